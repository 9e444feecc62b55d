import SyncCore

extension SQLCompiler {
    func arithmetic(
        _ op: BinaryOperator, _ lhs: QueryExpression, _ rhs: QueryExpression, _ expression: QueryExpression
    ) throws(NotCompilable) -> Operand {
        // PostgreSQL's integers raise on overflow where the evaluator turns to floating point.
        guard dialect.hasFerryFunctions else { throw NotCompilable() }
        let left = try operand(lhs)
        let right = try operand(rhs)
        if left.literal != nil, right.literal != nil { return try folded(expression) }
        // inf - inf, inf * 0 or inf mod x would be NaN, which SQLite turns into NULL.
        if left.mayBeInfinite || right.mayBeInfinite { throw NotCompilable() }
        guard let a = left.number?.value, let b = right.number?.value else { return .null }
        let bothInt = !left.numberMayBeDouble && !right.numberMayBeDouble
        var mayBeInfinite = false
        let sql: SQLFragment
        switch op {
        case .add, .subtract, .multiply:
            let symbol: SQLFragment = op == .add ? "+" : op == .subtract ? "-" : "*"
            sql = "(\(a) \(symbol) \(b))"
            mayBeInfinite = left.numberMayBeDouble || right.numberMayBeDouble
        case .divide, .modulo:
            // SQLite gives NULL for any division by zero; the evaluator only for integers.
            switch right.literal {
            case .int(let divisor)? where divisor != 0: break
            case .double(let divisor)? where divisor != 0, .decimal(let divisor)? where divisor != 0: break
            default: throw NotCompilable()
            }
            if op == .divide {
                sql = "(\(a) / \(b))"
                mayBeInfinite = left.numberMayBeDouble || right.numberMayBeDouble
            } else if bothInt {
                sql = "(\(a) % \(b))"
            } else {
                sql = try dialect.ferry("ferry_mod", [a, b])
            }
        default:
            throw NotCompilable()
        }
        var result = Operand(isNull: "(\(sql) IS NULL)")
        result.number = Projection(payload: sql)
        result.numberMayBeInt = left.numberMayBeInt && right.numberMayBeInt
        // Integer overflow (and Int64.min / -1) turns into floating point.
        result.numberMayBeDouble = left.numberMayBeDouble || right.numberMayBeDouble || op != .modulo
        result.mayBeInfinite = mayBeInfinite
        return result
    }

    func call(
        _ function: QueryFunction, _ arguments: [QueryExpression], _ expression: QueryExpression
    ) throws(NotCompilable) -> Operand {
        guard function.arity.contains(arguments.count) else { throw NotCompilable() }
        var values: [Operand] = []
        for argument in arguments { values.append(try operand(argument)) }
        if values.allSatisfy({ $0.literal != nil }) { return try folded(expression) }
        let dialect = dialect
        func named(_ arguments: [SQLFragment]) throws(NotCompilable) -> SQLFragment {
            try dialect.ferry("ferry_fn", [SQLFragment.quoted(function.rawValue)] + arguments)
        }
        func texts() -> [SQLFragment]? {
            let texts = values.map(\.textValue)
            return texts.contains { $0 == nil } ? nil : texts.compactMap { $0 }
        }
        switch function {
        case .contains, .startsWith, .endsWith:
            guard let texts = texts() else { return .null }
            let sql: SQLFragment
            switch function {
            case .contains: sql = "(\(dialect.position(of: texts[1], in: texts[0])) > 0)"
            case .startsWith: sql = "(\(dialect.position(of: texts[1], in: texts[0])) = 1)"
            default: sql = try named(texts)
            }
            var result = Operand(isNull: "(\(sql) IS NULL)")
            result.bool = Projection(payload: sql)
            return result
        case .length, .indexOf:
            guard let texts = texts() else { return .null }
            return .integer(try named(texts))
        case .toLower, .toUpper, .trim, .replace:
            guard let texts = texts() else { return .null }
            return .text(try named(texts))
        case .substring:
            guard let text = values[0].textValue else { return .null }
            var parts = [text]
            for value in values.dropFirst() {
                guard let number = value.number else { return .null }
                parts.append(number.value)
            }
            return .text(try named(parts))
        case .concat:
            var parts: [SQLFragment] = []
            for value in values { parts.append(try concatText(value)) }
            var result = Operand()
            result.string = Projection(payload: "(" + SQLFragment.joined(parts, separator: " || ") + ")")
            return result
        case .year, .month, .day, .hour, .minute, .second:
            let value = values[0]
            let part = SQLFragment.quoted(function.rawValue)
            var parts: [SQLFragment] = []
            if let instant = value.instant {
                parts.append(try dialect.ferry("ferry_datepart", [part, "'i'", instant.value]))
            }
            if let time = value.time { parts.append(try dialect.ferry("ferry_datepart", [part, "'t'", time.value])) }
            if let string = value.string {
                parts.append(try dialect.ferry("ferry_datepart", [part, "'s'", string.value]))
            }
            if parts.isEmpty { return .null }
            return .integer(
                parts.count == 1 ? parts[0] : "COALESCE(" + SQLFragment.joined(parts, separator: ", ") + ")")
        case .floor, .ceiling, .round:
            let value = values[0]
            guard let number = value.number else { return .null }
            let sql = try named([number.value])
            var result = Operand(isNull: "(\(sql) IS NULL)")
            result.number = Projection(payload: sql)
            result.numberMayBeInt = value.numberMayBeInt
            result.numberMayBeDouble = value.numberMayBeDouble
            result.mayBeInfinite = value.mayBeInfinite
            return result
        }
    }

    /// The text `concat` makes of one argument.
    private func concatText(_ value: Operand) throws(NotCompilable) -> SQLFragment {
        if let literal = value.literal {
            guard case .string(let text) = QueryEvaluator().evaluate(.function(.concat, [.literal(literal)]), in: [:]),
                !text.utf8.contains(0)
            else { throw NotCompilable() }
            return "\(bind: text)"
        }
        if value.instant != nil || value.time != nil { throw NotCompilable() }
        var cases: [(SQLFragment, SQLFragment)] = []
        if let isNull = value.isNull { cases.append((isNull, "''")) }
        if let string = value.string { cases.append((string.presence, string.payload)) }
        if let guid = value.guid { cases.append((guid.presence, guid.payload)) }
        if let enumeration = value.enumeration { cases.append((enumeration.index.presence, enumeration.text)) }
        if let bool = value.bool {
            cases.append(
                (bool.presence, "(CASE WHEN \(dialect.isTrueValue(bool.payload)) THEN 'true' ELSE 'false' END)"))
        }
        if let number = value.number {
            let payload = number.payload
            let text: SQLFragment =
                value.numberMayBeDouble
                ? "(CASE WHEN typeof(\(payload)) = 'integer' THEN CAST(\(payload) AS TEXT) ELSE \(try dialect.ferry("ferry_double_text", [payload])) END)"
                : "CAST(\(payload) AS TEXT)"
            // PostgreSQL's numeric text is not the evaluator's.
            guard dialect.hasFerryFunctions else { throw NotCompilable() }
            cases.append((number.presence, text))
        }
        if let other = value.other {
            guard dialect.hasFerryFunctions else { throw NotCompilable() }
            cases.append((other.presence, other.payload))
        }
        if cases.isEmpty { return "''" }
        var sql: SQLFragment = "(CASE"
        for (condition, text) in cases { sql = "\(sql) WHEN \(condition) THEN \(text)" }
        return "\(sql) ELSE '' END)"
    }
}
