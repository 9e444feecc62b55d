import GRDB
import QuerySQL
import QuerySQLite
import SyncCore

final class SQLiteTransaction: SQLiteReader, StoreTransaction {
    /// The table's catalog entry, created with its SQL table when absent.
    func ensureTable(_ table: String) throws -> TableEntry {
        try StoreValidation.validateStoredTableName(table)
        if let entry = try entry(table) { return entry }
        // A store inside an app's database names its tables apart from the app's (StoreSchema).
        let layout =
            try Int64.fetchOne(db, sql: "SELECT value FROM ferry_meta WHERE key = 'newTableLayout'") ?? ItemTable.layout
        try db.execute(
            sql: "INSERT INTO ferry_tables (name, layout, definition) VALUES (?, ?, NULL)",
            arguments: [table, layout])
        let key = db.lastInsertedRowID
        try ItemTable.create(db, key: key, layout: layout)
        let entry = TableEntry(key: key, layout: layout, definition: nil)
        entries[table] = entry
        return entry
    }

    func define(_ definition: SyncCore.TableDefinition) throws {
        try run("defining table '\(definition.name)' in") {
            let entry = try ensureTable(definition.name)
            try db.execute(
                sql: "UPDATE ferry_tables SET definition = ? WHERE key = ?",
                arguments: [JSONValue.object(definition.json).serialized(), entry.key])
            entries[definition.name] = nil
            try ItemTable.syncIndexes(db, entry: entry, definition: definition)
        }
    }

    func upsert(_ table: String, _ items: [JSONObject]) throws {
        try run("writing items of table '\(table)' to") {
            try StoreValidation.validateStoredTableName(table)
            // Validate everything first so that a bad item leaves nothing half-written.
            let ids = try items.map { item throws(StoreError) in try StoreValidation.validatedID(of: item, table: table)
            }
            for (id, item) in zip(ids, items) {
                if let problem = Self.unrepresentable(.object(item), depth: 1) {
                    throw StoreError(.invalidItem, "item '\(id)' of table '\(table)' \(problem)")
                }
            }
            guard !items.isEmpty else { return }
            let entry = try ensureTable(table)
            var writer = try ItemWriter(db, table: entry.sqlName)
            for (id, item) in zip(ids, items) {
                try writer.write(id: id, item: item)
            }
        }
    }

    /// What JSON text cannot carry back in `value` (nested at `depth`, the item being 1), or `nil`.
    static func unrepresentable(_ value: JSONValue, depth: Int) -> String? {
        switch value {
        case .double(let number):
            return number.isFinite ? nil : "holds a number JSON cannot represent (NaN or infinity)"
        case .array, .object:
            if depth > JSONValue.maximumNestingDepth {
                return "nests arrays and objects deeper than \(JSONValue.maximumNestingDepth) levels"
            }
            let children = value.arrayValue ?? value.objectValue.map { Array($0.values) } ?? []
            for child in children {
                if let problem = unrepresentable(child, depth: depth + 1) { return problem }
            }
            return nil
        default: return nil
        }
    }

    @discardableResult
    func delete(_ table: String, ids: [String]) throws -> Int {
        try run("deleting items of table '\(table)' from") {
            guard let entry = try entry(table) else { return 0 }
            let statement = try db.cachedStatement(sql: "DELETE FROM \(entry.sqlName) WHERE id = ?")
            var deleted = 0
            for id in ids {
                try statement.execute(arguments: [id])
                deleted += db.changesCount
            }
            return deleted
        }
    }

    @discardableResult
    func delete(_ table: String, matching query: TableQuery) throws -> Int {
        var selection = query
        selection.select = ["id"]
        selection.includeTotalCount = false
        let ids = try self.query(table, selection).items.compactMap(\.id)
        return try delete(table, ids: ids)
    }

