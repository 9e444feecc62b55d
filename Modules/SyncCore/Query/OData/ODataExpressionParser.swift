// The OData expression parser: `$filter` and `$orderby` expressions into a checked ``QueryExpression``.

/// A recursive-descent parser for expressions with an operator-precedence loop for binary operators.
///
/// Recursion only happens for parentheses, function arguments, `in` lists and casts, and each of those counts
/// against ``QueryLimits/maximumDepth``. Unary prefixes are collected in a loop. The nodes it builds are type- and
/// depth-checked in `ODataNodes.swift`; literals are read in `ODataLiterals.swift`; the tokens come from
/// ``ODataLexer``.
struct ODataExpressionParser {
    /// An expression with what the parser knows about it.
    struct Node {
        var expression: QueryExpression
        var kind: StaticKind
        /// The byte offset where the expression starts.
        var start: Int
        /// How deeply the expression tree nests (a leaf is 0).
        var depth: Int
    }

    private struct PendingOperator {
        var op: BinaryOperator
        var precedence: Int
        var start: Int
    }

    private let protocolVersion: ProtocolVersion
    private let limits: QueryLimits
    /// The tokens, read one at a time.
    private var lexer: ODataLexer

    /// Recognised OData functions that Ferry does not evaluate.
    private static let unsupportedFunctions: Set<String> = [
        "isof", "now", "date", "time", "totaloffsetminutes", "totalseconds", "fractionalseconds", "mindatetime",
        "maxdatetime", "any", "all", "matchespattern", "hassubset", "hassubsequence", "case", "tostring",
    ]

    init(text: String, option: String, protocolVersion: ProtocolVersion, limits: QueryLimits) throws(QueryError) {
        self.lexer = try ODataLexer(text: text, option: option)
        self.protocolVersion = protocolVersion
        self.limits = limits
    }

    // MARK: Entry points

    /// A whole filter: one expression that may be Boolean, then the end of the text.
    mutating func parseFilter() throws(QueryError) -> QueryExpression {
        if case .end = token.kind { throw error(.syntax, "expected a filter expression", at: token.start) }
        let node = try parseExpression(nesting: 0)
        try expectEnd()
        guard node.kind.mayBeBoolean else {
            throw error(.typeMismatch, "a filter must be a Boolean expression, not \(node.kind.phrase)", at: node.start)
        }
        return node.expression
    }

    /// A sort specification: `expression [asc|desc]` items separated by commas.
    mutating func parseOrderBy() throws(QueryError) -> [SortKey] {
        var keys: [SortKey] = []
        while true {
            let node = try parseExpression(nesting: 0)
            var descending = false
            if case .identifier(let word) = token.kind {
                switch word.lowercased() {
                case "asc": try advance()
                case "desc":
                    descending = true
                    try advance()
                default:
                    throw error(
                        .syntax,
                        "expected 'asc', 'desc' or ',' after a sort key, found '\(word)'",
                        at: token.start
                    )
                }
            }
            keys.append(SortKey(node.expression, descending: descending))
            switch token.kind {
            case .comma: try advance()
            case .end: return keys
            case .minus: throw minusError()
            default: throw error(.syntax, "expected ',' or the end, found \(describe(token))", at: token.start)
            }
        }
    }

    private mutating func expectEnd() throws(QueryError) {
        switch token.kind {
        case .end: return
        case .minus: throw minusError()
        case .closeParen: throw error(.syntax, "unbalanced ')'", at: token.start)
        case .identifier(let word):
            throw error(.syntax, "expected an operator, found '\(word)'", at: token.start)
        default:
            throw error(.syntax, "expected an operator or the end, found \(describe(token))", at: token.start)
        }
    }

    private func minusError() -> QueryError {
        error(.syntax, "'-' is not a binary operator in OData; write 'sub'", at: token.start)
    }

    // MARK: Binary operators

