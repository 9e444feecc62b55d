import StoreConformance
import StoreMemory
import SyncTesting
import Synchronization
import Testing

@testable import SyncCore

/// Waits (up to `seconds`) until `condition` holds; records an issue when it never does.
func eventually(
    _ what: String, seconds: Double = 30, sourceLocation: SourceLocation = #_sourceLocation,
    _ condition: () async throws -> Bool
) async throws {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
    while ContinuousClock.now < deadline {
        if try await condition() { return }
        try await Task.sleep(for: .milliseconds(10))
    }
    // Once more: a sleep that ended late (a busy machine) must not hide a condition that holds.
    if try await condition() { return }
    Issue.record("never happened: \(what)", sourceLocation: sourceLocation)
}

@Suite("Automatic sync")
struct AutomaticSyncTests {
    /// Servers name tables whatever their case (the protocol's do, and Ferry's): a hint of
    /// `TodoItem` is a hint of the subscribed `todoitem`; an exact name wins.
    @Test func aHintNamesASubscribedTableWhateverItsCase() {
        #expect(AutomaticSyncRun.subscribed("TodoItem", among: ["todoitem", "notes"]) == "todoitem")
        #expect(AutomaticSyncRun.subscribed("todo", among: ["Todo", "todo"]) == "todo")
        #expect(AutomaticSyncRun.subscribed("Todo", among: ["todo", "TODO"]) == "TODO")
        #expect(AutomaticSyncRun.subscribed("other", among: ["todo"]) == nil)
    }

    /// Fast pacing for tests: pushes right after writes, polls every 50 ms (the model server has no
    /// change feed), retries from 20 ms up to 200 ms.
    static let fast = AutomaticSyncConfiguration(
        pushDelay: .milliseconds(5), pollInterval: .milliseconds(50), retryDelay: .milliseconds(20),
        maximumRetryDelay: .milliseconds(200))

    static func items(_ context: SyncContext) async throws -> [String: JSONValue?] {
        let items = try await context.table("todo").query(TableQuery().top(100_000)).items
        return Dictionary(uniqueKeysWithValues: items.map { ($0.id!, $0["title"]) })
    }

    @Test(arguments: [StoreKind.memory, .sqliteFile])
    func twoDevicesConvergeWithoutPushingOrPullingThemselves(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let a = try Device("a", kind: kind, server: server, handler: ServerWinsConflictHandler())
        let b = try Device("b", kind: kind, server: server, handler: ServerWinsConflictHandler())
        let subscription = SyncSubscription(table: "todo", queryID: "everything")
        await a.context.startAutomaticSync([subscription], configuration: Self.fast)
        await b.context.startAutomaticSync([subscription], configuration: Self.fast)
        let fromA = Observed(b.table().observe(TableQuery().filter(.field("title").eq("from A"))))

        var random = SeededRandom(seed: 17)
        for step in 0..<60 {
            let device = Bool.random(using: &random) ? a : b
            let known: [String] = try await device.table().query(TableQuery().top(1_000)).items.compactMap { $0.id }
            if known.isEmpty || Int.random(in: 0..<3, using: &random) == 0 {
                try await device.table().insert(["title": .string("\(device.name) \(step)")])
            } else {
                let id = known.randomElement(using: &random)!
                _ = try? await device.table().update([
                    "id": .string(id), "title": .string("\(device.name) edit \(step)"),
                ])
            }
        }
        try await a.table().insert(["id": "a-marker", "title": "from A"])
        try await fromA.wait { $0.map(\.id) == ["a-marker"] }
        try await eventually("both devices hold what the server holds") {
            let rows = Dictionary(uniqueKeysWithValues: server.rows("todo").map { ($0.id!, $0["title"]) })
            let onA = try await Self.items(a.context)
            let onB = try await Self.items(b.context)
            let queued = try await a.context.queuedOperationCount() + b.context.queuedOperationCount()
            return queued == 0 && onA == rows && onB == rows
        }
        try await eventually("the status says so") { b.context.status.snapshot.isCaughtUp }
        #expect(b.context.status.snapshot.summary == "everything synced")
        fromA.stop()
        await a.context.stopAutomaticSync()
        await b.context.stopAutomaticSync()
        #expect(!a.context.status.snapshot.isRunning)
        // Stopped: no more requests.
        let requests = server.requests.count
        try await Task.sleep(for: .milliseconds(200))
        #expect(server.requests.count == requests)
    }

