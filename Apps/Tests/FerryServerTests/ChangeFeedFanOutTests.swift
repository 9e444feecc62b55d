@testable import FerryServer
import Foundation
import ServerStorageCore
import ServerStorageSQLite
import ServerTestSupport
import SyncCore
import Synchronization
import Testing
import Transport

#if canImport(Glibc)
    import Glibc
    private let systemRead = Glibc.read
    private let systemClose = Glibc.close
    private let openFiles = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
#elseif canImport(Darwin)
    import Darwin
    private let systemRead = Darwin.read
    private let systemClose = Darwin.close
    private let openFiles = RLIMIT_NOFILE
#endif

/// Many feeds on one server (issue 31): the configured limit holds exactly, every feed of a few
/// hundred hears one write, and the hub that fans changes out shares its work between feeds.
/// Performance is measured by `bash Tools/bench-sync.sh --fan-out 1000,10000`, not here.
@Suite("Change feed fan-out", .serialized, .timeLimit(.minutes(5)))
struct ChangeFeedFanOutTests {
    /// A change the hub writes straight to a feed's connection never overtakes an earlier one
    /// that waits for its visibility query (a per-user table's): a client that remembers the last
    /// event's position would otherwise resume past a change it never heard of.
    @Test func aChangeWrittenDirectlyWaitsForAnEarlierOneOfTheSameFeed() async throws {
        let storage = StuckStorage(try sqliteStorage(.memory, logger: .quietTest))
        var configuration = ServerConfiguration(
            host: "127.0.0.1", port: 0,
            tables: [TableSettings(name: "notes", requiresAuth: true, perUser: true), TableSettings(name: "todo")],
            logger: .quietTest)
        configuration.authSecret = LiveServer.secret
        let server = try await ReferenceServer.start(configuration, storage: storage, ownsStorage: true)
        let alice = ChangeFeedTests.remote(server.port, token: LiveServer.token("alice"))
        let feed = FeedReader(try await alice.changeFeed(tables: nil, after: nil))
        _ = try await feed.first(1)  // ready
        storage.holdQueries(of: "notes")
        _ = try await alice.onlineTable("notes").insert(["id": "n1"])
        _ = try await alice.onlineTable("todo").insert(["id": "t1"])
        try await eventually("the feed's visibility query waits") { storage.slowCount == 1 }
        try await Task.sleep(for: .milliseconds(300))
        #expect(feed.received.count == 1, "nothing overtakes the held change: \(feed.received)")
        storage.proceed()
        let events = try await feed.first(3)
        #expect(events.dropFirst().map(ChangeFeedTests.table) == ["notes", "todo"])
        feed.stop()
        try await server.shutdown()
    }

    @Test func aServerAcceptsExactlyItsFeedLimitAndRefusesTheNextWith429() async throws {
        var limits = RequestLimits()
        limits.maximumChangeFeeds = 300
        // No tokens: every caller is anonymous, and only the total applies.
        let live = try await LiveServer.start(tables: [TableSettings(name: "todo")], limits: limits, authSecret: nil)
        defer { Task { try? await live.stop() } }
        let feeds = try await RawFeeds.open(300, port: live.server.port)
        defer { feeds.close() }
        #expect(feeds.readyCount == 300, "every feed up to the limit starts with ready")
        let refused = try await live.send("GET", "/tables/$changes")
        #expect(refused.status == 429)
        #expect(refused.header("Retry-After") == "5")
        #expect(refused.json?["code"]?.stringValue == "tooManyFeeds", "\(refused.text)")
        #expect(refused.json?["error"]?.stringValue == "too many change feeds are open; retry later", "\(refused.text)")
        feeds.close()
        try await eventually("the closed feeds left") { live.hubCount == 0 }
        let again = try await RawFeeds.open(1, port: live.server.port)
        #expect(again.readyCount == 1, "the places came back")
        again.close()
    }

