import Logging
import PostgresNIO
import QuerySQL
public import ServerStorageCore
@_spi(StoreSupport) public import SyncCore
import Synchronization

extension PostgreSQLServerStorage {
    // MARK: - Tables

    public func prepare(_ tables: [StorageTable]) async throws {
        for table in tables { try StorageTable.validateName(table.name) }
        for table in tables { _ = try await tableNumber(table.name, creating: true) }
    }

    public func tableNames() async throws -> [String] {
        try await withConnection("listing tables") { connection in
            try await connection.rows("SELECT name FROM ferry_tables ORDER BY name").map { try $0.decode(String.self) }
        }
    }

    public func tableStamps(named names: Set<String>?, changedSince: Int64?) async throws -> [StorageChange] {
        let select: SQLFragment = """
            SELECT name, last_version, last_updated_at FROM ferry_tables
            WHERE last_updated_at >= \(bind: changedSince ?? Int64.min) ORDER BY name
            """
        return try await withConnection("reading the catalog") { connection in
            try await connection.rows(select).compactMap { row -> StorageChange? in
                let (name, version, updatedAt) = try row.decode((String, Int64, Int64).self)
                guard names?.contains(name) ?? true else { return nil }
                return StorageChange(
                    table: name, version: version, updatedAt: Timestamp(millisecondsSince1970: updatedAt))
            }
        }
    }

    public func claimTable(_ name: String) async throws -> String {
        try StorageTable.validateName(name)
        if numbers.withLock({ $0[name] }) != nil { return name }
        return try await transaction { [self] in
            let existing: String? = try await withConnection("creating table '\(name)'") { connection in
                // Racing claims of one name in any case wait for each other, on every instance.
                let key = "ferry_tables:" + name.lowercased()
                let lock: SQLFragment = "SELECT pg_advisory_xact_lock(hashtext(\(bind: key)))"
                _ = try await connection.rows(lock)
                let same: SQLFragment = """
                    SELECT name FROM ferry_tables WHERE lower(name) = lower(\(bind: name))
                    ORDER BY name = \(bind: name) DESC, name LIMIT 1
                    """
                return try await connection.rows(same).first.map { try $0.decode(String.self) }
            }
            if let existing { return existing }
            _ = try await tableNumber(name, creating: true)
            return name
        }
    }

    public func tableExists(_ table: String) async throws -> Bool {
        try await tableNumber(table, creating: false) != nil
    }

    /// The catalog number of `name`; with `creating`, the table is created when absent (by whichever
    /// instance gets there first: the others wait for its commit and use its table).
    func tableNumber(_ name: String, creating: Bool) async throws -> Int64? {
        if let known = numbers.withLock({ $0[name] }) { return known }
        let now = configuration.now()
        let found: Int64? = try await withTransaction(creating ? "creating table '\(name)'" : "reading the catalog") {
            connection in
            let select: SQLFragment = "SELECT number FROM ferry_tables WHERE name = \(bind: name)"
            if let row = try await connection.rows(select).first {
                return try row.decode(Int64.self)
            }
            guard creating else { return nil }
            let insert: SQLFragment = """
                INSERT INTO ferry_tables (name, number, created_at, last_updated_at, last_version)
                VALUES (\(bind: name), nextval('ferry_table_numbers'), \(bind: now), 0, 0)
                ON CONFLICT (name) DO NOTHING RETURNING number
                """
            guard let row = try await connection.rows(insert).first else {
                // Another instance created it meanwhile and has committed.
                return try await connection.rows(select).first.map { try $0.decode(Int64.self) }
            }
            let number = try row.decode(Int64.self)
            for statement in ServerSQLLayout.createStatements(number, dialect: .postgreSQL) {
                try await connection.execute(statement)
            }
            return number
        }
        if let found {
            // Remembered once it is committed: before that, other connections cannot see the table
            // (a query using the number would fail), and a rollback takes it away again.
            let remember: @Sendable () -> Void = { self.numbers.withLock { $0[name] = found } }
            if let transaction = currentTransaction { transaction.afterCommit(remember) } else { remember() }
        }
        return found
    }

