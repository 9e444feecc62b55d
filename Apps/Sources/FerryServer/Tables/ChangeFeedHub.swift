import Foundation
import ServerStorageCore
import Synchronization

/// The fan-out behind every change feed of one server: one subscription to the storage's change
/// stream, each change rendered once, one heartbeat clock.
///
/// A write reaches every open feed through one task: the hub renders the change's event once (the
/// bytes that every feed seeing the whole table writes, shared, not copied), then gathers the feeds
/// by the thread their connection lives on (an event loop) and asks each thread, in one call per
/// ``laneBatch`` feeds, to write the event to those feeds' connections: no task wakes per feed, and
/// the threads write while the hub still sorts the rest. A feed not attached to
/// its connection yet, a feed that sees the table only in part, and a client that has not taken what
/// it was sent get the change through the feed's mailbox instead, which folds it and wakes the
/// feed's writer. The list of feeds is an array shared
/// copy-on-write: taking it for a change is one retain under the lock, whatever the number of feeds,
/// and opening or closing a feed is O(1). Feeds that see a table only in part (per-user tables, data
/// views) ask the storage for the newest row they see, and feeds with the same view of a table share
/// one query per change (``visibleNewest(_:_:after:query:)``).
///
/// Heartbeats are spread over ``heartbeatBuckets`` ticks of the heartbeat period, so that 10,000
/// idle feeds do not all write at the same instant; a feed whose token has expired ends at its tick.
final class FeedHub: Sendable {
    /// One change as the hub hands it to feeds.
    struct Announcement: Sendable {
        var table: String
        var version: Int64
        /// The `change` event for a caller that sees the whole table (position and version in it).
        var frame: [UInt8]
        /// When the hub took the change from the storage (fan-out latency is measured from it).
        var postedAt: ContinuousClock.Instant
    }

    /// How many ticks one heartbeat period is cut into; each feed beats at one of them.
    static let heartbeatBuckets = 16

    /// The feeds of one thread the hub hands a change to in one call.
    static let laneBatch = 256

    private struct State {
        var feeds: ContiguousArray<ChangeFeed> = []
        var slots: [ObjectIdentifier: Int] = [:]
        var tasks: [Task<Void, Never>] = []
        /// The storage's stream ended, or the hub was stopped: new feeds end at once.
        var finished = false
        var nextBucket = 0
    }

    private struct NewestKey: Hashable {
        var table: String
        var access: TableService.FeedAccess
    }

    private struct NewestEntry {
        /// The query began after the change to this version was announced.
        var covers: Int64
        var task: Task<Result<(version: Int64, updatedAt: Int64), any Error>, Never>
    }

    /// The most shared queries remembered; past it the memory starts afresh.
    private static let newestLimit = 4_096

    private let storage: any ServerStorage
    private let heartbeat: Duration
    private let state = Mutex(State())
    private let newest = Mutex<[NewestKey: NewestEntry]>([:])

    init(storage: any ServerStorage, heartbeat: Duration) {
        self.storage = storage
        self.heartbeat = heartbeat
    }

    /// How many feeds the hub serves.
    var count: Int { state.withLock { $0.feeds.count } }

    /// Adds `feed`: it gets every change announced from now on. Answers the feed's heartbeat tick, or
    /// `nil` when the hub has ended (the storage closed, the server stopped): the feed ends at once.
    func register(_ feed: ChangeFeed) -> Int? {
        state.withLock { state in
            if state.finished { return nil }
            if state.tasks.isEmpty { start(&state) }
            state.slots[ObjectIdentifier(feed)] = state.feeds.count
            state.feeds.append(feed)
            defer { state.nextBucket = (state.nextBucket + 1) % Self.heartbeatBuckets }
            return state.nextBucket
        }
    }

    /// Removes `feed` (closed); O(1).
    func unregister(_ feed: ChangeFeed) {
        state.withLock { state in
            guard let slot = state.slots.removeValue(forKey: ObjectIdentifier(feed)) else { return }
            let last = state.feeds.removeLast()
            if slot < state.feeds.count {
                state.feeds[slot] = last
                state.slots[ObjectIdentifier(last)] = slot
            }
        }
    }

    /// Ends every feed and the hub's tasks (the server stopped); later feeds end at once.
    func stop() {
        let (feeds, tasks) = state.withLock { state in
            state.finished = true
            defer { state.tasks = [] }
            return (state.feeds, state.tasks)
        }
        for task in tasks { task.cancel() }
        for feed in feeds { feed.end() }
    }

