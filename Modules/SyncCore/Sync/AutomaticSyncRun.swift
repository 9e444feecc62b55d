import Logging
import Synchronization

/// One run of automatic sync, from start to stop: the driver of ``AutomaticSyncMachine``. Every
/// trigger (local writes, feed events, timers, connectivity) goes through one inbox; the machine
/// decides, and this carries its actions out with the real clock, one step at a time: a push and
/// its pulls run before the next event is taken, timers and the feed run in tasks of their own.
struct AutomaticSyncRun: Sendable {
    let context: SyncContext
    let subscriptions: [SyncSubscription]
    let configuration: AutomaticSyncConfiguration
    let connectivity: any ConnectivityMonitor

    typealias Event = AutomaticSyncMachine.Event

    var tables: Set<String> { Set(subscriptions.map(\.table)) }

    func run() async {
        let (inbox, post) = AsyncStream.makeStream(of: Event.self)
        var helpers: [Task<Void, Never>] = []
        // Local writes (and anything else that changes the queue).
        let queueSignals = context.store.commits.subscribe(tables: [], queue: true)
        helpers.append(Task { for await _ in queueSignals { post.yield(.queueChanged) } })
        // Attachments queued for upload or delete (AttachmentSync.swift) are pushed like operations.
        let attachmentSignals = context.store.commits.subscribe(tables: [AttachmentQueue.table])
        helpers.append(Task { for await _ in attachmentSignals { post.yield(.queueChanged) } })
        let paths = connectivity.paths()
        helpers.append(Task { for await online in paths { post.yield(.online(online)) } })
        var timers: [AutomaticSyncMachine.Timer: Task<Void, Never>] = [:]
        var feed: Task<Void, Never>?
        var machine = AutomaticSyncMachine(tables: tables, configuration: configuration)
        var random = SystemRandomNumberGenerator()
        let clock = ContinuousClock()
        await refreshStatus(machine)

        var pending: [Event] = []
        let hints = FeedHints()
        var iterator = inbox.makeAsyncIterator()
        while true {
            let event: Event
            if pending.isEmpty {
                guard let next = await iterator.next(), !Task.isCancelled else { break }
                event = next
            } else {
                event = pending.removeFirst()
            }
            if event == .feedHints {
                pending.insert(contentsOf: hints.take(), at: 0)
                continue
            }
            for action in machine.handle(event, now: clock.now, using: &random) {
                switch action {
                case .schedule(let timer, let instant):
                    timers[timer]?.cancel()
                    timers[timer] = Task {
                        guard (try? await clock.sleep(until: instant)) != nil else { return }
                        post.yield(.timer(timer))
                    }
                case .work(let push, let retryFailed, let pull):
                    // Inline: the next event waits until the push and its pulls end.
                    pending.append(.workFinished(await work(push: push, retryFailed: retryFailed, pull: pull)))
                case .askForFeed:
                    helpers.append(Task { post.yield(.feedOffer(await context.remote.offersChangeFeed())) })
                case .openFeed:
                    feed = Task { await readFeed(post, hints: hints) }
                case .closeFeed:
                    feed?.cancel()
                    feed = nil
                case .refreshCounts:
                    break  // below, after every event
                }
            }
            if Task.isCancelled { break }
            await refreshStatus(machine)
        }
        feed?.cancel()
        for task in helpers + Array(timers.values) { task.cancel() }
        post.finish()
    }

