import FerryServer
import Foundation
import Logging
import ServerTestSupport
import StoreSQLite
import Synchronization
import SyncCore
import Testing
import Transport

/// The newest result of an observation, for a test to wait on.
final class LatestResult: Sendable {
    private final class State: Sendable {
        let items = Mutex<[JSONObject]?>(nil)
    }

    private let state = State()
    private let task: Task<Void, Never>

    init(_ stream: AsyncThrowingStream<[JSONObject], any Error>) {
        let state = state
        task = Task {
            do {
                for try await items in stream { state.items.withLock { $0 = items } }
            } catch {
                Issue.record("the observation failed: \(error)")
            }
        }
    }

    var ids: Set<String> { Set(state.items.withLock { $0 ?? [] }.compactMap(\.id)) }

    /// Waits (up to 20 s) until the result holds `id`.
    func waitFor(_ id: String, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        for _ in 0..<2_000 {
            if ids.contains(id) { return }
            try await Task.sleep(for: .milliseconds(10))
        }
        Issue.record("'\(id)' never showed; the result holds \(ids.sorted())", sourceLocation: sourceLocation)
    }

    func stop() { task.cancel() }
}

@Suite("Live sync: automatic sync over the change feed", .timeLimit(.minutes(10)))
struct LiveSyncTests {
    /// Only the feed can tell of changes: polling is once an hour.
    static let feedOnly = AutomaticSyncConfiguration(
        pushDelay: .milliseconds(5), pollInterval: .seconds(3_600), retryDelay: .milliseconds(50),
        maximumRetryDelay: .milliseconds(400))

    static func device(_ name: String, _ scratch: Scratch, _ url: URL) throws -> SyncContext {
        SyncContext(
            store: try SQLiteStore(path: scratch.url.appendingPathComponent(name + ".sqlite").path),
            remote: TestServer.remote(url, .v3))
    }

    @Test(arguments: ServerBackend.allCases)
    func aWriteOnOneDeviceShowsOnAnotherWithoutPolling(_ backend: ServerBackend) async throws {
        let scratch = try await Scratch(backend)
        defer { scratch.remove() }
        let server = try await TestServer.start(in: scratch)
        defer { Task { try? await server.stop() } }
        let a = try Self.device("a", scratch, server.url)
        let b = try Self.device("b", scratch, server.url)
        let subscription = SyncSubscription(table: "todo")
        await a.startAutomaticSync([subscription], configuration: Self.feedOnly)
        await b.startAutomaticSync([subscription], configuration: Self.feedOnly)
        let seenOnB = LatestResult(b.table("todo").observe())
        for index in 0..<5 {
            try await a.table("todo").insert(["id": .string("a-\(index)"), "title": "from A"])
            try await seenOnB.waitFor("a-\(index)")
        }
        // And the other way round.
        let seenOnA = LatestResult(a.table("todo").observe())
        try await b.table("todo").insert(["id": "b-0", "title": "from B"])
        try await seenOnA.waitFor("b-0")
        #expect(b.status.snapshot.usesChangeFeed)
        try await eventually("B is caught up") { b.status.snapshot.isCaughtUp }
        seenOnA.stop()
        seenOnB.stop()
        await a.stopAutomaticSync()
        await b.stopAutomaticSync()
    }

    /// The server goes away and comes back on the same port: the feed reopens from its last
    /// position, so a change made while it was away (by another client) still arrives, and a write
    /// queued meanwhile is pushed.
    @Test func aDroppedFeedResumesWithoutMissingAChange() async throws {
        let scratch = try await Scratch()
        defer { scratch.remove() }
        let port = try await freePort(in: scratch)
        var server = try await TestServer.start(in: scratch, port: port)
        let url = server.url
        let a = try Self.device("a", scratch, url)
        let b = try Self.device("b", scratch, url)
        let subscription = SyncSubscription(table: "todo")
        await a.startAutomaticSync([subscription], configuration: Self.feedOnly)
        await b.startAutomaticSync([subscription], configuration: Self.feedOnly)
        let seenOnB = LatestResult(b.table("todo").observe())
        try await a.table("todo").insert(["id": "before", "title": "x"])
        try await seenOnB.waitFor("before")

        try await server.stop()
        try await a.table("todo").insert(["id": "queued-on-a", "title": "written while the server was away"])
        try await Task.sleep(for: .milliseconds(300))
        server = try await TestServer.start(in: scratch, port: port)
        // Another client writes right away: B's feed may not be back yet; its position brings it.
        _ = try await server.remote(.v3).onlineTable("todo").insert(["id": "by-another", "title": "y"])
        try await seenOnB.waitFor("by-another")
        try await seenOnB.waitFor("queued-on-a")
        seenOnB.stop()
        await a.stopAutomaticSync()
        await b.stopAutomaticSync()
        try await server.stop()
    }

