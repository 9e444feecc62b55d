import Foundation
import GRDB
public import Logging
import QuerySQL
import QuerySQLite
public import ServerStorageCore
@_spi(StoreSupport) public import SyncCore
import Synchronization

/// The reference server's embedded default storage: SQLite through GRDB.swift, in a file or in
/// memory, with no set-up.
///
/// ```swift
/// let storage = try SQLiteServerStorage(location: .file("ferry.sqlite"))   // or .memory
/// let todo = StorageTable(name: "todo")
/// let item = try await storage.insert(into: todo, id: "1", content: ["title": "Milk"], owner: nil)
/// print(item.updatedAt, item.versionTag)
/// try await storage.close()
/// ```
///
/// ## Layout
///
/// Each table is one SQL table `ferry_items_<n>` (named by its catalog number, never by its name):
/// `id` (primary key, the table is clustered on it), `item` (the JSON text of the item's own
/// fields, as `JSONValue.serialized()` writes it), `created_at`, `updated_at` (milliseconds,
/// unique per table), `version` (the table's write sequence), `deleted` and `owner`. The catalog
/// `ferry_tables` holds each table's number and its write sequence (last `updatedAt`, last
/// version); `ferry_fields` holds the JSON kind of each undeclared field.
///
/// ## Commit order
///
/// A file database runs in WAL mode on a GRDB `DatabasePool` (one writer, concurrent snapshot
/// readers); memory uses a `DatabaseQueue`. Every write is one `BEGIN IMMEDIATE` transaction that
/// first reads and advances the table's sequence row in `ferry_tables`, so writes to a table are
/// serialized by SQLite's write lock (even across processes sharing the file) and stamps follow
/// commit order: `version = last + 1` and `updatedAt = max(now, last updatedAt + 1 ms)`.
///
/// ## Queries
///
/// Queries compile to SQL with bound parameters only (QuerySQL's `SQLCompiler`, SQLite dialect,
/// over `ServerSQLLayout`); what SQL cannot reproduce exactly runs in `QueryEvaluator` over the rows
/// SQLite selected by the compiled part of the filter (`QueryPlan.evaluator`). Such a query reads
/// every row the compiled part selects.
public final class SQLiteServerStorage: ServerStorage {
    /// Where the database lives.
    public enum Location: Sendable, Hashable {
        /// A database file, created when absent, in WAL mode.
        case file(String)
        /// A private in-memory database, gone when the storage closes.
        case memory
    }

    /// How the storage opens, waits and tells time.
    public struct Configuration: Sendable {
        /// Seconds to wait for a lock held by another connection or process before failing with
        /// `StorageError.Code.busy`.
        public var busyTimeout: Double
        /// The most concurrent reader connections of a file database.
        public var maximumReaderCount: Int
        /// The clock stamps come from, in milliseconds since 1970 (tests inject their own).
        public var now: @Sendable () -> Int64
        /// Where the storage logs (debug level and below, plus warnings), as its caller chose;
        /// `nil` for nowhere.
        public var logger: Logger?
        /// The most bytes the database file may grow to (SQLite's `max_page_count`); `nil` for no
        /// limit but the disk's. A write past it fails with `StorageError.Code.full`, as on a full
        /// disk.
        public var maximumSize: Int?

        /// A configuration; see the properties.
        public init(
            busyTimeout: Double = 5, maximumReaderCount: Int = 4,
            now: @escaping @Sendable () -> Int64 = SQLiteServerStorage.systemMilliseconds, logger: Logger? = nil,
            maximumSize: Int? = nil
        ) {
            self.busyTimeout = busyTimeout
            self.maximumReaderCount = maximumReaderCount
            self.now = now
            self.logger = logger
            self.maximumSize = maximumSize
        }
    }

    /// The system clock in milliseconds since 1970 (the default ``Configuration/now``).
    @Sendable public static func systemMilliseconds() -> Int64 { StorageClock.systemMilliseconds() }

