@testable import FerryServer
import Foundation
import ServerStorageCore
import ServerTestSupport
import SyncCore
import Testing
import Transport

#if canImport(Glibc)
    import Glibc
#endif

/// What a change feed costs: nothing for tables it does not watch, bounded memory for a reader that
/// does not read, its place back at once when its client goes away, and places anonymous callers
/// cannot all take.
@Suite("Change feed bounds", .timeLimit(.minutes(3)))
struct ChangeFeedBoundsTests {
    static func remote(_ port: Int, token: String? = nil) -> HTTPRemote {
        ChangeFeedTests.remote(port, token: token)
    }

    @Test func anEventDoesNotGrowWithTheNumberOfTables() async throws {
        let live = try await LiveServer.start(tables: [TableSettings(name: "todo")]) { storage in
            for index in 0..<300 {
                _ = try await storage.insert(
                    into: StorageTable(name: "table_\(index)"), id: "1", content: [:], owner: nil)
            }
        }
        defer { Task { try? await live.stop() } }
        let remote = Self.remote(live.server.port)
        let watching = FeedReader(try await remote.changeFeed(tables: ["todo"], after: nil))
        let everything = FeedReader(try await remote.changeFeed(tables: nil, after: nil))
        _ = try await watching.first(1)
        _ = try await everything.first(1)
        _ = try await remote.onlineTable("todo").insert(["id": "a"])
        for feed in [watching, everything] {
            let events = try await feed.first(2)
            // Before, an event's id listed every table the feed had reported: 300 of them here.
            #expect(events.last?.position.utf8.count ?? 99 < 20, "\(events.last?.position.prefix(80) ?? "")")
        }
        watching.stop()
        everything.stop()
    }

    @Test func aResumedFeedHintsExactlyTheTablesWrittenSinceItsPosition() async throws {
        var limits = RequestLimits()
        limits.changeFeedResumeMargin = .zero  // this test's clocks are one clock
        let live = try await LiveServer.start(
            tables: ["a", "b", "c"].map { TableSettings(name: $0) }, limits: limits)
        defer { Task { try? await live.stop() } }
        let remote = Self.remote(live.server.port)
        let feed = FeedReader(try await remote.changeFeed(tables: ["a", "b", "c"], after: nil))
        _ = try await feed.first(1)
        for table in ["a", "b", "c"] { _ = try await remote.onlineTable(table).insert(["id": "1"]) }
        // The position is the server's clock when an event was sent, which may be the millisecond
        // of the write it tells (then that table is hinted again on resuming: hints are hints). The
        // position taken is that of a later write to b, so that a and c are plainly before it.
        _ = try await feed.first(4)
        try await Task.sleep(for: .milliseconds(20))
        _ = try await remote.onlineTable("b").insert(["id": "1b"])
        let position = try await feed.first(5).last?.position
        feed.stop()
        try await Task.sleep(for: .milliseconds(20))
        _ = try await remote.onlineTable("b").insert(["id": "2"])
        let resumed = FeedReader(try await remote.changeFeed(tables: ["a", "b", "c"], after: position))
        let events = try await resumed.first(2)
        #expect(events.map(ChangeFeedTests.table) == ["b", nil], "only b was written since, then caught-up: \(events)")
        try await Task.sleep(for: .milliseconds(300))
        #expect(resumed.received.count == 2, "\(resumed.received)")
        resumed.stop()
    }

    @Test func pendingChangesFoldIntoOnePerTable() async {
        // What a feed whose reader does not read holds: one change per table, whatever the writes.
        let mailbox = FeedMailbox()
        for version in 1...10_000 {
            mailbox.post(["todo", "notes", "tags"][version % 3], version: Int64(version), access: .all)
        }
        guard case .changes(let pending)? = await mailbox.next() else {
            Issue.record("no changes pending")
            return
        }
        #expect(pending.map(\.table) == ["notes", "tags", "todo"])
        #expect(pending.map(\.version) == [10_000, 9_998, 9_999])
        mailbox.finish()
        #expect(await mailbox.next() == nil)
    }

    @Test func aFeedWhoseClientWentAwayFreesItsPlaceAtOnce() async throws {
        var limits = RequestLimits()
        limits.maximumChangeFeedsPerUser = 1
        limits.changeFeedHeartbeat = .seconds(60)  // before, the place came back at the next heartbeat
        let live = try await LiveServer.start(tables: [TableSettings(name: "todo")], limits: limits)
        defer { Task { try? await live.stop() } }
        let alice = Self.remote(live.server.port, token: LiveServer.token("alice"))
        let feed = FeedReader(try await alice.changeFeed(tables: nil, after: nil))
        _ = try await feed.first(1)
        await #expect(throws: RemoteError.self, "one feed for alice") {
            _ = try await alice.changeFeed(tables: nil, after: nil)
        }
        feed.stop()
        try await eventually("alice's place came back") {
            (try? await alice.changeFeed(tables: nil, after: nil)) != nil
        }
    }

    @Test func anonymousCallersCannotTakeEveryPlace() async throws {
        var limits = RequestLimits()
        limits.maximumChangeFeeds = 4
        limits.maximumAnonymousChangeFeeds = 2
        let live = try await LiveServer.start(tables: [TableSettings(name: "todo")], limits: limits)
        defer { Task { try? await live.stop() } }
        let anonymous = Self.remote(live.server.port)
        var open: [FeedReader] = []
        for _ in 0..<2 { open.append(FeedReader(try await anonymous.changeFeed(tables: nil, after: nil))) }
        do {
            _ = try await anonymous.changeFeed(tables: nil, after: nil)
            Issue.record("a third anonymous feed opened")
        } catch {
            #expect(error.status == 429)
        }
        for subject in ["alice", "bob"] {
            let feed = try await Self.remote(live.server.port, token: LiveServer.token(subject)).changeFeed(
                tables: nil, after: nil)
            open.append(FeedReader(feed))
        }
        for feed in open { _ = try await feed.first(1) }
        for feed in open { feed.stop() }
    }

    @Test func aServerWithoutTokensGivesEveryCallerAFeedUpToTheTotal() async throws {
        var configuration = ServerConfiguration(
            host: "127.0.0.1", port: 0, tables: [TableSettings(name: "todo")], logger: .quietTest)
        configuration.limits.maximumChangeFeeds = 6
        configuration.limits.maximumChangeFeedsPerUser = 2
        let server = try await ReferenceServer.startInMemory(configuration)
        let remote = Self.remote(server.port)
        // Before, every caller of a server without tokens shared one allowance of 2.
        var feeds: [FeedReader] = []
        for _ in 0..<6 { feeds.append(FeedReader(try await remote.changeFeed(tables: nil, after: nil))) }
        for feed in feeds { _ = try await feed.first(1) }
        do {
            _ = try await remote.changeFeed(tables: nil, after: nil)
            Issue.record("a seventh feed opened")
        } catch {
            #expect(error.status == 429, "the total still holds")
        }
        for feed in feeds { feed.stop() }
        try await server.shutdown()
    }
}

extension FeedMailbox.Item: Equatable {
    static func == (left: Self, right: Self) -> Bool {
        switch (left, right) {
        case (.heartbeat, .heartbeat): true
        case (.changes(let one), .changes(let other)):
            one.map(\.table) == other.map(\.table) && one.map(\.version) == other.map(\.version)
        default: false
        }
    }
}
