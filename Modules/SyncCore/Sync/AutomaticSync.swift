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

    public init(
        pushDelay: Duration = .milliseconds(10), pollInterval: Duration = .seconds(30),
        retryDelay: Duration = .milliseconds(500), maximumRetryDelay: Duration = .seconds(60),
        usesChangeFeed: Bool = true
    ) {
        self.pushDelay = pushDelay
        self.pollInterval = pollInterval
        self.retryDelay = retryDelay
        self.maximumRetryDelay = maximumRetryDelay
        self.usesChangeFeed = usesChangeFeed
    }

    /// The wait before retry `failures` (1 = after the first failure): exponential, capped, with
    /// jitter (between half and all of it), so that many devices do not retry in step, and at least
    /// what the server asked for (`Retry-After`).
    func retryWait(after failures: Int, retryAfter: Duration? = nil) -> Duration {
        Backoff(initial: retryDelay, maximum: maximumRetryDelay).delay(after: failures, retryAfter: retryAfter)
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
        /// Whether a push is running.
        public var isPushing = false
        /// Whether a pull is running.
        public var isPulling = false
        /// Queued operations not yet accepted by the server (failed ones included).
        public var pendingOperations = 0
        /// Queued operations that failed and wait for the app (see the errors table).
        public var failedOperations = 0
        /// The last failure of automatic sync, until the next success.
        public var lastError: String?
        /// When automatic sync last pushed and pulled everything it had to.
        public var lastSyncedAt: Timestamp?
        /// Whether the server's change feed tells this device of changes (else it polls).
        public var usesChangeFeed = false
        /// Whether nothing waits: online, nothing queued, nothing known to be left to pull, no
        /// failure since the last sync.
        public var isCaughtUp = false

        public init() {}

        /// One line for people: "everything synced", "3 changes waiting to be pushed", "offline
        /// (2 changes waiting)", "sync failed: …".
        public var summary: String {
            let waiting = pendingOperations == 1 ? "1 change waiting" : "\(pendingOperations) changes waiting"
            if !isOnline { return pendingOperations == 0 ? "offline" : "offline (\(waiting))" }
            if let lastError { return "sync failed: \(lastError)" }
            if failedOperations > 0 {
                return failedOperations == 1
                    ? "1 change needs attention (see the errors)" : "\(failedOperations) changes need attention"
            }
            if pendingOperations > 0 { return waiting + " to be pushed" }
            if isCaughtUp { return "everything synced" }
            return isRunning ? "syncing" : "not syncing"
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

/// One run of automatic sync, from start to stop: every trigger (local writes, feed hints, timers,
/// connectivity) goes through one inbox, and one loop does the work, one step at a time.
struct AutomaticSyncRun: Sendable {
    let context: SyncContext
    let subscriptions: [SyncSubscription]
    let configuration: AutomaticSyncConfiguration
    let connectivity: any ConnectivityMonitor

    enum Trigger: Sendable {
        case queueChanged
        case tablesChanged(Set<String>)
        case everythingChanged
        case work
        case poll
        case online(Bool)
        case openFeed
        /// The feed ended (or could not open); `retryAfter` is the wait the server asked for.
        case feedEnded(heardAnything: Bool, retryAfter: Duration?)
    }

    var tables: Set<String> { Set(subscriptions.map(\.table)) }

    func run() async {
        let (inbox, post) = AsyncStream.makeStream(of: Trigger.self)
        var helpers: [Task<Void, Never>] = []
        // Local writes (and anything else that changes the queue).
        let queueSignals = context.tableChanges.subscribe(tables: [], queue: true)
        helpers.append(
            Task {
                for await _ in queueSignals { post.yield(.queueChanged) }
            })
        let paths = connectivity.paths()
        helpers.append(
            Task {
                for await online in paths { post.yield(.online(online)) }
            })
        var timers: [Task<Void, Never>] = []
        func after(_ delay: Duration, _ trigger: Trigger) {
            timers.removeAll { $0.isCancelled }
            timers.append(
                Task {
                    try? await Task.sleep(for: delay)
                    if !Task.isCancelled { post.yield(trigger) }
                })
        }
        var feed: Task<Void, Never>?
        var online = false
        var pushWanted = true
        var dirty = tables
        var failures = 0
        // After a failure, nothing is tried before this instant (the backoff, or the server's
        // Retry-After), whatever triggers come meanwhile (a failed operation changes the queue).
        var retryNotBefore: ContinuousClock.Instant?
        var workScheduled = false
        var retryFailedOperations = false
        var feedFailures = 0
        var feedActive = false
        var polling = false
        // Asked when the device comes online, and again after each sync while the answer is no:
        // a server that could not be asked (it was down) may well have a feed.
        var offersFeed = false
        func askForFeed() async {
            guard configuration.usesChangeFeed, !offersFeed else { return }
            offersFeed = await context.remote.offersChangeFeed()
            context.status.update { [offersFeed] in $0.usesChangeFeed = offersFeed }
            if offersFeed { post.yield(.openFeed) }
        }

        for await trigger in inbox {
            if Task.isCancelled { break }
            switch trigger {
            case .queueChanged:
                pushWanted = true
                if !workScheduled {
                    // The first write of a burst: the status shows it, and the push follows shortly.
                    workScheduled = true
                    await refreshCounts(caughtUp: false)
                    after(configuration.pushDelay, .work)
                }
                continue
            case .tablesChanged(let changed):
                dirty.formUnion(changed.intersection(tables))
            case .everythingChanged:
                dirty = tables
            case .poll:
                // Polling stops once the feed is there (the feed resumes from its position when it
                // drops, so nothing needs polling then).
                guard !offersFeed else {
                    polling = false
                    continue
                }
                dirty = tables
                if polling { after(configuration.pollInterval, .poll) }
            case .online(let now):
                let cameBack = now && !online
                online = now
                context.status.update { $0.isOnline = now }
                if !now {
                    feed?.cancel()
                    feed = nil
                    feedActive = false
                    continue
                }
                guard cameBack else { continue }
                pushWanted = true
                dirty = tables
                failures = 0
                retryNotBefore = nil  // a new network: try at once
                await askForFeed()  // opens the feed when there is one
                if offersFeed {
                    post.yield(.openFeed)  // still closed after coming back online
                } else if !polling {
                    polling = true
                    after(configuration.pollInterval, .poll)
                }
            case .openFeed:
                guard online, offersFeed, feed == nil else { continue }
                feedActive = true
                feed = Task { await readFeed(post) }
                continue
            case .feedEnded(let heardAnything, let retryAfter):
                feed = nil
                feedActive = false
                guard online, !Task.isCancelled else { continue }
                feedFailures = heardAnything ? 1 : feedFailures + 1
                // Changes may have come while it was closed: the reopened feed reports them
                // (it resumes from its last position); until then nothing is assumed.
                after(configuration.retryWait(after: feedFailures, retryAfter: retryAfter), .openFeed)
                continue
            case .work:
                workScheduled = false
                if let notBefore = retryNotBefore, ContinuousClock.now >= notBefore { retryNotBefore = nil }
            }
            guard online, retryNotBefore == nil else { continue }
            guard pushWanted || !dirty.isEmpty else { continue }
            // The work: a push if the queue changed, then the pulls of the tables that changed.
            do {
                if pushWanted {
                    pushWanted = false
                    // After operations failed on the server's side (5xx, 429), they are failed in the
                    // queue: the retry pushes them again.
                    let retrying = retryFailedOperations
                    retryFailedOperations = false
                    let toPush = try await hasOperationsToPush()
                    if retrying || toPush {
                        context.status.update { $0.isPushing = true }
                        defer { context.status.update { $0.isPushing = false } }
                        let result = try await context.push()
                        if result.failed.contains(where: { Self.isTransient($0.statusCode) }) {
                            retryFailedOperations = true
                            throw SyncError(
                                .remote, "the server failed \(result.failed.count) operations",
                                underlying: RemoteError(
                                    .server, "the server failed operations for now", retryAfter: result.retryAfter))
                        }
                    }
                }
                if !dirty.isEmpty {
                    context.status.update { $0.isPulling = true }
                    defer { context.status.update { $0.isPulling = false } }
                    for table in dirty.sorted() {
                        for subscription in subscriptions where subscription.table == table {
                            try await context.pull(
                                table, query: subscription.query, queryID: subscription.queryID,
                                options: PullOptions(pushesFirst: false))
                        }
                        dirty.remove(table)
                    }
                }
                failures = 0
                let now = ItemFields.now()
                context.status.update {
                    $0.lastSyncedAt = now
                    $0.lastError = nil
                }
                await askForFeed()
                await refreshCounts(caughtUp: feedActive || !offersFeed)
            } catch {
                let failure = SyncError.wrapping(error, "automatic sync")
                if Task.isCancelled || failure.code == .cancelled { break }
                context.status.update {
                    $0.lastError = failure.message
                    $0.isCaughtUp = false
                }
                if failure.code == .network || failure.code == .remote {
                    // Try again later, everything that was wanted.
                    pushWanted = true
                    dirty = tables
                    failures += 1
                    let wait = configuration.retryWait(after: failures, retryAfter: failure.remoteError?.retryAfter)
                    retryNotBefore = .now + wait
                    after(wait, .work)
                }
                await refreshCounts(caughtUp: false)
            }
        }
        feed?.cancel()
        for task in helpers + timers { task.cancel() }
        post.finish()
    }

    /// A failure worth retrying: the server's (5xx), or too many requests.
    static func isTransient(_ status: Int?) -> Bool {
        guard let status else { return false }
        return status >= 500 || status == 429 || status == 408
    }

    /// Whether the queue holds an operation that a push would send for the first time, or again
    /// after an unknown outcome (failed ones wait for the app, or for the next local write).
    func hasOperationsToPush() async throws -> Bool {
        var after: Int64?
        while true {
            let page = try await context.read("automatic sync") { [after] in
                try $0.operations(after: after, table: nil, limit: 500)
            }
            if page.contains(where: { $0.state != .failed }) { return true }
            guard let last = page.last, page.count == 500 else { return false }
            after = last.id
        }
    }

    func refreshCounts(caughtUp: Bool) async {
        guard
            let (queued, failed) = try? await context.read(
                "automatic sync",
                { reader in
                    (
                        try reader.operationCount(table: nil),
                        Set(try reader.operationErrors(table: nil).map(\.operationID)).count
                    )
                })
        else { return }
        context.status.update {
            $0.pendingOperations = queued
            $0.failedOperations = failed
            $0.isCaughtUp = caughtUp && queued == 0 && $0.lastError == nil && $0.isOnline
        }
    }

    /// Reads the change feed until it ends, posting the tables it says changed.
    func readFeed(_ post: AsyncStream<Trigger>.Continuation) async {
        var heardAnything = false
        var retryAfter: Duration?
        do {
            let position = await context.feedPosition
            let events = try await context.remote.changeFeed(tables: tables.sorted(), after: position)
            for try await event in events {
                heardAnything = true
                await context.setFeedPosition(event.position)
                switch event {
                case .ready:
                    // Whatever changed before the feed opened is pulled now.
                    post.yield(.everythingChanged)
                    post.yield(.work)
                case .changed(let table, _, _):
                    post.yield(.tablesChanged([table]))
                    post.yield(.work)
                }
            }
        } catch {
            retryAfter = (error as? RemoteError)?.retryAfter
        }
        post.yield(.feedEnded(heardAnything: heardAnything, retryAfter: retryAfter))
    }
}
