// The OData reader: query strings, `$filter`, `$orderby` and `$select` of table protocols 2.0.0 and 3.0.0.
//
// Everything here is pure Swift and works on UTF-8 bytes. Hostile input is bounded three ways:
// - the text is measured against `QueryLimits.maximumLength` before any other work;
// - parenthesized, function and unary nesting is counted and stops at `QueryLimits.maximumNesting`, so the
//   parser's recursion is bounded;
// - binary operators are reduced with an explicit operator stack (no recursion per operator), and the depth of
//   the tree they build is bounded by `QueryLimits.maximumDepth` too, so a chain of 100,000 `or`s fails fast
//   with `tooDeep` instead of building a tree that every later consumer would have to walk recursively.

// MARK: - Query strings

extension TableQuery {
    /// Parses a whole OData query string, such as the query component of a table request.
    ///
    /// ```swift
    /// let query = try TableQuery(
    ///     odata: "$filter=(year ge 1930) and (year le 1940)&$orderby=title desc&$top=20&$count=true",
    ///     dialect: .v3)
    /// query.top                // 20
    /// query.includeTotalCount  // true
    /// ```
    ///
    /// Both dialects' forms are accepted whichever `dialect` is named (`substringof` and `contains`,
    /// `datetime'…'` and `cast(…,Edm.DateTimeOffset)`, `$inlinecount=allpages` and `$count=true`); the dialect
    /// only shapes error messages.
    ///
    /// The recognised parameters are `$filter`, `$orderby`, `$skip`, `$top`, `$select`, `$count` (`true` or
    /// `false`), `$inlinecount` (`allpages` or `none`) and `__includedeleted` (any letter case, value `true`).
    /// Parameter names match without regard to letter case. Other parameters without a `$` are ignored (clients
    /// and peers send such parameters); an unknown `$` option fails with ``QueryError/Code/invalidOption``, and
    /// so does a recognised option given twice.
    ///
    /// The string may be percent-encoded or raw: it is split on `&` outside single-quoted literals and then
    /// percent-decoded (see ``ODataParameters/init(parsing:)``). Error positions count characters in the decoded
    /// value of the option named by ``QueryError/option``.
    ///
    /// - Parameters:
    ///   - queryString: The query string, without the leading `?`.
    ///   - dialect: The protocol the request came in.
    ///   - limits: Bounds on the text's length (checked on `queryString` as given) and on nesting.
    /// - Throws: ``QueryError`` for any malformed, unsupported, oversized or too deeply nested option.
    public init(odata queryString: String, dialect: ProtocolVersion, limits: QueryLimits = .default) throws(QueryError)
    {
        let length = queryString.utf8.count
        guard length <= limits.maximumLength else {
            throw QueryError(
                .tooLong,
                "the query string is \(length) bytes long; the limit is \(limits.maximumLength)"
            )
        }
        var query = TableQuery()
        var seen: Set<String> = []
        for parameter in ODataParameters(parsing: queryString).parameters {
            let key = parameter.name.lowercased()
            guard key.hasPrefix("$") || key == "__includedeleted" else { continue }
            guard seen.insert(key).inserted else {
                throw QueryError(.invalidOption, "the option is given more than once", option: key)
            }
            let value = parameter.value
            switch key {
            case "$filter":
                query.filter = try ODataSyntax.filterOption(value, dialect: dialect, limits: limits)
            case "$orderby":
                query.orderBy = try ODataSyntax.orderBy(value, dialect: dialect, limits: limits)
            case "$skip":
                query.skip = try ODataSyntax.count(value, option: key)
            case "$top":
                query.top = try ODataSyntax.count(value, option: key)
            case "$select":
                query.select = try ODataSyntax.select(value)
            case "$count":
                switch value.lowercased() {
                case "true": query.includeTotalCount = true
                case "false": break
                default:
                    throw QueryError(.invalidOption, "expected 'true' or 'false', found '\(value)'", option: key)
                }
            case "$inlinecount":
                switch value.lowercased() {
                case "allpages": query.includeTotalCount = true
                case "none": break
                default:
                    throw QueryError(.invalidOption, "expected 'allpages' or 'none', found '\(value)'", option: key)
                }
            case "__includedeleted":
                query.includeDeleted = value.lowercased() == "true"
            default:
                throw QueryError(
                    .invalidOption,
                    "unknown query option '\(parameter.name)' in protocol \(dialect.rawValue)",
                    option: parameter.name
                )
            }
        }
        self = query
    }
}

