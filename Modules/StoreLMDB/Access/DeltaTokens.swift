import CLMDB
import SyncCore

/// Reading the delta tokens of pull queries.
extension LMDBReader {
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

/// Writing the delta tokens of pull queries.
extension LMDBTransaction {
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
