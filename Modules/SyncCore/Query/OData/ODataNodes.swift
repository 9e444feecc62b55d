// Building the parser's nodes: the type checks that need no schema, and the depth bound.

extension ODataExpressionParser {
    func leaf(_ literal: QueryLiteral, at start: Int) -> Node {
        Node(expression: .literal(literal), kind: StaticKind(literal), start: start, depth: 0)
    }

    func makeBinary(_ op: BinaryOperator, _ lhs: Node, _ rhs: Node, at start: Int) throws(QueryError) -> Node {
        let depth = max(lhs.depth, rhs.depth) + 1
        try checkDepth(depth, at: start)
        let kind: StaticKind
        if op.isLogical {
            for operand in [lhs, rhs] where !operand.kind.mayBeBoolean {
                throw error(
                    .typeMismatch,
                    "'\(op.rawValue)' needs Boolean operands, not \(operand.kind.phrase)",
                    at: operand.start
                )
            }
            kind = .boolean
        } else if op.isComparison {
            guard lhs.kind.isComparable(with: rhs.kind) else {
                throw error(
                    .typeMismatch,
                    "cannot compare \(lhs.kind.phrase) with \(rhs.kind.phrase) using '\(op.rawValue)'",
                    at: start
                )
            }
            kind = .boolean
        } else {
            for operand in [lhs, rhs] where !operand.kind.mayBeNumber {
                throw error(
                    .typeMismatch,
                    "'\(op.rawValue)' needs numbers, not \(operand.kind.phrase)",
                    at: operand.start
                )
            }
            kind = .number
        }
        return Node(expression: .binary(op, lhs.expression, rhs.expression), kind: kind, start: lhs.start, depth: depth)
    }

    func makeIn(_ subject: Node, _ items: [Node], at start: Int) throws(QueryError) -> Node {
        let depth = items.reduce(subject.depth) { max($0, $1.depth) } + 1
        try checkDepth(depth, at: start)
        for item in items where !subject.kind.isComparable(with: item.kind) {
            throw error(
                .typeMismatch,
                "cannot look for \(subject.kind.phrase) among values that include \(item.kind.phrase)",
                at: item.start
            )
        }
        return Node(
            expression: .isIn(subject.expression, items.map(\.expression)),
            kind: .boolean,
            start: subject.start,
            depth: depth
        )
    }

    func makeUnary(_ op: UnaryOperator, _ operand: Node, at start: Int) throws(QueryError) -> Node {
        switch op {
        case .not:
            guard operand.kind.mayBeBoolean else {
                throw error(
                    .typeMismatch,
                    "'not' needs a Boolean operand, not \(operand.kind.phrase)",
                    at: operand.start
                )
            }
        case .negate:
            guard operand.kind.mayBeNumber else {
                throw error(.typeMismatch, "'-' needs a number, not \(operand.kind.phrase)", at: operand.start)
            }
            if case .literal(let literal) = operand.expression, let negated = Self.negated(literal) {
                return Node(expression: .literal(negated), kind: operand.kind, start: start, depth: 0)
            }
        }
        let depth = operand.depth + 1
        try checkDepth(depth, at: start)
        let kind: StaticKind = op == .not ? .boolean : .number
        return Node(expression: .unary(op, operand.expression), kind: kind, start: start, depth: depth)
    }

    /// `-literal` as a literal, when it is a number whose negation is representable.
    private static func negated(_ literal: QueryLiteral) -> QueryLiteral? {
        switch literal {
        case .int(let value):
            let (result, overflow) = Int64(0).subtractingReportingOverflow(value)
            return overflow ? nil : .int(result)
        case .double(let value): return .double(-value)
        case .decimal(let value): return .decimal(-value)
        default: return nil
        }
    }

    func makeCall(_ function: QueryFunction, _ arguments: [Node], name: String, at start: Int)
        throws(QueryError) -> Node
    {
        enum Expect { case string, number, datePart, timePart }
        let expected: [Expect]
        let result: StaticKind
        switch function {
        case .contains, .startsWith, .endsWith: (expected, result) = ([.string, .string], .boolean)
        case .length: (expected, result) = ([.string], .number)
        case .toLower, .toUpper, .trim: (expected, result) = ([.string], .string)
        case .indexOf: (expected, result) = ([.string, .string], .number)
        case .substring: (expected, result) = ([.string, .number, .number], .string)
        case .concat: (expected, result) = ([.string, .string], .string)
        case .replace: (expected, result) = ([.string, .string, .string], .string)
        case .year, .month, .day: (expected, result) = ([.datePart], .number)
        case .hour, .minute, .second: (expected, result) = ([.timePart], .number)
        case .floor, .ceiling, .round: (expected, result) = ([.number], .number)
        }
        for (argument, expectation) in zip(arguments, expected) {
            let accepted: Bool
            let wanted: String
            switch expectation {
            case .string: (accepted, wanted) = (argument.kind.mayBeString, "a string")
            case .number: (accepted, wanted) = (argument.kind.mayBeNumber, "a number")
            case .datePart: (accepted, wanted) = (argument.kind.hasDate, "a date, a date-time or a string")
            case .timePart: (accepted, wanted) = (argument.kind.hasTime, "a date-time, a time of day or a string")
            }
            guard accepted else {
                throw error(.typeMismatch, "'\(name)' needs \(wanted), not \(argument.kind.phrase)", at: argument.start)
            }
        }
        let depth = arguments.reduce(0) { max($0, $1.depth) } + 1
        try checkDepth(depth, at: start)
        return Node(
            expression: .function(function, arguments.map(\.expression)),
            kind: result,
            start: start,
            depth: depth
        )
    }
}