extension QueryExpression {
    /// Parses a `$filter` expression on its own (the text after `$filter=`, already percent-decoded).
    ///
    /// ```swift
    /// let filter = try QueryExpression(odataFilter: "year gt 1999 and startswith(title, 'The')", dialect: .v3)
    /// // .binary(.and, .binary(.greaterThan, .field("year"), .literal(.int(1999))),
    /// //        .function(.startsWith, [.field("title"), .literal(.string("The"))]))
    /// ```
    ///
    /// The grammar is the OData v3/v4 subset of both protocols, from the loosest operator to the tightest:
    /// `or`; `and`; `eq ne`; `gt ge lt le in`; `add sub`; `mul div mod`; unary `not` and `-`; then literals, field
    /// names, function calls and parentheses. Keywords and operators are lowercase; function names and the
    /// `Edm` type names match without regard to letter case. `-` is not a binary operator: `year - 1900` is a
    /// syntax error (write `year sub 1900`).
    ///
    /// Literals fold at parse time: `-5` and `- 5` are the integer `-5`; `cast(1994-10-14,Edm.Date)` and the bare
    /// `1994-10-14` are a ``QueryLiteral/date(_:)``; `datetime'…'`, `datetimeoffset'…'`, a bare date-time and
    /// `cast(…,Edm.DateTimeOffset)` are a ``QueryLiteral/dateTimeOffset(_:)``; `substringof(a, b)` becomes
    /// `contains(b, a)`. Types that are knowable without a schema are checked: `tolower(42)`, `'a' add 1` or a
    /// filter that cannot be Boolean such as `42` fail with ``QueryError/Code/typeMismatch``.
    ///
    /// - Throws: ``QueryError`` with ``QueryError/option`` `$filter` and the character offset of the problem.
    public init(odataFilter text: String, dialect: ProtocolVersion, limits: QueryLimits = .default) throws(QueryError) {
        let length = text.utf8.count
        guard length <= limits.maximumLength else {
            throw QueryError(
                .tooLong,
                "the filter is \(length) bytes long; the limit is \(limits.maximumLength)",
                option: "$filter"
            )
        }
        self = try ODataSyntax.filter(text, dialect: dialect, limits: limits)
    }
}

// MARK: - Options

/// The option-level readers that the query-string initializer uses.
enum ODataSyntax {
    /// A `$filter` option's value: blank means no filter.
    static func filterOption(
        _ text: String,
        dialect: ProtocolVersion,
        limits: QueryLimits
    ) throws(QueryError) -> QueryExpression? {
        if isBlank(text) { return nil }
        return try filter(text, dialect: dialect, limits: limits)
    }

    /// A whole `$filter` expression, which must be able to be Boolean.
    static func filter(_ text: String, dialect: ProtocolVersion, limits: QueryLimits) throws(QueryError)
        -> QueryExpression
    {
        var parser = try ODataExpressionParser(text: text, option: "$filter", dialect: dialect, limits: limits)
        return try parser.parseFilter()
    }

    /// A `$orderby` option's value: a comma list of `expression [asc|desc]`.
    static func orderBy(_ text: String, dialect: ProtocolVersion, limits: QueryLimits) throws(QueryError) -> [SortKey] {
        if isBlank(text) { return [] }
        var parser = try ODataExpressionParser(text: text, option: "$orderby", dialect: dialect, limits: limits)
        return try parser.parseOrderBy()
    }

    /// A `$skip` or `$top` value: a non-negative decimal integer.
    static func count(_ text: String, option: String) throws(QueryError) -> Int {
        let digits = trimmed(text)
        guard !digits.isEmpty, digits.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else {
            throw QueryError(.invalidOption, "expected a non-negative integer, found '\(text)'", option: option)
        }
        guard let value = Int(digits) else {
            throw QueryError(.invalidOption, "'\(digits)' is too large", option: option)
        }
        return value
    }

    /// A `$select` value: a comma list of field names; `*` (or a blank value) selects every field.
    static func select(_ text: String) throws(QueryError) -> [String]? {
        let bytes = Array(text.utf8)
        var fields: [String] = []
        var wildcard = false
        var index = 0
        while true {
            while index < bytes.count, isWhitespace(bytes[index]) { index += 1 }
            let start = index
            while index < bytes.count, bytes[index] != UInt8(ascii: ","), !isWhitespace(bytes[index]) { index += 1 }
            let end = index
            while index < bytes.count, isWhitespace(bytes[index]) { index += 1 }
            if index < bytes.count, bytes[index] != UInt8(ascii: ",") {
                throw selectError(.syntax, "field names are separated by ',', not spaces", bytes, index)
            }
            let item = bytes[start..<end]
            if item.isEmpty {
                if fields.isEmpty, !wildcard, index == bytes.count { return nil }  // A blank value.
                throw selectError(.syntax, "expected a field name", bytes, start)
            }
            if item.elementsEqual("*".utf8) {
                wildcard = true
            } else {
                if let slash = item.firstIndex(of: UInt8(ascii: "/")) {
                    throw selectError(.unsupported, "paths such as 'a/b' are not supported", bytes, slash)
                }
                if let bad = item.indices.first(where: { offset in
                    offset == start ? !isIdentifierStart(bytes[offset]) : !isIdentifierPart(bytes[offset])
                }) {
                    throw selectError(
                        .syntax,
                        "'\(character(in: bytes, at: bad))' cannot appear in a field name",
                        bytes,
                        bad
                    )
                }
                fields.append(String(decoding: item, as: UTF8.self))
            }
            if index == bytes.count { break }
            index += 1  // The comma.
        }
        return wildcard ? nil : fields
    }

