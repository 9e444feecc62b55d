import CoreMetrics
import Foundation
import Metrics
import ServerStorageCore
import SyncCore
import Synchronization

/// One open change feed: what it has sent, and the bytes it writes next (``next()``), for as long
/// as the client reads, the token lasts, the storage runs and the server does not shut down.
///
/// The server's ``FeedHub`` hands it every change (``deliver(_:)``) and its heartbeats
/// (``beat(now:)``); a feed has no task of its own besides the writer that calls ``next()``. Once
/// its first bytes went out, the HTTP layer gives it its connection (``attach(_:)``): a change of a
/// table the caller sees whole is then written by the hub straight to the connection, on the
/// connection's thread (``writeDirectly(_:_:)``), and the writer only wakes for heartbeats, changes
/// that need a visibility query, and a client that has not taken what it was sent.
final class ChangeFeed: Sendable {
    private let service: TableService
    private let mailbox = FeedMailbox()
    private let place: FeedRegistry.Place
    private let identity: TokenVerifier.Identity?
    private let wanted: Set<String>?
    private let state = Mutex(State())
    private let routing = Mutex(Routing())
    private let closed = Mutex(false)
    private let bucket = Atomic(0)

    private struct State {
        var first: [UInt8]?
        /// The `change` events in ``first`` (a resumed feed's hints).
        var firstEvents = 0
        var sent: [String: Int64] = [:]
    }

    private struct Routing {
        /// How the caller sees each table the hub told of (`nil`: it may not query it).
        var access: [String: TableService.FeedAccess?] = [:]
        /// Where the hub writes changes directly, once attached.
        var connection: (any FeedConnection)?
    }

    /// A feed that takes `place` (already reserved); ``open(first:sent:)`` gives it what it starts with.
    init(service: TableService, identity: TokenVerifier.Identity?, wanted: Set<String>?, place: FeedRegistry.Place) {
        self.service = service
        self.identity = identity
        self.wanted = wanted
        self.place = place
    }

    /// Joins the server's fan-out: changes from now on wait in the mailbox. Call it before reading
    /// the state the feed starts with, so that a change in between shows in both (and is sent once).
    func subscribe() {
        guard let tick = service.feedHub.register(self) else {
            mailbox.finish()  // the storage closed, or the server stopped
            return
        }
        bucket.store(tick, ordering: .relaxed)
    }

    /// The feed's first bytes (`retry`, then `ready` or the hints and `caught-up`) and the versions
    /// they told (`firstEvents`: the `change` events among them).
    func open(first: [UInt8], sent: [String: Int64], firstEvents: Int = 0) {
        state.withLock { $0 = State(first: first, firstEvents: firstEvents, sent: sent) }
        if let expiry = identity?.expiresAt, expiry <= Date() { mailbox.finish() }
    }

    /// Which tick of the heartbeat period this feed beats at.
    var heartbeatBucket: Int { bucket.load(ordering: .relaxed) }

    /// Hands the feed its connection: from now on the hub writes changes of tables the caller sees
    /// whole straight to it. Call it once the feed's first bytes went out.
    func attach(_ connection: any FeedConnection) {
        routing.withLock { $0.connection = connection }
    }

    /// Takes the connection back: what comes later goes through ``next()``. Call it on the
    /// connection's thread before the response ends.
    func detach() {
        routing.withLock { $0.connection = nil }
    }

    /// A change, from the hub: `nil` when the feed does not see it or folded it into its mailbox,
    /// or the connection to write it to (with ``writeDirectly(_:_:)``, on the connection's thread).
    func deliver(_ announcement: FeedHub.Announcement) -> (any FeedConnection)? {
        let name = announcement.table
        if let wanted, !wanted.contains(name) { return nil }
        let (seen, connection) = routing.withLock { routing -> (TableService.FeedAccess?, (any FeedConnection)?) in
            if let cached = routing.access[name] { return (cached, routing.connection) }
            let seen = service.feedAccess(name, identity)
            routing.access[name] = .some(seen)
            return (seen, routing.connection)
        }
        guard let seen else { return nil }
        // Straight to the connection only when nothing of this feed is on its way through the
        // mailbox: a change that waits there (a per-user table's, say) goes out first.
        if seen == .all, let connection, mailbox.isIdle { return connection }
        mailbox.post(
            name, version: announcement.version, access: seen, frame: seen == .all ? announcement.frame : nil,
            postedAt: announcement.postedAt)
        return nil
    }

