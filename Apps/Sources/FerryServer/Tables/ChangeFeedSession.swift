import CoreMetrics
import Foundation
import Metrics
import ServerStorageCore
import SyncCore
import Synchronization

/// One open change feed: what it has sent, and the bytes it writes next (``next()``), for as long
/// as the client reads, the token lasts, the storage runs and the server does not shut down.
final class ChangeFeed: Sendable {
    private let service: TableService
    private let mailbox = FeedMailbox()
    private let place: FeedRegistry.Place
    private let state: Mutex<State>
    private let tasks = Mutex<[Task<Void, Never>]>([])
    private let closed = Mutex(false)

    private struct State {
        var first: [UInt8]?
        /// The `change` events in ``first`` (a resumed feed's hints).
        var firstEvents: Int
        var sent: [String: Int64]
    }

    init(
        service: TableService, identity: TokenVerifier.Identity?, wanted: Set<String>?,
        changes: AsyncStream<StorageChange>, first: [UInt8], firstEvents: Int = 0, sent: [String: Int64],
        access: [String: TableService.FeedAccess], place: FeedRegistry.Place
    ) {
        self.service = service
        self.place = place
        state = Mutex(State(first: first, firstEvents: firstEvents, sent: sent))
        let mailbox = mailbox
        // The change stream is read as it comes and folded into the mailbox: a reader that is slow
        // to take frames never makes the storage's stream (or this process) hold more than one
        // pending version per table.
        let producer = Task {
            var access = access
            for await change in changes {
                let name = change.table
                if let wanted, !wanted.contains(name) { continue }
                if access[name] == nil {
                    guard let seen = service.feedAccess(name, identity) else { continue }
                    access[name] = seen
                }
                mailbox.post(name, version: change.version, access: access[name]!)
            }
            mailbox.finish()  // the storage closed
        }
        let heartbeat = service.configuration.limits.changeFeedHeartbeat
        let expiry = identity?.expiresAt
        let timer = Task {
            while !Task.isCancelled {
                if let expiry, expiry <= Date() {
                    mailbox.finish()  // the token expired: the client reconnects with a new one
                    return
                }
                guard (try? await Task.sleep(for: heartbeat)) != nil else { return }
                mailbox.beat()
            }
        }
        tasks.withLock { $0 = [producer, timer] }
    }

    /// The next bytes to write, or `nil` when the feed has ended.
    func next() async -> [UInt8]? {
        let metrics = service.metrics
        if case let (first, events)? = state.withLock({ state in
            defer { state.first = nil }
            return state.first.map { ($0, state.firstEvents) }
        }) {
            if events > 0 { metrics?.feedEvents.increment(by: events) }
            return first
        }
        while let item = await mailbox.next() {
            switch item {
            case .heartbeat:
                return Array(": heartbeat\n\n".utf8)
            case .changes(let changes):
                var frames: [UInt8] = []
                var events = 0
                let position = TableService.FeedPosition.now()
                for change in changes {
                    var version = change.version
                    if change.access != .all {
                        guard let seen = try? await service.visibleNewest(change.table, change.access) else { continue }
                        version = seen.version
                    }
                    let isNew = state.withLock { state in
                        guard version > state.sent[change.table] ?? 0 else { return false }
                        state.sent[change.table] = version
                        return true
                    }
                    guard isNew else { continue }
                    frames += TableService.changeFrame(change.table, version, position: position)
                    events += 1
                    metrics?.fanOut.record(duration: ContinuousClock.now - change.postedAt)
                }
                if !frames.isEmpty {
                    metrics?.feedEvents.increment(by: events)
                    return frames
                }
            }
        }
        return nil
    }

    /// Ends the feed: ``next()`` gives what is pending, then `nil`.
    func end() { mailbox.finish() }

    /// Ends the feed and gives its place back, at once (the client went away, or the response
    /// ended). Safe to call more than once.
    func close() {
        let first = closed.withLock { closed in
            defer { closed = true }
            return !closed
        }
        guard first else { return }
        for task in tasks.withLock({ $0 }) { task.cancel() }
        mailbox.finish()
        service.feeds.release(place)
    }
}