    /// `sqlite:PATH` or `memory`.
    public let location: String
    let database: any DatabaseWriter
    let configuration: Configuration
    /// Table numbers already looked up (a table's number never changes).
    let numbers = Mutex<[String: Int64]>([:])
    /// The recorded kinds of undeclared fields read so far, by table (a field's kind never changes).
    let knownFieldKinds = Mutex<[String: [String: String]]>([:])
    let closed = Mutex(false)
    /// The change stream: this process's writes (other processes sharing the file are not heard).
    let announcements = StorageChanges()
    /// Held by every write, and by a transaction from its start to its end.
    let writeGate = TurnGate()
    /// Whether reads run on the writer's connection (a memory database has only one): they then
    /// wait for the gate too, or they would see a transaction's writes before it commits.
    let readsShareTheWriter: Bool

    /// Opens (or creates) the database.
    ///
    /// - Throws: `StorageError` — `corrupt` for a file that is not a SQLite database or belongs to
    ///   another application, `busy` or `io` otherwise.
    public init(location: Location, configuration: Configuration = Configuration()) throws {
        self.configuration = configuration
        if case .memory = location { readsShareTheWriter = true } else { readsShareTheWriter = false }
        var grdb = GRDB.Configuration()
        grdb.busyMode = .timeout(configuration.busyTimeout)
        // A transaction stays open across its writes (``transaction(_:)``), with every other
        // write held back by `writeGate` meanwhile.
        grdb.allowsUnsafeTransactions = true
        grdb.maximumReaderCount = max(1, configuration.maximumReaderCount)
        grdb.label = "ferry.storage"
        grdb.prepareDatabase { db in
            try SQLiteQueryFunctions.register(db)
            // The savepoint of each write of a batch journals the pages it changes; in a file those
            // journals cost a dozen writes per request.
            try db.execute(sql: "PRAGMA temp_store = MEMORY")
            if let maximumSize = configuration.maximumSize {
                let pageSize = try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 4096
                try db.execute(sql: "PRAGMA max_page_count = \(max(1, maximumSize / pageSize))")
            }
        }
        switch location {
        case .file(let path):
            self.location = "sqlite:\(path)"
            do {
                database = try DatabasePool(path: path, configuration: grdb)
            } catch {
                throw Self.mapped(error, "opening", "sqlite:\(path)")
            }
        case .memory:
            self.location = "memory"
            do {
                database = try DatabaseQueue(configuration: grdb)
            } catch {
                throw Self.mapped(error, "opening", "memory")
            }
        }
        do {
            try Self.migrator.migrate(database)
        } catch {
            try? database.close()
            throw Self.mapped(error, "opening", self.location)
        }
    }

