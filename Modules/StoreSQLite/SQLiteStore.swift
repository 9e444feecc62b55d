import Foundation
import GRDB
import QuerySQLite
public import SyncCore
import Synchronization

/// A `LocalStore` in an SQLite database, through GRDB.swift and the system's SQLite.
///
/// A file store runs in WAL mode on a GRDB `DatabasePool`: one writer at a time, and readers that
/// run in parallel with it on snapshots. An in-memory store uses a GRDB `DatabaseQueue` (reads and
/// writes take turns) and keeps nothing after ``close()``.
///
/// ```swift
/// import StoreSQLite
/// import SyncCore
///
/// let store = try SQLiteStore(path: directory + "/app.ferry")   // or SQLiteStore(location: .memory)
/// try await store.write { tx in
///     try tx.upsert("todo", [["id": "1", "title": "Milk", "done": false]])
///     _ = try tx.appendOperation(OperationDraft(table: "todo", itemID: "1", kind: .insert))
/// }
/// let open = try await store.query("todo", TableQuery().filter(.field("done").eq(false)))
/// try await store.close()
/// ```
///
/// ## Storage
///
/// Each Ferry table is one SQL table with the item's JSON text (the source of truth, written by
/// `JSONValue.serialized()`) beside real, indexed columns for `id`, `updatedAt` (milliseconds),
/// `deleted` and `version`; declared indexes (`TableDefinition.indexes`) index the JSON fields
/// the app filters on. The operation queue, operation errors, delta tokens, table definitions and a
/// metadata table live in the same database, so an edit and its queued operation commit together.
/// The store's own tables are versioned with GRDB migrations; a newer Ferry opens an older store
/// without losing a queued operation. `docs/store-sqlite.md` describes the layout.
///
/// ## Queries
///
/// Queries compile to SQL with bound parameters and give exactly what `QueryEvaluator` gives;
/// constructs SQL cannot reproduce exactly (`cast`, for one) run in the evaluator over the rows
/// SQLite selected. See `SQLCompiler` and `docs/store-sqlite.md`.
///
/// ## Why a final class and not an actor
///
/// GRDB already serializes writers and runs readers concurrently on its own dispatch queues (off
/// Swift's cooperative pool); an actor would add a second, coarser lock that serializes readers
/// behind writers. The class holds only immutable, `Sendable` state plus a `Mutex`-guarded flag.
///
/// ## Errors
///
/// Every failure is a `StoreError`: SQLite's `CORRUPT`/`NOTADB` are `corrupt`, `BUSY`/`LOCKED`
/// are `busy`, `READONLY` (or a location that cannot be created) is `readOnly`, `FULL` is `full`,
/// the rest `io`, with GRDB's `DatabaseError` in `underlying` and the path in the message. Opening a
/// file that is not a SQLite database, is damaged, is another application's database or was
/// written by a newer Ferry fails before anything is written to it.
public final class SQLiteStore: LocalStore {
    /// Where a store keeps its data.
    public enum Location: Sendable, Hashable {
        /// A database file (created when absent), in WAL mode.
        case file(String)
        /// A private in-memory database, gone when the store closes.
        case memory
    }

    /// How a store opens and waits.
    ///
    /// ```swift
    /// var configuration = SQLiteStore.Configuration()
    /// configuration.busyTimeout = 10
    /// let store = try SQLiteStore(path: path, configuration: configuration)
    /// ```
    public struct Configuration: Sendable, Hashable {
        /// Seconds to wait for a lock held by another process before failing with `busy`.
        public var busyTimeout: Double
        /// The most reader connections of a file store.
        public var maximumReaderCount: Int
        /// Whether opening an existing file runs SQLite's `quick_check` first (reads the whole
        /// file once; damage is then reported at open, before anything is written).
        public var verifiesIntegrityOnOpen: Bool
        /// The most bytes the database may hold, or `nil` for no limit but the disk's. A write that
        /// would go past it fails with `StoreError.Code.full` and changes nothing, exactly as when
        /// the disk is full (SQLite's `max_page_count`, rounded down to whole pages).
        public var maximumSize: Int?
        /// How often a file store checks whether another connection or process committed, while
        /// someone observes its ``SQLiteStore/commits`` (never otherwise).
        public var otherWritersCheckInterval: Duration

        /// A configuration; the defaults suit an app's store.
        ///
        /// ```swift
        /// let fastOpen = SQLiteStore.Configuration(verifiesIntegrityOnOpen: false)
        /// ```
        public init(
            busyTimeout: Double = 5, maximumReaderCount: Int = 4, verifiesIntegrityOnOpen: Bool = true,
            maximumSize: Int? = nil, otherWritersCheckInterval: Duration = .milliseconds(100)
        ) {
            self.otherWritersCheckInterval = otherWritersCheckInterval
            self.busyTimeout = busyTimeout
            self.maximumReaderCount = maximumReaderCount
            self.verifiesIntegrityOnOpen = verifiesIntegrityOnOpen
            self.maximumSize = maximumSize
        }
    }