    static func sqlName(_ number: Int64) -> String { ServerSQLLayout.tableName(number) }

    // MARK: - Field kinds

    /// The undeclared fields of `content` whose kind is not known yet to be right; throws for a
    /// field whose kind is known and differs.
    func unknownKinds(_ table: StorageTable, _ content: JSONObject) throws -> [(String, FieldKind)] {
        let known = kinds.withLock { $0[table.name] ?? [:] }
        var unknown: [(String, FieldKind)] = []
        for (name, value) in content where table.schema.fields[name] == nil {
            guard let kind = FieldKind(of: value) else { continue }
            if let existing = known[name] {
                guard existing == kind else { throw Self.kindError(table.name, name, existing, kind) }
            } else {
                unknown.append((name, kind))
            }
        }
        return unknown.sorted { $0.0 < $1.0 }
    }

    static func kindError(_ table: String, _ field: String, _ existing: FieldKind, _ kind: FieldKind) -> StorageError {
        StorageError.fieldKind(table: table, field: field, holds: existing.rawValue, given: kind)
    }

    /// Fixes the kinds of new fields inside the write's transaction (before the table's sequence is
    /// taken) and checks them against what other writers fixed first.
    func fixKinds(_ connection: PostgreSQLSession, _ table: StorageTable, _ unknown: [(String, FieldKind)])
        async throws
    {
        if unknown.isEmpty { return }
        // Two statements whatever their number: two round trips per field made an item of 25,000
        // new fields take 12 s (0.10 s on SQLite).
        let inserted = try await Self.recordKinds(of: table.name, unknown, on: connection)
        let others = unknown.filter { !inserted.contains($0.0) }
        let fixed = try await Self.fieldKinds(of: table.name, others.map(\.0), on: connection)
        // In the fields' order (sorted by name), the first whose kind another writer fixed otherwise.
        for (name, kind) in others {
            guard let held = fixed[name] else { continue }
            guard held == kind else { throw Self.kindError(table.name, name, held, kind) }
        }
    }

    /// Remembers kinds once their transaction committed.
    func remember(_ table: String, _ fixed: [(String, FieldKind)]) {
        if fixed.isEmpty { return }
        let learn: @Sendable () -> Void = {
            self.kinds.withLock { all in
                for (name, kind) in fixed { all[table, default: [:]][name] = kind }
            }
        }
        if let transaction = currentTransaction { transaction.afterCommit(learn) } else { learn() }
    }

    /// The JSON kinds recorded for the undeclared fields of `table`.
    public func fieldKinds(of table: String) async throws -> [String: FieldKind] {
        return try await withConnection("reading field kinds") { connection in
            var result: [String: FieldKind] = [:]
            let select: SQLFragment = "SELECT field, kind FROM ferry_fields WHERE table_name = \(bind: table)"
            for row in try await connection.rows(select) {
                let (field, kind) = try row.decode((String, String).self)
                if let kind = FieldKind(rawValue: kind) { result[field] = kind }
            }
            return result
        }
    }

    // MARK: - Rows

    static let columns = "id, item::text, created_at, updated_at, version, deleted, owner"

    static func decode(_ row: PostgresRow) throws -> StoredItem {
        let (id, text, created, updated, version, deleted, owner) = try row.decode(
            (String, String, Int64, Int64, Int64, Bool, String?).self)
        return try item(id, text, created, updated, version, deleted, owner)
    }

