public import Observation
import Synchronization

/// Where a context's sync stands, for people and for SwiftUI.
///
/// On the main actor, each property is observable on its own (`Observation`): a view that shows
/// ``pendingOperations`` is not drawn again when ``isPulling`` changes. Anywhere, ``snapshot`` is the
/// status now and ``updates()`` a stream of snapshots that never repeats an unchanged one.
///
/// ```swift
/// Text(context.status.summary)                // SwiftUI, on the main actor: "everything synced", …
/// Text("\(context.status.pendingOperations)")
/// print(context.status.snapshot.summary)      // anywhere
/// for await status in context.status.updates() { print(status.pendingOperations) }
/// ```
///
/// The engine changes the status from any executor; the truth is ``snapshot``, and the main
/// actor's properties follow it (each change is delivered there, the newest state at once when
/// several come together).
///
/// Automatic sync keeps the status (``SyncContext/startAutomaticSync(_:configuration:connectivity:)``): its
/// counts (``pendingOperations``, ``failedOperations``, ``pendingAttachments``) and problems are
/// those it last read, and without it they stay as they were (0 in a new context). An app that
/// pushes and pulls by hand reads ``SyncContext/queuedOperationCount(table:)`` and
/// ``SyncContext/operationErrors(table:)`` instead.
@MainActor
@Observable
public final class SyncStatus: Sendable {
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
        /// Queued operations not yet accepted by the server (failed ones included), as automatic
        /// sync last counted them.
        public var pendingOperations = 0
        /// Queued operations that failed and wait for the app (see the errors table).
        public var failedOperations = 0
        /// Attachment uploads and deletes waiting for a push (docs/attachments.md).
        public var pendingAttachments = 0
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
        ///
        /// Keeping up does not take it away: once the device is caught up, a pull because the
        /// feed hinted a change (its own pushed write, echoed back, most often) or because a poll
        /// came due leaves it `true` while it runs, and so does a push that finds nothing queued.
        /// It turns `false` when an operation or attachment is queued, when a push or pull fails,
        /// when the server cannot be reached or the device goes offline, and when the feed drops
        /// (until it is open again and what it names is pulled). So a UI that shows "everything
        /// synced" does not blink after each edit that was pushed.
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
            if pendingAttachments > 0 {
                return pendingAttachments == 1
                    ? "1 file waiting to be sent" : "\(pendingAttachments) files waiting to be sent"
            }
            if isCaughtUp { return "everything synced" }
            guard isRunning else { return "not syncing" }
            return reachability == .unknown ? "connecting to the server" : "syncing"
        }
    }

    /// Whether automatic sync is running.
    public private(set) var isRunning = false
    /// Whether the device can reach the network.
    public private(set) var isOnline = true
    /// Whether the server answers.
    public private(set) var reachability = ServerReachability.unknown
    /// Whether a push is running.
    public private(set) var isPushing = false
    /// Whether a pull is running.
    public private(set) var isPulling = false
    /// Queued operations not yet accepted by the server.
    public private(set) var pendingOperations = 0
    /// Queued operations that failed and wait for the app.
    public private(set) var failedOperations = 0
    /// Attachment uploads and deletes waiting for a push.
    public private(set) var pendingAttachments = 0
    /// Why the last push failed, until one succeeds.
    public private(set) var uploadProblem: SyncProblem?
    /// Why the last pull, or the change feed, failed, until one succeeds.
    public private(set) var downloadProblem: SyncProblem?
    /// When automatic sync last pulled what it had to.
    public private(set) var lastSyncedAt: Timestamp?
    /// Whether the change feed tells this device of changes.
    public private(set) var usesChangeFeed = false
    /// Whether nothing waits ("everything synced").
    public private(set) var isCaughtUp = false
    /// ``Snapshot/summary``: one line for people, observable like the rest.
    public private(set) var summary = Snapshot().summary

    @ObservationIgnored private nonisolated let current = WatchedValue(Snapshot())
    @ObservationIgnored private nonisolated let delivery = Mutex(false)

    nonisolated init() {}

    /// The status now, from any executor.
    public nonisolated var snapshot: Snapshot { current.value }

    /// The status now, then every change (never an unchanged one), until the stream is dropped.
    public nonisolated func updates() -> AsyncStream<Snapshot> { current.watch() }

    /// The status now, then every change, the newest `limit` of them kept for a reader that falls
    /// behind (tests that must see each value).
    nonisolated func updates(bufferingNewest limit: Int) -> AsyncStream<Snapshot> {
        current.watch(bufferingNewest: limit)
    }

    /// Changes the status (from any executor) and delivers the change to the main actor.
    nonisolated func update(_ change: (inout Snapshot) -> Void) {
        guard current.update(change) else { return }
        let scheduled = delivery.withLock { pending in
            defer { pending = true }
            return pending
        }
        guard !scheduled else { return }  // the delivery under way takes the newest state
        Task { @MainActor in self.deliver() }
    }

    /// Sets the main actor's properties to the newest snapshot, each only when it changed.
    private func deliver() {
        delivery.withLock { $0 = false }
        let now = current.value
        if isRunning != now.isRunning { isRunning = now.isRunning }
        if isOnline != now.isOnline { isOnline = now.isOnline }
        if reachability != now.reachability { reachability = now.reachability }
        if isPushing != now.isPushing { isPushing = now.isPushing }
        if isPulling != now.isPulling { isPulling = now.isPulling }
        if pendingOperations != now.pendingOperations { pendingOperations = now.pendingOperations }
        if failedOperations != now.failedOperations { failedOperations = now.failedOperations }
        if pendingAttachments != now.pendingAttachments { pendingAttachments = now.pendingAttachments }
        if uploadProblem != now.uploadProblem { uploadProblem = now.uploadProblem }
        if downloadProblem != now.downloadProblem { downloadProblem = now.downloadProblem }
        if lastSyncedAt != now.lastSyncedAt { lastSyncedAt = now.lastSyncedAt }
        if usesChangeFeed != now.usesChangeFeed { usesChangeFeed = now.usesChangeFeed }
        if isCaughtUp != now.isCaughtUp { isCaughtUp = now.isCaughtUp }
        if summary != now.summary { summary = now.summary }
    }
}
