import CLMDB
import SyncCore

/// Runs one query: picks the keys to read from the filter and order (the plan), then lets
/// ``QueryEvaluator`` decide on every item read.
///
/// The plan only ever narrows which items are read, never which match: every item read goes
/// through the evaluator's filter, so answers are the evaluator's by construction. What is planned:
///
/// - `id eq 'x'`, `id in ('x', 'y')`: point reads of those keys.
/// - `id gt/ge/lt/le 'x'`: a range of the item keys (ids sort by UTF-8 bytes in keys, as in the
///   evaluator).
/// - `updatedAt gt/ge/lt/le/eq <date-time, date or ISO 8601 text>`: a range of the `updatedAt`
///   index (only date-times can satisfy such a comparison).
/// - Conditions combine through `and` (intersection) and `or` (the hull of both sides), so the
///   pull query `updatedAt gt T or (updatedAt eq T and id gt 'x')` reads from `T` on.
/// - Order: no `$orderby` or `id` first streams the item keys in order; `updatedAt` (then
///   optionally `id`) streams the `updatedAt` index when the filter bounds `updatedAt` or the table
///   holds no `updatedAt` that is neither null nor a date-time. A streamed query stops reading once
///   it has `skip + top` items, unless it needs the total count. Any other order reads the planned
///   keys and sorts with the evaluator.
///
/// `id` is planned only while the table's schema leaves it a string, `updatedAt` only while the
/// schema leaves it a date-time.
struct QueryRunner {
    let reader: LMDBReader
    let table: String
    let entry: TableEntry

    var txn: Txn { reader.txn }
    var schema: TableSchema { entry.schema }

    // MARK: Running

    func run(_ query: TableQuery) throws -> QueryResult {
        let plan = try plan(query)
        let evaluator = QueryEvaluator(schema: schema)
        if query.top == 0, !query.includeTotalCount { return QueryResult(items: []) }
        if !plan.streamed {
            var matching: [JSONObject] = []
            try forEachCandidate(plan) { summary, id, json in
                if !query.includeDeleted, summary.deleted { return true }
                let item = try decode(json, id)
                if let filter = query.filter, !evaluator.matches(filter, item) { return true }
                matching.append(item)
                return true
            }
            var rest = query
            rest.filter = nil
            rest.includeDeleted = true
            return try LMDBReader.evaluate(rest, schema: schema, over: matching)
        }
        let skip = max(0, query.skip ?? 0)
        let end = query.top.map { skip.addingReportingOverflow(max(0, $0)) }.map {
            $0.overflow ? Int.max : $0.partialValue
        }
        var total = 0
        var page: [JSONObject] = []
        try forEachCandidate(plan) { summary, id, json in
            if !query.includeDeleted, summary.deleted { return true }
            var item: JSONObject?
            if let filter = query.filter {
                let decoded = try decode(json, id)
                if !evaluator.matches(filter, decoded) { return true }
                item = decoded
            }
            let position = total
            total += 1
            if position >= skip, end.map({ position < $0 }) ?? true {
                page.append(try item ?? decode(json, id))
            }
            if !query.includeTotalCount, let end, total >= end { return false }
            return true
        }
        if let select = query.select { page = page.map { evaluator.project($0, select) } }
        return QueryResult(items: page, totalCount: query.includeTotalCount ? total : nil)
    }

    private func decode(_ json: UnsafeRawBufferPointer, _ id: String) throws(StoreError) -> JSONObject {
        try reader.decodeObject(json, what: "item '\(id)' of table '\(table)'")
    }