    private static func selectError(
        _ code: QueryError.Code,
        _ reason: String,
        _ bytes: [UInt8],
        _ offset: Int
    ) -> QueryError {
        QueryError(code, reason, option: "$select", position: characterOffset(in: bytes, byteOffset: offset))
    }

    // MARK: Shared character helpers

    static func isWhitespace(_ byte: UInt8) -> Bool {
        byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D
    }

    static func isBlank(_ text: String) -> Bool { text.utf8.allSatisfy(isWhitespace) }

    static func trimmed(_ text: String) -> String {
        let bytes = Array(text.utf8)
        guard let first = bytes.firstIndex(where: { !isWhitespace($0) }),
            let last = bytes.lastIndex(where: { !isWhitespace($0) })
        else { return "" }
        return String(decoding: bytes[first...last], as: UTF8.self)
    }

    static func isLetter(_ byte: UInt8) -> Bool {
        (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
            || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
    }

    static func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

    static func isHexDigit(_ byte: UInt8) -> Bool {
        isDigit(byte) || (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "f"))
            || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "F"))
    }

    static func isIdentifierStart(_ byte: UInt8) -> Bool { isLetter(byte) || byte == UInt8(ascii: "_") }

    static func isIdentifierPart(_ byte: UInt8) -> Bool { isIdentifierStart(byte) || isDigit(byte) }

    /// The number of characters in the text before `byteOffset`.
    static func characterOffset(in bytes: [UInt8], byteOffset: Int) -> Int {
        String(decoding: bytes[0..<min(max(byteOffset, 0), bytes.count)], as: UTF8.self).count
    }

    /// The character (Unicode scalar) that starts at `offset`, for messages.
    static func character(in bytes: [UInt8], at offset: Int) -> String {
        guard offset < bytes.count else { return "" }
        var end = offset + 1
        while end < bytes.count, bytes[end] & 0xC0 == 0x80 { end += 1 }
        return String(decoding: bytes[offset..<end], as: UTF8.self)
    }

    /// Whether `bytes[start...]` begins with a GUID in the `D` form (8-4-4-4-12 hexadecimal digits) that is not
    /// followed by more identifier or number characters.
    static func guid(in bytes: [UInt8], at start: Int) -> String? {
        guard bytes.count - start >= 36 else { return nil }
        for offset in 0..<36 {
            let byte = bytes[start + offset]
            switch offset {
            case 8, 13, 18, 23: guard byte == UInt8(ascii: "-") else { return nil }
            default: guard isHexDigit(byte) else { return nil }
            }
        }
        if start + 36 < bytes.count {
            let next = bytes[start + 36]
            if isIdentifierPart(next) || next == UInt8(ascii: "-") || next == UInt8(ascii: ".") { return nil }
        }
        return String(decoding: bytes[start..<start + 36], as: UTF8.self).lowercased()
    }

    /// A GUID in the `D` form, lowercased, or `nil`.
    static func guid(_ text: String) -> String? {
        let bytes = Array(text.utf8)
        guard bytes.count == 36 else { return nil }
        return guid(in: bytes, at: 0)
    }

    /// Reads an instant for `datetime'…'`, `datetimeoffset'…'` and casts from text: any form
    /// ``Timestamp/init(iso8601:)`` accepts, a date-time without a zone (taken as UTC), or a date (midnight UTC).
    static func timestamp(_ text: String) -> Timestamp? {
        if let value = Timestamp(iso8601: text) { return value }
        if let date = CalendarDate(iso8601: text) { return date.midnightUTC }
        return Timestamp(iso8601: text + "Z")
    }
}

// MARK: - Static types

/// What the parser can know about an expression's type without a schema.
enum StaticKind: Equatable {
    /// A field or anything computed from one whose type is not fixed by the grammar.
    case unknown
    case null
    case boolean
    case number
    case string
    case date
    case dateTimeOffset
    case timeOfDay
    case guid

    init(_ literal: QueryLiteral) {
        switch literal {
        case .null: self = .null
        case .bool: self = .boolean
        case .int, .double, .decimal: self = .number
        case .string: self = .string
        case .dateTimeOffset: self = .dateTimeOffset
        case .date: self = .date
        case .timeOfDay: self = .timeOfDay
        case .guid: self = .guid
        }
    }

    init(_ type: EdmType) {
        switch type {
        case .date: self = .date
        case .dateTimeOffset: self = .dateTimeOffset
        case .timeOfDay: self = .timeOfDay
        case .guid: self = .guid
        case .string: self = .string
        case .int32, .int64, .double, .decimal: self = .number
        case .boolean: self = .boolean
        }
    }

    /// Whether a value of this kind may be Boolean.
    var mayBeBoolean: Bool { self == .unknown || self == .null || self == .boolean }

