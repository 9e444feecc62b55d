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

    func metaUInt64(_ name: String) throws(StoreError) -> UInt64 {
        guard let value = try txn.get(dbs.meta, Array(name.utf8)) else { return 0 }
        guard let number = Layout.uint64(value) else { throw LMDBErrors.corruptValue("the counter '\(name)'", place) }
        return number
    }

    // MARK: StoreReader

    func item(_ table: String, id: String) throws -> JSONObject? {
        try checkActive()
        guard let entry = try entry(table), !id.isEmpty else { return nil }
        let key = ItemKeys.item(table: entry.key, id: id)
        guard let value = try txn.get(dbs.items, key) else { return nil }
        let items = try key.withUnsafeBytes { keyBytes throws(StoreError) in
            try storedItems(value, key: keyBytes, table: table)
        }
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

    func decodeOperation(_ bytes: UnsafeRawBufferPointer) throws(StoreError) -> QueuedOperation {
        try QueuedOperation(json: try decodeObject(bytes, what: "a queued operation"))
    }

    func operation(_ id: Int64) throws(StoreError) -> QueuedOperation? {
        guard let value = try txn.get(dbs.operations, Layout.sequenceKey(id)) else { return nil }
        return try decodeOperation(value)
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

    func operations(after afterID: Int64?, table: String?, limit: Int?) throws -> [QueuedOperation] {
        try checkActive()
        if let limit, limit <= 0 { return [] }
        var first: Int64 = 1
        if let afterID {
            if afterID == .max { return [] }
            first = max(1, afterID + 1)
        }
        var result: [QueuedOperation] = []
        guard let table else {
            try txn.withCursor(dbs.operations) { cursor in
                var next = try cursor.get(MDB_SET_RANGE, key: Layout.sequenceKey(first))
                while let (_, value) = next {
                    result.append(try decodeOperation(value))
                    if let limit, result.count >= limit { break }
                    next = try cursor.get(MDB_NEXT)
                }
            }
            return result
        }
        let (key, exact) = Layout.textKey(tag: UInt8(ascii: "o"), table)
        // With an exact key every id belongs to the table; with a cut one, filter after decoding.
        for id in try duplicates(dbs.operationsByTable, key, from: first, limit: exact ? limit : nil) {
            guard let operation = try operation(id) else {
                throw LMDBErrors.corruptValue("the queue index of table '\(table)'", place)
            }
            if operation.table != table { continue }
            result.append(operation)
            if let limit, result.count >= limit { break }
        }
        return result
    }

    func operations(table: String, itemID: String) throws -> [QueuedOperation] {
        try checkActive()
        var result: [QueuedOperation] = []
        for id in try duplicates(dbs.operationsByItem, Layout.pairKey(table, itemID)) {
            guard let operation = try operation(id) else {
                throw LMDBErrors.corruptValue("the operation index of item '\(itemID)'", place)
            }
            if operation.table == table, operation.itemID == itemID { result.append(operation) }
        }
        return result
    }

    func operation(id: Int64) throws -> QueuedOperation? {
        try checkActive()
        return try operation(id)
    }

    func operationCount(table: String?) throws -> Int {
        try checkActive()
        guard let table else { return try txn.entryCount(dbs.operations) }
        let (key, exact) = Layout.textKey(tag: UInt8(ascii: "o"), table)
        guard exact else { return try operations(after: nil, table: table, limit: nil).count }
        return try txn.withCursor(dbs.operationsByTable) { cursor in
            guard try cursor.get(MDB_SET_KEY, key: key) != nil else { return 0 }
            return try cursor.duplicateCount()
        }
    }

    func decodeError(_ bytes: UnsafeRawBufferPointer) throws(StoreError) -> OperationErrorRecord {
        try OperationErrorRecord(json: try decodeObject(bytes, what: "an operation error"))
    }

    func operationErrors(table: String?) throws -> [OperationErrorRecord] {
        try checkActive()
        var result: [OperationErrorRecord] = []
        try txn.withCursor(dbs.errors) { cursor in
            var next = try cursor.get(MDB_FIRST)
            while let (_, value) = next {
                let record = try decodeError(value)
                if table == nil || record.table == table { result.append(record) }
                next = try cursor.get(MDB_NEXT)
            }
        }
        return result
    }

    /// The sequence number and record of the error with `id`.
    func errorEntry(_ id: String) throws -> (sequence: Int64, record: OperationErrorRecord)? {
        let (key, _) = Layout.textKey(tag: UInt8(ascii: "e"), id)
        for sequence in try duplicates(dbs.errorIDs, key) {
            guard let value = try txn.get(dbs.errors, Layout.sequenceKey(sequence)) else {
                throw LMDBErrors.corruptValue("the index of operation error '\(id)'", place)
            }
            let record = try decodeError(value)
            if record.id == id { return (sequence, record) }
        }
        return nil
    }

    func operationError(id: String) throws -> OperationErrorRecord? {
        try checkActive()
        return try errorEntry(id)?.record
    }

    func tokenBucket(_ key: [UInt8]) throws(StoreError) -> [(table: String, queryID: String, value: String)] {
        guard let value = try txn.get(dbs.tokens, key) else { return [] }
        do {
            return try DeltaTokenRecords.decode(value)
        } catch {
            throw LMDBErrors.corruptValue("a delta token", place)
        }
    }

    func deltaToken(table: String, queryID: String) throws -> String? {
        try checkActive()
        return try tokenBucket(Layout.pairKey(table, queryID)).first { $0.table == table && $0.queryID == queryID }?
            .value
    }

    func deltaTokens(table: String) throws -> [String: String] {
        try checkActive()
        let prefix = Layout.pairPrefix(table)
        var tokens: [String: String] = [:]
        try txn.withCursor(dbs.tokens) { cursor in
            var next = try cursor.get(MDB_SET_RANGE, key: prefix)
            while let (key, value) = next, key.hasPrefix(prefix) {
                let entries: [(table: String, queryID: String, value: String)]
                do {
                    entries = try DeltaTokenRecords.decode(value)
                } catch {
                    throw LMDBErrors.corruptValue("a delta token of table '\(table)'", place)
                }
                for entry in entries where entry.table == table { tokens[entry.queryID] = entry.value }
                next = try cursor.get(MDB_NEXT)
            }
        }
        return tokens
    }
}

/// Writes inside one LMDB write transaction.
final class LMDBTransaction: LMDBReader, StoreTransaction {
    // MARK: Catalog

    func saveEntry(_ table: String, _ entry: TableEntry) throws(StoreError) {
        try txn.put(dbs.tables, Array(table.utf8), JSONValue.object(entry.json).serializedUTF8())
        catalog[table] = .some(entry)
    }

    /// The table's catalog record, created when absent.
    func ensureTable(_ table: String) throws(StoreError) -> TableEntry {
        try StoreValidation.validateTableName(table)
        if let entry = try entry(table) { return entry }
        let next = try metaUInt64("nextTableKey")
        let key = UInt32(exactly: max(next, 1))
        guard let key, key < .max else {
            throw StoreError(.full, "\(place) cannot hold more tables")
        }
        try txn.put(dbs.meta, Array("nextTableKey".utf8), Layout.sequenceKey(Int64(key) + 1))
        let entry = TableEntry(key: key, count: 0, definition: nil)
        try saveEntry(table, entry)
        return entry
    }

    func define(_ definition: TableDefinition) throws {
        try checkActive()
        var entry = try ensureTable(definition.name)
        entry.definition = definition
        try saveEntry(definition.name, entry)
    }

    // MARK: Items

    func upsert(_ table: String, _ items: [JSONObject]) throws {
        try checkActive()
        try StoreValidation.validateTableName(table)
        // Validate and encode everything first so that a bad item leaves nothing half-written.
        let batch = try EncodedBatch(items, table: table)
        guard !items.isEmpty else { return }
        var entry = try ensureTable(table)
        let before = entry.count
        var key: [UInt8] = []
        var indexKey: [UInt8] = []
        for index in 0..<batch.count {
            let id = batch.ids[index]
            ItemKeys.fill(&key, table: entry.key, id: id)
            let summary = batch.summaries[index]
            if ItemKeys.fits(id) {
                // A new key after every other is appended; otherwise one descent: the insert fails
                // on an existing key and shows its value.
                let old: UnsafeRawBufferPointer?
                if try txn.append(dbs.items, key, batch.value(index)) {
                    old = nil
                } else {
                    old = try txn.insert(dbs.items, key, batch.value(index))
                }
                guard let old else {
                    ItemKeys.fillUpdated(&indexKey, table: entry.key, summary: summary, idText: key[4...])
                    try txn.putIndex(dbs.updated, indexKey)
                    entry.count += 1
                    continue
                }
                let oldSummary: ItemSummary?
                do {
                    oldSummary = try ItemValue.singleSummary(old)
                } catch {
                    throw LMDBErrors.corruptValue("item '\(id)' of table '\(table)'", place)
                }
                if let oldSummary {
                    if !oldSummary.sharesIndexKey(with: summary) {
                        ItemKeys.fillUpdated(&indexKey, table: entry.key, summary: oldSummary, idText: key[4...])
                        try txn.delete(dbs.updated, indexKey)
                        ItemKeys.fillUpdated(&indexKey, table: entry.key, summary: summary, idText: key[4...])
                        try txn.putIndex(dbs.updated, indexKey)
                    }
                    try txn.put(dbs.items, key, batch.value(index))
                    continue
                }
            }
            if try updateBucket(table, entry.key, key, id: id, replacement: (summary, Array(batch.json(index)))) {
                entry.count += 1
            }
        }
        if entry.count != before { try saveEntry(table, entry) }
    }

    /// Inserts, replaces or (with a `nil` replacement) removes the item `id` in the value of `key`,
    /// for ids that do not fit in their key or keys shared by several ids. Returns whether an item
    /// was added (insert) or removed (delete).
    private func updateBucket(
        _ table: String, _ tableKey: UInt32, _ key: [UInt8], id: String,
        replacement: (summary: ItemSummary, json: [UInt8])?
    ) throws -> Bool {
        var entries: [(id: String, summary: ItemSummary, json: [UInt8])] = []
        if let value = try txn.get(dbs.items, key) {
            let stored = try key.withUnsafeBytes { keyBytes throws(StoreError) in
                try storedItems(value, key: keyBytes, table: table)
            }
            entries = stored.map { ($0.id, $0.summary, Array($0.json)) }
        }
        let idText = key[4...]
        let index = entries.firstIndex { $0.id == id }
        let previous = index.map { entries[$0].summary }
        if let replacement {
            if let index {
                entries[index] = (id, replacement.summary, replacement.json)
            } else {
                let position =
                    entries.firstIndex { id.utf8.lexicographicallyPrecedes($0.id.utf8) } ?? entries.endIndex
                entries.insert((id, replacement.summary, replacement.json), at: position)
            }
        } else if let index {
            entries.remove(at: index)
        } else {
            return false
        }
        if entries.isEmpty {
            try txn.delete(dbs.items, key)
        } else if entries.count == 1, entries[0].id.utf8.elementsEqual(idText) {
            try txn.put(dbs.items, key, ItemValue.single(entries[0].summary, json: entries[0].json))
        } else {
            try txn.put(dbs.items, key, ItemValue.bucket(entries))
        }
        // One index key stands for every entry of the value with the same updatedAt.
        if let previous, !entries.contains(where: { $0.summary.sharesIndexKey(with: previous) }) {
            try txn.delete(dbs.updated, ItemKeys.updated(table: tableKey, summary: previous, idText: idText))
        }
        if let replacement {
            try txn.put(
                dbs.updated, ItemKeys.updated(table: tableKey, summary: replacement.summary, idText: idText), [])
        }
        return (previous == nil) != (replacement == nil)
    }

    @discardableResult
    func delete(_ table: String, ids: [String]) throws -> Int {
        try checkActive()
        guard var entry = try entry(table) else { return 0 }
        var deleted = 0
        for id in ids where !id.isEmpty {
            let key = ItemKeys.item(table: entry.key, id: id)
            if ItemKeys.fits(id) {
                guard let old = try txn.get(dbs.items, key) else { continue }
                let oldSummary: ItemSummary?
                do {
                    oldSummary = try ItemValue.singleSummary(old)
                } catch {
                    throw LMDBErrors.corruptValue("item '\(id)' of table '\(table)'", place)
                }
                if let oldSummary {
                    try txn.delete(dbs.items, key)
                    try txn.delete(
                        dbs.updated, ItemKeys.updated(table: entry.key, summary: oldSummary, idText: key[4...]))
                    deleted += 1
                    continue
                }
            }
            if try updateBucket(table, entry.key, key, id: id, replacement: nil) { deleted += 1 }
        }
        if deleted > 0 {
            entry.count -= deleted
            try saveEntry(table, entry)
        }
        return deleted
    }

    @discardableResult
    func delete(_ table: String, matching query: TableQuery) throws -> Int {
        try checkActive()
        var selection = query
        selection.select = nil
        selection.includeTotalCount = false
        let ids = try self.query(table, selection).items.compactMap(\.id)
        return try delete(table, ids: ids)
    }

    // MARK: Operations

    private func putOperation(_ operation: QueuedOperation) throws(StoreError) {
        try txn.put(dbs.operations, Layout.sequenceKey(operation.id), JSONValue.object(operation.json).serializedUTF8())
    }

    private func indexOperation(_ operation: QueuedOperation, add: Bool) throws(StoreError) {
        let id = Layout.sequenceKey(operation.id)
        let byTable = Layout.textKey(tag: UInt8(ascii: "o"), operation.table).key
        let byItem = Layout.pairKey(operation.table, operation.itemID)
        if add {
            try txn.put(dbs.operationsByTable, byTable, id)
            try txn.put(dbs.operationsByItem, byItem, id)
        } else {
            try txn.delete(dbs.operationsByTable, byTable, value: id)
            try txn.delete(dbs.operationsByItem, byItem, value: id)
        }
    }

    func appendOperation(_ draft: OperationDraft) throws -> QueuedOperation {
        try checkActive()
        try StoreValidation.validateTableName(draft.table)
        // The high-water mark, never the highest id + 1: ids are not reused after the queue drains.
        let last = Int64(bitPattern: try metaUInt64("lastOperationId"))
        let highest = try txn.withCursor(dbs.operations) { cursor in
            try cursor.get(MDB_LAST).flatMap { Layout.uint64($0.key) }.map { Int64(bitPattern: $0) } ?? 0
        }
        let (next, overflow) = max(last, highest).addingReportingOverflow(1)
        guard !overflow else { throw StoreError(.full, "\(place) has used every operation id") }
        let operation = QueuedOperation(id: next, draft: draft)
        try putOperation(operation)
        try indexOperation(operation, add: true)
        try txn.put(dbs.meta, Array("lastOperationId".utf8), Layout.sequenceKey(next))
        return operation
    }

    func updateOperation(_ operation: QueuedOperation) throws {
        try checkActive()
        guard let previous = try self.operation(operation.id) else {
            throw StoreError(.notFound, "no queued operation with id \(operation.id) in \(place)")
        }
        if previous.table != operation.table || previous.itemID != operation.itemID {
            try indexOperation(previous, add: false)
            try indexOperation(operation, add: true)
        }
        try putOperation(operation)
    }

    func deleteOperations(ids: [Int64]) throws {
        try checkActive()
        for id in ids {
            guard let previous = try operation(id) else { continue }
            try txn.delete(dbs.operations, Layout.sequenceKey(id))
            try indexOperation(previous, add: false)
        }
    }

    // MARK: Errors and tokens

    func saveOperationError(_ error: OperationErrorRecord) throws {
        try checkActive()
        let json = JSONValue.object(error.json).serializedUTF8()
        if let (sequence, _) = try errorEntry(error.id) {
            // Replaced in place: an error keeps its first position.
            try txn.put(dbs.errors, Layout.sequenceKey(sequence), json)
            return
        }
        let last = Int64(bitPattern: try metaUInt64("lastErrorSeq"))
        let highest = try txn.withCursor(dbs.errors) { cursor in
            try cursor.get(MDB_LAST).flatMap { Layout.uint64($0.key) }.map { Int64(bitPattern: $0) } ?? 0
        }
        let sequence = max(last, highest) + 1
        try txn.put(dbs.errors, Layout.sequenceKey(sequence), json)
        try txn.put(
            dbs.errorIDs, Layout.textKey(tag: UInt8(ascii: "e"), error.id).key, Layout.sequenceKey(sequence))
        try txn.put(dbs.meta, Array("lastErrorSeq".utf8), Layout.sequenceKey(sequence))
    }

    func deleteOperationErrors(ids: [String]) throws {
        try checkActive()
        for id in ids {
            guard let (sequence, _) = try errorEntry(id) else { continue }
            try txn.delete(dbs.errors, Layout.sequenceKey(sequence))
            try txn.delete(
                dbs.errorIDs, Layout.textKey(tag: UInt8(ascii: "e"), id).key, value: Layout.sequenceKey(sequence))
        }
    }

    func setDeltaToken(table: String, queryID: String, value: String?) throws {
        try checkActive()
        let key = Layout.pairKey(table, queryID)
        var entries = try tokenBucket(key)
        entries.removeAll { $0.table == table && $0.queryID == queryID }
        if let value { entries.append((table, queryID, value)) }
        if entries.isEmpty {
            try txn.delete(dbs.tokens, key)
        } else {
            try txn.put(dbs.tokens, key, DeltaTokenRecords.encode(entries))
        }
    }
}

extension ItemSummary {
    /// Whether two items with the same id text have the same `updatedAt` index key.
    func sharesIndexKey(with other: ItemSummary) -> Bool {
        kind == other.kind && (kind != .timestamp || milliseconds == other.milliseconds)
    }
}