    /// Calls `body` with each candidate item (summary, id, JSON) of the plan, in the plan's order
    /// when it is streamed; `body` returns `false` to stop.
    func forEachCandidate(
        _ plan: Plan, _ body: (ItemSummary, String, UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        var descending = false
        var idDescending = false
        switch plan.order {
        case .id(let down):
            descending = down
            idDescending = down
        case .updatedAt(let down, let idDown):
            descending = down
            idDescending = idDown
        case .general: break
        }
        switch plan.source {
        case .ids(let ids):
            for id in descending ? Array(ids.reversed()) : ids {
                guard ItemID.isValid(id) else { continue }
                let key = ItemKeys.item(table: entry.key, id: id)
                guard let value = try txn.get(txn.dbs.items, key) else { continue }
                let items = try reader.storedItems(value, key: key, table: table)
                if let item = items.first(where: { $0.id == id }), !(try body(item.summary, item.id, item.json)) {
                    return
                }
            }
        case .all:
            try scanItems(IDRange(), descending: descending, body)
        case .idRange(let range):
            try scanItems(range, descending: descending, body)
        case .updatedAt(let range):
            try scanUpdatedAt(range, descending: descending, idDescending: idDescending, body)
        }
    }

    /// Reads item keys in order (buckets in id order), from the range's start (or end).
    private func scanItems(
        _ range: IDRange, descending: Bool, _ body: (ItemSummary, String, UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        let tablePrefix = ItemKeys.tablePrefix(entry.key)
        let lower = range.lower.map { Array($0.bytes.prefix(Layout.maximumKeyTextBytes)) }
        let upper = range.upper.map { Array($0.bytes.prefix(Layout.maximumKeyTextBytes)) }
        try txn.withCursor(txn.dbs.items) { cursor in
            var next: Cursor.Entry?
            if !descending {
                next = try cursor.get(MDB_SET_RANGE, key: tablePrefix + (lower ?? []))
            } else {
                let start = upper.map { tablePrefix + $0 } ?? ItemKeys.tablePrefix(entry.key + 1)
                next = try cursor.get(MDB_SET_RANGE, key: start)
                if let (key, _) = next {
                    // Past the end of the range: step back into it.
                    let text = UnsafeRawBufferPointer(rebasing: key[4...])
                    if !key.hasPrefix(tablePrefix) || (upper.map { text.compare($0) > 0 } ?? true) {
                        next = try cursor.get(MDB_PREV)
                    }
                } else {
                    next = try cursor.get(MDB_LAST)
                }
            }
            while let (key, value) = next, key.hasPrefix(tablePrefix) {
                let text = UnsafeRawBufferPointer(rebasing: key[4...])
                if !descending, let upper, text.compare(upper) > 0 { break }
                if descending, let lower, text.compare(lower) < 0 { break }
                let items = try reader.storedItems(value, key: key, table: table)
                for item in descending ? items.reversed() : items {
                    if !(try body(item.summary, item.id, item.json)) { return }
                }
                next = try cursor.get(descending ? MDB_PREV : MDB_NEXT)
            }
        }
    }

    /// Reads the `updatedAt` index in order: groups of equal `updatedAt`, each in id order.
    private func scanUpdatedAt(
        _ range: ClosedRange<Int64>?, descending: Bool, idDescending: Bool,
        _ body: (ItemSummary, String, UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        let tablePrefix = ItemKeys.tablePrefix(entry.key)
        let lowHeader = range.map {
            ItemKeys.updatedPrefix(table: entry.key, kind: .timestamp, milliseconds: $0.lowerBound)
        }
        let highHeader = range.map {
            ItemKeys.updatedPrefix(table: entry.key, kind: .timestamp, milliseconds: $0.upperBound)
        }
        func within(_ key: UnsafeRawBufferPointer) -> Bool {
            guard key.hasPrefix(tablePrefix), key.count > ItemKeys.updatedHeaderSize else { return false }
            guard let lowHeader, let highHeader else { return true }
            let header = UnsafeRawBufferPointer(rebasing: key[..<ItemKeys.updatedHeaderSize])
            return header.compare(lowHeader) >= 0 && header.compare(highHeader) <= 0
        }
        // Collect one group (keys with the same header) at a time, then read its items.
        var groupHeader: [UInt8] = []
        var group: [[UInt8]] = []
        func flush() throws -> Bool {
            defer { group.removeAll(keepingCapacity: true) }
            guard !group.isEmpty, let kind = ItemSummary.Kind(rawValue: groupHeader[4]) else { return true }
            let milliseconds = Layout.int64(ordered: Layout.uint64(groupHeader[5..<13]) ?? 0)
            let wanted = ItemSummary(deleted: false, kind: kind, milliseconds: milliseconds)
            // Keys of a group come in the scan's direction; the ids within it follow `idDescending`.
            let texts = descending == idDescending ? group : group.reversed()
            for text in texts {
                let key = tablePrefix + text
                guard let value = try txn.get(txn.dbs.items, key) else {
                    throw LMDBErrors.corruptValue("the updatedAt index of table '\(table)'", reader.place)
                }
                let items = try reader.storedItems(value, key: key, table: table)
                for item in idDescending ? items.reversed() : items where item.summary.sharesIndexKey(with: wanted) {
                    if !(try body(item.summary, item.id, item.json)) { return false }
                }
            }
            return true
        }
        // The index keys of the group are collected first: reading items moves no index cursor.
        var keys: [[UInt8]] = []
        try txn.withCursor(txn.dbs.updated) { cursor in
            var next: Cursor.Entry?
            if !descending {
                next = try cursor.get(MDB_SET_RANGE, key: lowHeader ?? tablePrefix)
            } else {
                // The first key after the range, then one step back.
                var after = ItemKeys.tablePrefix(entry.key + 1)
                if let range {
                    after =
                        range.upperBound == .max
                        ? ItemKeys.updatedPrefix(table: entry.key, kind: .string)
                        : ItemKeys.updatedPrefix(table: entry.key, kind: .timestamp, milliseconds: range.upperBound + 1)
                }
                next = try cursor.get(MDB_SET_RANGE, key: after)
                next = next == nil ? try cursor.get(MDB_LAST) : try cursor.get(MDB_PREV)
            }
            while let (key, _) = next, within(key) {
                keys.append(Array(key))
                next = try cursor.get(descending ? MDB_PREV : MDB_NEXT)
            }
        }
        for key in keys {
            let header = Array(key[..<ItemKeys.updatedHeaderSize])
            if header != groupHeader {
                if !(try flush()) { return }
                groupHeader = header
            }
            group.append(Array(key[ItemKeys.updatedHeaderSize...]))
        }
        _ = try flush()
    }
}
