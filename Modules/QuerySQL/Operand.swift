import SyncCore

// MARK: - Operand model

/// One kind of an operand: `payload` is the value when the operand has this kind.
struct Projection {
    /// The value when the operand has this kind; never NULL then.
    var payload: SQLFragment
    /// When the operand has this kind; `nil` when `payload` is NULL exactly when it does not.
    var condition: SQLFragment?

    init(payload: SQLFragment, condition: SQLFragment? = nil) {
        self.payload = payload
        self.condition = condition
    }

    /// The value, or NULL when the operand has another kind.
    var value: SQLFragment {
        condition.map { "(CASE WHEN \($0) THEN \(payload) END)" } ?? payload
    }

    /// True when the operand has this kind (false or NULL otherwise).
    var presence: SQLFragment {
        condition ?? "(\(payload) IS NOT NULL)"
    }

    /// `test` (written on the raw payload, so that an index on it can serve) and the kind guard.
    func guarded(_ test: SQLFragment) -> SQLFragment {
        condition.map { "(\(test) AND \($0))" } ?? "(\(test))"
    }
}

/// An enumeration value: its case position, and its text.
struct EnumProjection {
    var index: Projection
    /// The text, when the operand is an enumeration case.
    var text: SQLFragment
    var cases: [String]
}

/// A compiled value expression: one projection per kind it may have at run time.
struct Operand {
    /// Exactly when the value is null (1 or 0); `nil` when it never is.
    var isNull: SQLFragment?
    var bool: Projection?
    var number: Projection?
    var numberMayBeInt = true
    var numberMayBeDouble = true
    var string: Projection?
    /// Whether the string kind may hold text that reads as a date or date-time.
    var stringMayBeInstant = true
    /// Whether the string kind may hold text that reads as a time of day.
    var stringMayBeTime = true
    var guid: Projection?
    var enumeration: EnumProjection?
    /// A date-time or a date, as milliseconds since 1970 (a date at midnight UTC).
    var instant: Projection?
    /// A time of day, as milliseconds since midnight.
    var time: Projection?
    /// An array or object, as its JSON text.
    var other: Projection?
    /// Whether floating-point overflow may have made the value infinite.
    var mayBeInfinite = false
    /// Set when the operand is a constant.
    var literal: QueryLiteral?

    init(isNull: SQLFragment? = nil) {
        self.isNull = isNull
    }

    /// The null constant.
    static var null: Operand {
        var result = Operand(isNull: "1")
        result.literal = .null
        return result
    }

    static func literal(_ literal: QueryLiteral, _ dialect: SQLDialect) throws(NotCompilable) -> Operand {
        var result = Operand()
        result.literal = literal
        switch literal {
        case .null:
            return .null
        case .bool(let flag):
            result.bool = Projection(payload: dialect.boolean(flag))
        case .int(let number):
            result.number = Projection(payload: "\(bind: number)")
            result.numberMayBeDouble = false
        case .double(let number), .decimal(let number):
            guard number.isFinite else { throw NotCompilable() }
            result.number = Projection(payload: "\(bind: number)")
            result.numberMayBeInt = false
        case .string(let text):
            guard !text.utf8.contains(0) else { throw NotCompilable() }
            result.string = Projection(payload: "\(bind: text)")
            result.stringMayBeInstant = SQLCompiler.instantMilliseconds(text) != nil
            result.stringMayBeTime = TimeOfDay(iso8601: text) != nil
        case .dateTimeOffset(let timestamp):
            result.instant = Projection(payload: "\(bind: timestamp.millisecondsSince1970)")
        case .date(let date):
            result.instant = Projection(payload: "\(bind: date.midnightUTC.millisecondsSince1970)")
        case .timeOfDay(let time):
            result.time = Projection(payload: "\(bind: Int64(time.millisecondsSinceMidnight))")
        case .guid(let text):
            guard !text.utf8.contains(0), dialect.hasFerryFunctions else { throw NotCompilable() }
            result.guid = Projection(payload: "\(bind: text.lowercased())")
        }
        return result
    }

    /// A Boolean that is never null, from a strict predicate.
    static func boolean(_ predicate: SQLFragment) -> Operand {
        var result = Operand()
        result.bool = Projection(payload: predicate)
        return result
    }

    /// An integer or null.
    static func integer(_ sql: SQLFragment) -> Operand {
        var result = Operand(isNull: "(\(sql) IS NULL)")
        result.number = Projection(payload: sql)
        result.numberMayBeDouble = false
        return result
    }

    /// A string or null.
    static func text(_ sql: SQLFragment) -> Operand {
        var result = Operand(isNull: "(\(sql) IS NULL)")
        result.string = Projection(payload: sql)
        return result
    }

    /// The literal string, when the operand is one.
    var literalText: String? {
        if case .string(let text)? = literal { return text }
        return nil
    }

    /// The text the evaluator's string functions see (string, GUID or enumeration case), or NULL;
    /// `nil` when the operand never has text.
    var textValue: SQLFragment? {
        var parts: [SQLFragment] = []
        if let string { parts.append(string.value) }
        if let guid { parts.append(guid.value) }
        if let enumeration { parts.append("(CASE WHEN \(enumeration.index.presence) THEN \(enumeration.text) END)") }
        if parts.isEmpty { return nil }
        return parts.count == 1 ? parts[0] : "COALESCE(" + SQLFragment.joined(parts, separator: ", ") + ")"
    }

    /// Whether SQLite's number comparison (exact between integers and reals) gives the evaluator's
    /// answer (which converts an integer to a double when the other side is a double).
    static func numbersCompareExactly(_ lhs: Operand, _ rhs: Operand) -> Bool {
        if !lhs.numberMayBeDouble && !rhs.numberMayBeDouble { return true }
        if !lhs.numberMayBeInt && !rhs.numberMayBeInt { return true }
        return lhs.isSafeNumberLiteral || rhs.isSafeNumberLiteral
    }

    /// A number literal that every integer compares with the same way exactly and after conversion
    /// to a double.
    private var isSafeNumberLiteral: Bool {
        let limit = 9_007_199_254_740_992.0  // 2^53
        switch literal {
        case .int(let number)?: return number.magnitude <= 1 << 53
        case .double(let number)?, .decimal(let number)?: return number.magnitude < limit
        default: return false
        }
    }
}
