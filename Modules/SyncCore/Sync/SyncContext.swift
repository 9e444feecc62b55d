public import Logging

/// The sync engine: it owns a local store, a remote backend and a conflict handler, and moves changes
/// between them.
///
/// Apps read and write through ``SyncTable`` handles (``table(_:)``, or ``table(_:decoding:)`` and
/// ``table(_:of:decoding:)`` for `Codable` models). Every local write commits together with its
/// queued operation. ``push()`` sends the queue of every table in order; ``SyncTable/pull(_:queryID:options:)`` brings a table's server
/// changes back (incrementally with a query id); ``SyncTable/purge(_:force:)`` forgets local data.
///
/// ```swift
/// let context = SyncContext(store: try SQLiteStore(path: path), remote: backend, conflictHandler: .clientWins)
/// let todos = context.table("todo")
/// let item = try await todos.insert(["title": "Milk", "done": false])   // id generated
/// try await context.push()
/// try await todos.pull(TableQuery().filter(.field("done").eq(false)), queryID: "open")
/// for await event in context.events() { print(event) }
/// ```
///
/// Everything the engine knows lives in the store: the queue, the recorded errors and the pull
/// delta tokens survive a restart, and a new context on the same store carries on. Work is serialized
/// where it must be: one push at a time, one pull or purge at a time per table (pulls of different
/// tables run side by side). Cancelling the calling task stops the work at the next safe point and
/// leaves the store and the queue consistent.
///
/// Every method throws only ``SyncError`` (typed throws: `catch` gets a `SyncError` whose
/// ``SyncError/code`` says what to do), except ``write(_:)``, which rethrows an error of the app's
/// own from its body unchanged.
public actor SyncContext {
    /// The local store.
    public nonisolated let store: any LocalStore
    nonisolated let remote: any RemoteService
    nonisolated let conflictHandler: any ConflictHandler
    nonisolated let hub: EventHub
    /// The reports of stored items that typed tables could not decode.
    nonisolated let undecodable: UndecodableItemLog
    /// This context's name in the store's push lease, and the lease's lifetime.
    nonisolated let pushLease: (holder: String, lifetime: Duration)
    /// Where sync stands (automatic sync keeps it up to date).
    public nonisolated let status = SyncStatus()
    /// The running automatic sync, if any.
    var automaticSync: Task<Void, Never>?
    /// The subscriptions of automatic sync, and of ``synchronize(_:)`` by default.
    var registeredSubscriptions: [SyncSubscription] = []
    /// The last position of the server's change feed (in memory: a new context starts from a pull).
    var feedPosition: String?

    /// Attachments: the files directory, the server's side and the cache (``useAttachments(_:)``).
    var attachmentConfiguration: AttachmentConfiguration?

    func setFeedPosition(_ position: String) { feedPosition = position }

    /// When this store last pulled, or pushed operations the server took (even when others of the
    /// same push failed), kept in the store so that a new process knows it too; `nil` if it never did.
    ///
    /// ```swift
    /// if let last = try await context.lastSyncedAt() { print("last sync \(last.iso8601)") }
    /// ```
    public nonisolated func lastSyncedAt() async throws(SyncError) -> Timestamp? {
        let text = try await read("read the last sync time") {
            try $0.deltaToken(table: Self.engineSlot, queryID: "lastSync")
        }
        return text.flatMap(Int64.init).map(Timestamp.init(millisecondsSince1970:))
    }

    /// The tables whose last pull stopped before its end (cancelled, or failed after applying
    /// pages), sorted: until a pull of the table finishes, the store may lack what the server has,
    /// even with nothing queued (a status must not say "everything synced" then).
    ///
    /// ```swift
    /// for table in try await context.unfinishedPulls() { print("the last pull of \(table) stopped early") }
    /// ```
    public nonisolated func unfinishedPulls() async throws(SyncError) -> [String] {
        let slots = try await read("read the unfinished pulls") { try $0.deltaTokens(table: Self.engineSlot) }
        return slots.keys.filter { $0.hasPrefix(Self.unfinishedPullPrefix) }
            .map { String($0.dropFirst(Self.unfinishedPullPrefix.count)) }.sorted()
    }

    /// The engine slot's key prefix of a table whose last pull stopped before its end.
    static let unfinishedPullPrefix = "unfinishedPull:"

    /// Records that a pull of `table` finished (`finished`) or stopped before its end.
    nonisolated func recordPull(of table: String, finished: Bool) async throws {
        let key = Self.unfinishedPullPrefix + table
        // A finished pull writes only when an earlier one of the table stopped early.
        if finished,
            try await read("read the unfinished pulls", { try $0.deltaToken(table: Self.engineSlot, queryID: key) })
                == nil
        {
            return
        }
        let value = finished ? nil : String(ItemFields.now().millisecondsSince1970)
        try await write("record the pull's end") {
            try $0.setDeltaToken(table: Self.engineSlot, queryID: key, value: value)
        }
    }

    /// Records that a push or pull just succeeded.
    nonisolated func recordSync() async throws {
        let now = String(ItemFields.now().millisecondsSince1970)
        try await write("record the sync time") {
            try $0.setDeltaToken(table: Self.engineSlot, queryID: "lastSync", value: now)
        }
    }

    private var gates: [String: Gate] = [:]
    /// What the running push may use of the backend (set when a push starts).
    var pushPlan = PushPlan(capabilities: .none)
    /// This store's device id, for idempotency keys, once read.
    var deviceIdentifier: String?

    /// Creates a context over a store and a backend.
    ///
    /// - Parameters:
    ///   - store: where items, the queue, errors and delta tokens live.
    ///   - remote: gives the ``RemoteTable`` of each table.
    ///   - conflictHandler: decides conflicts; the default keeps them in the errors table.
    ///   - logger: where the context logs its events (swift-log's practice for libraries: the app
    ///     gives the logger; by default the task-local `Logger.current` of the caller).
    ///   - pushLeaseLifetime: how long another process waits for this context's push after this
    ///     process died mid-push (see ``SyncError/Code/pushInProgress``).
    public init(
        store: any LocalStore, remote: any RemoteService,
        conflictHandler: some ConflictHandler = KeepingConflictHandler(), logger: Logger = Logger.current,
        pushLeaseLifetime: Duration = .seconds(10)
    ) {
        self.pushLease = (PushLease.newHolder(), max(pushLeaseLifetime, .milliseconds(300)))
        self.store = store
        self.remote = remote
        self.conflictHandler = conflictHandler
        self.hub = EventHub(logger: logger)
        self.undecodable = UndecodableItemLog(logger: logger)
    }

    /// Creates a context whose remote tables come from a closure.
    ///
    /// ```swift
    /// // Any RemoteTable per name: here Transport's, with a header only the "audit" table needs.
    /// let context = SyncContext(store: MemoryStore(), conflictHandler: .serverWins) { name in
    ///     name == "audit" ? auditRemote.table(name) : remote.table(name)
    /// }
    /// ```
    public init(
        store: any LocalStore, conflictHandler: some ConflictHandler = KeepingConflictHandler(),
        logger: Logger = Logger.current, remote: @escaping @Sendable (String) -> any RemoteTable
    ) {
        self.init(
            store: store, remote: RemoteTableFactory(make: remote), conflictHandler: conflictHandler, logger: logger)
    }

    /// The handle for a table of JSON items.
    public nonisolated func table(_ name: String) -> SyncTable {
        SyncTable(name: name, context: self)
    }

    /// The handle for a table of `Codable` models; for a ``SyncModel``, ``table(_:decoding:)`` needs
    /// no name.
    ///
    /// ```swift
    /// struct Todo: Codable, Sendable { var id: String?; var title: String; var done: Bool }
    /// let todos = context.table("todo", of: Todo.self)
    /// let saved = try await todos.insert(Todo(id: nil, title: "Milk", done: false))
    /// ```
    ///
    /// - Parameters:
    ///   - name: The table's name.
    ///   - type: The model.
    ///   - decoding: What a read does with a stored item that does not decode as `Item`: skip it
    ///     and report it (the default), or throw.
    public nonisolated func table<Item: Codable & Sendable>(
        _ name: String, of type: Item.Type, decoding: DecodingPolicy = .skipAndReport
    ) -> TypedSyncTable<Item> {
        TypedSyncTable(table: table(name), decodingPolicy: decoding)
    }

    /// A new stream of progress events. Each call returns an independent stream; events that arrive
    /// faster than they are read beyond `bufferingNewest` are dropped, oldest first.
    ///
    /// ```swift
    /// Task { for await event in context.events() { log(event) } }
    /// ```
    public nonisolated func events(bufferingNewest limit: Int = 1024) -> AsyncStream<SyncEvent> {
        hub.stream(bufferingNewest: limit)
    }

    /// The number of queued operations (pending, in flight or failed), for one table or all.
    public nonisolated func queuedOperationCount(table: String? = nil) async throws(SyncError) -> Int {
        try await read("count the queued operations") { try $0.operationCount(table: table) }
    }

    /// The queued operations in queue order, for one table or all.
    public nonisolated func queuedOperations(table: String? = nil) async throws(SyncError) -> [QueuedOperation] {
        try await read("list the queued operations") { try $0.operations(after: nil, table: table, limit: nil) }
    }

    // MARK: - Serialization of sync work

    static let pushGate = "push"
    static func tableGate(_ table: String) -> String { "table:" + table }

    private struct Gate {
        var held = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    /// Waits until the gate is free and takes it (first come, first served).
    func acquire(_ name: String) async {
        if gates[name, default: Gate()].held {
            await withCheckedContinuation { gates[name, default: Gate()].waiters.append($0) }
            // Ownership was handed over by `release`.
        } else {
            gates[name, default: Gate()].held = true
        }
    }

    /// Frees the gate, or hands it to the next waiter.
    func release(_ name: String) {
        guard var gate = gates[name] else { return }
        if gate.waiters.isEmpty {
            gates[name] = nil
            return
        }
        let next = gate.waiters.removeFirst()
        gates[name] = gate
        next.resume()
    }

    /// Runs `body` holding the named gates, taken in the order given.
    func holding<Result: Sendable>(_ names: [String], _ body: () async throws -> Result) async throws -> Result {
        for name in names { await acquire(name) }
        defer { for name in names.reversed() { release(name) } }
        return try await body()
    }

    /// Throws ``SyncError/Code/cancelled`` when the calling task is cancelled (work that was cancelled
    /// before it started reports it: legacy bug #17).
    nonisolated func checkCancellation(_ what: String) throws(SyncError) {
        if Task.isCancelled { throw SyncError(.cancelled, "\(what) cancelled before it started") }
    }

    // MARK: - Store access with engine errors

    nonisolated func read<Result: Sendable>(
        _ what: String, _ body: @Sendable (any StoreReader) throws -> Result
    ) async throws(SyncError) -> Result {
        do {
            return try await store.read(body)
        } catch {
            throw SyncError.wrapping(error, what)
        }
    }

    /// Runs one write transaction. It is shielded from the caller's cancellation (stores such as GRDB
    /// refuse to start or commit in a cancelled task): once the engine decided to record something, for
    /// example the server's answer to a push, it is recorded, and cancellation takes effect at the next
    /// check instead.
    nonisolated func write<Result: Sendable>(
        _ what: String, _ body: @escaping @Sendable (any StoreTransaction) throws -> Result
    ) async throws(SyncError) -> Result {
        let store = store
        do {
            // The store publishes what the commit changed (its `commits`).
            return try await Task { try await store.write(body) }.value
        } catch {
            throw SyncError.wrapping(error, what)
        }
    }
}
