import CLMDB
import SyncCore

/// Reading the queue of local operations.
extension LMDBReader {
    func decodeOperation(_ bytes: UnsafeRawBufferPointer) throws(StoreError) -> QueuedOperation {
        try QueuedOperation(json: try decodeObject(bytes, what: "a queued operation"))
    }

    func operation(_ id: Int64) throws(StoreError) -> QueuedOperation? {
        guard let value = try txn.get(dbs.operations, Layout.sequenceKey(id)) else { return nil }
        return try decodeOperation(value)
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
}

/// Writing the queue of local operations.
extension LMDBTransaction {
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
        let (next, overflow) = try highWaterMark("lastOperationId", dbs.operations).addingReportingOverflow(1)
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
}
