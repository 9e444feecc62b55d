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
    ///     protocolVersion: .v3)
    /// query.top                // 20
    /// query.includeTotalCount  // true
    /// ```
    ///
    /// Both protocol versions' forms are accepted whichever `protocolVersion` is named (`substringof` and `contains`,
    /// `datetime'…'` and `cast(…,Edm.DateTimeOffset)`, `$inlinecount=allpages` and `$count=true`); the protocol version
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
    ///   - protocolVersion: The protocol the request came in.
    ///   - limits: Bounds on the text's length (checked on `queryString` as given) and on nesting.
    /// - Throws: ``QueryError`` for any malformed, unsupported, oversized or too deeply nested option.
    public init(odata queryString: String, protocolVersion: ProtocolVersion, limits: QueryLimits = .default)
        throws(QueryError)
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
                query.filter = try ODataSyntax.filterOption(value, protocolVersion: protocolVersion, limits: limits)
            case "$orderby":
                query.orderBy = try ODataSyntax.orderBy(value, protocolVersion: protocolVersion, limits: limits)
            case "$skip":
                query.skip = try ODataSyntax.count(value, option: key)
            case "$top":
                query.top = try ODataSyntax.count(value, option: key)
            case "$select":
                query.select = try ODataSyntax.select(value)
            case "$count":
                if try ODataSyntax.isOn(value, on: "true", off: "false", option: key) { query.includeTotalCount = true }
            case "$inlinecount":
                if try ODataSyntax.isOn(value, on: "allpages", off: "none", option: key) {
                    query.includeTotalCount = true
                }
            case "__includedeleted":
                query.includeDeleted = value.lowercased() == "true"
            default:
                throw QueryError(
                    .invalidOption,
                    "unknown query option '\(parameter.name)' in protocol \(protocolVersion.rawValue)",
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
    /// let filter = try QueryExpression(odataFilter: "year gt 1999 and startswith(title, 'The')", protocolVersion: .v3)
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
    public init(odataFilter text: String, protocolVersion: ProtocolVersion, limits: QueryLimits = .default)
        throws(QueryError)
    {
        let length = text.utf8.count
        guard length <= limits.maximumLength else {
            throw QueryError(
                .tooLong,
                "the filter is \(length) bytes long; the limit is \(limits.maximumLength)",
                option: "$filter"
            )
        }
        self = try ODataSyntax.filter(text, protocolVersion: protocolVersion, limits: limits)
    }
}

// MARK: - Options

/// The option-level readers that the query-string initializer uses.
enum ODataSyntax {
    /// A `$filter` option's value: blank means no filter.
    static func filterOption(
        _ text: String,
        protocolVersion: ProtocolVersion,
        limits: QueryLimits
    ) throws(QueryError) -> QueryExpression? {
        if isBlank(text) { return nil }
        return try filter(text, protocolVersion: protocolVersion, limits: limits)
    }

    /// A whole `$filter` expression, which must be able to be Boolean.
    static func filter(_ text: String, protocolVersion: ProtocolVersion, limits: QueryLimits) throws(QueryError)
        -> QueryExpression
    {
        var parser = try ODataExpressionParser(
            text: text, option: "$filter", protocolVersion: protocolVersion, limits: limits)
        return try parser.parseFilter()
    }

    /// A `$orderby` option's value: a comma list of `expression [asc|desc]`.
    static func orderBy(_ text: String, protocolVersion: ProtocolVersion, limits: QueryLimits) throws(QueryError)
        -> [SortKey]
    {
        if isBlank(text) { return [] }
        var parser = try ODataExpressionParser(
            text: text, option: "$orderby", protocolVersion: protocolVersion, limits: limits)
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

    /// Whether a two-valued option (`$count`, `$inlinecount`) is `on` rather than `off`, in any letter case.
    static func isOn(_ value: String, on: String, off: String, option: String) throws(QueryError) -> Bool {
        switch value.lowercased() {
        case on: return true
        case off: return false
        default: throw QueryError(.invalidOption, "expected '\(on)' or '\(off)', found '\(value)'", option: option)
        }
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
}
