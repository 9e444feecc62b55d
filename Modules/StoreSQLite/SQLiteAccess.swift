import GRDB
import SyncCore

/// The SQL layout of one Ferry table.
///
/// Each Ferry table is one SQL table named `items_<key>`, where `key` is its row in the
/// `ferry_tables` catalog (Ferry names are case-sensitive and SQLite identifiers are not, so names
/// never become identifiers):
///
/// ```sql
/// CREATE TABLE "items_1" (
///     id TEXT PRIMARY KEY NOT NULL,  -- the item's id
///     updatedAt INTEGER,             -- ms since 1970 when updatedAt is an ISO 8601 date-time (or date)
///     updatedAtIrregular INTEGER,    -- 1 when updatedAt is present, not null and not a date-time
///     deleted INTEGER NOT NULL,      -- 1 when deleted is true
///     version TEXT,                  -- the version string
///     hasNUL INTEGER,                -- 1 when the item's JSON holds the escape \u0000
///     item TEXT NOT NULL             -- the whole item: JSONValue.serialized(), the source of truth
/// );
/// CREATE INDEX "items_1_updatedAt" ON "items_1" (updatedAt, id);
/// CREATE INDEX "items_1_irregular" ON "items_1" (updatedAtIrregular) WHERE updatedAtIrregular IS NOT NULL;
/// CREATE INDEX "items_1_nul" ON "items_1" (hasNUL) WHERE hasNUL IS NOT NULL;
/// ```
///
/// The columns are derived from the item on every write; the item text is what reads return.
/// SQLite's `json_extract` ends a string at an escaped NUL character, so while a table holds such
/// an item, queries on it are answered by the evaluator (SQL still narrows the rows). A
/// declared index (``TableDefinition/indexes``) becomes `"items_1_ix_<n>"` on the same expressions
/// the query compiler uses: `json_extract(item, '$."field"')` per field, or the column for `id` and
/// `updatedAt`.
enum ItemTable {
    /// The layout version recorded in `ferry_tables.layout`.
    static let layout: Int64 = 1

    static func name(_ key: Int64) -> String { "items_\(key)" }

    static func create(_ db: Database, key: Int64) throws {
        let table = name(key)
        try db.execute(
            sql: """
                CREATE TABLE "\(table)" (
                    id TEXT PRIMARY KEY NOT NULL,
                    updatedAt INTEGER,
                    updatedAtIrregular INTEGER,
                    deleted INTEGER NOT NULL,
                    version TEXT,
                    hasNUL INTEGER,
                    item TEXT NOT NULL
                );
                CREATE INDEX "\(table)_updatedAt" ON "\(table)" (updatedAt, id);
                CREATE INDEX "\(table)_irregular" ON "\(table)" (updatedAtIrregular)
                    WHERE updatedAtIrregular IS NOT NULL;
                CREATE INDEX "\(table)_nul" ON "\(table)" (hasNUL) WHERE hasNUL IS NOT NULL;
                """)
    }

    /// The expression a declared index uses for `field`, or `nil` when the compiler never uses one.
    static func indexExpression(_ field: String, schema: TableSchema) -> String? {
        if field == "id", schema.fields["id"] == nil { return "id" }
        if field == "updatedAt", SQLCompiler(schema: schema).usesUpdatedAtColumn { return "updatedAt" }
        guard !field.utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") })
        else { return nil }
        return "json_extract(item, \(SQLFragment.quoted("$.\"" + field + "\"").text))"
    }

    /// Makes the declared indexes of `definition` exist, and no others.
    static func syncIndexes(_ db: Database, key: Int64, definition: SyncCore.TableDefinition) throws {
        let table = name(key)
        var wanted: [String: String] = [:]
        for (position, fields) in definition.indexes.enumerated() where !fields.isEmpty {
            var expressions = fields.compactMap { indexExpression($0, schema: definition.schema) }
            guard expressions.count == fields.count else { continue }
            // Queries order by `id` last: with it in the index, a page walks the index in order.
            if expressions.last != "id" { expressions.append("id") }
            let index = "\(table)_ix_\(position)"
            wanted[index] = "CREATE INDEX \"\(index)\" ON \"\(table)\" (\(expressions.joined(separator: ", ")))"
        }
        let existing = try Row.fetchAll(
            db, sql: "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND name LIKE ?",
            arguments: [table, "\(table)_ix_%"])
        var kept: Set<String> = []
        for row in existing {
            let index = try row.decode(String.self, forColumn: "name")
            let sql = try row.decode(String?.self, forColumn: "sql")
            if let sql, wanted[index] == sql {
                kept.insert(index)
            } else {
                try db.execute(sql: "DROP INDEX \"\(index)\"")
            }
        }
        for (index, sql) in wanted where !kept.contains(index) {
            try db.execute(sql: sql)
        }
    }

    static func upsertSQL(_ table: String) -> String {
        """
        INSERT INTO \(table) (id, updatedAt, updatedAtIrregular, deleted, version, hasNUL, item)
        VALUES (?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (id) DO UPDATE SET updatedAt = excluded.updatedAt,
            updatedAtIrregular = excluded.updatedAtIrregular, deleted = excluded.deleted,
            version = excluded.version, hasNUL = excluded.hasNUL, item = excluded.item
        """
    }
}

