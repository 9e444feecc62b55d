import Synchronization

/// What one committed write transaction of a store changed.
///
/// A store reports every commit, whoever made it (a ``SyncContext``, the app through
/// ``SyncContext/store``, or code calling ``LocalStore/write(_:)`` directly), through its
/// ``LocalStore/commits``. A commit by another connection or process on the same store is
/// ``external``: which tables it changed is not known, so every observer is woken.
public struct StoreCommit: Sendable, Hashable {
    /// The tables whose items changed.
    public var tables: Set<String>
    /// Whether the queue of operations (or its recorded errors) changed.
    public var queue: Bool
    /// Whether another connection or process made the commit (every table and the queue may have
    /// changed).
    public var isExternal: Bool

    /// A commit that changed `tables` and, with `queue`, the queue.
    public init(tables: Set<String> = [], queue: Bool = false) {
        self.tables = tables
        self.queue = queue
        self.isExternal = false
    }

    /// A commit by another connection or process: anything may have changed.
    public static var external: StoreCommit {
        var commit = StoreCommit()
        commit.isExternal = true
        return commit
    }

    /// Whether it changed nothing an observer could see.
    public var isEmpty: Bool { tables.isEmpty && !queue && !isExternal }
}

/// Where a store announces its commits, and observers hear of the tables they care about.
///
/// Every ``LocalStore`` owns one and publishes each commit after it is durable; observations and
/// automatic sync subscribe. A subscriber names its tables and is woken only for those (tables that
/// did not change cost it nothing); signals that arrive while it is busy fold into one (its stream
/// keeps the newest signal only).
///
/// A store implementation records what its transaction changed with
/// ``tracking(_:_:)`` and publishes it once the commit succeeded:
///
/// ```swift
/// let commits = StoreCommits()
/// let todoCommits = commits.subscribe(tables: ["todo"])
/// commits.publish(StoreCommit(tables: ["todo"]))
/// for await _ in todoCommits { print("todo changed"); break }
/// ```
public final class StoreCommits: Sendable {
    /// The check for other writers.
    private struct Checking {
        /// The running check, if any.
        var task: Task<Void, Never>?
        var stopped = false
    }

    /// The subscribers, each with the tables it watches.
    private let subscribers = Broadcast<StoreCommit>()
    /// Taken before the subscribers' own lock when both are held, never after.
    private let checking = Mutex(Checking())
    private let otherWriters: (interval: Duration, probe: @Sendable () async -> Bool)?

    /// A hub for a store that only this process writes (or that hears others by itself).
    public init() {
        otherWriters = nil
    }

    /// A hub for a store that other connections or processes may write: while it has subscribers,
    /// it calls `probe` every `interval` and publishes ``StoreCommit/external`` when the probe says
    /// someone else committed since its last call. With no subscriber nothing runs.
    ///
    /// ```swift
    /// let commits = StoreCommits(checkingOtherWritersEvery: .milliseconds(100)) {
    ///     await database.othersCommittedSinceLastLook()
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - interval: The longest a subscriber waits to hear of another writer's commit.
    ///   - probe: Whether others committed since the probe's last call (the store keeps its own
    ///     reading; a probe may answer `true` for nothing, never `false` for a commit).
    public init(checkingOtherWritersEvery interval: Duration, probe: @escaping @Sendable () async -> Bool) {
        otherWriters = (interval, probe)
    }

    /// A stream that yields after each commit that changed one of `tables` (every table when `nil`)
    /// or, with `queue`, the queue. It ends when the caller stops iterating it.
    public func subscribe(tables: Set<String>?, queue: Bool = false) -> AsyncStream<Void> {
        let stream = subscribers.stream(bufferingNewest: 1) { commit -> Void? in
            let concerned =
                commit.isExternal || (commit.queue && queue)
                || (!commit.tables.isEmpty && tables.map { !$0.isDisjoint(with: commit.tables) } ?? true)
            return concerned ? () : nil
        }
        // After the subscriber is in: a check deciding to end either saw it or ended before this.
        if let otherWriters {
            checking.withLock { checking in
                guard checking.task == nil, !checking.stopped else { return }
                checking.task = Task { [weak self] in
                    // The hub is held only for one look, never across the pause.
                    while true {
                        try? await Task.sleep(for: otherWriters.interval)
                        guard let hub = self, hub.checkingGoesOn() else { return }
                        if await otherWriters.probe() { hub.publish(.external) }
                    }
                }
            }
        }
        return stream
    }

    /// Stops checking for other writers for good (the store closes).
    public func stopChecking() {
        checking.withLock { checking in
            checking.stopped = true
            checking.task?.cancel()
            checking.task = nil
        }
    }

    /// Whether the check for other writers goes on: not once nobody subscribes. Decided under the
    /// lock `subscribe` takes after adding its subscriber, so a new subscriber finds the check
    /// running or starts another, never one about to end.
    private func checkingGoesOn() -> Bool {
        checking.withLock { checking in
            guard !checking.stopped, !Task.isCancelled, subscribers.subscriberCount > 0 else {
                checking.task = nil
                return false
            }
            return true
        }
    }

    /// Wakes the subscribers `commit` concerns. Stores call it after the commit is durable.
    public func publish(_ commit: StoreCommit) {
        guard !commit.isEmpty else { return }
        subscribers.yield(commit)
    }

    /// How many subscribers there are.
    public var subscriberCount: Int { subscribers.subscriberCount }