    private static func precedence(of op: BinaryOperator) -> Int {
        switch op {
        case .or: 1
        case .and: 2
        case .equal, .notEqual: 3
        case .greaterThan, .greaterThanOrEqual, .lessThan, .lessThanOrEqual: 4
        case .add, .subtract: 5
        case .multiply, .divide, .modulo: 6
        }
    }

    /// The precedence of `in`.
    private static let inPrecedence = 4

    private mutating func parseExpression(nesting: Int) throws(QueryError) -> Node {
        var operands: [Node] = [try parseUnary(nesting: nesting)]
        var operators: [PendingOperator] = []
        while case .identifier(let word) = token.kind {
            if word == "in" {
                let start = token.start
                while let top = operators.last, top.precedence >= Self.inPrecedence {
                    try reduce(&operands, &operators)
                }
                try advance()
                let items = try parseInList(nesting: nesting)
                let subject = operands.removeLast()
                operands.append(try makeIn(subject, items, at: start))
                continue
            }
            guard let op = BinaryOperator(rawValue: word) else {
                if word == "has" || word == "divby" {
                    throw error(.unsupported, "the '\(word)' operator is not supported", at: token.start)
                }
                break
            }
            let precedence = Self.precedence(of: op)
            while let top = operators.last, top.precedence >= precedence {
                try reduce(&operands, &operators)
            }
            operators.append(PendingOperator(op: op, precedence: precedence, start: token.start))
            try advance()
            operands.append(try parseUnary(nesting: nesting))
        }
        while !operators.isEmpty {
            try reduce(&operands, &operators)
        }
        return operands[0]
    }

    private func reduce(_ operands: inout [Node], _ operators: inout [PendingOperator]) throws(QueryError) {
        let pending = operators.removeLast()
        let rhs = operands.removeLast()
        let lhs = operands.removeLast()
        operands.append(try makeBinary(pending.op, lhs, rhs, at: pending.start))
    }

    private mutating func parseInList(nesting: Int) throws(QueryError) -> [Node] {
        guard case .openParen = token.kind else {
            throw error(.syntax, "expected '(' and a list of values after 'in'", at: token.start)
        }
        try checkNesting(nesting + 1, at: token.start)
        try advance()
        return try parseList(nesting: nesting + 1, in: "the 'in' list")
    }

    /// Expressions separated by commas up to the `)` that ends them, after the `(`; `list` names them
    /// in errors.
    private mutating func parseList(nesting: Int, in list: String) throws(QueryError) -> [Node] {
        var items: [Node] = []
        while true {
            items.append(try parseExpression(nesting: nesting))
            switch token.kind {
            case .comma: try advance()
            case .closeParen:
                try advance()
                return items
            case .minus: throw minusError()
            default:
                throw error(.syntax, "expected ',' or ')' in \(list), found \(describe(token))", at: token.start)
            }
        }
    }

    // MARK: Unary operators

    private mutating func parseUnary(nesting: Int) throws(QueryError) -> Node {
        var prefixes: [(op: UnaryOperator, start: Int)] = []
        var operand: Node?
        prefixLoop: while true {
            switch token.kind {
            case .identifier("not"):
                prefixes.append((.not, token.start))
                try advance()
            case .minus:
                let start = token.start
                try advance()
                if case .number(let text) = token.kind {
                    // A negative number literal: the sign belongs to the literal, so Int64.min is readable.
                    let literal = try numberLiteral("-" + text, at: start)
                    try advance()
                    operand = Node(expression: .literal(literal), kind: .number, start: start, depth: 0)
                    break prefixLoop
                }
                prefixes.append((.negate, start))
            default:
                break prefixLoop
            }
            if prefixes.count > limits.maximumDepth {
                throw error(.tooDeep, "more than \(limits.maximumDepth) nested unary operators", at: token.start)
            }
        }
        var node: Node
        if let operand {
            node = operand
        } else {
            node = try parsePrimary(nesting: nesting)
        }
        for prefix in prefixes.reversed() {
            node = try makeUnary(prefix.op, node, at: prefix.start)
        }
        return node
    }