    /// Whether a value of this kind may be a number.
    var mayBeNumber: Bool { self == .unknown || self == .null || self == .number }

    /// Whether a value of this kind may be a string.
    var mayBeString: Bool { self == .unknown || self == .null || self == .string }

    /// Whether `year`, `month` and `day` accept this kind (dates are often stored as text).
    var hasDate: Bool { [.unknown, .null, .string, .date, .dateTimeOffset].contains(self) }

    /// Whether `hour`, `minute` and `second` accept this kind.
    var hasTime: Bool { [.unknown, .null, .string, .dateTimeOffset, .timeOfDay].contains(self) }

    var isTemporal: Bool { self == .date || self == .dateTimeOffset || self == .timeOfDay }

    /// Whether two values of these kinds can be compared (`eq`, `gt`, `in`, …).
    func isComparable(with other: StaticKind) -> Bool {
        if self == other || self == .unknown || other == .unknown || self == .null || other == .null { return true }
        switch (self, other) {
        case (.string, .date), (.string, .dateTimeOffset), (.string, .timeOfDay), (.string, .guid),
            (.date, .string), (.dateTimeOffset, .string), (.timeOfDay, .string), (.guid, .string),
            (.date, .dateTimeOffset), (.dateTimeOffset, .date):
            return true
        default:
            return false
        }
    }

    /// The kind with an article, for messages.
    var phrase: String {
        switch self {
        case .unknown: "a value"
        case .null: "null"
        case .boolean: "a Boolean"
        case .number: "a number"
        case .string: "a string"
        case .date: "a date"
        case .dateTimeOffset: "a date-time"
        case .timeOfDay: "a time of day"
        case .guid: "a GUID"
        }
    }
}

// MARK: - Tokens

enum ODataTokenKind {
    /// A name: a field, keyword, operator, function or `Edm.Type` (dots allowed between parts).
    case identifier(String)
    /// `'…'` with `''` unescaped.
    case string(String)
    /// `prefix'…'`, such as `datetime'2011-11-21T05:16:21.010Z'`.
    case typedString(prefix: String, body: String)
    /// Unsigned number text, checked against the grammar, with its suffix.
    case number(String)
    /// A bare date, date-time, time of day or GUID.
    case literal(QueryLiteral)
    case openParen
    case closeParen
    case comma
    case minus
    case slash
    case end
}

struct ODataToken {
    var kind: ODataTokenKind
    /// The byte offsets of the token in the text.
    var start: Int
    var end: Int
}

// MARK: - Expression parser

/// A recursive-descent parser for expressions with an operator-precedence loop for binary operators.
///
/// Recursion only happens for parentheses, function arguments, `in` lists and casts, and each of those counts
/// against ``QueryLimits/maximumDepth``. Unary prefixes are collected in a loop.
struct ODataExpressionParser {
    /// An expression with what the parser knows about it.
    private struct Node {
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

    private let bytes: [UInt8]
    private let option: String
    private let dialect: ProtocolVersion
    private let limits: QueryLimits
    /// The lexer's position.
    private var index = 0
    private var token = ODataToken(kind: .end, start: 0, end: 0)
    private var previous: ODataToken?

    /// Recognised OData functions that Ferry does not evaluate.
    private static let unsupportedFunctions: Set<String> = [
        "isof", "now", "date", "time", "totaloffsetminutes", "totalseconds", "fractionalseconds", "mindatetime",
        "maxdatetime", "any", "all", "matchespattern", "hassubset", "hassubsequence", "case", "tostring",
    ]

