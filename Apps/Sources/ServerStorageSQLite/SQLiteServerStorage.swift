import Foundation
import GRDB
public import Logging
import QuerySQL
import QuerySQLite
public import ServerStorageCore
import SyncCore
import Synchronization
public import Tracing

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
        /// The tracer each statement's span goes to, when it runs inside a span (a request's, on the
        /// reference server); `nil` (the default) traces none. The span is named by the statement's
        /// operation (`SELECT` …) and carries `db.system.name` `sqlite` and `db.query.text`, the
        /// SQL with its `?` placeholders, never the values bound to them; SQLite times it.
        public var tracer: (any Tracer)?
        /// The bytes of the file SQLite reads through a memory map (`mmap_size`), 256 MiB by
        /// default; 0 reads every page with a system call. Keep it 0 for a file on a network file
        /// system, where an I/O error in a mapped page stops the process.
        public var memoryMapSize = 256 << 20

        /// A configuration; see the properties.
        public init(
            busyTimeout: Double = 5, maximumReaderCount: Int = 4,
            now: @escaping @Sendable () -> Int64 = SQLiteServerStorage.systemMilliseconds, logger: Logger? = nil,
            maximumSize: Int? = nil, tracer: (any Tracer)? = nil
        ) {
            self.tracer = tracer
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
    /// Where waits for ``writeGate`` are reported (``observe(_:)``).
    let observers = StorageObserverSlot()
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
            // Pages are read through a memory map (no copy from the kernel's cache per read) and
            // each connection caches up to 16 MiB: with SQLite's 2 MiB cache and no map, batched
            // inserts into a table of 50,000 rows and more spent 12% of the server's samples reading
            // pages from the kernel's cache, 4% with them (perf, release build).
            try db.execute(sql: "PRAGMA mmap_size = \(configuration.memoryMapSize)")
            try db.execute(sql: "PRAGMA cache_size = -16384")
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
        migrator.registerMigration("ferry-server-3-blobs") { db in
            try db.execute(sql: SQLiteBlobStorage.schema)
        }
        return migrator
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

    func announce(_ table: String, _ version: Int64, _ updatedAt: Timestamp) {
        let change = StorageChange(table: table, version: version, updatedAt: updatedAt)
        if let transaction = currentTransaction {
            transaction.hold(change)  // announced once committed
        } else {
            announcements.publish(change)
        }
    }

    // MARK: - Lifecycle

    /// Reports each wait for the writer's turn (`StorageWait.Resource.writer`) to `observer`.
    public func observe(_ observer: (any StorageObserver)?) { observers.set(observer) }

    /// The writer's turn.
    public var waitResources: [StorageWait.Resource] { [.writer] }

    /// Attachment content in this database's own tables (``SQLiteBlobStorage``).
    public func blobStorage() -> (any BlobStorage)? { SQLiteBlobStorage(storage: self) }

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
        if error is StorageError || error is BlobStorageError { return error }
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
