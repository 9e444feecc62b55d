import CLMDB
public import Logging
import Synchronization
public import SyncCore

/// A `SyncCore.LocalStore` in an LMDB environment (a memory-mapped B+tree), through the system's
/// liblmdb.
///
/// The store is a **directory** holding LMDB's `data.mdb` and `lock.mdb`; it is created when absent
/// (its parent must exist). Readers run on snapshots in parallel with the one writer, and never
/// wait for it.
///
/// ```swift
/// import StoreLMDB
/// import SyncCore
///
/// let store = try LMDBStore(path: directory + "/app.ferry")   // or `.lmdb(path:)`
/// try await store.write { tx in
///     try tx.upsert("todo", [["id": "1", "title": "Milk", "done": false]])
///     _ = try tx.appendOperation(OperationDraft(table: "todo", itemID: "1", kind: .insert))
/// }
/// let open = try await store.query("todo", TableQuery(filter: .field("done") == false))
/// try await store.close()
/// ```
///
/// ## What LMDB needs, done for you
///
/// - **The map grows by itself.** LMDB maps a fixed amount of address space; when a write finds it
///   full (`MDB_MAP_FULL`), the transaction is aborted, the map doubles (up to
///   ``Configuration/maximumMapSize``) and the write body runs again from the start. A write body
///   may therefore run more than once; only its last run commits.
/// - **Threads.** A write transaction runs wholly on one thread of the environment's serial writer
///   queue, so writers take turns and never block Swift's cooperative pool while waiting. Readers
///   use `MDB_NOTLS` transactions on whatever thread runs them. No transaction is held across an
///   `await`.
/// - **One environment per directory and process**, shared by every `LMDBStore` opened on it and
///   closed with the last of them. Stale reader slots of dead processes are cleared when it opens.
///
/// ## Errors
///
/// Every failure is a `StoreError` with an ``LMDBError`` in `underlying` when liblmdb
/// reported it. Opening a path whose parent does not exist, a file, a directory of other files, a
/// foreign LMDB environment or a store of a newer Ferry fails without changing anything there.
/// `docs/store-lmdb.md` describes the layout, the query planning and the limits.
public final class LMDBStore: LocalStore {
    /// How a store opens and grows.
    ///
    /// ```swift
    /// var configuration = LMDBStore.Configuration()
    /// configuration.initialMapSize = 256 << 20
    /// let store = try LMDBStore(path: path, configuration: configuration)
    /// ```
    public struct Configuration: Sendable, Hashable {
        /// The map size of a newly opened environment, in bytes (rounded up to a MiB). An existing
        /// store opens with at least its own size.
        public var initialMapSize: Int
        /// The largest the map may grow to, in bytes; a write that needs more fails with `full`.
        public var maximumMapSize: Int
        /// LMDB's reader slots: how many read transactions may be open at once across processes.
        public var maximumReaders: Int
        /// Whether each commit waits for the disk (on by default). Off (`MDB_NOSYNC`), a crash of
        /// the machine may lose the last commits, though never leave a partial one.
        public var syncsEveryCommit: Bool
        /// How long an open waits while another process holds LMDB's exclusive lock (2 s by
        /// default) before failing with `busy`. Another process holds it for the moment its own
        /// open or close of the environment takes; LMDB itself would wait for it forever.
        public var lockWait: Duration

        /// A configuration; the defaults suit an app's store.
        ///
        /// ```swift
        /// let small = LMDBStore.Configuration(initialMapSize: 1 << 20)
        /// ```
        public init(
            initialMapSize: Int = 64 << 20, maximumMapSize: Int = Int.max, maximumReaders: Int = 126,
            syncsEveryCommit: Bool = true, lockWait: Duration = .seconds(2)
        ) {
            self.initialMapSize = initialMapSize
            self.maximumMapSize = maximumMapSize
            self.maximumReaders = maximumReaders
            self.syncsEveryCommit = syncsEveryCommit
            self.lockWait = lockWait
        }
    }

    /// The store's directory, as given.
    public let path: String
    /// `[.persistent, .concurrentReaders]`.
    public let capabilities: StoreCapabilities = [.persistent, .concurrentReaders]
    let environment: Environment
    /// "the LMDB store at '…'", for messages.
    let place: String
    /// Whether the store is closed, how many transactions run, and whether the environment
    /// reference was given back (by `close()` or by the last transaction after it).
    private let state = Mutex(LeaseState())

    private struct LeaseState {
        var closed = false
        var running = 0
        var released = false
    }