    /// The application id stamped in the database header: "FRSV".
    static let applicationID: Int32 = 0x4652_5356

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("ferry-server-1") { db in
            let current = try Int32.fetchOne(db, sql: "PRAGMA application_id") ?? 0
            let tables =
                try Int.fetchOne(
                    db, sql: "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'grdb_%'") ?? 0
            if current != applicationID && (current != 0 || tables > 0) {
                throw StorageError(
                    .corrupt, "the database belongs to another application (not a Ferry server database)")
            }
            try db.execute(sql: "PRAGMA application_id = \(applicationID)")
            try db.execute(
                sql: """
                    CREATE TABLE ferry_tables (
                        name TEXT PRIMARY KEY NOT NULL,
                        number INTEGER NOT NULL UNIQUE,
                        created_at INTEGER NOT NULL,
                        last_updated_at INTEGER NOT NULL,
                        last_version INTEGER NOT NULL
                    );
                    CREATE TABLE ferry_fields (
                        table_name TEXT NOT NULL,
                        field TEXT NOT NULL,
                        kind TEXT NOT NULL,
                        PRIMARY KEY (table_name, field)
                    ) WITHOUT ROWID;
                    """)
        }
        migrator.registerMigration("ferry-server-2-outcomes") { db in
            try db.execute(
                sql: """
                    CREATE TABLE ferry_outcomes (
                        scope TEXT NOT NULL,
                        key TEXT NOT NULL,
                        fingerprint TEXT NOT NULL,
                        status INTEGER NOT NULL,
                        headers TEXT NOT NULL,
                        body TEXT,
                        recorded_at INTEGER NOT NULL,
                        PRIMARY KEY (scope, key)
                    ) WITHOUT ROWID;
                    CREATE INDEX ferry_outcomes_recorded ON ferry_outcomes (recorded_at);
                    """)
        }
        return migrator
    }

    // MARK: - Tables

    public func prepare(_ tables: [StorageTable]) async throws {
        for table in tables { try StorageTable.validateName(table.name) }
        try await write("preparing tables") { db in
            for table in tables { _ = try Self.tableRecord(db, table.name, creating: true) }
        }
    }

    public func tableNames() async throws -> [String] {
        try await read("listing tables") { db in
            try String.fetchAll(db, sql: "SELECT name FROM ferry_tables ORDER BY name")
        }
    }

    public func tableExists(_ table: String) async throws -> Bool {
        try await number(of: table) != nil
    }

    public func tableStamps(named names: Set<String>?, changedSince: Int64?) async throws -> [StorageChange] {
        try await read("reading the catalog") { db in
            try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT name, last_version, last_updated_at FROM ferry_tables
                        WHERE last_updated_at >= ? ORDER BY name
                        """),
                arguments: [changedSince ?? Int64.min]
            ).compactMap { row -> StorageChange? in
                let name: String = row[0]
                guard names?.contains(name) ?? true else { return nil }
                return StorageChange(
                    table: name, version: row[1], updatedAt: Timestamp(millisecondsSince1970: row[2]))
            }
        }
    }

    /// The catalog number of `name`, or `nil` when the table does not exist.
    func number(of name: String) async throws -> Int64? {
        if let known = numbers.withLock({ $0[name] }) { return known }
        let found = try await read("reading the catalog") { db in
            try Int64.fetchOne(db, sql: "SELECT number FROM ferry_tables WHERE name = ?", arguments: [name])
        }
        // Not remembered inside a transaction: until it commits, other connections cannot see a
        // table it created (a query using the number would fail).
        if let found, currentTransaction == nil { numbers.withLock { $0[name] = found } }
        return found
    }

    struct TableRecord {
        var number: Int64
        var lastUpdatedAt: Int64
        var lastVersion: Int64
        var sqlName: String { ServerSQLLayout.tableName(number) }
    }

    static func tableRecord(_ db: Database, _ name: String, creating: Bool) throws -> TableRecord? {
        if let row = try Row.fetchOne(
            db.cachedStatement(sql: "SELECT number, last_updated_at, last_version FROM ferry_tables WHERE name = ?"),
            arguments: [name])
        {
            return TableRecord(number: row[0], lastUpdatedAt: row[1], lastVersion: row[2])
        }
        guard creating else { return nil }
        let number = (try Int64.fetchOne(db, sql: "SELECT MAX(number) FROM ferry_tables") ?? 0) + 1
        let record = TableRecord(number: number, lastUpdatedAt: 0, lastVersion: 0)
        try db.execute(
            sql:
                "INSERT INTO ferry_tables (name, number, created_at, last_updated_at, last_version) VALUES (?, ?, ?, 0, 0)",
            arguments: [name, number, systemMilliseconds()])
        for statement in ServerSQLLayout.createStatements(number, dialect: .sqlite) {
            try db.execute(sql: statement)
        }
        return record
    }

    /// Advances the table's write sequence inside the current transaction.
    func nextStamp(_ db: Database, _ name: String, _ record: inout TableRecord) throws -> (
        updatedAt: Int64, version: Int64
    ) {
        let updatedAt = max(configuration.now(), record.lastUpdatedAt + 1)
        let version = record.lastVersion + 1
        record.lastUpdatedAt = updatedAt
        record.lastVersion = version
        try db.cachedStatement(sql: "UPDATE ferry_tables SET last_updated_at = ?, last_version = ? WHERE name = ?")
            .execute(arguments: [updatedAt, version, name])
        return (updatedAt, version)
    }

    /// Fixes the JSON kind of new undeclared fields and rejects values of another kind.
    ///
    /// A field's kind never changes once recorded, so the kinds read from the catalog are kept in
    /// memory and a write whose fields are all known reads nothing.
    func checkFieldKinds(_ db: Database, _ table: StorageTable, _ content: JSONObject) throws {
        let undeclared = content.compactMap { name, value -> (String, FieldKind)? in
            guard table.schema.fields[name] == nil, let kind = FieldKind(of: value) else { return nil }
            return (name, kind)
        }
        if undeclared.isEmpty { return }
        let remembered = knownFieldKinds.withLock { $0[table.name] }
        if let remembered, undeclared.allSatisfy({ remembered[$0.0] == $0.1.rawValue }) { return }
        var known: [String: String] = [:]
        for row in try Row.fetchAll(
            db.cachedStatement(sql: "SELECT field, kind FROM ferry_fields WHERE table_name = ?"),
            arguments: [table.name])
        {
            known[row[0]] = row[1]
        }
        // What was read is recorded (or, in a batch, forgotten again if the batch rolls back).
        knownFieldKinds.withLock { $0[table.name] = known }
        for (name, kind) in undeclared.sorted(by: { $0.0 < $1.0 }) {
            if let existing = known[name] {
                guard existing == kind.rawValue else {
                    throw StorageError(
                        .fieldKind,
                        "field '\(name)' of table '\(table.name)' holds \(existing) values; a \(kind.rawValue) cannot be stored in it"
                    )
                }
            }
        }
        for (name, kind) in undeclared.sorted(by: { $0.0 < $1.0 }) where known[name] == nil {
            try db.cachedStatement(sql: "INSERT INTO ferry_fields (table_name, field, kind) VALUES (?, ?, ?)")
                .execute(arguments: [table.name, name, kind.rawValue])
        }
    }

    /// The JSON kinds recorded for the undeclared fields of `table`.
    public func fieldKinds(of table: String) async throws -> [String: FieldKind] {
        try await read("reading field kinds") { db in
            var result: [String: FieldKind] = [:]
            for row in try Row.fetchAll(
                db, sql: "SELECT field, kind FROM ferry_fields WHERE table_name = ?", arguments: [table])
            {
                if let kind = FieldKind(rawValue: row[1]) { result[row[0]] = kind }
            }
            return result
        }
    }

    // MARK: - Rows

    static let columns = "id, item, created_at, updated_at, version, deleted, owner"

    static func decode(_ row: Row) throws -> StoredItem {
        let id: String = row[0]
        let text: String = row[1]
        guard case .object(let content) = try? JSONValue(parsing: text) else {
            throw StorageError(.corrupt, "the stored item '\(id)' is not a JSON object")
        }
        return StoredItem(
            id: id, content: content, createdAt: Timestamp(millisecondsSince1970: row[2]),
            updatedAt: Timestamp(millisecondsSince1970: row[3]), version: row[4], deleted: (row[5] as Int64) != 0,
            owner: row[6])
    }

    static func fetch(_ db: Database, _ record: TableRecord, id: String, owner: OwnerScope) throws -> StoredItem? {
        let row: Row?
        switch owner {
        case .all:
            row = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT \(columns) FROM \(record.sqlName) WHERE id = ?"), arguments: [id])
        case .owner(let subject):
            try OwnerScope.validateSubject(subject)
            row = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT \(columns) FROM \(record.sqlName) WHERE id = ? AND owner = ?"),
                arguments: [id, subject])
        }
        return try row.map(decode)
    }

    public func item(in table: StorageTable, id: String, owner: OwnerScope) async throws -> StoredItem? {
        guard let number = try await number(of: table.name) else { return nil }
        let record = TableRecord(number: number, lastUpdatedAt: 0, lastVersion: 0)
        return try await read("reading an item of '\(table.name)'") { db in
            try Self.fetch(db, record, id: id, owner: owner)
        }
    }

    public func insert(into table: StorageTable, id: String, content: JSONObject, owner: String?) async throws
        -> StoredItem
    {
        try StorageTable.validateName(table.name)
        try StoredItem.validateID(id)
        if let owner { try OwnerScope.validateSubject(owner) }
        let text = try ServerSQLLayout.itemText(content, table.name)
        let stored = try await write("inserting into '\(table.name)'") { db in
            guard var record = try Self.tableRecord(db, table.name, creating: true) else {
                throw StorageError.noSuchTable(table.name)
            }
            if let existing = try Self.fetch(db, record, id: id, owner: .all) {
                throw StorageError.alreadyExists(id: id, in: table.name, current: existing)
            }
            try self.checkFieldKinds(db, table, content)
            let stamp = try self.nextStamp(db, table.name, &record)
            try db.cachedStatement(sql: "INSERT INTO \(record.sqlName) (\(Self.columns)) VALUES (?, ?, ?, ?, ?, 0, ?)")
                .execute(arguments: [id, text, stamp.updatedAt, stamp.updatedAt, stamp.version, owner])
            return StoredItem(
                id: id, content: content, createdAt: Timestamp(millisecondsSince1970: stamp.updatedAt),
                updatedAt: Timestamp(millisecondsSince1970: stamp.updatedAt), version: stamp.version, deleted: false,
                owner: owner)
        }
        announce(table.name, stored.version, stored.updatedAt)
        return stored
    }

    public func replace(
        in table: StorageTable, id: String, expectedVersion: Int64, content: JSONObject, deleted: Bool,
        owner: OwnerScope
    ) async throws -> StoredItem {
        let text = try ServerSQLLayout.itemText(content, table.name)
        let stored = try await write("replacing an item of '\(table.name)'") { db in
            var record = try Self.existingRecord(db, table.name, id: id)
            var current = try StoredItem.checkWritePrecondition(
                Self.fetch(db, record, id: id, owner: owner), id: id, expectedVersion: expectedVersion, in: table.name)
            try self.checkFieldKinds(db, table, content)
            let stamp = try self.nextStamp(db, table.name, &record)
            try db.cachedStatement(
                sql: "UPDATE \(record.sqlName) SET item = ?, updated_at = ?, version = ?, deleted = ? WHERE id = ?"
            ).execute(arguments: [text, stamp.updatedAt, stamp.version, deleted ? 1 : 0, id])
            current.content = content
            current.updatedAt = Timestamp(millisecondsSince1970: stamp.updatedAt)
            current.version = stamp.version
            current.deleted = deleted
            return current
        }
        announce(table.name, stored.version, stored.updatedAt)
        return stored
    }

    public func delete(from table: StorageTable, id: String, expectedVersion: Int64, owner: OwnerScope) async throws {
        let stamp = try await write("deleting an item of '\(table.name)'") { db in
            var record = try Self.existingRecord(db, table.name, id: id)
            _ = try StoredItem.checkWritePrecondition(
                Self.fetch(db, record, id: id, owner: owner), id: id, expectedVersion: expectedVersion, in: table.name)
            // A delete advances the sequence too: the next write's stamps must still exceed it.
            let stamp = try self.nextStamp(db, table.name, &record)
            try db.execute(sql: "DELETE FROM \(record.sqlName) WHERE id = ?", arguments: [id])
            return stamp
        }
        announce(table.name, stamp.version, Timestamp(millisecondsSince1970: stamp.updatedAt))
    }

    // MARK: - Changes

    public func changes() -> AsyncStream<StorageChange> {
        announcements.subscribe()
    }

    /// Forgets the cached table numbers and field kinds (after a rollback: tables and fields it
    /// created are gone again).
    func forgetCaches() {
        numbers.withLock { $0.removeAll() }
        knownFieldKinds.withLock { $0.removeAll() }
    }

    private func announce(_ table: String, _ version: Int64, _ updatedAt: Timestamp) {
        let change = StorageChange(table: table, version: version, updatedAt: updatedAt)
        if let transaction = currentTransaction {
            transaction.hold(change)  // announced once committed
        } else {
            announcements.publish(change)
        }
    }

    static func existingRecord(_ db: Database, _ name: String, id: String) throws -> TableRecord {
        guard let record = try tableRecord(db, name, creating: false) else {
            throw StorageError.noItem(id: id, inMissingTable: name)
        }
        return record
    }

    // MARK: - Lifecycle

    public func close() async throws {
        let wasClosed = closed.withLock { flag in
            defer { flag = true }
            return flag
        }
        if wasClosed { return }
        announcements.finish()
        do {
            try database.close()
        } catch {
            throw Self.mapped(error, "closing", location)
        }
    }

    static func mapped(_ error: any Error, _ action: String, _ place: String) -> any Error {
        if error is StorageError { return error }
        guard let error = error as? DatabaseError else {
            return StorageError(.io, "\(action) \(place) failed: \(error)")
        }
        let native = String((error.message ?? "\(error.resultCode)").map { $0.isNewline ? " " : $0 })
        let code: StorageError.Code
        switch error.resultCode {
        case .SQLITE_CORRUPT, .SQLITE_NOTADB: code = .corrupt
        case .SQLITE_BUSY, .SQLITE_LOCKED: code = .busy
        case .SQLITE_FULL: code = .full
        default: code = .io
        }
        return StorageError(code, "\(action) \(place) failed (SQLite: \(native))", underlying: error)
    }
}