    // MARK: Primary expressions

    private mutating func parsePrimary(nesting: Int) throws(QueryError) -> Node {
        let start = token.start
        switch token.kind {
        case .openParen:
            try checkNesting(nesting + 1, at: start)
            try advance()
            if case .closeParen = token.kind {
                throw error(.syntax, "expected an expression inside '()'", at: token.start)
            }
            var inner = try parseExpression(nesting: nesting + 1)
            switch token.kind {
            case .closeParen: try advance()
            case .minus: throw minusError()
            default: throw error(.syntax, "expected ')' or an operator, found \(describe(token))", at: token.start)
            }
            inner.start = start
            return inner
        case .string(let value):
            try advance()
            return leaf(.string(value), at: start)
        case .number(let text):
            let literal = try numberLiteral(text, at: start)
            try advance()
            return leaf(literal, at: start)
        case .literal(let literal):
            try advance()
            return leaf(literal, at: start)
        case .typedString(let prefix, let body):
            let literal = try typedLiteral(prefix: prefix, body: body, at: start)
            try advance()
            return leaf(literal, at: start)
        case .identifier(let name):
            return try parseIdentifier(name, nesting: nesting)
        case .end:
            if let previous {
                throw error(.syntax, "expected an operand after '\(text(of: previous))'", at: start)
            }
            throw error(.syntax, "expected an operand", at: start)
        case .closeParen, .comma, .slash, .minus:
            throw error(.syntax, "expected an operand, found \(describe(token))", at: start)
        }
    }

    private mutating func parseIdentifier(_ name: String, nesting: Int) throws(QueryError) -> Node {
        let start = token.start
        switch name {
        case "true", "false":
            try advance()
            return leaf(.bool(name == "true"), at: start)
        case "null":
            try advance()
            return leaf(.null, at: start)
        case "INF":
            try advance()
            return leaf(.double(.infinity), at: start)
        case "NaN":
            try advance()
            return leaf(.double(.nan), at: start)
        default:
            break
        }
        if BinaryOperator(rawValue: name) != nil || name == "not" || name == "in" {
            throw error(.syntax, "expected an operand, found '\(name)'", at: start)
        }
        if nextSignificantByte() == UInt8(ascii: "(") {
            return try parseCall(name, nesting: nesting)
        }
        if name.utf8.contains(UInt8(ascii: ".")) {
            throw error(.unsupported, ODataSyntax.qualifiedNameReason(name), at: start)
        }
        try advance()
        if case .slash = token.kind {
            throw error(.unsupported, ODataSyntax.pathReason(name), at: token.start)
        }
        return Node(expression: .field(name), kind: .unknown, start: start, depth: 0)
    }

    /// The nesting levels a function call counts: parsing one nested in another takes about three
    /// times the stack of a parenthesis (6.6 KB in a release build), and 80 nested calls crashed
    /// a 512 KiB thread (Apple platforms' secondary threads) where 100 parentheses did not.
    static let callNesting = 2