    /// Pushes, then pulls the subscriptions of `pull`.
    func work(push: Bool, retryFailed: Bool, pull: Set<String>) async -> AutomaticSyncMachine.WorkOutcome {
        var outcome = AutomaticSyncMachine.WorkOutcome()
        if push {
            do {
                // After operations failed on the server's side (5xx, 429), they are failed in the
                // queue: a retry pushes them again.
                let toPush = try await hasOperationsToPush()
                if retryFailed || toPush {
                    context.status.update { $0.isPushing = true }
                    defer { context.status.update { $0.isPushing = false } }
                    let result = try await context.push()
                    // Pulls follow: the counts now, not when they end (the status said "1 change
                    // waiting to be pushed" of a pushed change for as long as a pull ran). A push
                    // alone leaves them to the refresh after it, which says "everything synced" in
                    // the same change (no "syncing" between the two after each edit).
                    if !pull.isEmpty, let counts = await storeCounts() {
                        context.status.update { Self.set(counts, in: &$0) }
                    }
                    if let failed = result.failed.first(where: { Self.isTransient($0.statusCode) }) {
                        outcome.retryFailed = true
                        outcome.retryAfter = result.retryAfter
                        outcome.pushProblem = SyncProblem(
                            code: .remote,
                            message: "the server failed \(result.failed.count) operation(s) for now: \(failed.message)",
                            status: failed.statusCode)
                        return outcome
                    }
                }
            } catch {
                if Task.isCancelled { return outcome }
                outcome.pushProblem = SyncProblem(error)
                outcome.retryAfter = SyncError.wrapping(error, "push").remoteError?.retryAfter
                log(error, "push")
                return outcome
            }
        }
        guard !pull.isEmpty else { return outcome }
        context.status.update { $0.isPulling = true }
        defer { context.status.update { $0.isPulling = false } }
        do {
            for table in pull.sorted() {
                for subscription in subscriptions where subscription.table == table {
                    try await context.pull(
                        table, query: subscription.query, queryID: subscription.queryID,
                        options: PullOptions(pushesFirst: false))
                }
            }
            let now = ItemFields.now()
            context.status.update { $0.lastSyncedAt = now }
        } catch {
            if Task.isCancelled { return outcome }
            outcome.pullProblem = SyncProblem(error)
            outcome.retryAfter = SyncError.wrapping(error, "pull").remoteError?.retryAfter
            log(error, "pull")
        }
        return outcome
    }

    func log(_ error: any Error, _ step: String) {
        context.hub.logger.warning(
            "automatic sync: the \(step) failed; retrying later", metadata: ["ferry.error": "\(error)"])
    }

    /// The subscribed table a feed's `table` names: the same name, else the one that differs from
    /// it only in case; `nil` for a table not subscribed.
    static func subscribed(_ table: String, among tables: Set<String>) -> String? {
        if tables.contains(table) { return table }
        let lowered = table.lowercased()
        return tables.sorted().first { $0.lowercased() == lowered }
    }

    /// A failure worth retrying: the server's (5xx), or too many requests.
    static func isTransient(_ status: Int?) -> Bool {
        guard let status else { return false }
        return status >= 500 || status == 429 || status == 408
    }

