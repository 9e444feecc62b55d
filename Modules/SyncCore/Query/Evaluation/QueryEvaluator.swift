/// Evaluates queries over items in memory, with the semantics of the protocol's servers.
///
/// The memory and LMDB stores answer queries with it, and the SQLite store's SQL is tested against
/// it. The rules, confirmed by replaying the servers' own test cases:
/// - comparisons with `null` are false except `eq null` and `ne null`;
/// - `int div int` is an integer (truncated), any floating-point operand makes it floating-point;
///   `round` rounds half to even; division of an integer by zero gives `null`;
/// - strings compare by their UTF-8 bytes (ordinal, case-sensitive), like SQLite's `BINARY`;
/// - a string compared with a date, date-time, time or GUID literal is read as one;
/// - sorting puts `null` first ascending and last descending, and always ends with `id` ascending;
/// - soft-deleted items (`deleted == true`) are left out unless the query includes them;
/// - the total count is taken after the filter, before skip and top.
///
/// ```swift
/// let evaluator = QueryEvaluator()
/// let query = try TableQuery(odata: "$filter=year ge 2000&$orderby=title&$top=10&$count=true", protocolVersion: .v3)
/// let result = try evaluator.evaluate(query, over: items)
/// print(result.totalCount ?? 0, result.items.count)
/// ```
public struct QueryEvaluator: Sendable {
    /// The schema that types fields and rejects unknown ones.
    public var schema: TableSchema

    public init(schema: TableSchema = .schemaless) {
        self.schema = schema
    }

    /// Checks that every field the query names is known to the schema, and that no expression is
    /// deeper than ``QueryLimits/maximumDepth`` (queries built in code are not bounded by the parser).
    public func validate(_ query: TableQuery) throws(QueryError) {
        if let filter = query.filter { try validate(filter, option: "$filter") }
        for key in query.orderBy { try validate(key.expression, option: "$orderby") }
        for field in query.select ?? [] where !schema.isKnown(field) {
            throw QueryError(.unknownField, "unknown field '\(field)'", option: "$select")
        }
    }

    private func validate(_ expression: QueryExpression, option: String) throws(QueryError) {
        let maximumDepth = QueryLimits.default.maximumDepth
        var stack = [(expression, 0)]
        while let (next, depth) = stack.popLast() {
            if depth > maximumDepth {
                throw QueryError(.tooDeep, "the expression nests deeper than \(maximumDepth) levels", option: option)
            }
            switch next {
            case .literal(let literal): try Self.validate(literal, option: option)
            case .field(let name):
                if !schema.isKnown(name) { throw QueryError(.unknownField, "unknown field '\(name)'", option: option) }
            case .unary(_, let operand): stack.append((operand, depth + 1))
            case .binary(_, let lhs, let rhs): stack.append(contentsOf: [(lhs, depth + 1), (rhs, depth + 1)])
            case .function(_, let arguments): stack.append(contentsOf: arguments.map { ($0, depth + 1) })
            case .isIn(let value, let list):
                stack.append((value, depth + 1))
                stack.append(contentsOf: list.map { ($0, depth + 1) })
            case .cast(let value, _): stack.append((value, depth + 1))
            }
        }
        // Depth is bounded above, so the bound's recursion is too.
        try StringGrowth(option: option).check(expression)
    }

    /// A date constant no query text carries (one built in code: a typed query's `Date` past the
    /// year 9999, or of NaN seconds): evaluated here it matched as no server would, and a server
    /// refused the query after the call.
    private static func validate(_ literal: QueryLiteral, option: String) throws(QueryError) {
        guard case .dateTimeOffset(let instant) = literal,
            !Timestamp.wireRange.contains(instant.millisecondsSince1970)
        else { return }
        throw QueryError(
            .syntax, "a date constant lies outside the years 0000-9999 that a query carries", option: option)
    }

    /// Runs a whole query: validation, soft-delete, filter, count, order, skip, top and select.
    public func evaluate(_ query: TableQuery, over items: some Sequence<JSONObject>) throws(QueryError) -> QueryResult {
        try validate(query)
        var matching: [JSONObject] = []
        for item in items {
            if !query.includeDeleted, item.isDeleted { continue }
            if let filter = query.filter, !matches(filter, item) { continue }
            matching.append(item)
        }
        let total = query.includeTotalCount ? matching.count : nil
        sort(&matching, by: query.orderBy)
        var page = matching[...]
        if let skip = query.skip { page = page.dropFirst(max(0, skip)) }
        if let top = query.top { page = page.prefix(max(0, top)) }
        let projected = page.map { project($0, query.select) }
        return QueryResult(items: projected, totalCount: total)
    }

    /// Whether `item` satisfies `filter`.
    public func matches(_ filter: QueryExpression, _ item: JSONObject) -> Bool {
        if case .bool(true) = value(of: filter, in: item) { return true }
        return false
    }

    /// Sorts items by the keys, then by `id` ascending (stable).
    public func sort(_ items: inout [JSONObject], by keys: [SortKey]) {
        if items.count < 2 { return }
        var effective = keys
        if !keys.contains(where: { $0.expression == .field("id") }) { effective.append(.field("id")) }
        // Decorate once so each key is evaluated once per item, not once per comparison.
        let decorated = items.enumerated().map { position, item in
            (key: effective.map { value(of: $0.expression, in: item) }, position: position)
        }
        let directions = effective.map(\.descending)
        let order = decorated.sorted { lhs, rhs in
            for index in directions.indices {
                let result = sortOrder(lhs.key[index], rhs.key[index])
                if result != 0 { return directions[index] ? result > 0 : result < 0 }
            }
            return lhs.position < rhs.position
        }
        items = order.map { items[$0.position] }
    }

    /// Compares two items by the keys and then `id`: negative, zero or positive.
    public func compare(_ lhs: JSONObject, _ rhs: JSONObject, by keys: [SortKey]) -> Int {
        for key in keys {
            let result = sortOrder(value(of: key.expression, in: lhs), value(of: key.expression, in: rhs))
            if result != 0 { return key.descending ? -result : result }
        }
        return sortOrder(value(of: .field("id"), in: lhs), value(of: .field("id"), in: rhs))
    }

    /// Keeps only the selected fields.
    public func project(_ item: JSONObject, _ select: [String]?) -> JSONObject {
        guard let select else { return item }
        var result = JSONObject(minimumCapacity: select.count)
        for field in select { if let value = item[field] { result[field] = value } }
        return result
    }

    /// The value of an expression for an item, as JSON (typed values such as dates become their
    /// ISO 8601 text). Useful for computed sort keys and for debugging.
    public func evaluate(_ expression: QueryExpression, in item: JSONObject) -> JSONValue {
        value(of: expression, in: item).json
    }
}

/// The answer to a query: one page of items and, when asked for, the total count.
public struct QueryResult: Sendable, Hashable {
    /// The items of the page, in order.
    public var items: [JSONObject]
    /// The number of matching items before skip and top, when the query asked for it.
    public var totalCount: Int?

    public init(items: [JSONObject], totalCount: Int? = nil) {
        self.items = items
        self.totalCount = totalCount
    }
}
