import SyncCore

extension SQLCompiler {
    /// Whether the system field `name` reads its layout column (a timestamp column serves only
    /// while the schema leaves the field a date-time).
    func usesColumn(_ name: String) -> Bool {
        switch name {
        case "updatedAt", "createdAt":
            layout.timestampColumn(name) != nil
                && (schema.fields[name] == nil || schema.fields[name] == .dateTimeOffset)
        case "deleted": layout.deletedColumn != nil && (schema.fields[name] == nil || schema.fields[name] == .bool)
        case "id": schema.fields["id"] == nil
        default: false
        }
    }

    /// Whether `expression` names no field (its value is the same for every item).
    static func isConstant(_ expression: QueryExpression) -> Bool {
        var stack = [expression]
        while let next = stack.popLast() {
            switch next {
            case .literal: break
            case .field: return false
            case .unary(_, let operand): stack.append(operand)
            case .binary(_, let lhs, let rhs): stack.append(contentsOf: [lhs, rhs])
            case .function(_, let arguments): stack.append(contentsOf: arguments)
            case .isIn(let value, let list): stack.append(contentsOf: [value] + list)
            case .cast(let value, _): stack.append(value)
            }
        }
        return true
    }

    func operand(_ expression: QueryExpression) throws(NotCompilable) -> Operand {
        switch expression {
        case .unary, .binary, .function, .isIn:
            // Constant results of these are plain JSON kinds (never dates or GUIDs): evaluate once.
            if Self.isConstant(expression) { return try folded(expression) }
        default: break
        }
        switch expression {
        case .literal(let literal):
            return try Operand.literal(literal, dialect)
        case .field(let name):
            return try field(name)
        case .unary(.negate, let inner):
            guard dialect.hasFerryFunctions else { throw NotCompilable() }
            let value = try operand(inner)
            if value.literal != nil { return try folded(expression) }
            guard let number = value.number else { return .null }
            let sql: SQLFragment = "(-1 * \(number.value))"
            var result = Operand(isNull: "(\(sql) IS NULL)")
            result.number = Projection(payload: sql)
            result.numberMayBeInt = value.numberMayBeInt
            result.numberMayBeDouble = true
            result.mayBeInfinite = value.mayBeInfinite
            return result
        case .unary(.not, let inner):
            if isAlwaysBoolean(inner) { return Operand.boolean(strict(try predicate(expression))) }
            let value = try operand(inner)
            if value.literal != nil { return try folded(expression) }
            guard let bool = value.bool else { return .null }
            var result = Operand(isNull: dialect.isNotTrue(bool.presence))
            result.bool = Projection(payload: dialect.negated(bool.payload), condition: bool.condition)
            return result
        case .binary(let op, let lhs, let rhs) where op.isArithmetic:
            return try arithmetic(op, lhs, rhs, expression)
        case .binary, .isIn:
            return Operand.boolean(strict(try predicate(expression)))
        case .function(let function, let arguments):
            return try call(function, arguments, expression)
        case .cast(let inner, let type):
            return try cast(inner, to: type)
        }
    }

    /// `cast` to a plain JSON kind (string, integer, double, Boolean), through the evaluator's own
    /// `cast` on each kind the operand may have, and to an instant (``instantCast(_:)``). Casts to
    /// dates, times and GUIDs are not compiled.
    private func cast(_ inner: QueryExpression, to type: EdmType) throws(NotCompilable) -> Operand {
        if type == .dateTimeOffset { return try instantCast(inner) }
        let value = try operand(inner)
        var cases: [(SQLFragment, SQLFragment)] = []
        func via(_ tag: String, _ projection: Projection?) throws(NotCompilable) {
            guard let projection else { return }
            let arguments = [SQLFragment.quoted(type.rawValue), SQLFragment.quoted(tag), projection.payload]
            cases.append((projection.presence, try dialect.ferry("ferry_cast", arguments)))
        }
        switch type {
        case .string, .int32, .int64, .double, .decimal, .boolean: break
        default: throw NotCompilable()
        }
        if let literal = value.literal {
            if case .string(let text) = literal, text.utf8.contains(0) { throw NotCompilable() }
            return try folded(.cast(.literal(literal), type))
        }
        try via("b", value.bool)
        try via("n", value.number)
        try via("s", value.string)
        try via("g", value.guid)
        if type == .string {
            // A date or time prints differently as a date and as a date-time, which the compiled
            // form does not tell apart.
            if value.instant != nil || value.time != nil { throw NotCompilable() }
            if let enumeration = value.enumeration { cases.append((enumeration.index.presence, enumeration.text)) }
            if let other = value.other { cases.append((other.presence, other.payload)) }
        }
        var sql: SQLFragment = "(CASE"
        for (condition, result) in cases { sql = "\(sql) WHEN \(condition) THEN \(result)" }
        sql = cases.isEmpty ? "NULL" : "\(sql) END)"
        switch type {
        case .string: return .text(sql)
        case .int32, .int64: return .integer(sql)
        case .boolean:
            var result = Operand(isNull: "(\(sql) IS NULL)")
            result.bool = Projection(payload: sql)
            return result
        default:
            var result = Operand(isNull: "(\(sql) IS NULL)")
            result.number = Projection(payload: sql)
            result.numberMayBeInt = false
            result.mayBeInfinite = value.mayBeInfinite
            return result
        }
    }

