import GRDB
import QuerySQL
import QuerySQLite
import SyncCore

class SQLiteReader: StoreReader {
    let db: Database
    /// "the SQLite store at '…'", for messages.
    let place: String
    /// Set when the transaction ends; the handle then refuses every call.
    var isFinished = false
    /// Catalog entries read in this transaction (a push reads the same table's entry for every
    /// operation); a transaction that changes an entry forgets it.
    var entries: [String: TableEntry] = [:]

    init(db: Database, place: String) {
        self.db = db
        self.place = place
    }

    /// Runs `body` on the connection, mapping SQLite errors to `StoreError`.
    func run<T>(_ action: @autoclosure () -> String, _ body: () throws -> T) throws -> T {
        if isFinished {
            throw StoreError(.closed, "a handle of \(place) was used after its transaction ended")
        }
        do {
            return try body()
        } catch let error as DatabaseError {
            throw StoreErrors.map(error, action(), place)
        } catch let error as RowDecodingError {
            throw StoreError(
                .corrupt, "\(action()) \(place) failed: a stored value has an unexpected type", underlying: error)
        }
    }

    // MARK: Catalog

    func entry(_ table: String) throws -> TableEntry? {
        if let known = entries[table] { return known }
        let statement = try db.cachedStatement(sql: "SELECT key, layout, definition FROM ferry_tables WHERE name = ?")
        guard let row = try Row.fetchOne(statement, arguments: [table]) else { return nil }
        var definition: SyncCore.TableDefinition?
        if let text = try row.decode(String?.self, forColumn: "definition") {
            definition = try SyncCore.TableDefinition(
                json: try decodeObject(text, what: "the definition of table '\(table)'"))
        }
        let entry = TableEntry(
            key: try row.decode(Int64.self, forColumn: "key"), layout: try row.decode(Int64.self, forColumn: "layout"),
            definition: definition)
        entries[table] = entry
        return entry
    }

    func decodeObject(_ text: String, what: @autoclosure () -> String) throws(StoreError) -> JSONObject {
        do {
            if let object = try JSONValue(parsing: text).objectValue { return object }
        } catch {
            throw StoreError(.corrupt, "\(what()) in \(place) is not valid JSON: \(error)", underlying: error)
        }
        throw StoreError(.corrupt, "\(what()) in \(place) is not a JSON object")
    }

    /// A key column for arbitrary text (error ids, query ids, tokens): its JSON form, which has no
    /// NUL character (SQLite's C API would cut the text there).
    static func key(_ text: String) -> String { JSONValue.string(text).serialized() }

    func unkey(_ text: String) throws(StoreError) -> String {
        guard let value = try? JSONValue(parsing: text).stringValue else {
            throw StoreError(.corrupt, "a stored key in \(place) is not a JSON string")
        }
        return value
    }

    // MARK: StoreReader

    func item(_ table: String, id: String) throws -> JSONObject? {
        try run("reading an item of table '\(table)' from") {
            guard let entry = try entry(table) else { return nil }
            return try itemRow(table, in: entry.sqlName, id: id)
        }
    }

    /// One statement for all the ids, given as a JSON array (`json_each`): the statement is
    /// prepared once for any number of ids, and each id is still a lookup in the primary key.
    func items(_ table: String, ids: [String]) throws -> [ItemID.Key: JSONObject] {
        try run("reading items of table '\(table)' from") {
            guard !ids.isEmpty, let entry = try entry(table) else { return [:] }
            let statement = try db.cachedStatement(
                sql: "SELECT id, item FROM \(entry.sqlName) WHERE id IN (SELECT value FROM json_each(?))")
            var found: [ItemID.Key: JSONObject] = [:]
            found.reserveCapacity(ids.count)
            let rows = try Row.fetchCursor(statement, arguments: [Self.jsonArray(ids)])
            while let row = try rows.next() {
                let id: String = row[0]
                found[ItemID.Key(id)] = try decodeObject(row[1], what: "item '\(id)' of table '\(table)'")
            }
            return found
        }
    }

    /// `ids` as a JSON array, for `json_each`.
    static func jsonArray(_ ids: [String]) -> String {
        JSONValue.array(ids.map { .string($0) }).serialized()
    }

    /// The item `id` of `table`, whose SQL table is `sqlName` (a table's SQL name never changes:
    /// tables are never dropped, so their keys are never reused).
    func item(_ table: String, in sqlName: String, id: String) throws -> JSONObject? {
        try run("reading an item of table '\(table)' from") { try itemRow(table, in: sqlName, id: id) }
    }