    init(text: String, option: String, dialect: ProtocolVersion, limits: QueryLimits) throws(QueryError) {
        self.bytes = Array(text.utf8)
        self.option = option
        self.dialect = dialect
        self.limits = limits
        try advance()
        previous = nil
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
        var items: [Node] = []
        while true {
            items.append(try parseExpression(nesting: nesting + 1))
            switch token.kind {
            case .comma: try advance()
            case .closeParen:
                try advance()
                return items
            case .minus: throw minusError()
            default:
                throw error(.syntax, "expected ',' or ')' in the 'in' list, found \(describe(token))", at: token.start)
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
            throw error(.unsupported, "qualified names such as '\(name)' are not supported", at: start)
        }
        try advance()
        if case .slash = token.kind {
            throw error(.unsupported, "paths such as '\(name)/…' are not supported", at: token.start)
        }
        return Node(expression: .field(name), kind: .unknown, start: start, depth: 0)
    }

    private mutating func parseCall(_ name: String, nesting: Int) throws(QueryError) -> Node {
        let start = token.start
        let lowercased = name.lowercased()
        try advance()  // The name.
        try checkNesting(nesting + 1, at: token.start)
        try advance()  // The '('.
        if lowercased == "cast" { return try parseCast(at: start, nesting: nesting) }
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
            throw error(.unknownFunction, "unknown function '\(name)' in protocol \(dialect.rawValue)", at: start)
        }
        var arguments: [Node] = []
        if case .closeParen = token.kind {
            try advance()
        } else {
            argumentLoop: while true {
                arguments.append(try parseExpression(nesting: nesting + 1))
                switch token.kind {
                case .comma: try advance()
                case .closeParen:
                    try advance()
                    break argumentLoop
                case .minus: throw minusError()
                default:
                    throw error(
                        .syntax,
                        "expected ',' or ')' in the arguments of '\(name)', found \(describe(token))",
                        at: token.start
                    )
                }
            }
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

    // MARK: Building nodes (with type and depth checks)

    private func leaf(_ literal: QueryLiteral, at start: Int) -> Node {
        Node(expression: .literal(literal), kind: StaticKind(literal), start: start, depth: 0)
    }

    private func makeBinary(_ op: BinaryOperator, _ lhs: Node, _ rhs: Node, at start: Int) throws(QueryError) -> Node {
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

    private func makeIn(_ subject: Node, _ items: [Node], at start: Int) throws(QueryError) -> Node {
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

    private func makeUnary(_ op: UnaryOperator, _ operand: Node, at start: Int) throws(QueryError) -> Node {
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

    private func makeCall(_ function: QueryFunction, _ arguments: [Node], name: String, at start: Int)
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

    // MARK: Literals

    /// Converts checked number text (with an optional leading `-` and suffix) to a literal.
    private func numberLiteral(_ text: String, at start: Int) throws(QueryError) -> QueryLiteral {
        var body = Substring(text)
        var suffix: UInt8?
        if let last = body.utf8.last, ODataSyntax.isLetter(last), last != UInt8(ascii: "e"), last != UInt8(ascii: "E") {
            suffix = last | 0x20
            body = body.dropLast()
        }
        let isReal = body.utf8.contains {
            $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "e") || $0 == UInt8(ascii: "E")
        }
        func real() throws(QueryError) -> Double {
            guard let value = Double(body), value.isFinite else {
                throw error(.syntax, "the number '\(text)' is out of range", at: start)
            }
            return value
        }
        switch suffix {
        case UInt8(ascii: "m"): return .decimal(try real())
        case UInt8(ascii: "d"), UInt8(ascii: "f"): return .double(try real())
        default:
            if isReal { return .double(try real()) }
            guard let value = Int64(body) else {
                throw error(.syntax, "the integer '\(text)' is out of range", at: start)
            }
            return .int(value)
        }
    }

    /// `datetime'…'`, `datetimeoffset'…'`, `guid'…'`; other OData prefixes are recognised but unsupported.
    private func typedLiteral(prefix: String, body: String, at start: Int) throws(QueryError) -> QueryLiteral {
        switch prefix.lowercased() {
        case "datetime", "datetimeoffset":
            guard let value = ODataSyntax.timestamp(body) else {
                throw error(.syntax, "'\(body)' is not a valid date-time", at: start)
            }
            return .dateTimeOffset(value)
        case "guid":
            guard let value = ODataSyntax.guid(body) else {
                throw error(.syntax, "'\(body)' is not a valid GUID", at: start)
            }
            return .guid(value)
        case "time", "duration", "binary", "x", "geography", "geometry":
            throw error(.unsupported, "'\(prefix)' literals are not supported", at: start)
        default:
            throw error(.syntax, "unknown literal prefix '\(prefix)'", at: start)
        }
    }

    /// The literal `cast(literal, type)` stands for.
    private func fold(_ literal: QueryLiteral, to type: EdmType, at start: Int) throws(QueryError) -> QueryLiteral {
        if case .null = literal { return .null }
        let result: QueryLiteral?
        switch (type, literal) {
        case (.date, .date): result = literal
        case (.date, .dateTimeOffset(let value)): result = .date(value.date)
        case (.date, .string(let text)): result = CalendarDate(iso8601: text).map(QueryLiteral.date)
        case (.dateTimeOffset, .dateTimeOffset): result = literal
        case (.dateTimeOffset, .date(let value)): result = .dateTimeOffset(value.midnightUTC)
        case (.dateTimeOffset, .string(let text)): result = ODataSyntax.timestamp(text).map(QueryLiteral.dateTimeOffset)
        case (.timeOfDay, .timeOfDay): result = literal
        case (.timeOfDay, .dateTimeOffset(let value)): result = .timeOfDay(value.timeOfDay)
        case (.timeOfDay, .string(let text)): result = TimeOfDay(iso8601: text).map(QueryLiteral.timeOfDay)
        case (.guid, .guid): result = literal
        case (.guid, .string(let text)): result = ODataSyntax.guid(text).map(QueryLiteral.guid)
        case (.string, .string): result = literal
        case (.string, .date(let value)): result = .string(value.iso8601)
        case (.string, .dateTimeOffset(let value)): result = .string(value.iso8601)
        case (.string, .timeOfDay(let value)): result = .string(value.iso8601)
        case (.string, .guid(let value)): result = .string(value)
        case (.string, .int(let value)): result = .string(String(value))
        case (.string, .double(let value)), (.string, .decimal(let value)): result = .string(String(value))
        case (.string, .bool(let value)): result = .string(value ? "true" : "false")
        case (.int32, .int(let value)): result = Int32(exactly: value) != nil ? literal : nil
        case (.int64, .int): result = literal
        case (.int32, .double(let value)), (.int32, .decimal(let value)):
            result = Int32(exactly: value).map { .int(Int64($0)) }
        case (.int64, .double(let value)), (.int64, .decimal(let value)):
            result = Int64(exactly: value).map(QueryLiteral.int)
        case (.int32, .string(let text)): result = Int32(text).map { .int(Int64($0)) }
        case (.int64, .string(let text)): result = Int64(text).map(QueryLiteral.int)
        case (.double, .int(let value)): result = .double(Double(value))
        case (.double, .double(let value)), (.double, .decimal(let value)): result = .double(value)
        case (.double, .string(let text)): result = Double(text).flatMap { $0.isFinite ? .double($0) : nil }
        case (.decimal, .int(let value)): result = .decimal(Double(value))
        case (.decimal, .double(let value)), (.decimal, .decimal(let value)): result = .decimal(value)
        case (.decimal, .string(let text)): result = Double(text).flatMap { $0.isFinite ? .decimal($0) : nil }
        case (.boolean, .bool): result = literal
        case (.boolean, .string(let text)):
            switch text.lowercased() {
            case "true": result = .bool(true)
            case "false": result = .bool(false)
            default: result = nil
            }
        default:
            throw error(.typeMismatch, "cannot cast \(StaticKind(literal).phrase) to \(type.rawValue)", at: start)
        }
        guard let result else {
            if case .string = literal {
                throw error(.syntax, "the text is not a valid \(type.rawValue) value", at: start)
            }
            throw error(.typeMismatch, "the value does not fit \(type.rawValue)", at: start)
        }
        return result
    }

    // MARK: Limits and errors

    private func checkNesting(_ nesting: Int, at start: Int) throws(QueryError) {
        guard nesting <= limits.maximumNesting else {
            throw error(.tooDeep, "expressions nest deeper than \(limits.maximumNesting) levels", at: start)
        }
    }

    private func checkDepth(_ depth: Int, at start: Int) throws(QueryError) {
        guard depth <= limits.maximumDepth else {
            throw error(.tooDeep, "the expression nests deeper than \(limits.maximumDepth) levels", at: start)
        }
    }

    private func error(_ code: QueryError.Code, _ reason: String, at byteOffset: Int) -> QueryError {
        QueryError(
            code,
            reason,
            option: option,
            position: ODataSyntax.characterOffset(in: bytes, byteOffset: byteOffset)
        )
    }

    private func text(of token: ODataToken) -> String {
        String(decoding: bytes[token.start..<token.end], as: UTF8.self)
    }

    private func describe(_ token: ODataToken) -> String {
        if case .end = token.kind { return "the end of the text" }
        return "'\(text(of: token))'"
    }

    // MARK: Lexer

    private func nextSignificantByte() -> UInt8? {
        var offset = index
        while offset < bytes.count, ODataSyntax.isWhitespace(bytes[offset]) { offset += 1 }
        return offset < bytes.count ? bytes[offset] : nil
    }

    private mutating func advance() throws(QueryError) {
        previous = token
        token = try lex()
    }

    private mutating func lex() throws(QueryError) -> ODataToken {
        while index < bytes.count, ODataSyntax.isWhitespace(bytes[index]) { index += 1 }
        let start = index
        guard index < bytes.count else { return ODataToken(kind: .end, start: start, end: start) }
        let byte = bytes[index]
        let single: ODataTokenKind? =
            switch byte {
            case UInt8(ascii: "("): .openParen
            case UInt8(ascii: ")"): .closeParen
            case UInt8(ascii: ","): .comma
            case UInt8(ascii: "-"): .minus
            case UInt8(ascii: "/"): .slash
            default: nil
            }
        if let single {
            index += 1
            return ODataToken(kind: single, start: start, end: index)
        }
        if byte == UInt8(ascii: "'") {
            let value = try lexQuoted()
            return ODataToken(kind: .string(value), start: start, end: index)
        }
        if let guid = ODataSyntax.guid(in: bytes, at: index) {
            index += 36
            return ODataToken(kind: .literal(.guid(guid)), start: start, end: index)
        }
        if ODataSyntax.isIdentifierStart(byte) {
            index += 1
            while index < bytes.count {
                if ODataSyntax.isIdentifierPart(bytes[index]) {
                    index += 1
                } else if bytes[index] == UInt8(ascii: "."), index + 1 < bytes.count,
                    ODataSyntax.isIdentifierStart(bytes[index + 1])
                {
                    index += 2
                } else {
                    break
                }
            }
            let name = String(decoding: bytes[start..<index], as: UTF8.self)
            if index < bytes.count, bytes[index] == UInt8(ascii: "'") {
                let body = try lexQuoted()
                return ODataToken(kind: .typedString(prefix: name, body: body), start: start, end: index)
            }
            return ODataToken(kind: .identifier(name), start: start, end: index)
        }
        if ODataSyntax.isDigit(byte) {
            let kind = try lexNumeric()
            return ODataToken(kind: kind, start: start, end: index)
        }
        throw error(.syntax, "unexpected character '\(ODataSyntax.character(in: bytes, at: start))'", at: start)
    }

    /// A `'…'` literal starting at `index`, with `''` unescaped.
    private mutating func lexQuoted() throws(QueryError) -> String {
        let start = index
        index += 1
        var content: [UInt8] = []
        while index < bytes.count {
            let byte = bytes[index]
            index += 1
            if byte == UInt8(ascii: "'") {
                if index < bytes.count, bytes[index] == UInt8(ascii: "'") {
                    content.append(byte)
                    index += 1
                } else {
                    return String(decoding: content, as: UTF8.self)
                }
            } else {
                content.append(byte)
            }
        }
        throw error(.syntax, "unterminated string literal", at: start)
    }

    /// A token that starts with a digit: a number, a date, a date-time or a time of day.
    private mutating func lexNumeric() throws(QueryError) -> ODataTokenKind {
        let start = index
        while index < bytes.count {
            let byte = bytes[index]
            guard
                ODataSyntax.isIdentifierPart(byte) || byte == UInt8(ascii: ".") || byte == UInt8(ascii: ":")
                    || byte == UInt8(ascii: "+") || byte == UInt8(ascii: "-")
            else { break }
            index += 1
        }
        let word = bytes[start..<index]
        let text = String(decoding: word, as: UTF8.self)
        func digits(_ offsets: Range<Int>) -> Bool {
            offsets.allSatisfy { start + $0 < index && ODataSyntax.isDigit(bytes[start + $0]) }
        }
        func byte(_ offset: Int, is character: Unicode.Scalar) -> Bool {
            start + offset < index && bytes[start + offset] == UInt8(ascii: character)
        }
        if digits(0..<4), byte(4, is: "-"), digits(5..<7), byte(7, is: "-"), digits(8..<10) {
            if word.count == 10 {
                guard let date = CalendarDate(iso8601: text) else {
                    throw error(.syntax, "'\(text)' is not a valid date", at: start)
                }
                return .literal(.date(date))
            }
            guard let instant = Timestamp(iso8601: text) else {
                throw error(.syntax, "'\(text)' is not a valid date-time", at: start)
            }
            return .literal(.dateTimeOffset(instant))
        }
        if digits(0..<2), byte(2, is: ":") {
            guard let time = TimeOfDay(iso8601: text) else {
                throw error(.syntax, "'\(text)' is not a valid time of day", at: start)
            }
            return .literal(.timeOfDay(time))
        }
        guard Self.isNumber(Array(word)) else {
            throw error(.syntax, "'\(text)' is not a valid number", at: start)
        }
        return .number(text)
    }

    /// `digits ['.' digits] [('e'|'E') ['+'|'-'] digits] [suffix]`; the suffix `L` only on integers.
    private static func isNumber(_ bytes: [UInt8]) -> Bool {
        var index = 0
        func digitRun() -> Bool {
            let start = index
            while index < bytes.count, ODataSyntax.isDigit(bytes[index]) { index += 1 }
            return index > start
        }
        guard digitRun() else { return false }
        var isInteger = true
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            isInteger = false
            guard digitRun() else { return false }
        }
        if index < bytes.count, bytes[index] | 0x20 == UInt8(ascii: "e") {
            index += 1
            isInteger = false
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                index += 1
            }
            guard digitRun() else { return false }
        }
        if index < bytes.count {
            switch bytes[index] | 0x20 {
            case UInt8(ascii: "m"), UInt8(ascii: "d"), UInt8(ascii: "f"): index += 1
            case UInt8(ascii: "l") where isInteger: index += 1
            default: return false
            }
        }
        return index == bytes.count
    }
}

// MARK: - Raw parameters

/// The raw parameters of a query string, in order and percent-decoded, with helpers for the next-page link.
///
/// ```swift
/// let parameters = ODataParameters(parsing: "$count=true&$top=125&$filter=(title eq 'A&B')")
/// parameters.value(for: "$FILTER")              // "(title eq 'A&B')"
/// parameters.nextPage(skip: 100, top: 25)       // "$count=true&$filter=(title eq 'A&B')&$skip=100&$top=25"
/// ```
public struct ODataParameters: Sendable, Hashable {
    /// One `name=value` pair.
    public struct Parameter: Sendable, Hashable {
        /// The percent-decoded name.
        public var name: String
        /// The percent-decoded value; empty when the pair had no `=`.
        public var value: String

        /// Creates a pair.
        public init(name: String, value: String) {
            self.name = name
            self.value = value
        }
    }

    /// The pairs, in the order they appeared.
    public var parameters: [Parameter]

    /// The pairs as tuples, in the order they appeared.
    public var items: [(name: String, value: String)] {
        get { parameters.map { ($0.name, $0.value) } }
        set { parameters = newValue.map { Parameter(name: $0.name, value: $0.value) } }
    }

    /// Creates a list from pairs.
    public init(_ items: [(name: String, value: String)] = []) {
        self.parameters = items.map { Parameter(name: $0.name, value: $0.value) }
    }

    /// Splits a query string into its parameters.
    ///
    /// The string is split on `&` characters that are not inside a single-quoted literal of a value (so the raw
    /// `$filter=(title eq 'A&B')` stays one parameter), then each part at its first `=`. Both halves are
    /// percent-decoded, and `+` is a space, as the servers of this protocol family (Node's query parser, ASP.NET)
    /// and every form encoder (`curl --data-urlencode`, Python's `urlencode`, HTML forms) have it: a literal `+`
    /// must be sent as `%2B`, which Ferry's encoder does. A `%` that does not start a valid escape stays as it is,
    /// so raw, unencoded input is otherwise accepted as is. Empty parts are dropped, and one leading
    /// `?` is ignored.
    public init(parsing queryString: String) {
        var bytes = Array(queryString.utf8)
        if bytes.first == UInt8(ascii: "?") { bytes.removeFirst() }
        var parameters: [Parameter] = []
        var start = 0
        var equals: Int?
        var inQuote = false
        func finish(_ end: Int) {
            defer {
                start = end + 1
                equals = nil
                inQuote = false
            }
            guard end > start else { return }
            let nameEnd = equals ?? end
            let valueStart = equals.map { $0 + 1 } ?? end
            parameters.append(
                Parameter(
                    name: ODataParameters.percentDecoded(bytes[start..<nameEnd]),
                    value: ODataParameters.percentDecoded(bytes[valueStart..<end])
                )
            )
        }
        for (offset, byte) in bytes.enumerated() {
            switch byte {
            case UInt8(ascii: "&") where !inQuote: finish(offset)
            case UInt8(ascii: "=") where equals == nil: equals = offset
            case UInt8(ascii: "'") where equals != nil: inQuote.toggle()
            default: break
            }
        }
        finish(bytes.count)
        self.parameters = parameters
    }

    /// The value of the first parameter called `name`, compared without regard to letter case.
    public func value(for name: String) -> String? {
        let key = name.lowercased()
        return parameters.first { $0.name.lowercased() == key }?.value
    }

    /// The 3.0 next-page parameters: these parameters minus `$skip` and `$top`, then `$skip=<skip>` and, when `top`
    /// is not `nil`, `$top=<top>`.
    public func nextPageParameters(skip: Int, top: Int?) -> ODataParameters {
        var next = ODataParameters()
        next.parameters = parameters.filter {
            let key = $0.name.lowercased()
            return key != "$skip" && key != "$top"
        }
        next.parameters.append(Parameter(name: "$skip", value: String(skip)))
        if let top { next.parameters.append(Parameter(name: "$top", value: String(top))) }
        return next
    }

    /// The 3.0 next page as raw (not percent-encoded) `a=b&c=d` text: see ``nextPageParameters(skip:top:)``.
    ///
    /// `"$count=true&$top=125&$filter=x"` with skip 100 and top 25 gives
    /// `"$count=true&$filter=x&$skip=100&$top=25"`.
    public func nextPage(skip: Int, top: Int?) -> String {
        nextPageParameters(skip: skip, top: top).rawQueryString
    }

    /// The parameters joined as raw (not percent-encoded) `name=value` text.
    public var rawQueryString: String {
        parameters.map { "\($0.name)=\($0.value)" }.joined(separator: "&")
    }

    /// The parameters joined as `name=value` text, percent-encoded for a URL's query component (see
    /// ``TableQuery/odataQueryString(dialect:)`` for the characters kept).
    public var percentEncodedQueryString: String {
        parameters.map { ODataEncoding.percentEncoded($0.name) + "=" + ODataEncoding.percentEncoded($0.value) }
            .joined(separator: "&")
    }

    static func percentDecoded(_ bytes: ArraySlice<UInt8>) -> String {
        guard bytes.contains(where: { $0 == UInt8(ascii: "%") || $0 == UInt8(ascii: "+") }) else {
            return String(decoding: bytes, as: UTF8.self)
        }
        var output: [UInt8] = []
        output.reserveCapacity(bytes.count)
        var index = bytes.startIndex
        while index < bytes.endIndex {
            let byte = bytes[index]
            if byte == UInt8(ascii: "%"), index + 2 < bytes.endIndex,
                let high = hexValue(bytes[index + 1]), let low = hexValue(bytes[index + 2])
            {
                output.append(high << 4 | low)
                index += 3
            } else if byte == UInt8(ascii: "+") {
                output.append(UInt8(ascii: " "))
                index += 1
            } else {
                output.append(byte)
                index += 1
            }
        }
        return String(decoding: output, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
