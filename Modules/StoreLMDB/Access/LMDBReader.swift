import CLMDB
import SyncCore

/// Reads the store inside one LMDB transaction (a snapshot, or the write transaction).
class LMDBReader: StoreReader {
    let txn: Txn
    /// "the LMDB store at '…'", for messages.
    var place: String { txn.place }
    /// Set when the transaction ends; the handle then refuses every call.
    var isFinished = false
    /// Catalog records looked up in this transaction (`nil`: known to be absent).
    var catalog: [String: TableEntry?] = [:]

    init(txn: Txn) {
        self.txn = txn
    }

    var dbs: Databases { txn.dbs }

    func checkActive() throws(StoreError) {
        if isFinished {
            throw StoreError(.closed, "a handle of \(place) was used after its transaction ended")
        }
    }

    // MARK: Catalog

    func entry(_ table: String) throws(StoreError) -> TableEntry? {
        if let cached = catalog[table] { return cached }
        var found: TableEntry?
        // Only valid names are ever written; others cannot be found (and may not fit in a key).
        if !table.isEmpty, table.utf8.count <= StoreValidation.maximumTableNameLength,
            let value = try txn.get(dbs.tables, Array(table.utf8))
        {
            found = try TableEntry(
                json: try decodeObject(value, what: "the catalog record of table '\(table)'"), table: table)
        }
        catalog[table] = .some(found)
        return found
    }

    func decodeObject(_ bytes: UnsafeRawBufferPointer, what: @autoclosure () -> String) throws(StoreError)
        -> JSONObject
    {
        do {
            if let object = try JSONValue(parsingUTF8: bytes.assumingMemoryBound(to: UInt8.self)).objectValue {
                return object
            }
        } catch {
            throw StoreError(.corrupt, "\(what()) in \(place) is not valid JSON: \(error)", underlying: error)
        }
        throw StoreError(.corrupt, "\(what()) in \(place) is not a JSON object")
    }

    func storedItems(_ value: UnsafeRawBufferPointer, key: UnsafeRawBufferPointer, table: String) throws(StoreError)
        -> [StoredItem]
    {
        do {
            return try ItemValue.decode(value, keyID: UnsafeRawBufferPointer(rebasing: key[4...]))
        } catch {
            throw LMDBErrors.corruptValue("an item of table '\(table)'", place)
        }
    }

    /// ``storedItems(_:key:table:)`` for a key held in an array.
    func storedItems(_ value: UnsafeRawBufferPointer, key: [UInt8], table: String) throws -> [StoredItem] {
        try key.withUnsafeBytes { keyBytes throws(StoreError) in
            try storedItems(value, key: keyBytes, table: table)
        }
    }

    func metaUInt64(_ name: String) throws(StoreError) -> UInt64 {
        guard let value = try txn.get(dbs.meta, Array(name.utf8)) else { return 0 }
        guard let number = Layout.uint64(value) else { throw LMDBErrors.corruptValue("the counter '\(name)'", place) }
        return number
    }

    /// The operation ids stored under one key of a duplicate-sorted index, from `first` on.
    func duplicates(_ dbi: MDB_dbi, _ key: [UInt8], from first: Int64? = nil, limit: Int? = nil) throws -> [Int64] {
        try txn.withCursor(dbi) { cursor in
            var next: Cursor.Entry?
            if let first {
                next = try cursor.get(MDB_GET_BOTH_RANGE, key: key, value: Layout.sequenceKey(first))
            } else {
                next = try cursor.get(MDB_SET_KEY, key: key)
            }
            var ids: [Int64] = []
            while let (_, value) = next {
                guard let id = Layout.uint64(value) else { throw LMDBErrors.corruptValue("an index entry", place) }
                ids.append(Int64(bitPattern: id))
                if let limit, ids.count >= limit { break }
                next = try cursor.get(MDB_NEXT_DUP)
            }
            return ids
        }
    }

    // MARK: StoreReader

    func item(_ table: String, id: String) throws -> JSONObject? {
        try checkActive()
        guard let entry = try entry(table), !id.isEmpty else { return nil }
        let key = ItemKeys.item(table: entry.key, id: id)
        guard let value = try txn.get(dbs.items, key) else { return nil }
        let items = try storedItems(value, key: key, table: table)
        guard let stored = items.first(where: { $0.id == id }) else { return nil }
        return try decodeObject(stored.json, what: "item '\(id)' of table '\(table)'")
    }

    func query(_ table: String, _ query: TableQuery) throws -> QueryResult {
        try checkActive()
        let entry = try entry(table)
        let schema = entry?.schema ?? .schemaless
        try StoreValidation.validate(query, schema: schema)
        guard let entry else { return try Self.evaluate(query, schema: schema, over: []) }
        return try QueryRunner(reader: self, table: table, entry: entry).run(query)
    }

    static func evaluate(_ query: TableQuery, schema: TableSchema, over items: [JSONObject]) throws(StoreError)
        -> QueryResult
    {
        do {
            return try QueryEvaluator(schema: schema).evaluate(query, over: items)
        } catch {
            throw StoreError(.invalidQuery, error.description, underlying: error)
        }
    }

    func count(_ table: String) throws -> Int {
        try checkActive()
        return try entry(table)?.count ?? 0
    }

    func tableNames() throws -> [String] {
        try checkActive()
        var names: [String] = []
        try txn.withCursor(dbs.tables) { cursor in
            var next = try cursor.get(MDB_FIRST)
            while let (key, value) = next {
                let name = String(decoding: key, as: UTF8.self)
                let entry = try TableEntry(
                    json: try decodeObject(value, what: "the catalog record of table '\(name)'"), table: name)
                if entry.count > 0 || entry.definition != nil { names.append(name) }
                next = try cursor.get(MDB_NEXT)
            }
        }
        return names.sorted()
    }

    func definition(of table: String) throws -> TableDefinition? {
        try checkActive()
        return try entry(table)?.definition
    }
}