    /// A change counts as waiting until its push, not until the pulls after the push end: the
    /// status said "1 change waiting to be pushed" of a pushed change for as long as a pull ran.
    @Test func aPushedChangeStopsWaitingBeforeThePullsAfterIt() async throws {
        let server = ModelServer()
        let device = try Device(kind: .memory, server: server)
        let status = device.context.status
        let waitingDuringPulls = Mutex<[Int]>([])
        server.setFaultPolicy { request in
            guard request.kind == .query else { return nil }
            return .hook {
                // A pull once the item is on the server: the one after its push.
                if server.row("todo", id: "a") != nil {
                    waitingDuringPulls.withLock { $0.append(status.snapshot.pendingOperations) }
                }
                return nil
            }
        }
        // Queued before the start: the first step pushes it, then pulls.
        try await device.table().insert(["id": "a", "title": "Milk"])
        await device.context.startAutomaticSync([SyncSubscription(table: "todo")], configuration: Self.fast)
        try await eventually("a pull after the push") { !waitingDuringPulls.withLock(\.isEmpty) }
        #expect(waitingDuringPulls.withLock { $0 }.allSatisfy { $0 == 0 }, "\(waitingDuringPulls.withLock { $0 })")
        await device.context.stopAutomaticSync()
    }

    @Test func aServerThatIsDownIsRetriedLessAndLessOften() async throws {
        let server = ModelServer()
        let device = try Device(kind: .memory, server: server)
        server.setFaultPolicy { _ in .dropBeforeApply }
        await device.context.startAutomaticSync([SyncSubscription(table: "todo")], configuration: Self.fast)
        try await device.table().insert(["id": "a", "title": "Milk"])
        try await eventually("a few attempts") { server.requests.count >= 3 }
        // Retries wait 20, 40, 80, 160, then 200 ms (with jitter): a handful in a second, each a
        // request or two; without a backoff it would be thousands.
        let before = server.requests.count
        try await Task.sleep(for: .seconds(1))
        let attempts = server.requests.count - before
        #expect(attempts <= 30, "\(attempts) requests in a second")
        try await eventually("the status says why") { device.context.status.snapshot.lastError != nil }
        server.clearFaults()
        try await eventually("the item arrives once the server is back") {
            let queued = try await device.context.queuedOperationCount()
            return server.row("todo", id: "a") != nil && queued == 0
        }
        try await eventually("the error is gone") { device.context.status.snapshot.lastError == nil }
        await device.context.stopAutomaticSync()
    }

    /// Operations the server failed (503) are pushed again after the backoff, not left failed.
    @Test func operationsTheServerFailedAreRetried() async throws {
        let server = ModelServer()
        let device = try Device(kind: .memory, server: server)
        server.inject(.status(503, "maintenance"), on: .insert, count: 2)
        await device.context.startAutomaticSync([SyncSubscription(table: "todo")], configuration: Self.fast)
        try await device.table().insert(["id": "a", "title": "Milk"])
        try await eventually("the item arrives after the 503s") {
            let queued = try await device.context.queuedOperationCount()
            return server.row("todo", id: "a") != nil && queued == 0
        }
        #expect(server.requests.filter { $0.kind == .insert }.count == 3)
        await device.context.stopAutomaticSync()
    }

    /// A server that answers 503 with `Retry-After` is not asked again sooner, whatever the backoff.
    @Test func aServerThatAsksToWaitIsNotAskedAgainSooner() async throws {
        let server = ModelServer()
        let device = try Device(kind: .memory, server: server)
        server.inject(.busy(retryAfter: .seconds(2)), on: .insert, count: 1)
        await device.context.startAutomaticSync([SyncSubscription(table: "todo")], configuration: Self.fast)
        try await device.table().insert(["id": "a", "title": "Milk"])
        try await eventually("the first attempt") { !server.requests.filter { $0.kind == .insert }.isEmpty }
        // The backoff alone would retry after 20 ms, 40 ms, …: a dozen attempts in a second.
        try await Task.sleep(for: .seconds(1))
        #expect(server.requests.filter { $0.kind == .insert }.count == 1, "asked again before the 2 s")
        try await eventually("the item arrives once the wait is over") {
            let queued = try await device.context.queuedOperationCount()
            return server.row("todo", id: "a") != nil && queued == 0
        }
        await device.context.stopAutomaticSync()
    }

    @Test func nothingIsSentWhileOffline() async throws {
        let server = ModelServer()
        server.seed("todo", [["id": "s", "title": "From the server"]])
        let device = try Device(kind: .memory, server: server)
        let network = ManualConnectivity(online: false)
        await device.context.startAutomaticSync(
            [SyncSubscription(table: "todo")], configuration: Self.fast, connectivity: network)
        try await device.table().insert(["id": "a", "title": "Written offline"])
        try await eventually("the status counts the write") {
            device.context.status.snapshot.summary == "offline (1 change waiting)"
        }
        try await Task.sleep(for: .milliseconds(300))
        #expect(server.requests.isEmpty, "\(server.requests.count) requests while offline")
        network.isOnline = true
        try await eventually("the offline write is pushed and the server's item pulled") {
            let local = try await Self.items(device.context)
            let queued = try await device.context.queuedOperationCount()
            return server.row("todo", id: "a") != nil && local["s"] != nil && queued == 0
        }
        await device.context.stopAutomaticSync()
    }

