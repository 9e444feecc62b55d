import SyncCore

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
        guard skip >= 0, (limit ?? 0) >= 0, (maximumBytes ?? 0) >= 0 else {
            throw StorageError(.invalidQuery, "skip, limit and maximumBytes must not be negative")
        }
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
