import SyncCore

extension SQLCompiler {
    /// A compiled filter: `sql` is true exactly when the evaluator's value is `true`; otherwise it
    /// is false, or NULL when `isStrict` is false.
    struct Predicate {
        var sql: SQLFragment
        var isStrict: Bool
    }

    var alwaysTrue: Predicate { Predicate(sql: dialect.alwaysTrue, isStrict: true) }
    var alwaysFalse: Predicate { Predicate(sql: dialect.alwaysFalse, isStrict: true) }

    /// The same test as `predicate`, true or false, never NULL.
    func strict(_ predicate: Predicate) -> SQLFragment {
        predicate.isStrict ? predicate.sql : dialect.isTrue(predicate.sql)
    }

    func predicate(_ expression: QueryExpression) throws(NotCompilable) -> Predicate {
        if Self.isConstant(expression) {
            let value = QueryEvaluator(schema: schema).evaluate(expression, in: [:])
            return value == .bool(true) ? alwaysTrue : alwaysFalse
        }
        switch expression {
        case .binary(let op, _, _) where op.isLogical:
            // A chain of one connective is written flat: SQLite's parser overflows on deeply
            // nested parentheses.
            var parts: [Predicate] = []
            for operand in Self.chain(op, expression) { parts.append(try predicate(operand)) }
            let keyword = op == .and ? " AND " : " OR "
            return Predicate(
                sql: "(" + SQLFragment.joined(parts.map(\.sql), separator: keyword) + ")",
                isStrict: parts.allSatisfy(\.isStrict))
        case .binary(let op, let lhs, let rhs) where op.isComparison:
            return try compare(op, lhs, rhs)
        case .isIn(let needle, let list):
            if list.isEmpty { return alwaysFalse }
            var parts: [Predicate] = []
            for element in list { parts.append(try compare(.equal, needle, element)) }
            return Predicate(
                sql: "(" + SQLFragment.joined(parts.map(\.sql), separator: " OR ") + ")",
                isStrict: parts.allSatisfy(\.isStrict))
        case .unary(.not, let operand) where isAlwaysBoolean(operand):
            let inner = try predicate(operand)
            return Predicate(sql: inner.isStrict ? "(NOT \(inner.sql))" : dialect.isNotTrue(inner.sql), isStrict: true)
        default:
            return truth(of: try self.operand(expression))
        }
    }

    /// Whether the evaluator's value of `expression` is always a Boolean (never null).
    func isAlwaysBoolean(_ expression: QueryExpression) -> Bool {
        switch expression {
        case .binary(let op, _, _): return op.isComparison || op.isLogical
        case .isIn: return true
        case .literal(.bool): return true
        case .unary(.not, let operand): return isAlwaysBoolean(operand)
        default: return false
        }
    }

    /// True exactly when the operand is the Boolean `true`.
    private func truth(of operand: Operand) -> Predicate {
        if case .bool(let flag)? = operand.literal { return flag ? alwaysTrue : alwaysFalse }
        guard let bool = operand.bool else { return alwaysFalse }
        return Predicate(sql: bool.guarded(dialect.isTrueValue(bool.payload)), isStrict: false)
    }

    // MARK: - Comparisons

    private static func sqlOperator(_ op: BinaryOperator) -> SQLFragment {
        switch op {
        case .equal: "="
        case .notEqual: "<>"
        case .greaterThan: ">"
        case .greaterThanOrEqual: ">="
        case .lessThan: "<"
        default: "<="
        }
    }

    /// One pair of kinds the evaluator can compare.
    private struct Pair {
        /// Conditions that must hold besides the comparison being non-NULL (kind guards).
        var guards: [SQLFragment]
        /// Both values have the pair's kinds (for the general form).
        var presence: SQLFragment
        /// The comparison for an SQL operator; NULL when the two values cannot be compared.
        var comparison: (SQLFragment) -> SQLFragment

