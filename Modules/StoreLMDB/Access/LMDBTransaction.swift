import CLMDB
import SyncCore

/// Writes inside one LMDB write transaction.
final class LMDBTransaction: LMDBReader, StoreTransaction {
    // MARK: Catalog

    func saveEntry(_ table: String, _ entry: TableEntry) throws(StoreError) {
        try txn.put(dbs.tables, Array(table.utf8), JSONValue.object(entry.json).serializedUTF8())
        catalog[table] = .some(entry)
    }

    /// The table's catalog record, created when absent.
    func ensureTable(_ table: String) throws(StoreError) -> TableEntry {
        try StoreValidation.validateStoredTableName(table)
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

    /// The greater of the counter `name` in `meta` and the last key of `dbi` (both 8-byte
    /// sequence numbers): the high-water mark of an id sequence.
    func highWaterMark(_ name: String, _ dbi: MDB_dbi) throws -> Int64 {
        let last = Int64(bitPattern: try metaUInt64(name))
        let highest = try txn.withCursor(dbi) { cursor in
            try cursor.get(MDB_LAST).flatMap { Layout.uint64($0.key) }.map { Int64(bitPattern: $0) } ?? 0
        }
        return max(last, highest)
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
        try StoreValidation.validateStoredTableName(table)
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
                if let oldSummary = try singleSummary(old, id: id, table: table) {
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

    /// The summary of the one item a value holds, `nil` for a bucket of several.
    private func singleSummary(_ value: UnsafeRawBufferPointer, id: String, table: String) throws(StoreError)
        -> ItemSummary?
    {
        do {
            return try ItemValue.singleSummary(value)
        } catch {
            throw LMDBErrors.corruptValue("item '\(id)' of table '\(table)'", place)
        }
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
            let stored = try storedItems(value, key: key, table: table)
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
                if let oldSummary = try singleSummary(old, id: id, table: table) {
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
}

extension ItemSummary {
    /// Whether two items with the same id text have the same `updatedAt` index key.
    func sharesIndexKey(with other: ItemSummary) -> Bool {
        kind == other.kind && (kind != .timestamp || milliseconds == other.milliseconds)
    }
}
