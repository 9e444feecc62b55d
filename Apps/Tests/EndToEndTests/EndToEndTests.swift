import FerryServer
import Foundation
import GRDB
import ServerTestSupport
import StoreConformance
import SyncCore
import Testing
import Transport

/// The client (SyncCore + Transport + a store) against the reference server over real HTTP on
/// loopback, in both protocol versions.
@Suite("End to end over HTTP", .serialized, .timeLimit(.minutes(10)))
struct EndToEndTests {
    static let matrix: [(ProtocolVersion, StoreKind)] = ProtocolVersion.both.flatMap { version in
        StoreKind.allCases.map { (version, $0) }
    }
    static let persistentMatrix = matrix.filter { $0.1.persists }
    /// Each case on both server storages (PostgreSQL skipped, with the reason, when not set up).
    static func onEveryBackend<each T>(_ cases: [(repeat each T)]) -> [(repeat each T, ServerBackend)] {
        ServerBackend.allCases.flatMap { backend in cases.map { (repeat each $0, backend) } }
    }

    /// The legacy tutorial: offline adds, a restart, the server comes up, sync, a second device.
    @Test(arguments: onEveryBackend(persistentMatrix))
    func offlineEditsSurviveARestartAndReachTheServerAndASecondDevice(
        version: ProtocolVersion, kind: StoreKind, backend: ServerBackend
    ) async throws {
        let scratch = try await Scratch(backend)
        defer { scratch.remove() }
        let port = try await freePort(in: scratch)
        let url = URL(string: "http://127.0.0.1:\(port)")!

        // The server is not running: items are saved and queued, the push fails as a network error.
        var store = try kind.open(scratch.url, "phone")
        var phone = SyncContext(store: store, remote: TestServer.remote(url, version))
        for title in ["Milk", "Bread", "Eggs"] {
            try await phone.table("todo").insert(["title": .string(title), "done": false])
        }
        let offline = await #expect(throws: SyncError.self) { try await phone.push() }
        #expect(offline?.code == .network)
        #expect(try await phone.queuedOperationCount() == 3)

        // Restart: close the store, open it again.
        try await store.close()
        store = try kind.open(scratch.url, "phone")
        phone = SyncContext(store: store, remote: TestServer.remote(url, version))
        #expect(try await phone.queuedOperationCount() == 3)
        #expect(try await phone.table("todo").query().items.count == 3)

        // The server comes up on that port: the items are not there until the phone syncs.
        let server = try await TestServer.start(in: scratch, port: port)
        #expect(try await server.items("todo", version).isEmpty)
        let pushed = try await phone.push()
        #expect(pushed.pushed == 3)
        #expect(try await phone.queuedOperationCount() == 0)
        let onServer = try await server.items("todo", version)
        #expect(Set(onServer.values.compactMap { $0["title"]?.stringValue }) == ["Milk", "Bread", "Eggs"])

        // A second device pulls them.
        let tablet = SyncContext(store: try kind.open(scratch.url, "tablet"), remote: server.remote(version))
        let pulled = try await tablet.pull("todo", queryID: "all")
        #expect(pulled.items.received == 3)
        let local = try await tablet.table("todo").query().items
        let localByID: [String: JSONObject] = Dictionary(
            uniqueKeysWithValues: local.map { ($0.id ?? "", appFields($0)) })
        let serverByID: [String: JSONObject] = onServer.mapValues(appFields)
        #expect(localByID == serverByID)
        try await store.close()
        try await server.stop()
    }

    enum Handler: String, CaseIterable, Sendable { case keep, serverWins, clientWins, merge }