    /// The SQL name of `table`'s items, or `nil` while the table does not exist.
    func sqlName(of table: String) throws -> String? {
        try run("reading the catalog of") { try entry(table)?.sqlName }
    }

    private func itemRow(_ table: String, in sqlName: String, id: String) throws -> JSONObject? {
        let statement = try db.cachedStatement(sql: "SELECT item FROM \(sqlName) WHERE id = ?")
        guard let text = try String.fetchOne(statement, arguments: [id]) else { return nil }
        return try decodeObject(text, what: "item '\(id)' of table '\(table)'")
    }

    func query(_ table: String, _ query: TableQuery) throws -> QueryResult {
        try run("querying table '\(table)' in") {
            let entry = try entry(table)
            let schema = entry?.schema ?? .schemaless
            try StoreValidation.validate(query, schema: schema)
            guard let entry else { return try evaluate(query, schema: schema, over: []) }
            return try QueryRunner(reader: self, table: table, entry: entry).run(query)
        }
    }

    func evaluate(_ query: TableQuery, schema: TableSchema, over items: [JSONObject]) throws -> QueryResult {
        do {
            return try QueryEvaluator(schema: schema).evaluate(query, over: items)
        } catch {
            throw StoreError(.invalidQuery, error.description, underlying: error)
        }
    }

    func count(_ table: String) throws -> Int {
        try run("counting table '\(table)' in") {
            guard let entry = try entry(table) else { return 0 }
            return try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM \(entry.sqlName)") ?? 0
        }
    }

    func tableNames() throws -> [String] {
        try run("listing the tables of") {
            var names: [String] = []
            for row in try Row.fetchAll(
                db, sql: "SELECT key, layout, name, definition IS NOT NULL AS defined FROM ferry_tables")
            {
                let key = try row.decode(Int64.self, forColumn: "key")
                let layout = try row.decode(Int64.self, forColumn: "layout")
                let defined = try row.decode(Bool.self, forColumn: "defined")
                let holdsItems =
                    try Bool.fetchOne(
                        db, sql: "SELECT EXISTS (SELECT 1 FROM \"\(ItemTable.name(key, layout: layout))\")") ?? false
                if defined || holdsItems {
                    names.append(try row.decode(String.self, forColumn: "name"))
                }
            }
            return names.sorted()
        }
    }

    func definition(of table: String) throws -> SyncCore.TableDefinition? {
        try run("reading the definition of table '\(table)' from") { try entry(table)?.definition }
    }

    func operations(after afterID: Int64?, table: String?, limit: Int?) throws -> [QueuedOperation] {
        try run("reading the operation queue of") {
            if let limit, limit <= 0 { return [] }
            var sql: SQLFragment = "SELECT json FROM ferry_operations WHERE id > \(bind: afterID ?? Int64.min)"
            if let table { sql = "\(sql) AND tableName = \(bind: table)" }
            sql = "\(sql) ORDER BY id"
            // Without a table filter the SQL limit is exact; with one, table names holding NUL
            // characters are matched exactly in Swift below, so the limit applies there.
            if let limit, table == nil { sql = "\(sql) LIMIT \(bind: Int64(limit))" }
            var result: [QueuedOperation] = []
            let cursor = try String.fetchCursor(db, sql: sql.sqliteText, arguments: sql.statementArguments)
            while let text = try cursor.next() {
                let operation = try decodeOperation(text)
                if let table, operation.table != table { continue }
                result.append(operation)
                if let limit, result.count >= limit { break }
            }
            return result
        }
    }

    func decodeOperation(_ text: String) throws -> QueuedOperation {
        try QueuedOperation(json: try decodeObject(text, what: "a queued operation"))
    }

    func operations(table: String, itemID: String) throws -> [QueuedOperation] {
        try run("reading the operations of item '\(itemID)' from") {
            let statement = try db.cachedStatement(
                sql: "SELECT json FROM ferry_operations WHERE tableName = ? AND itemId = ? ORDER BY id")
            return try String.fetchAll(statement, arguments: [table, itemID]).map { try decodeOperation($0) }
                .filter { $0.table == table && $0.itemID == itemID }
        }
    }