    /// Whether the check for other writers runs now.
    public var isCheckingOtherWriters: Bool { checking.withLock { $0.task != nil } }

    /// Runs `body` on `transaction` and returns its result with what it changed: for a store's
    /// ``LocalStore/write(_:)``, which publishes the change once its commit succeeded.
    ///
    /// ```swift
    /// let (result, commit) = try StoreCommits.tracking(transaction, body)
    /// // … commit the transaction, then:
    /// commits.publish(commit)
    /// ```
    public static func tracking<Result>(
        _ transaction: any StoreTransaction, _ body: (any StoreTransaction) throws -> Result
    ) throws -> (Result, StoreCommit) {
        let tracked = TrackedTransaction(transaction)
        return (try body(tracked), tracked.commit)
    }

    /// The store's own transaction behind the handle ``tracking(_:_:)`` gave `body`: for a store's
    /// code that needs its native handle.
    ///
    /// ```swift
    /// let native = StoreCommits.storeTransaction(tx) as? MyStoreTransaction
    /// ```
    public static func storeTransaction(_ transaction: any StoreTransaction) -> any StoreTransaction {
        (transaction as? TrackedTransaction)?.inner ?? transaction
    }

    /// The subscribers' streams finish with the hub (the `Broadcast` finishes them).
    deinit {
        checking.withLock { $0.task }?.cancel()
    }
}

/// A store transaction that records what it changed (``StoreCommits/tracking(_:_:)``). Every
/// call goes to the store's own transaction.
final class TrackedTransaction: StoreTransaction {
    let inner: any StoreTransaction
    private(set) var commit = StoreCommit()

    init(_ inner: any StoreTransaction) { self.inner = inner }

    // MARK: StoreReader

    func item(_ table: String, id: String) throws -> JSONObject? { try inner.item(table, id: id) }
    func items(_ table: String, ids: [String]) throws -> [ItemID.Key: JSONObject] {
        try inner.items(table, ids: ids)
    }
    func query(_ table: String, _ query: TableQuery) throws -> QueryResult { try inner.query(table, query) }
    func count(_ table: String) throws -> Int { try inner.count(table) }
    func tableNames() throws -> [String] { try inner.tableNames() }
    func definition(of table: String) throws -> TableDefinition? { try inner.definition(of: table) }
    func operations(after afterID: Int64?, table: String?, limit: Int?) throws -> [QueuedOperation] {
        try inner.operations(after: afterID, table: table, limit: limit)
    }
    func operations(table: String, itemID: String) throws -> [QueuedOperation] {
        try inner.operations(table: table, itemID: itemID)
    }
    func operations(table: String, itemIDs: [String]) throws -> [QueuedOperation] {
        try inner.operations(table: table, itemIDs: itemIDs)
    }
    func operation(id: Int64) throws -> QueuedOperation? { try inner.operation(id: id) }
    func operationCount(table: String?) throws -> Int { try inner.operationCount(table: table) }
    func operationErrors(table: String?) throws -> [OperationErrorRecord] { try inner.operationErrors(table: table) }
    func operationErrors(table: String, operationID: Int64) throws -> [OperationErrorRecord] {
        try inner.operationErrors(table: table, operationID: operationID)
    }
    func operationError(id: String) throws -> OperationErrorRecord? { try inner.operationError(id: id) }
    func deltaToken(table: String, queryID: String) throws -> String? {
        try inner.deltaToken(table: table, queryID: queryID)
    }
    func deltaTokens(table: String) throws -> [String: String] { try inner.deltaTokens(table: table) }

    // MARK: StoreTransaction

    func define(_ definition: TableDefinition) throws { try inner.define(definition) }

    func upsert(_ table: String, _ items: [JSONObject]) throws {
        try inner.upsert(table, items)
        if !items.isEmpty { commit.tables.insert(table) }
    }

    func delete(_ table: String, ids: [String]) throws -> Int {
        let deleted = try inner.delete(table, ids: ids)
        if deleted > 0 { commit.tables.insert(table) }
        return deleted
    }

    func delete(_ table: String, matching query: TableQuery) throws -> Int {
        let deleted = try inner.delete(table, matching: query)
        if deleted > 0 { commit.tables.insert(table) }
        return deleted
    }

    func appendOperation(_ draft: OperationDraft) throws -> QueuedOperation {
        commit.queue = true
        return try inner.appendOperation(draft)
    }

    func appendOperations(_ drafts: [OperationDraft]) throws -> [QueuedOperation] {
        if !drafts.isEmpty { commit.queue = true }
        return try inner.appendOperations(drafts)
    }

    func updateOperation(_ operation: QueuedOperation) throws {
        commit.queue = true
        try inner.updateOperation(operation)
    }

    func deleteOperations(ids: [Int64]) throws {
        if !ids.isEmpty { commit.queue = true }
        try inner.deleteOperations(ids: ids)
    }

    func deleteOperation(id: Int64) throws -> Bool {
        let deleted = try inner.deleteOperation(id: id)
        if deleted { commit.queue = true }
        return deleted
    }

    func saveOperationError(_ error: OperationErrorRecord) throws {
        commit.queue = true
        try inner.saveOperationError(error)
    }

    func deleteOperationErrors(ids: [String]) throws {
        if !ids.isEmpty { commit.queue = true }
        try inner.deleteOperationErrors(ids: ids)
    }

    func setDeltaToken(table: String, queryID: String, value: String?) throws {
        try inner.setDeltaToken(table: table, queryID: queryID, value: value)
    }
}