/// The changes a feed has not written yet, folded into the newest version per table, and whether a
/// heartbeat is due: what a slow reader costs is bounded by the tables it watches.
final class FeedMailbox: Sendable {
    struct Change: Sendable {
        var table: String
        var version: Int64
        var access: TableService.FeedAccess
        /// When the oldest announcement folded into this one arrived.
        var postedAt: ContinuousClock.Instant
    }

    enum Item: Sendable {
        case changes([Change])
        case heartbeat
    }

    private struct State {
        var pending: [String: Change] = [:]
        var order: [String] = []
        var heartbeat = false
        var finished = false
        var waiter: CheckedContinuation<Item?, Never>?

        /// What a waiter gets now, if anything.
        mutating func take() -> Item?? {
            if !order.isEmpty {
                defer { (pending, order) = ([:], []) }
                return .some(.changes(order.compactMap { pending[$0] }))
            }
            if heartbeat {
                heartbeat = false
                return .some(.heartbeat)
            }
            return finished ? .some(nil) : .none
        }
    }

    private let state = Mutex(State())

    func post(_ table: String, version: Int64, access: TableService.FeedAccess) {
        update { state in
            if let known = state.pending[table] {
                state.pending[table]?.version = max(known.version, version)
            } else {
                state.pending[table] = Change(table: table, version: version, access: access, postedAt: .now)
                state.order.append(table)
            }
        }
    }

    func beat() { update { $0.heartbeat = true } }

    func finish() { update { $0.finished = true } }

    private func update(_ change: (inout State) -> Void) {
        let (waiter, item): (CheckedContinuation<Item?, Never>?, Item?) = state.withLock { state in
            change(&state)
            guard let waiter = state.waiter, let item = state.take() else { return (nil, nil) }
            state.waiter = nil
            return (waiter, item)
        }
        waiter?.resume(returning: item)
    }

    /// The next item, or `nil` once finished and drained. A cancelled caller ends the feed.
    func next() async -> Item? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Item?, Never>) in
                let ready: Item?? = state.withLock { state in
                    if let item = state.take() { return item }
                    state.waiter = continuation
                    return .none
                }
                if case .some(let item) = ready { continuation.resume(returning: item) }
            }
        } onCancel: {
            finish()
        }
    }
}

/// The change feeds open on one server: in total, per owner (a token's subject, or an anonymous
/// caller's address), and anonymous ones together.
final class FeedRegistry: Sendable {
    /// Whose place a feed takes.
    struct Place: Sendable, Hashable {
        /// A token's subject, or an anonymous caller's address on a server that takes tokens;
        /// `nil` where every caller is anonymous (no tokens): then only the total applies.
        var owner: String?
        /// Whether it counts against the anonymous callers' share (on a server that takes tokens).
        var anonymous: Bool
    }

    private let open = Mutex<(total: Int, anonymous: Int, byOwner: [String: Int])>((0, 0, [:]))
    /// The gauge of open feeds (`ferry_open_change_feeds`), when metrics are on.
    private let gauge: Meter?

    init(open gauge: Meter? = nil) { self.gauge = gauge }

    /// Takes a place; `false` when a limit is reached.
    func reserve(_ place: Place, limits: RequestLimits) -> Bool {
        let reserved = open.withLock { open in
            guard open.total < limits.maximumChangeFeeds,
                place.owner.map({ open.byOwner[$0, default: 0] < limits.maximumChangeFeedsPerUser }) ?? true,
                !place.anonymous || open.anonymous < limits.maximumAnonymousChangeFeeds
            else { return false }
            open.total += 1
            if place.anonymous { open.anonymous += 1 }
            if let owner = place.owner { open.byOwner[owner, default: 0] += 1 }
            return true
        }
        if reserved { gauge?.increment() }
        return reserved
    }

    func release(_ place: Place) {
        gauge?.decrement()
        open.withLock { open in
            open.total -= 1
            if place.anonymous { open.anonymous -= 1 }
            guard let owner = place.owner else { return }
            open.byOwner[owner, default: 1] -= 1
            if open.byOwner[owner] == 0 { open.byOwner.removeValue(forKey: owner) }
        }
    }

    /// How many feeds are open.
    var count: Int { open.withLock { $0.total } }
}