    /// Subscribes to the storage (before the first feed reads its state, so that a change in between
    /// shows in both) and starts the fan-out and the heartbeat clock.
    private func start(_ state: inout State) {
        let changes = storage.changes()
        let fanOut = Task { [weak self] in
            for await change in changes {
                guard let self else { return }
                let frame = TableService.changeFrame(
                    change.table, change.version, position: TableService.FeedPosition.now())
                let announcement = Announcement(
                    table: change.table, version: change.version, frame: frame, postedAt: .now)
                // Feeds whose connections share a thread get the change in one call on it per
                // `laneBatch` feeds: the threads start writing while the rest are sorted.
                var lanes: [ObjectIdentifier: (connection: any FeedConnection, feeds: [ChangeFeed])] = [:]
                func send(_ connection: any FeedConnection, _ feeds: [ChangeFeed]) {
                    connection.onLane(frame) { wire in for feed in feeds { feed.writeDirectly(announcement, wire) } }
                }
                for feed in self.state.withLock({ $0.feeds }) {
                    guard let connection = feed.deliver(announcement) else { continue }
                    let lane = connection.lane
                    lanes[lane, default: (connection, [])].feeds.append(feed)
                    if let full = lanes[lane], full.feeds.count >= Self.laneBatch {
                        send(full.connection, full.feeds)
                        lanes[lane] = nil
                    }
                }
                for (connection, feeds) in lanes.values { send(connection, feeds) }
            }
            self?.stop()  // the storage closed: every feed ends
        }
        let tick = heartbeat / Self.heartbeatBuckets
        let clock = Task { [weak self] in
            var bucket = 0
            var next = ContinuousClock.now + tick
            while !Task.isCancelled {
                guard (try? await Task.sleep(until: next, clock: .continuous)) != nil, let self else { return }
                // Ticks keep to the clock: a late wake-up beats every bucket whose tick has passed
                // instead of stretching the period (16 late sleeps made a 100 ms heartbeat last a
                // second on a busy machine, and clients gave up on a silent feed).
                let now = ContinuousClock.now
                var due: Set<Int> = []
                while next <= now && due.count < Self.heartbeatBuckets {
                    due.insert(bucket)
                    bucket = (bucket + 1) % Self.heartbeatBuckets
                    next += tick
                }
                if next <= now { next = now + tick }
                let date = Date()
                for feed in self.state.withLock({ $0.feeds }) where due.contains(feed.heartbeatBucket) {
                    feed.beat(now: date)
                }
            }
        }
        state.tasks = [fanOut, clock]
    }

    /// The version and `updatedAt` of the newest row `access` sees in `table`, from a query that
    /// began after the change to `version` was announced: every feed with the same view of the table
    /// shares one query per change, instead of each asking the storage the same question.
    func visibleNewest(
        _ table: String, _ access: TableService.FeedAccess, after version: Int64,
        query: @escaping @Sendable () async throws -> (version: Int64, updatedAt: Int64)
    ) async throws -> (version: Int64, updatedAt: Int64) {
        let key = NewestKey(table: table, access: access)
        let task = newest.withLock { entries in
            if let entry = entries[key], entry.covers >= version { return entry.task }
            if entries.count >= Self.newestLimit { entries.removeAll() }
            // Versions of a table commit in order: a query that begins after this announcement sees
            // every change up to it.
            let task = Task { () -> Result<(version: Int64, updatedAt: Int64), any Error> in
                do { return .success(try await query()) } catch { return .failure(error) }
            }
            entries[key] = NewestEntry(covers: version, task: task)
            return task
        }
        return try await task.value.get()
    }
}

/// A change feed's connection, for the writes the hub makes without the feed's writer task:
/// FerryServer's HTTP layer provides it (an event loop's channel), this layer only uses it.
protocol FeedConnection: AnyObject, Sendable {
    /// The thread the connection's writes run on; connections with the same lane share it.
    var lane: ObjectIdentifier { get }
    /// Runs `body` on the connection's thread with `frame` made ready to write, once for every
    /// connection of the lane.
    func onLane(_ frame: [UInt8], _ body: @escaping @Sendable (FeedWire) -> Void)
    /// Whether the client has taken what it was sent (on the connection's thread).
    var isWritable: Bool { get }
    /// Writes a frame made ready by ``onLane(_:_:)`` and sends it (on the connection's thread).
    func write(_ wire: FeedWire)
}