    /// Writes a change the hub routed to this feed's connection, on the connection's thread: at
    /// once when the client takes what it is sent, else through the mailbox (folded, written by the
    /// feed's writer as the client reads).
    func writeDirectly(_ announcement: FeedHub.Announcement, _ wire: FeedWire) {
        let name = announcement.table
        guard let connection = routing.withLock({ $0.connection }), connection.isWritable else {
            mailbox.post(
                name, version: announcement.version, access: .all, frame: announcement.frame,
                postedAt: announcement.postedAt)
            return
        }
        let isNew = state.withLock { state in
            guard announcement.version > state.sent[name] ?? 0 else { return false }
            state.sent[name] = announcement.version
            return true
        }
        guard isNew else { return }
        connection.write(wire)
        if let metrics = service.metrics {
            metrics.feedEvents.increment()
            metrics.fanOut.record(duration: ContinuousClock.now - announcement.postedAt)
        }
    }

    /// A heartbeat is due, from the hub; a feed whose token has expired ends instead (the client
    /// reconnects with a new one).
    func beat(now: Date) {
        if let expiry = identity?.expiresAt, expiry <= now {
            mailbox.finish()
        } else {
            mailbox.beat()
        }
    }

    /// The next bytes to write, or `nil` when the feed has ended. A caller that may be cancelled
    /// while it waits calls ``end()`` then (one cancellation handler around its loop, not one per
    /// event).
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
                return Self.heartbeatFrame
            case .changes(let changes):
                var frames: [UInt8] = []
                var position: String?
                var events = 0
                for change in changes {
                    var version = change.version
                    if change.access != .all {
                        let service = service
                        guard
                            let seen = try? await service.feedHub.visibleNewest(
                                change.table, change.access, after: change.version,
                                query: { try await service.visibleNewest(change.table, change.access) })
                        else { continue }
                        version = seen.version
                    }
                    let isNew = state.withLock { state in
                        guard version > state.sent[change.table] ?? 0 else { return false }
                        state.sent[change.table] = version
                        return true
                    }
                    guard isNew else { continue }
                    events += 1
                    metrics?.fanOut.record(duration: ContinuousClock.now - change.postedAt)
                    // The hub's rendering, shared by every feed that sees the whole table.
                    if let frame = change.frame, version == change.version {
                        if changes.count == 1 {
                            metrics?.feedEvents.increment()
                            return frame
                        }
                        frames += frame
                    } else {
                        if position == nil { position = TableService.FeedPosition.now() }
                        frames += TableService.changeFrame(change.table, version, position: position!)
                    }
                }
                if !frames.isEmpty {
                    metrics?.feedEvents.increment(by: events)
                    return frames
                }
            }
        }
        return nil
    }

    static let heartbeatFrame = Array(": heartbeat\n\n".utf8)

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
        detach()
        service.feedHub.unregister(self)
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
        /// The hub's rendering of the change, for a caller that sees the whole table.
        var frame: [UInt8]?
        /// When the hub took the oldest change folded into this one from the storage.
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
        /// The writer took changes and has not come back for more: they may not be written yet.
        var writing = false
        var waiter: UnsafeContinuation<Item?, Never>?

        /// What a waiter gets now, if anything.
        mutating func take() -> Item?? {
            if !order.isEmpty {
                writing = true
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

    func post(
        _ table: String, version: Int64, access: TableService.FeedAccess, frame: [UInt8]? = nil,
        postedAt: ContinuousClock.Instant = .now
    ) {
        update { state in
            if let known = state.pending[table] {
                if version > known.version {
                    state.pending[table]?.version = version
                    state.pending[table]?.frame = frame
                }
            } else {
                state.pending[table] = Change(
                    table: table, version: version, access: access, frame: frame, postedAt: postedAt)
                state.order.append(table)
            }
        }
    }

    func beat() { update { $0.heartbeat = true } }

    /// Whether no change waits here or is being written by the feed's writer: a change written
    /// past the mailbox now cannot overtake an earlier one.
    var isIdle: Bool { state.withLock { $0.order.isEmpty && !$0.writing } }

    func finish() { update { $0.finished = true } }

    private func update(_ change: (inout State) -> Void) {
        let (waiter, item): (UnsafeContinuation<Item?, Never>?, Item?) = state.withLock { state in
            change(&state)
            guard let waiter = state.waiter, let item = state.take() else { return (nil, nil) }
            state.waiter = nil
            return (waiter, item)
        }
        waiter?.resume(returning: item)
    }

    /// The next item, or `nil` once finished and drained. A caller that may be cancelled while it
    /// waits finishes the mailbox then (the feed's writer does, once for all its waits).
    func next() async -> Item? {
        await withUnsafeContinuation { (continuation: UnsafeContinuation<Item?, Never>) in
            let ready: Item?? = state.withLock { state in
                state.writing = false  // what the writer took before has been written
                if let item = state.take() { return item }
                state.waiter = continuation
                return .none
            }
            if case .some(let item) = ready { continuation.resume(returning: item) }
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