/// A catalog row: a Ferry table's key and definition.
struct TableEntry {
    var key: Int64
    var definition: SyncCore.TableDefinition?

    var sqlName: String { "\"\(ItemTable.name(key))\"" }
    var schema: TableSchema { definition?.schema ?? .schemaless }
}

/// Reads the store inside one GRDB read (a snapshot) or write transaction.
class SQLiteReader: StoreReader {
    let db: Database
    /// "the SQLite store at '…'", for messages.
    let place: String
    /// Set when the transaction ends; the handle then refuses every call.
    var isFinished = false

    init(db: Database, place: String) {
        self.db = db
        self.place = place
    }

    /// Runs `body` on the connection, mapping SQLite errors to ``StoreError``.
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
        let statement = try db.cachedStatement(sql: "SELECT key, definition FROM ferry_tables WHERE name = ?")
        guard let row = try Row.fetchOne(statement, arguments: [table]) else { return nil }
        var definition: SyncCore.TableDefinition?
        if let text = try row.decode(String?.self, forColumn: "definition") {
            definition = try SyncCore.TableDefinition(
                json: try decodeObject(text, what: "the definition of table '\(table)'"))
        }
        return TableEntry(key: try row.decode(Int64.self, forColumn: "key"), definition: definition)
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
            let statement = try db.cachedStatement(sql: "SELECT item FROM \(entry.sqlName) WHERE id = ?")
            guard let text = try String.fetchOne(statement, arguments: [id]) else { return nil }
            return try decodeObject(text, what: "item '\(id)' of table '\(table)'")
        }
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
                db, sql: "SELECT key, name, definition IS NOT NULL AS defined FROM ferry_tables")
            {
                let key = try row.decode(Int64.self, forColumn: "key")
                let defined = try row.decode(Bool.self, forColumn: "defined")
                let holdsItems =
                    try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM \"\(ItemTable.name(key))\")") ?? false
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

    func operations(after afterID: Int64?, table: String?, limit: Int?) throws -> [PendingOperation] {
        try run("reading the operation queue of") {
            if let limit, limit <= 0 { return [] }
            var sql: SQLFragment = "SELECT json FROM ferry_operations WHERE id > \(bind: afterID ?? Int64.min)"
            if let table { sql = "\(sql) AND tableName = \(bind: table)" }
            sql = "\(sql) ORDER BY id"
            // Without a table filter the SQL limit is exact; with one, table names holding NUL
            // characters are matched exactly in Swift below, so the limit applies there.
            if let limit, table == nil { sql = "\(sql) LIMIT \(bind: Int64(limit))" }
            var result: [PendingOperation] = []
            let cursor = try String.fetchCursor(db, sql: sql.text, arguments: sql.statementArguments)
            while let text = try cursor.next() {
                let operation = try decodeOperation(text)
                if let table, operation.table != table { continue }
                result.append(operation)
                if let limit, result.count >= limit { break }
            }
            return result
        }
    }

    func decodeOperation(_ text: String) throws -> PendingOperation {
        try PendingOperation(json: try decodeObject(text, what: "a queued operation"))
    }

    func operations(table: String, itemID: String) throws -> [PendingOperation] {
        try run("reading the operations of item '\(itemID)' from") {
            let statement = try db.cachedStatement(
                sql: "SELECT json FROM ferry_operations WHERE tableName = ? AND itemId = ? ORDER BY id")
            return try String.fetchAll(statement, arguments: [table, itemID]).map { try decodeOperation($0) }
                .filter { $0.table == table && $0.itemID == itemID }
        }
    }

    func operation(id: Int64) throws -> PendingOperation? {
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
            var sql: SQLFragment = "SELECT json FROM ferry_errors"
            if let table { sql = "\(sql) WHERE tableName = \(bind: table)" }
            sql = "\(sql) ORDER BY seq"
            return try String.fetchAll(db, sql: sql.text, arguments: sql.statementArguments)
                .map { try OperationErrorRecord(json: try decodeObject($0, what: "an operation error")) }
                .filter { table == nil || $0.table == table }
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

/// Writes inside one GRDB write transaction.
final class SQLiteTransaction: SQLiteReader, StoreTransaction {
    /// The table's catalog entry, created with its SQL table when absent.
    func ensureTable(_ table: String) throws -> TableEntry {
        try StoreValidation.validateTableName(table)
        if let entry = try entry(table) { return entry }
        try db.execute(
            sql: "INSERT INTO ferry_tables (name, layout, definition) VALUES (?, ?, NULL)",
            arguments: [table, ItemTable.layout])
        let key = db.lastInsertedRowID
        try ItemTable.create(db, key: key)
        return TableEntry(key: key, definition: nil)
    }

    func define(_ definition: SyncCore.TableDefinition) throws {
        try run("defining table '\(definition.name)' in") {
            let entry = try ensureTable(definition.name)
            try db.execute(
                sql: "UPDATE ferry_tables SET definition = ? WHERE key = ?",
                arguments: [JSONValue.object(definition.json).serialized(), entry.key])
            try ItemTable.syncIndexes(db, key: entry.key, definition: definition)
        }
    }

    func upsert(_ table: String, _ items: [JSONObject]) throws {
        try run("writing items of table '\(table)' to") {
            try StoreValidation.validateTableName(table)
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

    func appendOperation(_ draft: OperationDraft) throws -> PendingOperation {
        try run("queueing an operation in") {
            try StoreValidation.validateTableName(draft.table)
            // The high-water mark, never max(id) + 1: ids are not reused after the queue drains.
            let last = try Int64.fetchOne(db, sql: "SELECT value FROM ferry_meta WHERE key = 'lastOperationId'") ?? 0
            let highest = try Int64.fetchOne(db, sql: "SELECT MAX(id) FROM ferry_operations") ?? 0
            let operation = PendingOperation(id: max(last, highest) + 1, draft: draft)
            try db.execute(
                sql: "INSERT INTO ferry_operations (id, tableName, itemId, json) VALUES (?, ?, ?, ?)",
                arguments: [
                    operation.id, operation.table, operation.itemID, JSONValue.object(operation.json).serialized(),
                ])
            try db.execute(
                sql: "UPDATE ferry_meta SET value = ? WHERE key = 'lastOperationId'", arguments: [operation.id])
            return operation
        }
    }

    func updateOperation(_ operation: PendingOperation) throws {
        try run("updating operation \(operation.id) in") {
            try db.execute(
                sql: "UPDATE ferry_operations SET tableName = ?, itemId = ?, json = ? WHERE id = ?",
                arguments: [
                    operation.table, operation.itemID, JSONValue.object(operation.json).serialized(), operation.id,
                ])
            if db.changesCount == 0 {
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

/// Runs one query: in SQLite as far as it compiles, then in the evaluator.
struct QueryRunner {
    let reader: SQLiteReader
    let table: String
    let entry: TableEntry

    /// How a query ran, for tests and diagnostics.
    enum Strategy: Equatable {
        /// Filter, order, paging and count in SQLite.
        case sql
        /// Part of the filter, or the order, in the evaluator over the rows SQLite selected.
        case evaluator
    }

    /// The plan for a query: SQL conditions, and the ORDER BY when it compiled.
    struct Plan {
        var conditions: [SQLFragment]
        var residual: QueryExpression?
        var order: [SQLFragment]?

        var strategy: Strategy { residual == nil && order != nil ? .sql : .evaluator }

        var whereClause: SQLFragment {
            conditions.isEmpty ? "" : "WHERE \(SQLFragment.joined(conditions, separator: " AND "))"
        }
    }

    func plan(_ query: TableQuery) throws -> Plan {
        let compiler = SQLCompiler(schema: entry.schema)
        let split = compiler.split(query.filter)
        var plan = Plan(conditions: [], residual: split.residual, order: nil)
        if !query.includeDeleted { plan.conditions.append("deleted = 0") }
        let touchesItems = query.filter != nil || !query.orderBy.isEmpty
        if touchesItems, try exists("hasNUL IS NOT NULL") {
            // json_extract would cut those strings short: SQL only narrows the rows, the evaluator
            // decides (rows holding NUL always go to it).
            if let sql = split.sql { plan.conditions.append("(\(sql) OR hasNUL IS NOT NULL)") }
            plan.residual = query.filter
            return plan
        }
        if let sql = split.sql { plan.conditions.append(sql) }
        guard split.residual == nil, var order = try? compiler.order(query.orderBy, filter: query.filter) else {
            return plan
        }
        if let precheck = order.precheck {
            if try exists(precheck) {
                guard
                    let general = try? SQLCompiler(schema: entry.schema, assumesRegularSortKeys: false).order(
                        query.orderBy, filter: query.filter)
                else { return plan }
                order = general
            }
        }
        plan.order = order.terms
        return plan
    }

    /// Whether some row satisfies `condition`.
    private func exists(_ condition: SQLFragment) throws -> Bool {
        let sql: SQLFragment = "SELECT EXISTS (SELECT 1 FROM \(SQLFragment(text: entry.sqlName)) WHERE \(condition))"
        return try Bool.fetchOne(reader.db, sql: sql.text, arguments: sql.statementArguments) ?? false
    }

    func run(_ query: TableQuery) throws -> QueryResult {
        let plan = try plan(query)
        do {
            return try run(query, plan)
        } catch let error as DatabaseError where error.resultCode == .SQLITE_ERROR || error.resultCode == .SQLITE_TOOBIG
        {
            // SQLite refused the statement (an expression deeper than its limit, too many
            // parameters): the evaluator answers alone.
            let plain = Plan(
                conditions: query.includeDeleted ? [] : ["deleted = 0"], residual: query.filter, order: nil)
            return try run(query, plain)
        }
    }

    private func run(_ query: TableQuery, _ plan: Plan) throws -> QueryResult {
        let from = SQLFragment(text: "FROM \(entry.sqlName) ")
        guard let order = plan.order else {
            // The evaluator finishes: rows SQLite selected, in id order, then filter, order, page.
            let sql: SQLFragment = "SELECT item \(from)\(plan.whereClause) ORDER BY id"
            var rest = query
            rest.filter = plan.residual
            return try reader.evaluate(rest, schema: entry.schema, over: try items(sql))
        }
        var total: Int?
        if query.includeTotalCount {
            let sql: SQLFragment = "SELECT COUNT(*) \(from)\(plan.whereClause)"
            total = try Int.fetchOne(reader.db, sql: sql.text, arguments: sql.statementArguments) ?? 0
        }
        guard query.top != 0 else { return QueryResult(items: [], totalCount: total) }
        let orderBy = SQLFragment.joined(order, separator: ", ")
        let limit = Int64(query.top ?? -1)
        let offset = Int64(query.skip ?? 0)
        let sql: SQLFragment =
            "SELECT item \(from)\(plan.whereClause) ORDER BY \(orderBy) LIMIT \(bind: limit) OFFSET \(bind: offset)"
        var page = try items(sql)
        if let select = query.select {
            let evaluator = QueryEvaluator(schema: entry.schema)
            page = page.map { evaluator.project($0, select) }
        }
        return QueryResult(items: page, totalCount: total)
    }

    private func items(_ sql: SQLFragment) throws -> [JSONObject] {
        var result: [JSONObject] = []
        let cursor = try String.fetchCursor(reader.db, sql: sql.text, arguments: sql.statementArguments)
        while let text = try cursor.next() {
            result.append(try reader.decodeObject(text, what: "an item of table '\(table)'"))
        }
        return result
    }
}