    private mutating func parseCall(_ name: String, nesting: Int) throws(QueryError) -> Node {
        let start = token.start
        let lowercased = name.lowercased()
        try advance()  // The name.
        let inner = nesting + Self.callNesting
        try checkNesting(inner, at: token.start)
        try advance()  // The '('.
        if lowercased == "cast" { return try parseCast(at: start, nesting: inner - 1) }
        if lowercased.hasPrefix("geo.") {
            throw error(.unsupported, "the geospatial function '\(name)' is not supported", at: start)
        }
        if Self.unsupportedFunctions.contains(lowercased) {
            throw error(.unsupported, "the function '\(name)' is not supported", at: start)
        }
        let function: QueryFunction
        let swapsArguments = lowercased == "substringof"
        if swapsArguments {
            function = .contains
        } else if let known = QueryFunction(rawValue: lowercased) {
            function = known
        } else {
            throw error(
                .unknownFunction, "unknown function '\(name)' in protocol \(protocolVersion.rawValue)", at: start)
        }
        var arguments: [Node] = []
        if case .closeParen = token.kind {
            try advance()
        } else {
            arguments = try parseList(nesting: inner, in: "the arguments of '\(name)'")
        }
        let arity = swapsArguments ? 2...2 : function.arity
        guard arity.contains(arguments.count) else {
            let expected = arity.count == 1 ? "\(arity.lowerBound)" : "\(arity.lowerBound) or \(arity.upperBound)"
            throw error(
                .wrongArgumentCount,
                "'\(name)' takes \(expected) argument\(arity.upperBound == 1 ? "" : "s"), not \(arguments.count)",
                at: start
            )
        }
        if swapsArguments { arguments.swapAt(0, 1) }
        return try makeCall(function, arguments, name: name, at: start)
    }

    /// `cast(x, Edm.Type)`, after `cast(`: folds literals into typed literals.
    private mutating func parseCast(at start: Int, nesting: Int) throws(QueryError) -> Node {
        if case .identifier(let word) = token.kind, word.lowercased().hasPrefix("edm.") {
            throw error(.unsupported, "a cast of the current item ('cast(\(word))') is not supported", at: start)
        }
        let value = try parseExpression(nesting: nesting + 1)
        switch token.kind {
        case .comma: try advance()
        case .minus: throw minusError()
        default:
            throw error(.syntax, "expected ',' and a type name in 'cast', found \(describe(token))", at: token.start)
        }
        let typeStart = token.start
        let typeName: String
        switch token.kind {
        case .identifier(let name), .string(let name): typeName = name
        default: throw error(.syntax, "expected an Edm type name, found \(describe(token))", at: typeStart)
        }
        guard let type = EdmType.allCases.first(where: { $0.rawValue.lowercased() == typeName.lowercased() }) else {
            throw error(.unsupported, "cannot cast to '\(typeName)'", at: typeStart)
        }
        try advance()
        guard case .closeParen = token.kind else {
            throw error(.syntax, "expected ')' after the type in 'cast', found \(describe(token))", at: token.start)
        }
        try advance()
        if case .literal(let literal) = value.expression {
            let folded = try fold(literal, to: type, at: value.start)
            return Node(expression: .literal(folded), kind: StaticKind(folded), start: start, depth: 0)
        }
        let depth = value.depth + 1
        try checkDepth(depth, at: start)
        return Node(expression: .cast(value.expression, type), kind: StaticKind(type), start: start, depth: depth)
    }

    // MARK: Limits and errors

    private func checkNesting(_ nesting: Int, at start: Int) throws(QueryError) {
        guard nesting <= limits.maximumNesting else {
            throw error(.tooDeep, "expressions nest deeper than \(limits.maximumNesting) levels", at: start)
        }
    }

    func checkDepth(_ depth: Int, at start: Int) throws(QueryError) {
        guard depth <= limits.maximumDepth else {
            throw error(.tooDeep, "the expression nests deeper than \(limits.maximumDepth) levels", at: start)
        }
    }

    func error(_ code: QueryError.Code, _ reason: String, at byteOffset: Int) -> QueryError {
        lexer.error(code, reason, at: byteOffset)
    }

    // MARK: Tokens

    private var token: ODataToken { lexer.token }

    private var previous: ODataToken? { lexer.previous }

    private mutating func advance() throws(QueryError) { try lexer.advance() }

    private func nextSignificantByte() -> UInt8? { lexer.nextSignificantByte() }

    private func text(of token: ODataToken) -> String { lexer.text(of: token) }

    private func describe(_ token: ODataToken) -> String { lexer.describe(token) }
}