    /// Where this store keeps its data.
    public let location: Location
    /// `[.persistent, .concurrentReaders, .declaredIndexes]` for a file, `[.declaredIndexes]` in memory.
    public let capabilities: StoreCapabilities
    let database: any DatabaseWriter
    /// Every committed write: this store's, and (file stores, while someone subscribes) those of
    /// other connections and processes on the same file, as `StoreCommit.external`.
    public let commits: StoreCommits
    /// "the SQLite store at '…'", for messages.
    let place: String
    private let closed = Mutex(false)
    /// Whether ``close()`` closes the database (not when the app opened it and owns it).
    private let ownsDatabase: Bool
    /// A read-only connection of its own for point reads (file stores), opened on first use.
    private let pointReader = Mutex(PointReader.unopened)
    /// The SQL tables of the Ferry tables point reads have found (a table's never changes).
    private let itemTables = Mutex<[String: String]>([:])

    private enum PointReader {
        case unopened
        case idle(DatabaseQueue)
        case inUse(DatabaseQueue)
        /// Closed, or it could not be opened: point reads use the pool.
        case unavailable
    }

    /// Opens (or creates) the store in a database file.
    ///
    /// ```swift
    /// let store = try SQLiteStore(path: directory + "/app.ferry")
    /// ```
    ///
    /// - Throws: `StoreError` — `corrupt` for a file that is not a SQLite database, is damaged,
    ///   belongs to another application or was written by a newer Ferry; `readOnly` when the file
    ///   cannot be created or written; `busy`, `io` otherwise. The file is left untouched.
    public convenience init(path: String, configuration: Configuration = Configuration()) throws {
        try self.init(location: .file(path), configuration: configuration)
    }

    /// Opens a store at `location`.
    ///
    /// ```swift
    /// let scratch = try SQLiteStore(location: .memory)
    /// ```
    public convenience init(location: Location, configuration: Configuration = Configuration()) throws {
        switch location {
        case .file(let path):
            let place = "the SQLite store at '\(path)'"
            try self.init(
                database: try Self.openFile(path, configuration, place: place), location: location, place: place,
                capabilities: [.persistent, .concurrentReaders, .declaredIndexes], ownsDatabase: true,
                configuration: configuration)
        case .memory:
            let place = "the in-memory SQLite store"
            let queue: DatabaseQueue
            do {
                queue = try DatabaseQueue(configuration: Self.grdbConfiguration(configuration))
                try StoreSchema.migrator.migrate(queue)
            } catch {
                throw StoreErrors.mapIfNeeded(error, "opening", place)
            }
            try self.init(
                database: queue, location: location, place: place, capabilities: [.declaredIndexes],
                ownsDatabase: true, configuration: configuration)
        }
    }

    /// A store on an open database: this store's own (`ownsDatabase`, closed with it) or the app's.
    init(
        database: any DatabaseWriter, location: Location, place: String, capabilities: StoreCapabilities,
        ownsDatabase: Bool, configuration: Configuration
    ) throws {
        self.database = database
        self.location = location
        self.place = place
        self.capabilities = capabilities
        self.ownsDatabase = ownsDatabase
        commits = (database as? DatabasePool).map { Self.commitsHearingOthers(on: $0, configuration) } ?? StoreCommits()
    }

    /// A new, empty store in memory.
    ///
    /// ```swift
    /// let store = try SQLiteStore.inMemory()
    /// ```
    public static func inMemory(configuration: Configuration = Configuration()) throws -> SQLiteStore {
        try SQLiteStore(location: .memory, configuration: configuration)
    }

    // MARK: LocalStore

    /// Runs `body` on one snapshot of the store, in a GRDB read.
    ///
    /// ```swift
    /// let (items, queued) = try await store.read { reader in
    ///     (try reader.count("todo"), try reader.operationCount(table: "todo"))
    /// }
    /// ```
    public func read<Result: Sendable>(_ body: @Sendable (any StoreReader) throws -> Result) async throws -> Result {
        try checkOpen()
        let place = self.place
        do {
            return try await database.read { db in
                let reader = SQLiteReader(db: db, place: place)
                defer { reader.isFinished = true }
                return try body(reader)
            }
        } catch {
            throw failure(error, "reading")
        }
    }

    /// The item with `id` in `table`, or `nil`.
    ///
    /// A point read takes microseconds, so it runs synchronously on the caller's thread on one of
    /// the pool's reader connections, instead of hopping to GRDB's reader queue and back as
    /// ``read(_:)`` does: the thread is busy for the read itself (or, when every reader connection
    /// is in use, until one is free).
    public func item(_ table: String, id: String) async throws -> JSONObject? {
        try checkOpen()
        do {
            if let sqlName = itemTables.withLock({ $0[table] }) {
                return try readHere { reader in try reader.item(table, in: sqlName, id: id) }
            }
            return try readHere { reader in
                guard let sqlName = try reader.sqlName(of: table) else { return nil }
                itemTables.withLock { $0[table] = sqlName }
                return try reader.item(table, in: sqlName, id: id)
            }
        } catch {
            throw failure(error, "reading")
        }
    }