    @Test func synchronizeIsABarrier() async throws {
        let server = ModelServer()
        let a = try Device("a", kind: .memory, server: server)
        let b = try Device("b", kind: .memory, server: server)
        try await a.table().insert(["id": "from-a", "title": "A"])
        try await a.context.push()
        try await b.table().insert(["id": "from-b", "title": "B"])
        let report = try await b.context.synchronize([SyncSubscription(table: "todo")])
        #expect(report.push.pushed == 1 && report.push.isComplete)
        #expect(report.pulls["automatic"]?.items.upserted ?? 0 >= 1)
        #expect(try await Self.items(b.context).keys.sorted() == ["from-a", "from-b"])
        #expect(server.row("todo", id: "from-b") != nil)
    }

    /// A device syncing `todo` by itself against a model server whose feed the test drives, once
    /// the feed is open.
    static func startedWithAFeed() async throws -> (ModelServer, FeedingRemote, SyncContext) {
        let server = ModelServer()
        let remote = FeedingRemote(server)
        let context = SyncContext(store: MemoryStore(), remote: remote)
        await context.startAutomaticSync(
            [SyncSubscription(table: "todo")],
            configuration: AutomaticSyncConfiguration(pushDelay: .milliseconds(5), pollInterval: .seconds(3_600)))
        try await eventually("the feed is opened") { remote.feedOpened }
        return (server, remote, context)
    }

    /// A server whose capabilities could not be read at first (it was down) is asked again after
    /// the first sync: its change feed is used from then on, and a hint pulls the table.
    @Test func aFeedThatCouldNotBeAskedForAtFirstIsUsedLater() async throws {
        let (server, remote, context) = try await Self.startedWithAFeed()
        try await eventually("the status says the feed is used") { context.status.snapshot.usesChangeFeed }
        server.seed("todo", [["id": "s", "title": "From the server"]])
        remote.hint("todo")
        try await eventually("the hint pulls the table") {
            try await context.table("todo").item(id: "s") != nil
        }

        await context.stopAutomaticSync()
    }

    /// A feed that says far more than the device can pull (a storm of changes, other tables' names
    /// from a hostile server) costs a few pulls, not one per event: before, every event queued
    /// behind the running pull, each with a status refresh, and memory grew by 14 MB/s.
    @Test func aStormOfHintsIsGatheredIntoAFewPulls() async throws {
        let (server, remote, context) = try await Self.startedWithAFeed()
        try await eventually("the first pull is over") { context.status.snapshot.isCaughtUp }
        server.seed("todo", [["id": "s", "title": "From the server"]])
        server.clearRequests()
        // Pulls of 50 ms, as over a network: the hints that arrive meanwhile wait for the next one
        // (on an idle machine a pull of the model server took less time than a few hints).
        server.setFaultPolicy { request in
            request.kind == .query
                ? .hook {
                    try? await Task.sleep(for: .milliseconds(50))
                    return nil
                } : nil
        }
        for index in 0..<20_000 {
            remote.hint(index.isMultiple(of: 2) ? "todo" : "other-\(index)")
        }
        // One pull per hint would take 500 s to settle; gathered, a few pulls do.
        try await eventually("the hints pull the table and the device settles") {
            try await context.table("todo").item(id: "s") != nil && context.status.snapshot.isCaughtUp
        }
        try await Task.sleep(for: .milliseconds(300))
        let pulls = server.requests.filter { $0.kind == .query }.count
        #expect(pulls >= 1 && pulls < 100, "\(pulls) queries for 10,000 hints of one table")
        #expect(!server.requests.contains { $0.table.hasPrefix("other-") }, "a table nobody subscribed to was pulled")
        await context.stopAutomaticSync()
    }
}

