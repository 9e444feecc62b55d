public import Observation
import Synchronization

/// A query that automatic sync keeps pulled (incrementally, under its query id).
///
/// ```swift
/// let open = SyncSubscription(table: "todo", query: TableQuery().filter(.field("done").eq(false)), queryID: "open")
/// ```
public struct SyncSubscription: Sendable, Hashable {
    /// The table.
    public var table: String
    /// What to pull (no `select`, `orderBy`, `skip` or `top`: it is pulled incrementally).
    public var query: TableQuery
    /// The query id its delta token is kept under.
    public var queryID: String

    public init(table: String, query: TableQuery = TableQuery(), queryID: String = "automatic") {
        self.table = table
        self.query = query
        self.queryID = queryID
    }
}

/// How automatic sync paces itself.
public struct AutomaticSyncConfiguration: Sendable, Hashable {
    /// How long after a local write the push starts, so that a burst of writes goes in one push.
    public var pushDelay: Duration
    /// How often the subscriptions are pulled when the server has no change feed.
    public var pollInterval: Duration
    /// The first wait after a network or server failure; it doubles with each failure in a row.
    public var retryDelay: Duration
    /// The longest wait between retries.
    public var maximumRetryDelay: Duration
    /// Whether to use the server's change feed when it offers one (otherwise: poll).
    public var usesChangeFeed: Bool
    /// The longest wait between two attempts to open the change feed (from 100 ms, doubling): a
    /// feed that drops is how a device hears of changes, so it is reopened soon after the server
    /// comes back, and a server that stays down is asked at most this often (and never sooner than
    /// its `Retry-After`). Ferry's server sends `retry: 2000`.
    public var maximumFeedRetryDelay: Duration

    public init(
        pushDelay: Duration = .milliseconds(10), pollInterval: Duration = .seconds(30),
        retryDelay: Duration = .milliseconds(500), maximumRetryDelay: Duration = .seconds(60),
        usesChangeFeed: Bool = true, maximumFeedRetryDelay: Duration = .seconds(2)
    ) {
        self.pushDelay = pushDelay
        self.pollInterval = pollInterval
        self.retryDelay = retryDelay
        self.maximumRetryDelay = maximumRetryDelay
        self.usesChangeFeed = usesChangeFeed
        self.maximumFeedRetryDelay = maximumFeedRetryDelay
    }

    /// The wait before retry `failures` (1 = after the first failure): exponential, capped, with
    /// jitter (between half and all of it), so that many devices do not retry in step, and at least
    /// what the server asked for (`Retry-After`).
    func retryWait(
        after failures: Int, retryAfter: Duration? = nil, using generator: inout some RandomNumberGenerator
    ) -> Duration {
        Backoff(initial: retryDelay, maximum: maximumRetryDelay).delay(
            after: failures, retryAfter: retryAfter, using: &generator)
    }
}

/// Whether the device can reach the network, as the platform tells it: `NWPathMonitor` on Apple
/// platforms (Transport's `NetworkPathConnectivity`), ``ManualConnectivity`` in tests or for apps
/// that know better, ``AlwaysOnline`` by default.
public protocol ConnectivityMonitor: Sendable {
    /// Whether the network is usable now, then every change, until the stream is dropped.
    func paths() -> AsyncStream<Bool>
}

/// Connectivity that is always there: the network's failures alone say when it is not.
public struct AlwaysOnline: ConnectivityMonitor {
    public init() {}

    public func paths() -> AsyncStream<Bool> {
        AsyncStream { continuation in continuation.yield(true) }
    }
}

/// Connectivity set by hand.
///
/// ```swift
/// let network = ManualConnectivity()
/// await context.startAutomaticSync([SyncSubscription(table: "todo")], connectivity: network)
/// network.isOnline = false   // nothing is sent until it is true again
/// ```
public final class ManualConnectivity: ConnectivityMonitor {
    private let online: WatchedValue<Bool>

    public init(online: Bool = true) {
        self.online = WatchedValue(online)
    }

    /// Whether the network is usable; setting it tells every watcher.
    public var isOnline: Bool {
        get { online.value }
        set { online.update { $0 = newValue } }
    }

