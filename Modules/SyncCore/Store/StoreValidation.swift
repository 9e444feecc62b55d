/// Rules every store applies to what it is given, so that all backends reject the same input the
/// same way. Third-party stores should call these too.
public enum StoreValidation: Sendable {
    /// The longest table name.
    public static let maximumTableNameLength = 128

    /// Throws ``StoreError/Code/invalidTableName`` unless `name` is 1–128 characters of `A-Z a-z 0-9 _ -`
    /// that does not start with `__` (reserved for Ferry's own tables).
    public static func validateTableName(_ name: String) throws(StoreError) {
        guard !name.isEmpty, name.utf8.count <= maximumTableNameLength else {
            throw StoreError(
                .invalidTableName,
                "invalid table name '\(name.prefix(40))': it must be 1 to \(maximumTableNameLength) characters")
        }
        guard name.utf8.allSatisfy({ isTableNameByte($0) }) else {
            throw StoreError(
                .invalidTableName,
                "invalid table name '\(name.prefix(40))': use only ASCII letters, digits, '_' and '-'")
        }
        guard !name.hasPrefix("__") else {
            throw StoreError(.invalidTableName, "invalid table name '\(name)': names starting with '__' are reserved")
        }
    }

    /// The local system tables Ferry itself keeps as item tables in a store, beside the app's:
    /// `__attachments` (the attachment queue and cache index, see ``ItemAttachment``). An app can never
    /// name a table so (``validateTableName(_:)`` refuses the `__` prefix); a store accepts them.
    public static let localSystemTables: Set<String> = ["__attachments"]

    /// What a store checks before it writes items to a table: ``validateTableName(_:)``, except that
    /// Ferry's own ``localSystemTables`` pass. Stores call this in `define` and `upsert`, so that
    /// Ferry's system rows commit in the same transactions as the app's items.
    public static func validateStoredTableName(_ name: String) throws(StoreError) {
        if localSystemTables.contains(name) { return }
        try validateTableName(name)
    }

    /// Returns the item's id, or throws ``StoreError/Code/invalidItem`` when it has no valid string id.
    public static func validatedID(of item: JSONObject, table: String) throws(StoreError) -> String {
        guard let raw = item["id"] else {
            throw StoreError(.invalidItem, "an item for table '\(table)' has no id")
        }
        guard case .string(let id) = raw else {
            throw StoreError(.invalidItem, "an item for table '\(table)' has a non-string id: \(raw)")
        }
        do {
            try ItemID.validate(id)
        } catch {
            throw StoreError(.invalidItem, "table '\(table)': \(error)", underlying: error)
        }
        return id
    }

    /// Validates a query against a table's schema, mapping a ``QueryError`` to
    /// ``StoreError/Code/invalidQuery``.
    public static func validate(_ query: TableQuery, schema: TableSchema) throws(StoreError) {
        do throws(QueryError) {
            try QueryEvaluator(schema: schema).validate(query)
            if let skip = query.skip, skip < 0 {
                throw QueryError(.invalidOption, "$skip must not be negative", option: "$skip")
            }
            if let top = query.top, top < 0 {
                throw QueryError(.invalidOption, "$top must not be negative", option: "$top")
            }
        } catch {
            throw StoreError(.invalidQuery, error.description, underlying: error)
        }
    }

    private static func isTableNameByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"), UInt8(ascii: "-"):
            true
        default: false
        }
    }
}