        func fast(_ op: SQLFragment) -> SQLFragment {
            SQLFragment.joined([comparison(op)] + guards, separator: " AND ").parenthesized
        }
    }

    func compare(_ op: BinaryOperator, _ lhs: QueryExpression, _ rhs: QueryExpression) throws(NotCompilable)
        -> Predicate
    {
        let left = try operand(lhs)
        let right = try operand(rhs)
        if let a = left.literal, let b = right.literal {
            let value = QueryEvaluator(schema: schema).evaluate(.binary(op, .literal(a), .literal(b)), in: [:])
            return value == .bool(true) ? alwaysTrue : alwaysFalse
        }
        // Against the null literal: the exact null test.
        if case .null? = right.literal { return nullComparison(op, left) }
        if case .null? = left.literal { return nullComparison(op, right) }

        let pairs = try comparablePairs(left, right)
        let notEqualConstant = op == .notEqual ? dialect.alwaysTrue : dialect.alwaysFalse
        if left.isNull == nil || right.isNull == nil {
            // At most one side can be null: null against anything is "not equal", which is what
            // the absence of every comparable pair gives.
            if op == .notEqual {
                if pairs.isEmpty { return alwaysTrue }
                let equal = SQLFragment.joined(pairs.map { $0.fast("=") }, separator: " OR ")
                return Predicate(sql: dialect.isNotTrue(equal), isStrict: true)
            }
            if pairs.isEmpty { return alwaysFalse }
            let sqlOp = Self.sqlOperator(op)
            let parts = pairs.map { $0.fast(sqlOp) }
            return Predicate(
                sql: parts.count == 1 ? parts[0] : "(" + SQLFragment.joined(parts, separator: " OR ") + ")",
                isStrict: false)
        }
        // General form: both sides may be null.
        let sqlOp = Self.sqlOperator(op)
        var sql: SQLFragment = "CASE"
        if let a = left.isNull, let b = right.isNull {
            let bothNull = op == .equal ? dialect.alwaysTrue : dialect.alwaysFalse
            sql = "\(sql) WHEN \(a) AND \(b) THEN \(bothNull) WHEN \(a) OR \(b) THEN \(notEqualConstant)"
        }
        for pair in pairs {
            sql = "\(sql) WHEN \(pair.presence) THEN COALESCE(\(pair.comparison(sqlOp)), \(notEqualConstant))"
        }
        return Predicate(sql: "(\(sql) ELSE \(notEqualConstant) END)", isStrict: true)
    }

    private func nullComparison(_ op: BinaryOperator, _ operand: Operand) -> Predicate {
        switch op {
        case .equal: return operand.isNull.map { Predicate(sql: $0, isStrict: true) } ?? alwaysFalse
        case .notEqual: return operand.isNull.map { Predicate(sql: "(NOT \($0))", isStrict: true) } ?? alwaysTrue
        default: return alwaysFalse
        }
    }