    /// The item of a row's decoded columns (``columns``).
    static func item(
        _ id: String, _ text: String, _ created: Int64, _ updated: Int64, _ version: Int64, _ deleted: Bool,
        _ owner: String?
    ) throws -> StoredItem {
        guard case .object(let content) = try? JSONValue(parsing: text) else {
            throw StorageError(.corrupt, "the stored item '\(id)' is not a JSON object")
        }
        return StoredItem(
            id: id, content: content, createdAt: Timestamp(millisecondsSince1970: created),
            updatedAt: Timestamp(millisecondsSince1970: updated), version: version, deleted: deleted, owner: owner)
    }

    static func fetch(
        _ connection: PostgreSQLSession, _ table: String, id: String, owner: OwnerScope
    )
        async throws -> StoredItem?
    {
        let condition = SQLFragment.joined(
            ["id = \(bind: id)"] + [try ServerSQLLayout.ownerCondition(owner)].compactMap { $0 }, separator: " AND ")
        let select: SQLFragment =
            "SELECT \(SQLFragment(text: columns)) FROM \(SQLFragment(text: table)) WHERE \(condition)"
        return try await connection.preparedRows(query(select)).first.map(decode)
    }

    /// The items of `ids` in `table` (those that exist and `owner` sees), in any order: one
    /// statement for many reads by id (``ReadBatches``).
    static func fetch(
        _ connection: PostgreSQLSession, _ table: String, ids: [String], owner: OwnerScope
    ) async throws -> [StoredItem] {
        var binds = PostgresBindings(capacity: 2)
        binds.append(ids)
        var sql = "SELECT \(columns) FROM \(table) WHERE id = ANY($1::text[])"
        if case .owner(let subject) = owner {
            try OwnerScope.validateSubject(subject)
            binds.append(subject)
            sql += " AND owner = $2::text"
        }
        return try await connection.preparedRows(PostgresQuery(unsafeSQL: sql, binds: binds)).map(decode)
    }

    public func item(in table: StorageTable, id: String, owner: OwnerScope) async throws -> StoredItem? {
        guard let number = try await tableNumber(table.name, creating: false) else { return nil }
        let name = table.name
        let sqlName = Self.sqlName(number)
        guard currentTransaction == nil else {
            return try await withConnection("reading an item of '\(name)'") { connection in
                try await Self.fetch(connection, sqlName, id: id, owner: owner)
            }
        }
        return try await readBatches.read(
            ReadBatches.Key(table: sqlName, owner: owner), id: id,
            alone: {
                try await withConnection("reading an item of '\(name)'") { connection in
                    try await Self.fetch(connection, sqlName, id: id, owner: owner)
                }
            },
            together: { [self] key, ids in
                try await withConnection("reading items of '\(name)'") { connection in
                    try await Self.fetch(connection, key.table, ids: ids, owner: key.owner)
                }
            })
    }

    /// Takes the table's next stamp (`$stamp` rows `last_updated_at`, `last_version`) and announces
    /// it on commit: the head of every write statement.
    func stampCTE(_ table: String, when condition: SQLFragment? = nil) -> SQLFragment {
        let guardClause = condition.map { " AND \($0)" as SQLFragment } ?? ""
        return """
            stamp AS (
                UPDATE ferry_tables
                SET last_updated_at = GREATEST(\(bind: configuration.now()), last_updated_at + 1), last_version = last_version + 1
                WHERE name = \(bind: table)\(guardClause)
                RETURNING last_updated_at, last_version
            ), notified AS (
                SELECT pg_notify(\(bind: channel), last_version || ' ' || last_updated_at || ' ' || \(bind: table)) FROM stamp
            )
            """
    }