extension AutomaticSyncTests {
    /// After each local write, the server's feed hints the device's own write back and automatic
    /// sync pulls: the status said "everything synced", then not, then again, after every edit.
    /// Every value the status takes is recorded (nothing dropped for a slow reader): once a push
    /// has emptied the queue, none says the device is not caught up.
    @Test func theFeedEchoingTheDevicesOwnWritesNeverTakesCaughtUpAway() async throws {
        let server = ModelServer()
        let remote = EchoingRemote(server)
        let context = SyncContext(store: MemoryStore(), remote: remote)
        await context.startAutomaticSync(
            [SyncSubscription(table: "todo")],
            configuration: AutomaticSyncConfiguration(pushDelay: .milliseconds(5), pollInterval: .seconds(3_600)))
        try await eventually("caught up at first") { context.status.snapshot.isCaughtUp }
        let seen = Mutex<[SyncStatus.Snapshot]>([])
        let updates = context.status.updates(bufferingNewest: .max)
        let recording = Task { for await snapshot in updates { seen.withLock { $0.append(snapshot) } } }
        for index in 0..<3 {
            let queries = server.requests.filter { $0.kind == .query }.count
            try await context.table("todo").insert(["id": .string("item-\(index)"), "title": "Milk"])
            try await eventually("pushed, echoed, pulled, settled") {
                let pulled = server.requests.filter { $0.kind == .query }.count > queries
                let now = context.status.snapshot
                return server.row("todo", id: "item-\(index)") != nil && pulled && now.isCaughtUp && !now.isPulling
                    && seen.withLock { $0.last } == now
            }
        }
        recording.cancel()
        await context.stopAutomaticSync()
        let values = seen.withLock { $0 }
        #expect(values.contains { $0.pendingOperations > 0 && !$0.isCaughtUp }, "the writes were seen waiting")
        #expect(values.contains { $0.isPulling }, "the echoes were pulled")
        let flickers = values.filter {
            $0.pendingOperations == 0 && $0.uploadProblem == nil && $0.downloadProblem == nil && !$0.isCaughtUp
        }
        #expect(flickers.isEmpty, "not caught up with nothing queued: \(flickers)")
    }
}

/// The model server with a change feed that hints every write it accepts back, as Ferry's server
/// does (the feed tells every device, the writer too).
final class EchoingRemote: RemoteService, Sendable {
    struct EchoingTable: RemoteTable {
        let inner: any RemoteTable
        let echo: @Sendable () -> Void

        func insert(_ item: JSONObject) async throws(RemoteError) -> JSONObject {
            let stored = try await inner.insert(item)
            echo()
            return stored
        }

        func update(_ item: JSONObject, ifVersion version: String?) async throws(RemoteError) -> JSONObject {
            let stored = try await inner.update(item, ifVersion: version)
            echo()
            return stored
        }

        func delete(id: String, ifVersion version: String?) async throws(RemoteError) {
            try await inner.delete(id: id, ifVersion: version)
            echo()
        }

        func item(id: String) async throws(RemoteError) -> JSONObject? { try await inner.item(id: id) }
        func query(_ query: TableQuery) async throws(RemoteError) -> RemotePage { try await inner.query(query) }
    }

    let inner: any RemoteService
    private let feed = Mutex<AsyncThrowingStream<RemoteChangeEvent, any Error>.Continuation?>(nil)

    init(_ server: ModelServer) { inner = server.remote() }

    func table(_ name: String) -> any RemoteTable {
        EchoingTable(inner: inner.table(name)) { self.hint(name) }
    }

    func hint(_ table: String) {
        _ = feed.withLock { $0 }?.yield(.changed(table: table, version: 1, position: "\(table)=1"))
    }

    func offersChangeFeed() async -> Bool { true }

    func changeFeed(tables: [String]?, after position: String?) async throws(RemoteError)
        -> AsyncThrowingStream<RemoteChangeEvent, any Error>
    {
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: RemoteChangeEvent.self)
        continuation.yield(.ready(versions: ["todo": 0], position: "todo=0"))
        feed.withLock { $0 = continuation }
        return stream
    }
}

/// The model server with a change feed the test drives; the first question about it fails.
final class FeedingRemote: RemoteService, Sendable {
    let inner: any RemoteService
    private let state = Mutex<(asked: Int, feed: AsyncThrowingStream<RemoteChangeEvent, any Error>.Continuation?)>(
        (0, nil))

    init(_ server: ModelServer) { inner = server.remote() }

    func table(_ name: String) -> any RemoteTable { inner.table(name) }

    func offersChangeFeed() async -> Bool {
        state.withLock { state in
            state.asked += 1
            return state.asked > 1  // the first time the server could not be reached
        }
    }

    func changeFeed(tables: [String]?, after position: String?) async throws(RemoteError)
        -> AsyncThrowingStream<RemoteChangeEvent, any Error>
    {
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: RemoteChangeEvent.self)
        continuation.yield(.ready(versions: ["todo": 0], position: "todo=0"))
        state.withLock { $0.feed = continuation }
        return stream
    }

    var feedOpened: Bool { state.withLock { $0.feed != nil } }

    func hint(_ table: String) {
        _ = state.withLock { $0.feed }?.yield(.changed(table: table, version: 1, position: "\(table)=1"))
    }
}