    /// The pairs of kinds of `left` and `right` that the evaluator's `compareValues` can order.
    private func comparablePairs(_ left: Operand, _ right: Operand) throws(NotCompilable) -> [Pair] {
        var pairs: [Pair] = []
        let dialect = dialect
        func add(_ a: Projection, _ b: Projection, _ comparison: @escaping (SQLFragment) -> SQLFragment) {
            pairs.append(
                Pair(
                    guards: [a.condition, b.condition].compactMap { $0 },
                    presence: "(\(a.presence) AND \(b.presence))", comparison: comparison))
        }
        func text(_ a: SQLFragment, _ b: SQLFragment) -> (SQLFragment) -> SQLFragment {
            { dialect.compareText(a, $0, b) }
        }
        if let a = left.bool, let b = right.bool {
            add(a, b) { "\(a.payload) \($0) \(b.payload)" }
        }
        if let a = left.number, let b = right.number {
            if Operand.numbersCompareExactly(left, right) {
                add(a, b) { "\(a.payload) \($0) \(b.payload)" }
            } else {
                guard dialect.hasFerryFunctions else { throw NotCompilable() }
                add(a, b) { op in
                    "(CASE WHEN typeof(\(a.payload)) = 'integer' AND typeof(\(b.payload)) = 'integer' THEN \(a.payload) \(op) \(b.payload) ELSE CAST(\(a.payload) AS REAL) \(op) CAST(\(b.payload) AS REAL) END)"
                }
            }
        }
        if let a = left.string, let b = right.string { add(a, b, text(a.payload, b.payload)) }
        if let a = left.guid, let b = right.guid { add(a, b, text(a.payload, b.payload)) }
        if let a = left.string, let b = right.guid {
            add(a, b, text(try lowercased(a, literal: left.literal), b.payload))
        }
        if let a = left.guid, let b = right.string {
            add(a, b, text(a.payload, try lowercased(b, literal: right.literal)))
        }
        if let a = left.enumeration, let b = right.enumeration {
            add(a.index, b.index) { "\(a.index.payload) \($0) \(b.index.payload)" }
        }
        if let a = left.enumeration, let b = right.string {
            add(a.index, b, try enumAgainstText(a, textOf: b, literal: right.literal, enumOnLeft: true))
        }
        if let a = left.string, let b = right.enumeration {
            add(a, b.index, try enumAgainstText(b, textOf: a, literal: left.literal, enumOnLeft: false))
        }
        if let a = left.instant, let b = right.instant {
            add(a, b) { "\(a.payload) \($0) \(b.payload)" }
        }
        if let a = left.time, let b = right.time {
            add(a, b) { "\(a.payload) \($0) \(b.payload)" }
        }
        // A string against a date, date-time or time: the string is read as one.
        if let a = left.string, let b = right.instant, left.stringMayBeInstant, let instant = try instantOf(a, left) {
            add(a, b) { "\(instant) \($0) \(b.payload)" }
        }
        if let a = left.instant, let b = right.string, right.stringMayBeInstant, let instant = try instantOf(b, right) {
            add(a, b) { "\(a.payload) \($0) \(instant)" }
        }
        if let a = left.string, let b = right.time, left.stringMayBeTime, let time = try timeOf(a, left) {
            add(a, b) { "\(time) \($0) \(b.payload)" }
        }
        if let a = left.time, let b = right.string, right.stringMayBeTime, let time = try timeOf(b, right) {
            add(a, b) { "\(a.payload) \($0) \(time)" }
        }
        if let a = left.other, let b = right.other {
            // Arrays and objects are only equal or not (JSON equality: numbers by value, strings by
            // canonical equivalence, which is not text equality).
            let equal = try dialect.ferry("ferry_json_equal", [a.payload, b.payload])
            add(a, b) { op in
                switch op.text {
                case "=", ">=", "<=": "(\(equal) = 1)"
                case "<>": "(\(equal) = 0)"
                default: "0"
                }
            }
        }
        return pairs
    }

    /// A string read as an instant: the milliseconds of a literal (`nil` when it is not one), or
    /// `ferry_instant` of a value.
    private func instantOf(_ projection: Projection, _ operand: Operand) throws(NotCompilable) -> SQLFragment? {
        guard let text = operand.literalText else { return try dialect.ferry("ferry_instant", [projection.payload]) }
        return Self.instantMilliseconds(text).map { "\(bind: $0)" }
    }

    /// A string read as a time of day, as ``instantOf(_:_:)``.
    private func timeOf(_ projection: Projection, _ operand: Operand) throws(NotCompilable) -> SQLFragment? {
        guard let text = operand.literalText else { return try dialect.ferry("ferry_time", [projection.payload]) }
        return TimeOfDay(iso8601: text).map { "\(bind: Int64($0.millisecondsSinceMidnight))" }
    }