    /// `cast(x, Edm.DateTimeOffset)`: the milliseconds of a date-time or a date (text that reads as
    /// one, or a field declared so), else NULL, as the evaluator's `cast` gives. A typed query sorts a
    /// `Date` property by it (`TypedQuery.orderBy`), so that text written with other offsets sorts by
    /// its instant.
    private func instantCast(_ inner: QueryExpression) throws(NotCompilable) -> Operand {
        let value = try operand(inner)
        // A literal's cast is folded into a typed literal by the parser; an enumeration case's name is
        // compared by the evaluator as text, which this form does not follow.
        if value.literal != nil || value.enumeration != nil { throw NotCompilable() }
        var cases: [(SQLFragment, SQLFragment)] = []
        if let instant = value.instant { cases.append((instant.presence, instant.payload)) }
        if let string = value.string, value.stringMayBeInstant {
            cases.append((string.presence, try dialect.ferry("ferry_instant", [string.payload])))
        }
        guard !cases.isEmpty else { return .null }
        var sql: SQLFragment = "(CASE"
        for (condition, result) in cases { sql = "\(sql) WHEN \(condition) THEN \(result)" }
        sql = "\(sql) END)"
        var result = Operand(isNull: "(\(sql) IS NULL)")
        result.instant = Projection(payload: sql)
        return result
    }

    /// A constant expression, evaluated once (only for results that are not typed text).
    func folded(_ expression: QueryExpression) throws(NotCompilable) -> Operand {
        switch QueryEvaluator(schema: schema).evaluate(expression, in: [:]) {
        case .null: return try .literal(.null, dialect)
        case .bool(let flag): return try .literal(.bool(flag), dialect)
        case .int(let number): return try .literal(.int(number), dialect)
        case .double(let number) where number.isFinite: return try .literal(.double(number), dialect)
        case .string(let text): return try .literal(.string(text), dialect)
        default: throw NotCompilable()
        }
    }

    private func field(_ name: String) throws(NotCompilable) -> Operand {
        guard !name.utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }),
            !layout.unreadableFields.contains(name)
        else { throw NotCompilable() }
        if usesColumn(name) {
            if name == "id" {
                var result = Operand()
                result.string = Projection(payload: SQLFragment(text: layout.idColumn))
                return result
            }
            if name == "deleted", let column = layout.deletedColumn {
                var result = Operand()
                result.bool = Projection(payload: SQLFragment(text: column))
                return result
            }
            if let column = layout.timestampColumn(name), column.irregularColumn == nil {
                var result = Operand()
                result.instant = Projection(payload: SQLFragment(text: column.name))
                return result
            }
        } else if !layout.itemHoldsSystemFields, SQLTableLayout.systemFields.contains(name) {
            throw NotCompilable()
        }
        let declared = schema.fields[name] ?? (name == "createdAt" || name == "updatedAt" ? .dateTimeOffset : nil)
        let json = dialect.jsonField(layout.itemColumn, name)
        let value = json.text
        var result = Operand(isNull: json.isNull)
        result.bool = json.bool
        result.number = json.number
        result.other = json.other
        let isText = json.isText
        if let column = layout.timestampColumn(name), let irregular = column.irregularColumn, usesColumn(name) {
            // The column holds the milliseconds of every valid date-time; other text is irregular.
            result.isNull = SQLFragment(text: "(\(column.name) IS NULL AND \(irregular) IS NULL)")
            result.instant = Projection(payload: SQLFragment(text: column.name))
            result.string = Projection(
                payload: value, condition: "(\(SQLFragment(text: column.name)) IS NULL AND \(isText))")
            result.stringMayBeInstant = false
            return result
        }
        switch declared {
        case .guid?:
            result.guid = Projection(payload: try dialect.ferry("ferry_fn", ["'tolower'", value]), condition: isText)
        case .enumeration(let cases)? where !cases.isEmpty:
            let index = try enumIndex(of: value, cases: cases)
            result.enumeration = EnumProjection(
                index: Projection(payload: index, condition: "(\(isText) AND \(index) IS NOT NULL)"),
                text: Self.caseName(at: index, cases: cases), cases: cases)
            result.string = Projection(payload: value, condition: "(\(isText) AND \(index) IS NULL)")
        case .dateTimeOffset?, .date?:
            let instant = try dialect.ferry("ferry_instant", [value])
            result.instant = Projection(payload: instant, condition: "(\(isText) AND \(instant) IS NOT NULL)")
            result.string = Projection(payload: value, condition: "(\(isText) AND \(instant) IS NULL)")
            result.stringMayBeInstant = false
        case .timeOfDay?:
            let time = try dialect.ferry("ferry_time", [value])
            result.time = Projection(payload: time, condition: "(\(isText) AND \(time) IS NOT NULL)")
            result.string = Projection(payload: value, condition: "(\(isText) AND \(time) IS NULL)")
            result.stringMayBeTime = false
        default:
            result.string = Projection(payload: value, condition: isText)
        }
        return result
    }
}