    public func insert(into table: StorageTable, id: String, content: JSONObject, owner: String?) async throws
        -> StoredItem
    {
        try StorageTable.validateName(table.name)
        try Self.validateID(id)
        if let owner { try OwnerScope.validateSubject(owner) }
        let text = try Self.itemText(content, table.name)
        let unknown = try unknownKinds(table, content)
        guard let number = try await tableNumber(table.name, creating: true) else {
            throw StorageError.noSuchTable(table.name)
        }
        if unknown.isEmpty && currentTransaction == nil {
            // The common case: grouped with the table's concurrent inserts (InsertBatches).
            return try await insertBatches.insert(
                .init(name: table.name, sqlName: Self.sqlName(number)), id: id, text: text, owner: owner,
                content: content
            ) { target, batch in
                await self.runInsertBatch(target, batch)
            }
        }
        // A field never seen before: its kind is fixed in the same transaction as the row.
        let sqlName = SQLFragment(text: Self.sqlName(number))
        let statement: SQLFragment = """
            WITH \(stampCTE(table.name)), inserted AS (
                INSERT INTO \(sqlName) (id, item, created_at, updated_at, version, deleted, owner)
                SELECT \(bind: id), (\(bind: text))::jsonb, last_updated_at, last_updated_at, last_version, FALSE, \(owner.map { "\(bind: $0)" as SQLFragment } ?? "NULL")
                FROM stamp
                ON CONFLICT (id) DO NOTHING
                RETURNING updated_at, version
            )
            SELECT updated_at, version, (SELECT count(*) FROM notified) FROM inserted
            """
        let body: @Sendable (PostgreSQLSession) async throws -> StoredItem = { connection in
            try await self.fixKinds(connection, table, unknown)
            guard let row = try await connection.rows(statement).first else {
                let existing = try await Self.fetch(connection, Self.sqlName(number), id: id, owner: .all)
                throw StorageError.alreadyExists(id: id, in: table.name, current: existing)
            }
            let (updatedAt, version) = try row.decode((Int64, Int64).self)
            return StoredItem(
                id: id, content: content, createdAt: Timestamp(millisecondsSince1970: updatedAt),
                updatedAt: Timestamp(millisecondsSince1970: updatedAt), version: version, deleted: false, owner: owner)
        }
        let stored = try await withTransaction("inserting into '\(table.name)'", body)
        remember(table.name, unknown)
        return stored
    }

    public func lockTables(_ tables: [String]) async throws {
        guard currentTransaction != nil, !tables.isEmpty else { return }
        try await withConnection("locking the tables \(tables.sorted())") { connection in
            try await Self.lockTables(tables, on: connection)
        }
    }

    /// Locks the sequence rows of `tables` (those that exist) in name order, until the transaction
    /// ends: what every write takes, first (``ServerStorage/lockTables(_:)``).
    static func lockTables(_ tables: [String], on connection: PostgreSQLSession) async throws {
        var binds = PostgresBindings(capacity: 1)
        binds.append(Array(Set(tables)).sorted())
        _ = try await connection.rows(
            PostgresQuery(
                unsafeSQL: "SELECT name FROM ferry_tables WHERE name = ANY($1::text[]) ORDER BY name FOR UPDATE",
                binds: binds))
    }

    public func replace(
        in table: StorageTable, id: String, expectedVersion: Int64, content: JSONObject, deleted: Bool,
        owner: OwnerScope
    ) async throws -> StoredItem {
        let text = try Self.itemText(content, table.name)
        let unknown = try unknownKinds(table, content)
        let scope = try ServerSQLLayout.ownerCondition(owner).map { " AND \($0)" as SQLFragment } ?? ""
        guard let number = try await tableNumber(table.name, creating: false) else {
            throw StorageError.noItem(id: id, inMissingTable: table.name)
        }
        let sqlName = SQLFragment(text: Self.sqlName(number))
        let statement: SQLFragment = """
            WITH current AS (
                SELECT id FROM \(sqlName) WHERE id = \(bind: id) AND version = \(bind: expectedVersion)\(scope) FOR UPDATE
            ), \(stampCTE(table.name, when: "EXISTS (SELECT 1 FROM current)")), updated AS (
                UPDATE \(sqlName) SET item = (\(bind: text))::jsonb, updated_at = stamp.last_updated_at,
                    version = stamp.last_version, deleted = \(SQLFragment(text: deleted ? "TRUE" : "FALSE"))
                FROM stamp WHERE \(sqlName).id = \(bind: id)
                RETURNING \(SQLFragment(text: Self.columns))
            )
            SELECT updated.*, (SELECT count(*) FROM notified) FROM updated
            """
        let body: @Sendable (PostgreSQLSession) async throws -> StoredItem = { connection in
            // The table's lock before the item's row, as every writer takes them: the row first,
            // against a batch holding the table and then asking for the row, deadlocked.
            try await Self.lockTables([table.name], on: connection)
            try await self.fixKinds(connection, table, unknown)
            if let row = try await connection.rows(statement).first {
                var stored = try Self.decode(row)
                stored.content = content
                return stored
            }
            throw try await Self.missing(connection, table.name, Self.sqlName(number), id: id, owner: owner)
        }
        let stored = try await withTransaction("replacing an item of '\(table.name)'", body)
        remember(table.name, unknown)
        return stored
    }