    /// Two devices edit the same item; the second pusher's handler decides.
    @Test(arguments: onEveryBackend(ProtocolVersion.both.flatMap { version in Handler.allCases.map { (version, $0) } }))
    func twoDevicesEditTheSameItem(version: ProtocolVersion, handler: Handler, backend: ServerBackend) async throws {
        let scratch = try await Scratch(backend)
        defer { scratch.remove() }
        let server = try await TestServer.start(in: scratch)
        let first = SyncContext(store: try StoreKind.sqlite.open(scratch.url, "a"), remote: server.remote(version))
        let store = try StoreKind.sqlite.open(scratch.url, "b")
        let remote = server.remote(version)
        let second: SyncContext =
            switch handler {
            case .keep: SyncContext(store: store, remote: remote, conflictHandler: .keep)
            case .serverWins: SyncContext(store: store, remote: remote, conflictHandler: .serverWins)
            case .clientWins: SyncContext(store: store, remote: remote, conflictHandler: .clientWins)
            case .merge: SyncContext(store: store, remote: remote, conflictHandler: .threeWayMerge())
            }
        let item = try await first.table("todo").insert(["title": "base", "note": "n"])
        let id = try #require(item.id)
        _ = try await first.push()
        _ = try await second.pull("todo", queryID: "all")

        try await first.table("todo").update(["id": .string(id), "title": "A", "note": "n"])
        _ = try await first.push()
        try await second.table("todo").update(["id": .string(id), "title": "base", "note": "B"])
        let result = try await second.push()

        let onServer = try #require(try await server.items("todo", version)[id])
        switch handler {
        case .keep:
            #expect(result.failed.count == 1)
            let error = try #require(try await second.operationErrors().first)
            #expect(error.serverItem?["title"] == "A")
            #expect(onServer["title"] == "A" && onServer["note"] == "n")
        case .serverWins:
            #expect(result.failed.isEmpty)
            #expect(try await second.table("todo").item(id: id)?["title"] == "A")
            #expect(onServer["title"] == "A" && onServer["note"] == "n")
        case .clientWins:
            #expect(result.failed.isEmpty)
            #expect(onServer["title"] == "base" && onServer["note"] == "B")
        case .merge:
            #expect(result.failed.isEmpty)
            #expect(onServer["title"] == "A" && onServer["note"] == "B")
        }
        if handler != .keep {
            // Both devices end equal to the server.
            _ = try await first.pull("todo", queryID: "all")
            _ = try await second.pull("todo", queryID: "all")
            for context in [first, second] {
                let local = try #require(try await context.table("todo").item(id: id))
                #expect(appFields(local) == appFields(onServer))
            }
        }
        try await server.stop()
    }

    /// Deletes and undeletes on one side reach the other through incremental pulls.
    @Test(arguments: onEveryBackend(matrix))
    func deletesAndUndeletesPropagate(version: ProtocolVersion, kind: StoreKind, backend: ServerBackend) async throws {
        let scratch = try await Scratch(backend)
        defer { scratch.remove() }
        let server = try await TestServer.start(in: scratch)
        let first = SyncContext(store: try kind.open(scratch.url, "a"), remote: server.remote(version))
        let second = SyncContext(store: try kind.open(scratch.url, "b"), remote: server.remote(version))
        let kept = try await first.table("todo").insert(["title": "keep"])
        let doomed = try await first.table("todo").insert(["title": "doomed"])
        _ = try await first.push()
        _ = try await second.pull("todo", queryID: "all")
        #expect(try await second.table("todo").query().items.count == 2)

        try await first.table("todo").delete(id: doomed.id!)
        _ = try await first.push()
        let afterDelete = try await second.pull("todo", queryID: "all")
        #expect(afterDelete.items.deleted == 1)
        #expect(try await second.table("todo").item(id: doomed.id!) == nil)
        #expect(try await second.table("todo").item(id: kept.id!) != nil)

        // Another client undeletes it on the server: it comes back.
        _ = try await server.remote(version).onlineTable("todo").undelete(id: doomed.id!)
        _ = try await second.pull("todo", queryID: "all")
        #expect(try await second.table("todo").item(id: doomed.id!)?["title"] == "doomed")
        try await server.stop()
    }

