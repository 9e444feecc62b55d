import FerryServer
import Foundation
import Logging
import ServerStorageCore
import ServerTestSupport
import SyncCore
import Synchronization
import Testing
import Transport

#if canImport(Glibc)
    import Glibc
#endif

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Reads a feed's events one at a time, with a deadline, on behalf of a test.
final class FeedReader: Sendable {
    private final class State: Sendable {
        let events = Mutex<[RemoteChangeEvent]>([])
        let ended = Mutex<(done: Bool, error: RemoteError?)>((false, nil))
    }

    private let state = State()
    private let task: Task<Void, Never>

    init(_ stream: AsyncThrowingStream<RemoteChangeEvent, any Error>) {
        let state = state
        task = Task {
            do {
                for try await event in stream { state.events.withLock { $0.append(event) } }
                state.ended.withLock { $0.done = true }
            } catch {
                state.ended.withLock { $0 = (true, error as? RemoteError) }
            }
        }
    }

    /// The events received so far.
    var received: [RemoteChangeEvent] { state.events.withLock { $0 } }
    var hasEnded: Bool { state.ended.withLock { $0.done } }
    /// Whether it ended and how, with the events it had: for a failure's message.
    var summary: String {
        let (done, error) = state.ended.withLock { $0 }
        return "\(received.count) events, " + (done ? "ended: \(error.map { "\($0)" } ?? "by the server")" : "open")
    }

    /// Waits (up to 10 s) until `count` events arrived, and answers them.
    func first(_ count: Int) async throws -> [RemoteChangeEvent] {
        for _ in 0..<1_000 {
            let now = received
            if now.count >= count { return Array(now.prefix(count)) }
            try await Task.sleep(for: .milliseconds(10))
        }
        Issue.record("only \(received.count) of \(count) events arrived: \(received)")
        return received
    }

    /// Waits (up to 10 s) until the feed ends.
    func end() async throws {
        for _ in 0..<1_000 where !hasEnded { try await Task.sleep(for: .milliseconds(10)) }
        #expect(hasEnded, "the feed did not end")
    }

    func stop() { task.cancel() }
}

@Suite("The change feed (GET /tables/$changes)", .timeLimit(.minutes(10)))
struct ChangeFeedTests {
    static func remote(_ port: Int, token: String? = nil) -> HTTPRemote {
        HTTPRemote(
            HTTPRemote.Configuration(
                serverURL: URL(string: "http://127.0.0.1:\(port)")!, protocolVersion: .v3,
                retry: .init(maximumAttempts: 1)),
            tokenProvider: token.map { token in { @Sendable _ in token } })
    }