    func appendOperation(_ draft: OperationDraft) throws -> QueuedOperation {
        try run("queueing an operation in") {
            try StoreValidation.validateTableName(draft.table)
            // The high-water mark, never max(id) + 1: ids are not reused after the queue drains.
            // Cached statements: a bulk import appends one operation per item.
            let last =
                try Int64.fetchOne(
                    db.cachedStatement(sql: "SELECT value FROM ferry_meta WHERE key = 'lastOperationId'")) ?? 0
            let highest = try Int64.fetchOne(db.cachedStatement(sql: "SELECT MAX(id) FROM ferry_operations")) ?? 0
            let operation = QueuedOperation(id: max(last, highest) + 1, draft: draft)
            try db.cachedStatement(
                sql: "INSERT INTO ferry_operations (id, tableName, itemId, json) VALUES (?, ?, ?, ?)"
            ).execute(arguments: [
                operation.id, operation.table, operation.itemID, JSONValue.object(operation.json).serialized(),
            ])
            try db.cachedStatement(sql: "UPDATE ferry_meta SET value = ? WHERE key = 'lastOperationId'").execute(
                arguments: [operation.id])
            return operation
        }
    }

    /// The queue's high-water mark read once and written once for all of `drafts`.
    func appendOperations(_ drafts: [OperationDraft]) throws -> [QueuedOperation] {
        guard drafts.count > 1 else { return try drafts.map { try appendOperation($0) } }
        return try run("queueing operations in") {
            for draft in drafts { try StoreValidation.validateTableName(draft.table) }
            let last =
                try Int64.fetchOne(
                    db.cachedStatement(sql: "SELECT value FROM ferry_meta WHERE key = 'lastOperationId'")) ?? 0
            let highest = try Int64.fetchOne(db.cachedStatement(sql: "SELECT MAX(id) FROM ferry_operations")) ?? 0
            var writer = try OperationWriter(db)
            var next = max(last, highest)
            var operations: [QueuedOperation] = []
            operations.reserveCapacity(drafts.count)
            for draft in drafts {
                next += 1
                let operation = QueuedOperation(id: next, draft: draft)
                try writer.write(operation)
                operations.append(operation)
            }
            try db.cachedStatement(sql: "UPDATE ferry_meta SET value = ? WHERE key = 'lastOperationId'").execute(
                arguments: [next])
            return operations
        }
    }

    func updateOperation(_ operation: QueuedOperation) throws {
        try run("updating operation \(operation.id) in") {
            var writer = try OperationWriter(db, .update)
            guard try writer.write(operation) == 0 else { return }
            var mover = try OperationWriter(db, .move)
            if try mover.write(operation) == 0 {
                throw StoreError(.notFound, "no queued operation with id \(operation.id) in \(place)")
            }
        }
    }

    func deleteOperations(ids: [Int64]) throws {
        try run("deleting operations from") {
            let statement = try db.cachedStatement(sql: "DELETE FROM ferry_operations WHERE id = ?")
            for id in ids { try statement.execute(arguments: [id]) }
        }
    }

    func deleteOperation(id: Int64) throws -> Bool {
        try run("deleting an operation from") {
            try db.cachedStatement(sql: "DELETE FROM ferry_operations WHERE id = ?").execute(arguments: [id])
            return db.changesCount > 0
        }
    }

    func saveOperationError(_ error: OperationErrorRecord) throws {
        try run("saving operation error '\(error.id)' in") {
            try db.execute(
                sql: """
                    INSERT INTO ferry_errors (id, tableName, json) VALUES (?, ?, ?)
                    ON CONFLICT (id) DO UPDATE SET tableName = excluded.tableName, json = excluded.json
                    """,
                arguments: [Self.key(error.id), error.table, JSONValue.object(error.json).serialized()])
        }
    }

    func deleteOperationErrors(ids: [String]) throws {
        try run("deleting operation errors from") {
            let statement = try db.cachedStatement(sql: "DELETE FROM ferry_errors WHERE id = ?")
            for id in ids { try statement.execute(arguments: [Self.key(id)]) }
        }
    }

    func setDeltaToken(table: String, queryID: String, value: String?) throws {
        try run("saving a delta token of table '\(table)' in") {
            if let value {
                try db.execute(
                    sql: """
                        INSERT INTO ferry_delta_tokens (tableName, queryId, value) VALUES (?, ?, ?)
                        ON CONFLICT (tableName, queryId) DO UPDATE SET value = excluded.value
                        """,
                    arguments: [Self.key(table), Self.key(queryID), Self.key(value)])
            } else {
                try db.execute(
                    sql: "DELETE FROM ferry_delta_tokens WHERE tableName = ? AND queryId = ?",
                    arguments: [Self.key(table), Self.key(queryID)])
            }
        }
    }
}
