public import SyncCore

extension StorageQuery {
    /// Checks the query against `table`'s schema, as every backend must before running it.
    ///
    /// - Parameter table: The table queried.
    /// - Throws: ``StorageError`` with ``StorageError/Code/invalidQuery``.
    public func validate(for table: StorageTable) throws(StorageError) {
        var check = TableQuery(filter: filter, orderBy: orderBy)
        check.skip = skip
        check.top = limit
        do {
            try QueryEvaluator(schema: table.schema).validate(check)
        } catch {
            throw StorageError(.invalidQuery, error.description, underlying: error)
        }
        guard skip >= 0, (limit ?? 0) >= 0 else {
            throw StorageError(.invalidQuery, "skip and limit must not be negative")
        }
    }

    /// The page a backend answers when part of the query runs in `QueryEvaluator`: `rows` (what its
    /// database selected with the compiled part of the filter) filtered by `residual`, sorted by the
    /// query's order unless the database already did (`sorted`), then skipped and limited.
    ///
    /// ```swift
    /// let page = query.evaluatedPage(of: rows, table: table, residual: split.residual, sorted: false)
    /// ```
    ///
    /// - Parameters:
    ///   - rows: The rows selected so far.
    ///   - table: The table, for its schema.
    ///   - residual: What of the filter the database did not run, if anything.
    ///   - sorted: Whether `rows` are already in the query's order.
    public func evaluatedPage(
        of rows: [StoredItem], table: StorageTable, residual: QueryExpression?, sorted: Bool
    ) -> StoragePage {
        var items = rows
        let evaluator = QueryEvaluator(schema: table.schema)
        if let residual {
            items = items.filter { evaluator.matches(residual, $0.queryable) }
        }
        if !sorted {
            var byID: [String: StoredItem] = [:]
            for item in items { byID[item.id] = item }
            var queryables = items.map(\.queryable)
            evaluator.sort(&queryables, by: orderBy)
            items = queryables.compactMap { $0.id.flatMap { byID[$0] } }
        }
        let skip = max(0, skip)
        let limit = limit.map { max(0, $0) }
        let total = items.count
        let start = min(skip, total)
        let end = limit.map { min(total, start + min($0, total)) } ?? total
        return StoragePage(
            items: Array(items[start..<end]), totalCount: includeTotalCount ? total : nil, hasMore: end < total,
            plan: .evaluator)
    }
}

extension StorageTable {
    /// The server's system table of attachment metadata (docs/attachments.md): the one name with
    /// the reserved `__` prefix a storage accepts. Clients never reach it as a table: the server
    /// checks their table names with `StoreValidation.validateTableName(_:)`, which refuses it.
    public static let attachmentsTableName = "__attachments"

    /// Checks a table name as every backend must: `StoreValidation.validateTableName(_:)`'s rules,
    /// or ``attachmentsTableName``.
    ///
    /// - Parameter name: The table's name.
    /// - Throws: ``StorageError`` with ``StorageError/Code/invalidTableName``.
    public static func validateName(_ name: String) throws(StorageError) {
        if name == attachmentsTableName { return }
        do {
            try StoreValidation.validateTableName(name)
        } catch {
            throw StorageError(.invalidTableName, error.message)
        }
    }
}

extension StoredItem {
    /// Checks an item id as every backend must: `ItemID.validate(_:)`'s rules.
    ///
    /// - Parameter id: The id.
    /// - Throws: ``StorageError`` with ``StorageError/Code/invalidName``.
    public static func validateID(_ id: String) throws(StorageError) {
        do {
            try ItemID.validate(id)
        } catch {
            throw StorageError(.invalidName, error.description)
        }
    }
}
