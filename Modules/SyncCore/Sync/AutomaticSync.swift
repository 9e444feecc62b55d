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
    /// comes back, and a server that stays down is asked at most this often, but never sooner than
    /// it asked: its `Retry-After`, or the reconnection time its feed set (SSE `retry:`; Ferry's
    /// server sends `retry: 2000`, so a failed attempt waits 2 s).
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
    /// With no subscriptions (none given, and automatic sync not started) it only pushes: with an
    /// empty queue it returns at once without asking the server. Name the tables to pull
    /// (`synchronize([SyncSubscription(table: "todo")])`) for a barrier that reaches the server.
    ///
    /// - Throws: ``SyncError`` — `network`, `unauthorized`, `cancelled`, or the error of a pull.
    @discardableResult
    public func synchronize(_ subscriptions: [SyncSubscription]? = nil) async throws(SyncError) -> SyncReport {
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