    /// A device that writes nothing while the server is away learns of what changed only from its
    /// feed's resumed position: after the restart it pulls the one table that changed, not both
    /// (a feed that ignored its position, or a client that re-pulled everything, would pull both).
    /// The server's resume margin is 0 here (one clock): by default a resumed feed also hints tables
    /// written in the minute before its position.
    @Test func aResumedFeedBringsOnlyTheTableThatChanged() async throws {
        let scratch = try await Scratch()
        defer { scratch.remove() }
        let port = try await freePort(in: scratch)
        var limits = RequestLimits()
        limits.changeFeedResumeMargin = .zero
        var server = try await TestServer.start(in: scratch, port: port, limits: limits)
        let reader = try Self.device("reader", scratch, server.url)
        let subscriptions = [SyncSubscription(table: "todo"), SyncSubscription(table: "notes")]
        let writer = server.remote(.v3)
        _ = try await writer.onlineTable("notes").insert(["id": "n0"])
        await reader.startAutomaticSync(subscriptions, configuration: Self.feedOnly)
        let todo = LatestResult(reader.table("todo").observe())
        let notes = LatestResult(reader.table("notes").observe())
        try await notes.waitFor("n0")
        _ = try await writer.onlineTable("todo").insert(["id": "t0"])
        try await todo.waitFor("t0")
        try await eventually("the reader is caught up") { reader.status.snapshot.isCaughtUp }

        let events = reader.events()
        let pulls = Task {
            var tables: [String] = []
            for await event in events {
                if case .pullStarted(let table, _) = event { tables.append(table) }
            }
            return tables
        }
        try await server.stop()
        try await Task.sleep(for: .milliseconds(300))
        server = try await TestServer.start(in: scratch, port: port, limits: limits)
        _ = try await server.remote(.v3).onlineTable("todo").insert(["id": "t1", "title": "while it was away"])
        try await todo.waitFor("t1")
        try await Task.sleep(for: .milliseconds(300))
        pulls.cancel()
        let pulled = await pulls.value
        #expect(pulled.contains("todo"))
        #expect(!pulled.contains("notes"), "a table that did not change was pulled again: \(pulled)")
        todo.stop()
        notes.stop()
        await reader.stopAutomaticSync()
        try await server.stop()
    }

    /// Two server instances on one PostgreSQL database: a write through instance 1 reaches a device
    /// connected to instance 2.
    @Test func aWriteThroughOneInstanceReachesADeviceOnAnother() async throws {
        let scratch = try await Scratch(.postgreSQL)
        defer { scratch.remove() }
        let first = try await TestServer.start(in: scratch)
        let second = try await TestServer.start(in: scratch)
        defer {
            Task {
                try? await first.stop()
                try? await second.stop()
            }
        }
        let a = try Self.device("a", scratch, first.url)
        let b = try Self.device("b", scratch, second.url)
        let subscription = SyncSubscription(table: "todo")
        await a.startAutomaticSync([subscription], configuration: Self.feedOnly)
        await b.startAutomaticSync([subscription], configuration: Self.feedOnly)
        let seenOnB = LatestResult(b.table("todo").observe())
        try await a.table("todo").insert(["id": "via-instance-1", "title": "x"])
        try await seenOnB.waitFor("via-instance-1")
        seenOnB.stop()
        await a.stopAutomaticSync()
        await b.stopAutomaticSync()
    }
}