    /// The operations of some items of a table, in queue order. The order is `+id`, not `id`:
    /// with `ORDER BY id` SQLite walks the table's whole queue in `(tableName, id)` order and tests
    /// each operation's item against the list, so completing each batch of a push read the whole
    /// queue (a third of the client's time in a push of 60,000). `+id` makes it look up each item
    /// in `(tableName, itemId)` and sort the few operations found.
    static let operationsOfItemsSQL = """
        SELECT json FROM ferry_operations
        WHERE tableName = ? AND itemId IN (SELECT value FROM json_each(?)) ORDER BY +id
        """

    func operations(table: String, itemIDs: [String]) throws -> [QueuedOperation] {
        try run("reading the operations of \(itemIDs.count) items from") {
            guard !itemIDs.isEmpty else { return [] }
            let statement = try db.cachedStatement(sql: Self.operationsOfItemsSQL)
            let keys = Set(itemIDs.map(ItemID.Key.init))
            return try String.fetchAll(statement, arguments: [table, Self.jsonArray(itemIDs)])
                .map { try decodeOperation($0) }.filter { $0.table == table && keys.contains(ItemID.Key($0.itemID)) }
        }
    }

    func operation(id: Int64) throws -> QueuedOperation? {
        try run("reading operation \(id) from") {
            let statement = try db.cachedStatement(sql: "SELECT json FROM ferry_operations WHERE id = ?")
            return try String.fetchOne(statement, arguments: [id]).map { try decodeOperation($0) }
        }
    }

    func operationCount(table: String?) throws -> Int {
        try run("counting the operation queue of") {
            guard let table else { return try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ferry_operations") ?? 0 }
            if table.utf8.contains(0) { return try operations(after: nil, table: table, limit: nil).count }
            return try Int.fetchOne(
                db, sql: "SELECT COUNT(*) FROM ferry_operations WHERE tableName = ?", arguments: [table])
                ?? 0
        }
    }

    func operationErrors(table: String?) throws -> [OperationErrorRecord] {
        try run("reading the operation errors of") {
            let statement =
                table == nil
                ? try db.cachedStatement(sql: "SELECT json FROM ferry_errors ORDER BY seq")
                : try db.cachedStatement(sql: "SELECT json FROM ferry_errors WHERE tableName = ? ORDER BY seq")
            return try String.fetchAll(statement, arguments: table.map { [$0] } ?? [])
                .map { try OperationErrorRecord(json: try decodeObject($0, what: "an operation error")) }
                .filter { table == nil || $0.table == table }
        }
    }

    func operationErrors(table: String, operationID: Int64) throws -> [OperationErrorRecord] {
        try run("reading the errors of operation \(operationID) from") {
            // Found through the index of each error's operation (schema v3): no record of another
            // operation is read.
            let statement = try db.cachedStatement(
                sql: """
                    SELECT json FROM ferry_errors
                    WHERE tableName = ? AND \(StoreSchema.operationOfError) = ? ORDER BY seq
                    """)
            return try String.fetchAll(statement, arguments: [table, operationID])
                .map { try OperationErrorRecord(json: try decodeObject($0, what: "an operation error")) }
                .filter { $0.table == table && $0.operationID == operationID }
        }
    }

    func operationError(id: String) throws -> OperationErrorRecord? {
        try run("reading operation error '\(id)' from") {
            let statement = try db.cachedStatement(sql: "SELECT json FROM ferry_errors WHERE id = ?")
            return try String.fetchOne(statement, arguments: [Self.key(id)]).map {
                try OperationErrorRecord(json: try decodeObject($0, what: "operation error '\(id)'"))
            }
        }
    }

    func deltaToken(table: String, queryID: String) throws -> String? {
        try run("reading a delta token of table '\(table)' from") {
            let statement = try db.cachedStatement(
                sql: "SELECT value FROM ferry_delta_tokens WHERE tableName = ? AND queryId = ?")
            return try String.fetchOne(statement, arguments: [Self.key(table), Self.key(queryID)]).map { try unkey($0) }
        }
    }

    func deltaTokens(table: String) throws -> [String: String] {
        try run("reading the delta tokens of table '\(table)' from") {
            var tokens: [String: String] = [:]
            let rows = try Row.fetchAll(
                db, sql: "SELECT queryId, value FROM ferry_delta_tokens WHERE tableName = ?",
                arguments: [Self.key(table)])
            for row in rows {
                let queryID = try row.decode(String.self, forColumn: "queryId")
                tokens[try unkey(queryID)] = try unkey(try row.decode(String.self, forColumn: "value"))
            }
            return tokens
        }
    }
}