    /// `body` synchronously on the calling thread, outside a transaction (each statement reads the
    /// latest commit; a point read is the catalog lookup and one `SELECT`), on the store's own
    /// point-read connection when it is free (a file store), else on the pool's. Should the table
    /// change between the two statements, the read runs again in a transaction.
    private func readHere<Result>(_ body: (SQLiteReader) throws -> Result) throws -> Result {
        let place = self.place
        func run(_ db: Database) throws -> Result {
            let reader = SQLiteReader(db: db, place: place)
            defer { reader.isFinished = true }
            return try body(reader)
        }
        if let queue = takePointReader() {
            defer { pointReader.withLock { if case .inUse(let queue) = $0 { $0 = .idle(queue) } } }
            if let result = try? queue.unsafeReentrantRead(run) { return result }
        }
        do {
            return try database.unsafeReentrantRead(run)
        } catch {
            return try database.read(run)
        }
    }

    /// The point-read connection, marked in use, or `nil` when another read holds it (or there is
    /// none: in memory, closed, or it failed to open).
    private func takePointReader() -> DatabaseQueue? {
        guard case .file(let path) = location else { return nil }
        return pointReader.withLock { state in
            switch state {
            case .idle(let queue):
                state = .inUse(queue)
                return queue
            case .unopened:
                var configuration = GRDB.Configuration()
                configuration.readonly = true
                configuration.label = "Ferry.SQLiteStore.pointReader"
                configuration.busyMode = .timeout(5)
                guard let queue = try? DatabaseQueue(path: path, configuration: configuration) else {
                    state = .unavailable
                    return nil
                }
                state = .inUse(queue)
                return queue
            case .inUse, .unavailable:
                return nil
            }
        }
    }

    /// Runs `body` in one GRDB write transaction: all of its changes commit, or none do. The
    /// handle throws `StoreError.Code.closed` once `body` has returned.
    ///
    /// ```swift
    /// let operation = try await store.write { tx in
    ///     try tx.upsert("todo", [["id": "1", "title": "Milk"]])
    ///     return try tx.appendOperation(OperationDraft(table: "todo", itemID: "1", kind: .insert))
    /// }
    /// ```
    public func write<Result: Sendable>(
        _ body: @Sendable (any StoreTransaction) throws -> Result
    ) async throws -> Result {
        try checkOpen()
        let place = self.place
        do {
            let tellsTheApp = !ownsDatabase
            let (result, commit) = try await database.write { db in
                let transaction = SQLiteTransaction(db: db, place: place)
                defer { transaction.isFinished = true }
                let tracked = try StoreCommits.tracking(transaction, body)
                // Items are written through SQLite's C API, which GRDB's observation does not see:
                // in the app's database, its ValueObservations are told here.
                if tellsTheApp { try transaction.notifyGRDBObservers(of: tracked.1) }
                return tracked
            }
            commits.publish(commit)
            return result
        } catch {
            throw failure(error, "writing to")
        }
    }

    /// Closes the database; later calls fail with `StoreError.Code.closed`. Closing twice is
    /// harmless.
    ///
    /// ```swift
    /// try await store.close()
    /// ```
    public func close() async throws {
        let wasClosed = closed.withLock { isClosed in
            defer { isClosed = true }
            return isClosed
        }
        if wasClosed { return }
        commits.stopChecking()
        let pointQueue: DatabaseQueue? = pointReader.withLock { state in
            defer { state = .unavailable }
            switch state {
            case .idle(let queue), .inUse(let queue): return queue
            case .unopened, .unavailable: return nil
            }
        }
        do {
            // Readers first, so the writer is the last connection to close: SQLite then removes the
            // `-wal` and `-shm` files (GRDB closes the writer first, which leaves them behind). The
            // point reader's close waits for a read it is running.
            try pointQueue?.close()
            guard ownsDatabase else { return }
            (database as? DatabasePool)?.releaseMemory()
            try database.close()
        } catch {
            throw StoreErrors.mapIfNeeded(error, "closing", place)
        }
    }

    private func checkOpen() throws(StoreError) {
        if closed.withLock({ $0 }) { throw StoreError(.closed, "\(place) is closed") }
    }

    private func failure(_ error: any Error, _ action: String) -> any Error {
        if error is DatabaseError, closed.withLock({ $0 }) { return StoreError(.closed, "\(place) is closed") }
        return StoreErrors.mapIfNeeded(error, action, place)
    }

    /// How the store runs `query` on `table`: all in SQL, or partly in the evaluator.
    func strategy(for query: TableQuery, table: String) async throws -> QueryRunner.Strategy {
        let place = self.place
        return try await database.read { db in
            let reader = SQLiteReader(db: db, place: place)
            guard let entry = try reader.entry(table) else { return .sql }
            return try QueryRunner(reader: reader, table: table, entry: entry).plan(query).strategy
        }
    }
}

extension LocalStore where Self == SQLiteStore {
    /// A store in the SQLite database file at `path`: `SyncContext(store: try .sqlite(path: …), …)`.
    ///
    /// ```swift
    /// let store: SQLiteStore = try .sqlite(path: directory + "/app.ferry")
    /// ```
    public static func sqlite(path: String) throws -> SQLiteStore {
        try SQLiteStore(path: path)
    }
}
