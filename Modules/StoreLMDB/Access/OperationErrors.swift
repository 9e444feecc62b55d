import CLMDB
import SyncCore

/// Reading the errors of operations the remote refused.
extension LMDBReader {
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
}

/// Writing the errors of operations the remote refused.
extension LMDBTransaction {
    func saveOperationError(_ error: OperationErrorRecord) throws {
        try checkActive()
        let json = JSONValue.object(error.json).serializedUTF8()
        if let (sequence, _) = try errorEntry(error.id) {
            // Replaced in place: an error keeps its first position.
            try txn.put(dbs.errors, Layout.sequenceKey(sequence), json)
            return
        }
        let sequence = try highWaterMark("lastErrorSeq", dbs.errors) + 1
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
}