    public func paths() -> AsyncStream<Bool> { online.watch() }
}

/// Where a context's sync stands, for people and for SwiftUI: observable (`Observation`), and as
/// an `AsyncStream` of snapshots (``updates()``) for code outside SwiftUI.
///
/// ```swift
/// Text(context.status.summary)          // "everything synced", "3 changes waiting", "offline"
/// for await status in context.status.updates() { print(status.pendingOperations) }
/// ```
public final class SyncStatus: Observable, Sendable {
    /// One moment of the status.
    public struct Snapshot: Sendable, Hashable {
        /// Whether automatic sync is running.
        public var isRunning = false
        /// Whether the device can reach the network (as the connectivity monitor says).
        public var isOnline = true
        /// Whether the server answers: reachable since when, or unreachable since when and why.
        public var reachability = ServerReachability.unknown
        /// Whether a push is running.
        public var isPushing = false
        /// Whether a pull is running.
        public var isPulling = false
        /// Queued operations not yet accepted by the server (failed ones included).
        public var pendingOperations = 0
        /// Queued operations that failed and wait for the app (see the errors table).
        public var failedOperations = 0
        /// Why the last push failed, until one succeeds.
        public var uploadProblem: SyncProblem?
        /// Why the last pull, or the change feed, failed, until one succeeds.
        public var downloadProblem: SyncProblem?
        /// When automatic sync last pulled what it had to.
        public var lastSyncedAt: Timestamp?
        /// Whether the server's change feed tells this device of changes (else it polls).
        public var usesChangeFeed = false
        /// Whether nothing waits: online, the server answering, nothing queued, the subscriptions
        /// pulled since the server last started answering (with a feed, an open one that said so),
        /// no failure since.
        public var isCaughtUp = false

        public init() {}

        /// The last failure, upload first, for one line.
        public var lastError: String? { (uploadProblem ?? downloadProblem)?.message }

        /// One line for people: "everything synced", "3 changes waiting to be pushed", "offline
        /// (2 changes waiting)", "server unreachable: could not connect to the server", "sync
        /// failed: …", "connecting to the server".
        public var summary: String {
            let waiting = pendingOperations == 1 ? "1 change waiting" : "\(pendingOperations) changes waiting"
            if !isOnline { return pendingOperations == 0 ? "offline" : "offline (\(waiting))" }
            if case .unreachable(_, let reason) = reachability {
                let line = "server unreachable: \(reason.message)"
                return pendingOperations == 0 ? line : "\(line) (\(waiting))"
            }
            if let lastError { return "sync failed: \(lastError)" }
            if failedOperations > 0 {
                return failedOperations == 1
                    ? "1 change needs attention (see the errors)" : "\(failedOperations) changes need attention"
            }
            if pendingOperations > 0 { return waiting + " to be pushed" }
            if isCaughtUp { return "everything synced" }
            guard isRunning else { return "not syncing" }
            return reachability == .unknown ? "connecting to the server" : "syncing"
        }
    }

    private let registrar = ObservationRegistrar()
    private let current = WatchedValue(Snapshot())

    init() {}

    /// The status now.
    public var snapshot: Snapshot {
        registrar.access(self, keyPath: \.snapshot)
        return current.value
    }

    /// ``Snapshot/summary`` of the status now.
    public var summary: String { snapshot.summary }

    /// The status now, then every change, until the stream is dropped.
    public func updates() -> AsyncStream<Snapshot> { current.watch() }

    func update(_ change: (inout Snapshot) -> Void) {
        registrar.withMutation(of: self, keyPath: \.snapshot) { current.update(change) }
    }
}

/// A value and whoever watches it: a watcher gets the value now, then each new one (the newest
/// only when it falls behind), until it drops its stream.
final class WatchedValue<Value: Sendable & Equatable>: Sendable {
    private let state: Mutex<(value: Value, next: Int, watchers: [Int: AsyncStream<Value>.Continuation])>

    init(_ value: Value) { state = Mutex((value, 0, [:])) }