    /// Whether the queue holds an operation that a push would send for the first time, or again
    /// after an unknown outcome (failed ones wait for the app, or for the next local write).
    func hasOperationsToPush() async throws -> Bool {
        if await context.attachmentConfiguration != nil {
            let ready = try await context.read("automatic sync") { reader in
                try AttachmentQueue.queued(in: reader).contains {
                    try !AttachmentQueue.insertQueued(table: $0.table, itemID: $0.itemID, in: reader)
                }
            }
            if ready { return true }
        }
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

    /// The store's counts for the status: queued operations, operations with errors, queued
    /// attachments; `nil` when the store cannot say.
    func storeCounts() async -> (queued: Int, failed: Int, attachments: Int)? {
        try? await context.read(
            "automatic sync",
            { reader in
                (
                    try reader.operationCount(table: nil),
                    Set(try reader.operationErrors(table: nil).map(\.operationID)).count,
                    try AttachmentQueue.queued(in: reader).count
                )
            })
    }

    static func set(_ counts: (queued: Int, failed: Int, attachments: Int), in status: inout SyncStatus.Snapshot) {
        status.pendingOperations = counts.queued
        status.failedOperations = counts.failed
        status.pendingAttachments = counts.attachments
    }

    /// The status from the machine's facts and the store's counts.
    func refreshStatus(_ machine: AutomaticSyncMachine) async {
        let counts = await storeCounts()
        let reachability = ServerReachability(machine.reachability)
        context.status.update {
            if let counts { Self.set(counts, in: &$0) }
            $0.isOnline = machine.online || !machine.connectivityKnown
            $0.reachability = reachability
            $0.uploadProblem = machine.uploadProblem
            $0.downloadProblem = machine.downloadProblem
            $0.usesChangeFeed = machine.usesChangeFeed
            // Queued attachments wait for a push too: not caught up while any does.
            $0.isCaughtUp = counts.map { machine.isCaughtUp(queued: $0.queued + $0.attachments) } ?? false
        }
    }

    /// Reads the change feed until it ends, gathering what it says into `hints` and posting
    /// `.feedHints` when the run loop has taken the last ones: a feed that says more than the
    /// device can pull (a storm of changes, a hostile server) costs a set of table names, not a
    /// queue of events that grows while a pull runs (measured before: 14 MB/s and a status
    /// refresh per event).
    func readFeed(_ post: AsyncStream<Event>.Continuation, hints: FeedHints) async {
        var opened = false
        var end = AutomaticSyncMachine.FeedEnd(wasOpen: false)
        do {
            let position = await context.feedPosition
            let events = try await context.remote.changeFeed(tables: tables.sorted(), after: position)
            opened = true
            post.yield(.feedOpened)
            for try await event in events {
                await context.setFeedPosition(event.position)
                let wake: Bool
                switch event {
                case .ready:
                    // Whatever changed before the feed opened is pulled now.
                    wake = hints.add { $0.everything = true }
                case .changed(let table, _, _):
                    // Only subscribed tables: names of others are not kept. A server names tables
                    // whatever their case (the protocol's servers do): `TodoItem` is `todoitem` here.
                    guard let subscribed = Self.subscribed(table, among: tables) else { continue }
                    wake = hints.add { $0.tables.insert(subscribed) }
                case .caughtUp:
                    wake = hints.add { $0.caughtUp = true }
                }
                if wake { post.yield(.feedHints) }
            }
        } catch {
            if Task.isCancelled { return }
            end.problem = SyncProblem(error)
            end.retryAfter = (error as? RemoteError)?.retryAfter
            context.hub.logger.warning(
                "automatic sync: the change feed \(opened ? "ended" : "could not open"); reopening",
                metadata: ["ferry.error": "\(error)"])
        }
        if Task.isCancelled { return }
        end.wasOpen = opened
        post.yield(.feedEnded(end))
    }
}

extension ServerReachability {
    /// The machine's reachability, its instants as wall-clock times.
    init(_ machine: AutomaticSyncMachine.Reachability, now: ContinuousClock.Instant = .now) {
        func wallClock(_ instant: ContinuousClock.Instant) -> Timestamp {
            let ago = now - instant
            let milliseconds = ago.components.seconds * 1000 + ago.components.attoseconds / 1_000_000_000_000_000
            return Timestamp(millisecondsSince1970: ItemFields.now().millisecondsSince1970 - milliseconds)
        }
        switch machine {
        case .unknown: self = .unknown
        case .reachable(let since): self = .reachable(since: wallClock(since))
        case .unreachable(let since, let reason): self = .unreachable(since: wallClock(since), reason: reason)
        }
    }
}

/// What the change feed said since the run loop last looked, gathered (``AutomaticSyncRun/readFeed(_:hints:)``).
final class FeedHints: Sendable {
    struct Said: Sendable {
        var everything = false
        var tables: Set<String> = []
        var caughtUp = false
        /// A `.feedHints` is on its way to the run loop.
        var posted = false
    }

    private let said = Mutex(Said())

    /// Adds what the feed said; whether the run loop must be woken (nothing was on its way).
    func add(_ change: (inout Said) -> Void) -> Bool {
        said.withLock { said in
            change(&said)
            defer { said.posted = true }
            return !said.posted
        }
    }

    /// The events of what was said, in the feed's order of meaning, and a clean slate.
    func take() -> [AutomaticSyncMachine.Event] {
        let taken = said.withLock { said in
            defer { said = Said() }
            return said
        }
        var events: [AutomaticSyncMachine.Event] = []
        if taken.everything { events.append(.everythingChanged) }
        if !taken.tables.isEmpty { events.append(.tablesChanged(taken.tables)) }
        if taken.caughtUp { events.append(.feedCaughtUp) }
        return events
    }
}