    private func lowercased(_ projection: Projection, literal: QueryLiteral?) throws(NotCompilable) -> SQLFragment {
        if case .string(let text)? = literal { return "\(bind: text.lowercased())" }
        return try dialect.ferry("ferry_fn", ["'tolower'", projection.payload])
    }

    /// An enumeration value against text: by position when the text names a case, else by name.
    private func enumAgainstText(
        _ enumeration: EnumProjection, textOf text: Projection, literal: QueryLiteral?, enumOnLeft: Bool
    ) throws(NotCompilable) -> (SQLFragment) -> SQLFragment {
        let index = enumeration.index.payload
        let name = enumeration.text
        if case .string(let value)? = literal {
            if let position = enumeration.cases.firstIndex(of: value) {
                return {
                    enumOnLeft ? "\(index) \($0) \(bind: Int64(position))" : "\(bind: Int64(position)) \($0) \(index)"
                }
            }
            return { enumOnLeft ? "\(name) \($0) \(bind: value)" : "\(bind: value) \($0) \(name)" }
        }
        let other = try enumIndex(of: text.payload, cases: enumeration.cases)
        let payload = text.payload
        return { op in
            enumOnLeft
                ? "(CASE WHEN \(other) IS NOT NULL THEN \(index) \(op) \(other) ELSE \(name) \(op) \(payload) END)"
                : "(CASE WHEN \(other) IS NOT NULL THEN \(other) \(op) \(index) ELSE \(payload) \(op) \(name) END)"
        }
    }

    /// The position of a text value among `cases` as `cases.firstIndex(of:)` finds it (Swift string
    /// equality, which is canonical equivalence), or NULL. Plain byte matches are tried first; the
    /// Swift function decides only for non-ASCII text or cases.
    func enumIndex(of text: SQLFragment, cases: [String]) throws(NotCompilable) -> SQLFragment {
        guard !cases.isEmpty else { return "NULL" }
        if cases.contains(where: { $0.utf8.contains(0) }) { throw NotCompilable() }
        let arguments = SQLFragment.joined(cases.map { "\(bind: $0)" }, separator: ", ")
        let swiftIndex = try dialect.ferry("ferry_enum", [text, arguments])
        // Two different ASCII strings are never canonically equivalent: for ASCII cases only text
        // with other characters (K, the Kelvin sign, equals K) needs the Swift comparison.
        guard cases.allSatisfy({ $0.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F } }) else { return swiftIndex }
        var sql: SQLFragment = "(CASE \(text)"
        var seen: Set<String> = []
        for (position, name) in cases.enumerated() where seen.insert(name).inserted {
            sql = "\(sql) WHEN \(bind: name) THEN \(bind: Int64(position))"
        }
        return "\(sql) ELSE CASE WHEN \(text) GLOB '*[^ -~]*' THEN \(swiftIndex) END END)"
    }

    /// The case name at a position (what the evaluator compares and prints for an enumeration value).
    static func caseName(at index: SQLFragment, cases: [String]) -> SQLFragment {
        var sql: SQLFragment = "(CASE \(index)"
        for (position, name) in cases.enumerated() {
            sql = "\(sql) WHEN \(bind: Int64(position)) THEN \(bind: name)"
        }
        return "\(sql) END)"
    }

    /// What `ferry_instant` computes: an ISO 8601 date-time, else a date at midnight UTC.
    ///
    /// ```swift
    /// SQLCompiler.instantMilliseconds("1970-01-01T00:00:01.000Z")   // 1000
    /// SQLCompiler.instantMilliseconds("soon")                       // nil
    /// ```
    public static func instantMilliseconds(_ text: String) -> Int64? {
        if let timestamp = Timestamp(iso8601: text) { return timestamp.millisecondsSince1970 }
        if let date = CalendarDate(iso8601: text) { return date.midnightUTC.millisecondsSince1970 }
        return nil
    }
}