    var value: Value { state.withLock { $0.value } }

    /// Changes the value, and tells the watchers when it changed.
    func update(_ change: (inout Value) -> Void) {
        let changed: (Value, [AsyncStream<Value>.Continuation])? = state.withLock { state in
            var next = state.value
            change(&next)
            guard next != state.value else { return nil }
            state.value = next
            return (next, Array(state.watchers.values))
        }
        if let (value, watchers) = changed { for watcher in watchers { watcher.yield(value) } }
    }

    func watch() -> AsyncStream<Value> {
        let (stream, continuation) = AsyncStream.makeStream(of: Value.self, bufferingPolicy: .bufferingNewest(1))
        let id = state.withLock { state in
            state.next += 1
            state.watchers[state.next] = continuation
            continuation.yield(state.value)
            return state.next
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.watchers.removeValue(forKey: id) }
        }
        return stream
    }

    deinit {
        for watcher in state.withLock({ $0.watchers.values }) { watcher.finish() }
    }
}

/// What ``SyncContext/synchronize(_:)`` did.
public struct SyncReport: Sendable, Hashable {
    /// The push.
    public var push = PushResult()
    /// The pull of each subscription, by query id.
    public var pulls: [String: PullResult] = [:]

    public init() {}
}

extension SyncContext {
    /// Starts syncing by itself: it pushes soon after local writes (a burst goes in one push), pulls
    /// `subscriptions` when the server's change feed says their table changed (or every
    /// ``AutomaticSyncConfiguration/pollInterval`` against a server without one), backs off
    /// exponentially with jitter on network and server failures, sends nothing while
    /// `connectivity` says the device is offline and catches up when it is back. Conflicts go to
    /// the conflict handler as always. Starting again replaces the subscriptions.
    ///
    /// ```swift
    /// await context.startAutomaticSync([SyncSubscription(table: "todo")])
    /// // … the app writes; Ferry pushes and pulls …
    /// await context.stopAutomaticSync()
    /// ```
    public func startAutomaticSync(
        _ subscriptions: [SyncSubscription], configuration: AutomaticSyncConfiguration = AutomaticSyncConfiguration(),
        connectivity: any ConnectivityMonitor = AlwaysOnline()
    ) async {
        await stopAutomaticSync()
        registeredSubscriptions = subscriptions
        let run = AutomaticSyncRun(
            context: self, subscriptions: subscriptions, configuration: configuration, connectivity: connectivity)
        automaticSync = Task { await run.run() }
        status.update { $0.isRunning = true }
    }

    /// Stops automatic sync and waits until its work has stopped (a push or pull under way stops
    /// at its next safe point, the queue consistent).
    public func stopAutomaticSync() async {
        guard let running = automaticSync else { return }
        automaticSync = nil
        running.cancel()
        await running.value
        status.update {
            $0.isRunning = false
            $0.isPushing = false
            $0.isPulling = false
            $0.isCaughtUp = false
        }
    }

    /// Whether automatic sync is running.
    public var isSyncingAutomatically: Bool { automaticSync != nil }

    /// The sync barrier: pushes everything queued, then pulls every subscription (by default those
    /// of automatic sync) to the end, so that when it returns the device holds everything the
    /// server had when the call began, and the server everything the device had. Operations the
    /// server refused are in ``SyncReport/push`` (and the errors table), not thrown.
    ///
    /// ```swift
    /// // Pull to refresh:
    /// let report = try await context.synchronize()
    /// if !report.push.isComplete { showErrors() }
    /// ```
    ///
    /// - Throws: ``SyncError`` — `network`, `unauthorized`, `cancelled`, or the error of a pull.
    @discardableResult
    public func synchronize(_ subscriptions: [SyncSubscription]? = nil) async throws -> SyncReport {
        var report = SyncReport()
        report.push = try await push()
        for subscription in subscriptions ?? registeredSubscriptions {
            report.pulls[subscription.queryID] = try await pull(
                subscription.table, query: subscription.query, queryID: subscription.queryID,
                options: PullOptions(pushesFirst: false))
        }
        return report
    }
}