    /// Opens (or creates) the store in the directory `path`.
    ///
    /// ```swift
    /// let store = try LMDBStore(path: directory + "/app.ferry")
    /// ```
    ///
    /// - Throws: `StoreError` — `io` when the parent directory does not exist or the path
    ///   is a file; `corrupt` for a directory of other files, a file that is not LMDB's, an LMDB
    ///   environment that is not a Ferry store or a store of a newer Ferry; `readOnly` when the
    ///   location cannot be written; `busy` when another process holds the environment's lock.
    ///   Nothing at the path is changed when opening fails.
    ///
    /// The store logs opening, closing and map growth to `logger` (by default the caller's
    /// task-local `Logger.current`); the first store to open an environment gives it its logger.
    public init(path: String, configuration: Configuration = Configuration(), logger: Logger = Logger.current) throws {
        self.path = path
        place = "the LMDB store at '\(path)'"
        environment = try EnvironmentRegistry.open(
            path: path, configuration: configuration, place: place, logger: logger)
    }

    deinit {
        // A store dropped without close() still gives its environment back.
        if !state.withLock({ $0.released }) { EnvironmentRegistry.release(environment) }
    }

    /// The current size of the map, in bytes (it grows as the store fills).
    public var mapSize: Int { environment.mapSize }

    // MARK: LocalStore

    /// Runs `body` on one snapshot of the store, in an LMDB read transaction.
    ///
    /// ```swift
    /// let (items, queued) = try await store.read { reader in
    ///     (try reader.count("todo"), try reader.operationCount(table: "todo"))
    /// }
    /// ```
    public func read<Result: Sendable>(_ body: @Sendable (any StoreReader) throws -> Result) async throws -> Result {
        try await readConcurrently(body)
    }

    @concurrent
    private func readConcurrently<Result: Sendable>(
        _ body: @Sendable (any StoreReader) throws -> Result
    ) async throws -> Result {
        // A read runs synchronously on the task's thread and need not suspend; yielding first keeps
        // a task that reads in a loop from starving other tasks (a writer waiting to be queued).
        await Task.yield()
        try lease()
        defer { endLease() }
        return try environment.read(place: place) { txn in
            let reader = LMDBReader(txn: txn)
            defer { reader.isFinished = true }
            return try body(reader)
        }
    }

    /// Every committed write of this directory's stores in this process, announced after the commit,
    /// and, while someone subscribes, the commits of other processes as `StoreCommit.external`
    /// (LMDB's newest transaction id, read every 100 ms, against this process's own commits).
    public var commits: StoreCommits { environment.commits }

    /// Runs `body` in one LMDB write transaction: all of its changes commit, or none do. The handle
    /// throws `StoreError.Code.closed` once `body` has returned. When the map has to
    /// grow, `body` runs again from the start (see the type's documentation).
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
        try lease()
        defer { endLease() }
        return try await environment.write(place: place, body)
    }

    /// Closes the store; later calls fail with `StoreError.Code.closed`. The environment
    /// closes once no other store of the same directory has it open and running transactions end.
    /// Closing twice is harmless.
    ///
    /// ```swift
    /// try await store.close()
    /// ```
    public func close() async throws {
        let release = state.withLock { state in
            if state.closed { return false }
            state.closed = true
            guard state.running == 0 else { return false }
            state.released = true
            return true
        }
        if release { EnvironmentRegistry.release(environment) }
    }

    /// Counts a transaction, unless the store is closed. The store's own reference keeps the
    /// environment open while it runs, even if `close()` comes meanwhile.
    private func lease() throws(StoreError) {
        try state.withLock { state throws(StoreError) in
            if state.closed { throw StoreError(.closed, "\(place) is closed") }
            state.running += 1
        }
    }

    private func endLease() {
        let release = state.withLock { state in
            state.running -= 1
            guard state.closed, state.running == 0, !state.released else { return false }
            state.released = true
            return true
        }
        if release { EnvironmentRegistry.release(environment) }
    }

    /// The plan the store uses for `query` on `table` (for tests and diagnostics).
    func plan(for query: TableQuery, table: String) async throws -> QueryRunner.Plan? {
        try await read { reader in
            guard let reader = reader as? LMDBReader, let entry = try reader.entry(table) else { return nil }
            return try QueryRunner(reader: reader, table: table, entry: entry).plan(query)
        }
    }
}

extension LocalStore where Self == LMDBStore {
    /// A store in the LMDB directory at `path`: `SyncContext(store: try .lmdb(path: …), …)`.
    ///
    /// ```swift
    /// let store: LMDBStore = try .lmdb(path: directory + "/app.ferry")
    /// ```
    public static func lmdb(path: String) throws -> LMDBStore {
        try LMDBStore(path: path)
    }
}