    /// 10,000 rows, 4,000 of them in one millisecond: nothing missed, nothing twice; writes made
    /// during a pull arrive with the next; purge and pull again bring everything back.
    @Test(arguments: ProtocolVersion.both)
    func incrementalPullsMissNothingAndRepeatNothing(version: ProtocolVersion) async throws {
        let scratch = try await Scratch()
        defer { scratch.remove() }
        var server = try await TestServer.start(in: scratch)
        let seeder = server.remote(.v3).onlineTable("rows")
        _ = try await seeder.insert(["id": "seed", "n": 0])
        try await server.stop()
        // Seed 10,000 rows straight into the server's database, 4,000 sharing one millisecond, as a
        // millisecond-precision peer server would leave them. The reference server itself never
        // gives two rows of a table one millisecond (a unique index enforces it), so this test drops
        // that index in its own database to play such a peer.
        let queue = try DatabaseQueue(path: server.databasePath)
        try await queue.write { db in
            let indexes = try String.fetchAll(
                db, sql: "SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'ferry_items_%_updated'")
            for index in indexes { try db.execute(sql: "DROP INDEX \(index)") }
            let table = try String.fetchOne(
                db, sql: "SELECT 'ferry_items_' || number FROM ferry_tables WHERE name = 'rows'")!
            let base = try Int64.fetchOne(db, sql: "SELECT last_updated_at FROM ferry_tables WHERE name = 'rows'")!
            var version = try Int64.fetchOne(db, sql: "SELECT last_version FROM ferry_tables WHERE name = 'rows'")!
            let statement = try db.makeStatement(
                sql:
                    "INSERT INTO \(table) (id, item, created_at, updated_at, version, deleted, owner) VALUES (?, ?, ?, ?, ?, 0, NULL)"
            )
            for index in 1..<10_000 {
                version += 1
                let stamp = index < 3_000 ? base + Int64(index) : (index < 7_000 ? base + 3_000 : base + Int64(index))
                let id = String(format: "r%05d", 10_000 - index)  // ids against the stamp order
                try statement.execute(arguments: [id, #"{"n":\#(index)}"#, stamp, stamp, version])
            }
            try db.execute(
                sql: "UPDATE ferry_tables SET last_updated_at = ?, last_version = ? WHERE name = 'rows'",
                arguments: [base + 10_000, version])
        }
        try queue.close()
        server = try await TestServer.start(in: scratch, port: 0, pageSize: 100)

        let device = SyncContext(
            store: try StoreKind.sqlite.open(scratch.url, "device"), remote: server.remote(version))
        let writer = server.remote(version).onlineTable("rows")
        // Writes during the pull: some land before the pull reaches the end, some after.
        async let writes: Void = {
            for index in 0..<50 {
                _ = try await writer.insert(["id": .string("late-\(index)"), "n": .int(Int64(index))])
            }
        }()
        let first = try await device.pull("rows", queryID: "all", options: PullOptions(pageSize: 100))
        try await writes
        let second = try await device.pull("rows", queryID: "all", options: PullOptions(pageSize: 100))
        #expect(first.items.received + second.items.received == 10_050, "no row twice, none missed")
        #expect(try await device.table("rows").query(TableQuery().top(0).includingTotalCount()).totalCount == 10_050)
        let third = try await device.pull("rows", queryID: "all")
        #expect(third.items.received == 0)
        #expect(third.pages <= 1)

        // Purge and pull again: the purge reset the delta token, so everything comes back.
        let purged = try await device.purge("rows")
        #expect(purged == 10_050)
        let again = try await device.pull("rows", queryID: "all", options: PullOptions(pageSize: 100))
        #expect(again.items.received == 10_050)
        #expect(try await device.table("rows").query(TableQuery().top(0).includingTotalCount()).totalCount == 10_050)
        try await server.stop()
    }

    /// Random local work on three devices with random pushes and pulls, then a final client-wins
    /// sync: every device equals the server.
    @Test(arguments: ProtocolVersion.both, ServerBackend.allCases)
    func randomDevicesConvergeToTheServer(version: ProtocolVersion, backend: ServerBackend) async throws {
        let scratch = try await Scratch(backend)
        defer { scratch.remove() }
        let server = try await TestServer.start(in: scratch, pageSize: 7)
        var random = SeededRandom(seed: version == .v2 ? 2 : 3)
        let devices = try (0..<3).map { index in
            SyncContext(
                store: try (index == 0 ? StoreKind.memory : .sqlite).open(scratch.url, "d\(index)"),
                remote: server.remote(version), conflictHandler: .clientWins)
        }
        var known: [String] = []
        for step in 0..<240 {
            let device = devices[Int.random(in: 0..<devices.count, using: &random)]
            let table = device.table("notes")
            switch Int.random(in: 0..<10, using: &random) {
            case 0...2:
                let item = try await table.insert(["text": .string("s\(step)"), "n": .int(Int64(step))])
                known.append(item.id!)
            case 3...4:
                guard let id = known.randomElement(using: &random), try await table.item(id: id) != nil else {
                    continue
                }
                try await table.update(["id": .string(id), "text": .string("u\(step)"), "n": .int(Int64(step))])
            case 5:
                guard let id = known.randomElement(using: &random), try await table.item(id: id) != nil else {
                    continue
                }
                try await table.delete(id: id)
            case 6...7:
                _ = try await device.push()
            default:
                _ = try await device.pull("notes", queryID: "all", options: PullOptions(pageSize: 5))
            }
        }
        for device in devices { _ = try await device.push() }
        for device in devices { _ = try await device.pull("notes", queryID: "all") }
        let onServer = try await server.items("notes", version)
        for device in devices {
            #expect(try await device.queuedOperationCount() == 0)
            #expect(try await device.operationErrors().isEmpty)
            let local = try await device.table("notes").query(TableQuery().top(100_000)).items
            let byID = Dictionary(uniqueKeysWithValues: local.map { ($0.id!, appFields($0)) })
            #expect(byID == onServer.mapValues(appFields))
        }
        try await server.stop()
    }

    /// A table name the server refuses comes back to the client as the code the SDK uses for it.
    @Test(arguments: ProtocolVersion.both)
    func aTableNameTheServerRefusesIsInvalidTableNameOnTheClient(version: ProtocolVersion) async throws {
        let scratch = try await Scratch()
        defer { scratch.remove() }
        let server = try await TestServer.start(in: scratch)
        let table = server.remote(version).onlineTable("__reserved")
        func expectRefused(_ what: String, _ call: () async throws -> Void) async {
            do {
                try await call()
                Issue.record("\(what): the server accepted the table name '__reserved'")
            } catch let error as RemoteError {
                #expect(error.code == .invalidTableName, "\(what): \(error)")
            } catch {
                Issue.record("\(what): \(error)")
            }
        }
        await expectRefused("query") { _ = try await table.query(TableQuery()) }
        await expectRefused("insert") { _ = try await table.insert(["id": "a"]) }
        try await server.stop()
    }
}

extension EndToEndTests {
    /// A pull asked to count gets the total from the server with its first page (both protocols:
    /// `$inlinecount=allpages` in 2.0, `$count=true` in 3.0), for progress with an ETA.
    @Test(arguments: ProtocolVersion.both)
    func aCountedPullReportsTheTotalFromTheServer(version: ProtocolVersion) async throws {
        let scratch = try await Scratch()
        defer { scratch.remove() }
        let server = try await TestServer.start(in: scratch, pageSize: 10)
        let writer = server.remote(version).onlineTable("rows")
        for index in 0..<25 { _ = try await writer.insert(["id": .string("r\(index)"), "n": .int(Int64(index))]) }
        let device = SyncContext(
            store: try StoreKind.memory.open(scratch.url, "device"), remote: server.remote(version))
        let events = device.events()
        let result = try await device.pull(
            "rows", queryID: "all", options: PullOptions(pageSize: 10, countsTotal: true))
        try await server.stop()
        var totals: [Int] = []
        for await event in events {
            if case .pullCounted(_, _, let total) = event { totals.append(total) }
            if case .pullFinished = event { break }
        }
        #expect(result.items.received == 25)
        #expect(totals == [25])
    }
}