    public func delete(from table: StorageTable, id: String, expectedVersion: Int64, owner: OwnerScope) async throws {
        let scope = try ServerSQLLayout.ownerCondition(owner).map { " AND \($0)" as SQLFragment } ?? ""
        guard let number = try await tableNumber(table.name, creating: false) else {
            throw StorageError.noItem(id: id, inMissingTable: table.name)
        }
        let sqlName = SQLFragment(text: Self.sqlName(number))
        let statement: SQLFragment = """
            WITH current AS (
                SELECT id FROM \(sqlName) WHERE id = \(bind: id) AND version = \(bind: expectedVersion)\(scope) FOR UPDATE
            ), \(stampCTE(table.name, when: "EXISTS (SELECT 1 FROM current)")), removed AS (
                DELETE FROM \(sqlName) WHERE id = \(bind: id) AND EXISTS (SELECT 1 FROM stamp) RETURNING id
            )
            SELECT id, (SELECT count(*) FROM notified) FROM removed
            """
        try await withTransaction("deleting an item of '\(table.name)'") { connection in
            try await Self.lockTables([table.name], on: connection)
            if try await connection.rows(statement).isEmpty {
                throw try await Self.missing(connection, table.name, Self.sqlName(number), id: id, owner: owner)
            }
        }
    }

    /// Why a compare-and-set write changed nothing: the row is absent (or another owner's), or its
    /// version moved on.
    static func missing(
        _ connection: PostgreSQLSession, _ table: String, _ sqlName: String, id: String, owner: OwnerScope,
    ) async throws -> StorageError {
        StorageError.writePreconditionFailed(
            id: id, in: table, current: try await fetch(connection, sqlName, id: id, owner: owner))
    }

    // MARK: - Validation

    static func validateID(_ id: String) throws {
        try StoredItem.validateID(id)
        guard !id.utf8.contains(0) else {
            throw StorageError(.invalidName, "the id contains U+0000, which PostgreSQL text cannot hold")
        }
    }

    /// The item's JSON text (``ServerSQLLayout/itemText(_:_:)``). What `jsonb` cannot hold exactly
    /// is refused: NaN and infinities, nesting deeper than the parser reads back, and, checked after
    /// those, U+0000 in a string or a key.
    static func itemText(_ content: JSONObject, _ table: String) throws -> String {
        let text = try ServerSQLLayout.itemText(content, table)
        guard !holdsNUL(.object(content)) else {
            throw StorageError(
                .fieldKind, "the item for '\(table)' holds U+0000 in a string or a key, which PostgreSQL cannot store")
        }
        return text
    }

    static func holdsNUL(_ value: JSONValue) -> Bool {
        switch value {
        case .string(let text): text.utf8.contains(0)
        case .array(let values): values.contains(where: holdsNUL)
        case .object(let members): members.contains { $0.key.utf8.contains(0) || holdsNUL($0.value) }
        case .null, .bool, .int, .double: false
        }
    }
}