    /// One backend at a time (the suite is serialized: one test of hundreds of feeds at a time), and
    /// 300 feeds: each feed holds two descriptors in this process (the client's and the server's),
    /// and with both backends at once (1,600 descriptors and the other tests') a `Process.run()` of
    /// another test crashed the test process: Foundation on Linux reads
    /// `/proc/self/fd` past the end of its buffer once about 1,350 descriptors are open
    /// (swiftlang/swift-corelibs-foundation#5472, fixed after Swift 6.3.1; seen in CI on
    /// 2026-11-28, the crash's registers holding descriptor numbers 1362 and 1363).
    @Test(.serialized, arguments: ServerBackend.allCases)
    func everyFeedOfAServerWithDefaultLimitsHearsOneWrite(_ backend: ServerBackend) async throws {
        // 300 anonymous feeds, on a server without tokens (where anonymous callers are bounded by the
        // total only): the default of 256 before issue 31 refused the 257th.
        let live = try await LiveServer.start(
            tables: [TableSettings(name: "todo")], backend: backend, authSecret: nil)
        defer { Task { try? await live.stop() } }
        let server = live.server
        let feeds = try await RawFeeds.open(300, port: server.port, tables: "todo")
        defer { feeds.close() }
        #expect(feeds.readyCount == 300)
        let written = try await LoopbackHTTP.send(
            port: server.port, method: "POST", target: "/tables/todo",
            headers: [("Content-Type", "application/json"), ("ZUMO-API-VERSION", "3.0.0")],
            body: Array(#"{"id":"a","title":"Milk"}"#.utf8))
        #expect(written.status == 201, "\(String(decoding: written.body, as: UTF8.self))")
        let heard = try await feeds.waitForChanges(table: "todo", timeout: .seconds(30))
        #expect(heard == 300, "every feed hears the write once")
    }

    @Test func theHubKeepsItsFeedsWhenOneInTheMiddleCloses() async throws {
        let live = try await LiveServer.start(tables: [TableSettings(name: "todo")])
        defer { Task { try? await live.stop() } }
        let feeds = try await RawFeeds.open(3, port: live.server.port, tables: "todo")
        defer { feeds.close() }
        try await eventually("three feeds in the hub") { live.hubCount == 3 }
        feeds.close(index: 1)
        try await eventually("the closed feed left the hub") { live.hubCount == 2 }
        let written = try await live.send("POST", "/tables/todo", json: ["id": "a"])
        #expect(written.status == 201)
        #expect(try await feeds.waitForChanges(table: "todo", timeout: .seconds(10)) == 2)
    }

    @Test func feedsWithTheSameViewShareOneQueryPerChange() async throws {
        let hub = FeedHub(storage: try sqliteStorage(.memory, logger: .quietTest), heartbeat: .seconds(15))
        let queries = Mutex(0)
        let access = TableService.FeedAccess.some(.owner("alice"), nil)
        @Sendable func ask(_ version: Int64) async throws -> Int64 {
            try await hub.visibleNewest("notes", access, after: version) {
                queries.withLock { $0 += 1 }
                return (version: version, updatedAt: 0)
            }.version
        }
        for _ in 0..<100 { #expect(try await ask(5) == 5) }
        #expect(queries.withLock { $0 } == 1, "a hundred feeds, one query")
        #expect(try await ask(6) == 6)
        #expect(queries.withLock { $0 } == 2, "a newer change asks again")
        #expect(try await ask(5) == 6, "the newer answer covers an older change")
        #expect(queries.withLock { $0 } == 2)
        _ = try await hub.visibleNewest("notes", .some(.owner("bob"), nil), after: 5) {
            queries.withLock { $0 += 1 }
            return (version: 1, updatedAt: 0)
        }
        #expect(queries.withLock { $0 } == 3, "another view is another query")
    }
}

extension LiveServer {
    /// Feeds currently served by the server's hub.
    var hubCount: Int { server.feedHub.count }
}

/// Change feeds over plain loopback sockets (the test's HTTP clients pool a few connections per
/// host): hundreds of them, read without a task each.
final class RawFeeds: Sendable {
    private let sockets: Mutex<[Int32?]>
    private let received: Mutex<[[UInt8]]>
    let readyCount: Int

    private init(sockets: [Int32], received: [[UInt8]]) {
        self.sockets = Mutex(sockets)
        self.received = Mutex(received)
        readyCount = received.filter { Self.contains($0, "event: ready") }.count
    }

    /// Opens `count` feeds (of `tables`, when given) and reads each until its `ready` event.
    static func open(_ count: Int, port: Int, tables: String? = nil) async throws -> RawFeeds {
        raiseOpenFileLimit()
        return try await offThePool {
            var sockets: [Int32] = []
            var received: [[UInt8]] = []
            let target = "/tables/$changes" + (tables.map { "?tables=" + $0 } ?? "")
            let request = Array(
                "GET \(target) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nZUMO-API-VERSION: 3.0.0\r\n\r\n".utf8)
            for _ in 0..<count {
                let socket = try LoopbackHTTP.connect(port: port)
                sockets.append(socket)
                try LoopbackHTTP.writeAll(socket, request)
                received.append(Self.read(socket, until: "event: ready", deadline: Date().addingTimeInterval(10)))
            }
            return RawFeeds(sockets: sockets, received: received)
        }
    }

    /// Reads every open feed until it has a `change` event of `table` (or `timeout` passes): how
    /// many have one.
    func waitForChanges(table: String, timeout: Duration) async throws -> Int {
        let open = sockets.withLock { $0 }
        let marker = #"event: change"#
        let deadline = Date().addingTimeInterval(Double(timeout.components.seconds))
        let events = try await offThePool {
            open.map { socket -> [UInt8] in
                guard let socket else { return [] }
                return Self.read(socket, until: marker, deadline: deadline)
            }
        }
        return events.filter { Self.contains($0, marker) && Self.contains($0, #""table":"\#(table)""#) }.count
    }

    func close(index: Int) {
        sockets.withLock { sockets in
            if let socket = sockets[index] { _ = systemClose(socket) }
            sockets[index] = nil
        }
    }

    func close() {
        let count = sockets.withLock { $0.count }
        for index in 0..<count { close(index: index) }
    }

    /// Reads `socket` until `marker` arrived, it closed, or `deadline` passed.
    private static func read(_ socket: Int32, until marker: String, deadline: Date) -> [UInt8] {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4_096)
        while !contains(bytes, marker) {
            let left = max(0.05, deadline.timeIntervalSinceNow)
            var timeout = timeval(tv_sec: Int(left), tv_usec: .init(left.truncatingRemainder(dividingBy: 1) * 1e6))
            setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            let count = systemRead(socket, &buffer, buffer.count)
            if count <= 0 || Date() > deadline { break }
            bytes += buffer[0..<count]
        }
        return bytes
    }

    private static func contains(_ bytes: [UInt8], _ text: String) -> Bool {
        bytes.firstRange(of: Array(text.utf8)) != nil
    }

    /// This process holds both ends of every connection: take the open files the system allows.
    private static func raiseOpenFileLimit() {
        var limit = rlimit()
        guard getrlimit(openFiles, &limit) == 0, limit.rlim_cur < limit.rlim_max else { return }
        limit.rlim_cur = min(limit.rlim_max, 1 << 16)
        _ = setrlimit(openFiles, &limit)
    }
}