    @Test(arguments: ServerBackend.allCases)
    func aWriteReachesAnOpenFeedAndAResumedFeedMissesNothing(_ backend: ServerBackend) async throws {
        let live = try await LiveServer.start(tables: [TableSettings(name: "todo")], backend: backend)
        defer { Task { try? await live.stop() } }
        let remote = Self.remote(live.server.port)
        #expect(await remote.offersChangeFeed())
        let first = try await remote.onlineTable("todo").insert(["id": "a", "title": "Milk"])
        let feed = FeedReader(try await remote.changeFeed(tables: nil, after: nil))
        let ready = try await feed.first(1)
        guard case .ready(let versions, let position)? = ready.first else {
            Issue.record("the feed did not start with ready: \(ready)")
            return
        }
        #expect(versions["todo"] == first.version.flatMap(ItemVersion.number))
        let second = try await remote.onlineTable("todo").insert(["id": "b", "title": "Bread"])
        let events = try await feed.first(2)
        guard case .changed(let table, let version, let after)? = events.last else {
            Issue.record("no change after an insert: \(events)")
            return
        }
        #expect(table == "todo")
        #expect(version == second.version.flatMap(ItemVersion.number))
        feed.stop()

        // Writes while nobody listens, to a known table and to a new one: a feed resumed after the
        // last event tells both, and nothing else.
        _ = try await remote.onlineTable("todo").insert(["id": "c"])
        let note = try await remote.onlineTable("notes").insert(["id": "n"])
        let resumed = FeedReader(try await remote.changeFeed(tables: nil, after: after))
        let caughtUp = try await resumed.first(3)
        let tables = caughtUp.compactMap { event -> String? in
            if case .changed(let table, _, _) = event { return table }
            return nil
        }
        #expect(tables == ["notes", "todo"])
        if case .changed(_, let version, _)? = caughtUp.first {
            #expect(version == note.version.flatMap(ItemVersion.number))
        }
        if case .caughtUp = caughtUp.last {} else { Issue.record("the hints do not end with caught-up: \(caughtUp)") }
        try await Task.sleep(for: .milliseconds(200))
        #expect(resumed.received.count == 3, "only what was missed: \(resumed.received)")
        resumed.stop()
        // A position from before the first event is one the server can resume from too.
        let fromStart = FeedReader(try await remote.changeFeed(tables: ["todo"], after: position))
        let again = try await fromStart.first(1)
        if case .changed(let table, _, _)? = again.first { #expect(table == "todo") } else { Issue.record("\(again)") }
        fromStart.stop()
    }

    @Test(arguments: ServerBackend.allCases)
    func aCallerHearsOnlyOfRowsItMayRead(_ backend: ServerBackend) async throws {
        let live = try await LiveServer.start(
            tables: [
                TableSettings(name: "notes", requiresAuth: true, perUser: true),
                TableSettings(name: "secrets", requiresAuth: true),
                TableSettings(name: "todo"),
            ], backend: backend)
        defer { Task { try? await live.stop() } }
        let alice = Self.remote(live.server.port, token: LiveServer.token("alice"))
        let bob = Self.remote(live.server.port, token: LiveServer.token("bob"))
        let anonymous = Self.remote(live.server.port)
        _ = try await bob.onlineTable("notes").insert(["id": "bob-1"])
        let aliceFeed = FeedReader(try await alice.changeFeed(tables: nil, after: nil))
        let bobFeed = FeedReader(try await bob.changeFeed(tables: nil, after: nil))
        let anonymousFeed = FeedReader(try await anonymous.changeFeed(tables: nil, after: nil))
        guard case .ready(let aliceVersions, _)? = try await aliceFeed.first(1).first,
            case .ready(let anonymousVersions, _)? = try await anonymousFeed.first(1).first
        else {
            Issue.record("the feeds did not start with ready")
            return
        }
        // Alice has no note yet: her version of the table is 0, whatever Bob wrote.
        #expect(aliceVersions["notes"] == 0)
        #expect(aliceVersions["secrets"] == 0)
        #expect(anonymousVersions.keys.sorted() == ["todo"], "an anonymous caller reads only todo")
        _ = try await bobFeed.first(1)

        let note = try await alice.onlineTable("notes").insert(["id": "alice-1"])
        _ = try await alice.onlineTable("todo").insert(["id": "t1"])
        let aliceEvents = try await aliceFeed.first(3)
        #expect(aliceEvents.dropFirst().map(Self.table) == ["notes", "todo"])
        if case .changed(_, let version, _) = aliceEvents[1] {
            #expect(version == note.version.flatMap(ItemVersion.number))
        }
        // Bob and the anonymous caller hear of todo only: Alice's note is none of their business.
        #expect(try await bobFeed.first(2).dropFirst().map(Self.table) == ["todo"])
        #expect(try await anonymousFeed.first(2).dropFirst().map(Self.table) == ["todo"])
        try await Task.sleep(for: .milliseconds(200))
        #expect(bobFeed.received.count == 2 && anonymousFeed.received.count == 2)
        for feed in [aliceFeed, bobFeed, anonymousFeed] { feed.stop() }
    }

    static func table(_ event: RemoteChangeEvent) -> String? {
        if case .changed(let table, _, _) = event { return table }
        return nil
    }

    @Test func feedsAreBoundedRefusedWithoutAValidTokenAndEndWithTheServer() async throws {
        var limits = RequestLimits()
        limits.maximumChangeFeeds = 3
        limits.maximumChangeFeedsPerUser = 2
        // A client that went away is noticed when the next heartbeat cannot be written. Not
        // shorter: a client gives up on a feed silent for 2.5 heartbeats (of at least a second),
        // its head included, and a feed opened at 1 s timed out when the whole suite loaded the
        // two cores (twice in three runs).
        limits.changeFeedHeartbeat = .seconds(2)
        let live = try await LiveServer.start(tables: [TableSettings(name: "todo")], limits: limits)
        let alice = Self.remote(live.server.port, token: LiveServer.token("alice"))
        let feeds = [
            FeedReader(try await alice.changeFeed(tables: nil, after: nil)),
            FeedReader(try await alice.changeFeed(tables: nil, after: nil)),
        ]
        for feed in feeds { _ = try await feed.first(1) }
        await #expect(throws: RemoteError.self) { _ = try await alice.changeFeed(tables: nil, after: nil) }
        do {
            _ = try await alice.changeFeed(tables: nil, after: nil)
        } catch {
            #expect(error.status == 429)
        }
        // Each remote is held to the end: a remote that goes away closes its connections, and its feed.
        let bobRemote = Self.remote(live.server.port, token: LiveServer.token("bob"))
        let bob = FeedReader(try await bobRemote.changeFeed(tables: nil, after: nil))
        _ = try await bob.first(1)
        do {
            _ = try await Self.remote(live.server.port, token: LiveServer.token("carol")).changeFeed(
                tables: nil, after: nil)
            // Which feed gave its place back, if one did.
            Issue.record("a fourth feed opened; alice's: \(feeds.map(\.summary)), bob's: \(bob.summary)")
        } catch {
            #expect(error.status == 429, "the total is bounded too")
        }
        // A feed whose client went away gives its place back (at the next heartbeat).
        feeds[0].stop()
        var reopened = false
        for _ in 0..<500 where !reopened {
            if (try? await alice.changeFeed(tables: nil, after: nil)) != nil { reopened = true }
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(reopened)
        do {
            _ = try await Self.remote(live.server.port, token: LiveServer.token("alice", expired: true)).changeFeed(
                tables: nil, after: nil)
            Issue.record("an expired token opened a feed")
        } catch {
            #expect(error.code == .unauthorized)
        }
        do {
            _ = try await alice.changeFeed(tables: nil, after: "todo=x")
            Issue.record("a malformed position was taken")
        } catch {
            #expect(error.status == 400)
        }
        // The server shuts down with feeds open: they end, and the shutdown does not wait for them.
        try await live.stop()
        try await feeds[1].end()
        try await bob.end()
        withExtendedLifetime(bobRemote) {}
    }

    /// Through a `URLSession` the app gives (what https and proxies use on Linux): the same events.
    @Test func aFeedReadThroughURLSession() async throws {
        let live = try await LiveServer.start(tables: [TableSettings(name: "todo")])
        defer { Task { try? await live.stop() } }
        let remote = HTTPRemote(
            HTTPRemote.Configuration(serverURL: URL(string: "http://127.0.0.1:\(live.server.port)")!),
            session: URLSession(configuration: .ephemeral))
        let feed = FeedReader(try await remote.changeFeed(tables: ["todo"], after: nil))
        _ = try await feed.first(1)
        let item = try await remote.onlineTable("todo").insert(["id": "u"])
        let events = try await feed.first(2)
        #expect(events.first.map { if case .ready = $0 { true } else { false } } == true)
        guard case .changed(let table, let version, _)? = events.last else {
            Issue.record("no change through URLSession: \(events)")
            return
        }
        #expect(table == "todo" && version == item.version.flatMap(ItemVersion.number))
        feed.stop()
    }

    @Test func anIdleFeedSendsHeartbeats() async throws {
        var limits = RequestLimits()
        limits.changeFeedHeartbeat = .milliseconds(50)
        let live = try await LiveServer.start(tables: [TableSettings(name: "todo")], limits: limits)
        defer { Task { try? await live.stop() } }
        // Reads until four heartbeats came (or 20 s passed, on a machine too loaded to tell).
        let text = try await Self.readRaw(port: live.server.port, seconds: 20) {
            $0.components(separatedBy: ": heartbeat").count > 4
        }
        #expect(text.hasPrefix("HTTP/1.1 200"), "\(text.prefix(200))")
        #expect(text.lowercased().contains("content-type: text/event-stream"))
        #expect(text.contains("event: ready"))
        #expect(text.components(separatedBy: ": heartbeat").count > 3, "\(text)")
    }

    /// What a plain socket reads from the feed within `seconds`, or until `enough` says so (on a
    /// thread of its own).
    static func readRaw(port: Int, seconds: Double, until enough: @escaping @Sendable (String) -> Bool)
        async throws -> String
    {
        try await withCheckedThrowingContinuation { continuation in
            Thread {
                let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
                var address = sockaddr_in()
                address.sin_family = sa_family_t(AF_INET)
                address.sin_addr.s_addr = inet_addr("127.0.0.1")
                address.sin_port = UInt16(port).bigEndian
                let connected = withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                    }
                }
                guard connected == 0 else {
                    close(fd)
                    continuation.resume(throwing: URLError(.cannotConnectToHost))
                    return
                }
                let request = Array("GET /tables/$changes HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)
                _ = request.withUnsafeBytes { send(fd, $0.baseAddress!, request.count, Int32(MSG_NOSIGNAL)) }
                var timeout = timeval(tv_sec: 0, tv_usec: 50_000)
                setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                var received: [UInt8] = []
                let deadline = Date().addingTimeInterval(seconds)
                var buffer = [UInt8](repeating: 0, count: 4096)
                while Date() < deadline && !enough(String(decoding: received, as: UTF8.self)) {
                    let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress!, 4096, 0) }
                    if count > 0 { received += buffer[..<count] } else if count == 0 { break }
                }
                close(fd)
                continuation.resume(returning: String(decoding: received, as: UTF8.self))
            }.start()
        }
    }

    /// Two instances on one PostgreSQL database: a write through one reaches a feed open on the other.
    @Test func aWriteThroughOneInstanceReachesAFeedOnAnother() async throws {
        let database = try await ServerBackend.postgreSQL.database()
        defer { Task { await database.remove() } }
        var configuration = ServerConfiguration(
            host: "127.0.0.1", port: 0, tables: [TableSettings(name: "todo")], logger: .quietTest)
        configuration.authSecret = LiveServer.secret
        let first = try await ReferenceServer.start(
            configuration, storage: try await database.open(logger: .quietTest), ownsStorage: true)
        let second = try await ReferenceServer.start(
            configuration, storage: try await database.open(logger: .quietTest), ownsStorage: true)
        defer {
            Task {
                try? await first.shutdown()
                try? await second.shutdown()
            }
        }
        let feed = FeedReader(try await Self.remote(second.port).changeFeed(tables: ["todo"], after: nil))
        _ = try await feed.first(1)
        let item = try await Self.remote(first.port).onlineTable("todo").insert(["id": "x"])
        let events = try await feed.first(2)
        guard case .changed(let table, let version, _)? = events.last else {
            Issue.record("no change reached the other instance: \(events)")
            return
        }
        #expect(table == "todo" && version == item.version.flatMap(ItemVersion.number))
        feed.stop()
    }
}
