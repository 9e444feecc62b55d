import FerryServer
import Foundation
import GRDB
import ServerTestSupport
import StoreConformance
import StoreSQLite
import SyncCore
import Testing
import Transport

@Suite("Pushes whose requests and answers are lost", .timeLimit(.minutes(10)))
struct LostAnswerTests {
    /// Random local writes pushed through a proxy that loses a third of the requests or their
    /// answers (before the server, after it applied them, or halfway through the answer), many
    /// rounds: afterwards the server holds exactly the device's items, every pushed operation was
    /// applied exactly once (the table's write sequence counts them), no conflict was reported, and
    /// the queue is empty. With batches and keys, and against a server without them.
    @Test(arguments: [true, false], ProtocolVersion.both)
    func nothingIsLostDuplicatedOrFalselyConflicted(pushExtensions: Bool, version: ProtocolVersion) async throws {
        let scratch = try await Scratch(.sqlite)
        defer { scratch.remove() }
        let server = try await TestServer.start(in: scratch, pushExtensions: pushExtensions)
        let proxy = try AnswerDroppingProxy(
            target: server.server.port, lossRate: 0.3, seed: pushExtensions ? 11 : 12)
        defer { proxy.stop() }
        let remote = TestServer.remote(URL(string: "http://127.0.0.1:\(proxy.port)")!, version)
        let device = SyncContext(
            store: try SQLiteStore(path: scratch.url.appendingPathComponent("device.sqlite").path), remote: remote)
        let events = device.events(bufferingNewest: 1_000_000)
        let counter = Task {
            var pushed = 0
            for await event in events {
                if case .operationPushed = event { pushed += 1 }
                if case .pushStarted(operations: 0) = event { break }  // the last push, with nothing to do
            }
            return pushed
        }
        var random = SeededRandom(seed: pushExtensions ? 5 : 6)
        var live: [String] = []
        var failedPushes = 0
        let table = device.table("things")
        for round in 0..<6 {
            for step in 0..<40 {
                switch live.isEmpty ? 0 : Int.random(in: 0..<10, using: &random) {
                case 0...5:
                    let item = try await table.insert(["n": .int(Int64(step)), "round": .int(Int64(round))])
                    live.append(item.id!)
                case 0...7:
                    let id = live.randomElement(using: &random)!
                    try await table.update(["id": .string(id), "n": .int(Int64(step)), "edited": true])
                default:
                    let index = Int.random(in: 0..<live.count, using: &random)
                    try await table.delete(id: live.remove(at: index))
                }
            }
            failedPushes += try await Self.pushUntilTheQueueIsEmpty(device, atMost: 200)
        }
        proxy.stopLosing()
        #expect(try await device.operationErrors().isEmpty, "no conflict, no failure")
        // Ends the counter: a push with nothing to do.
        _ = try await device.push()
        let pushed = await counter.value
        let fates = proxy.fates
        #expect(fates.contains(.loseAnswer) && fates.contains(.cutBeforeServer) && fates.contains(.cutAnswerMidway))
        // (With keyed batches a lost batch is sent again whole, in one request: fewer requests, so
        // fewer losses, than one request per operation.)
        #expect(failedPushes > 2, "the proxy lost too little to test anything (\(failedPushes) failed pushes)")
        let onServer = try await Self.expectServerHoldsTheDevicesItems(server, table, version, applied: pushed)
        #expect(Set(onServer) == Set(live))
        try await server.stop()
    }

    /// A bulk of inserts, enough for two batches on their way at once, pushed through a proxy that
    /// loses a third of the requests or their answers: the server ends with exactly the device's
    /// items, each applied once, with no conflict.
    @Test func twoBatchesOnTheirWayThroughALossyProxyApplyEachWriteOnce() async throws {
        let scratch = try await Scratch(.sqlite)
        defer { scratch.remove() }
        let server = try await TestServer.start(in: scratch, pushExtensions: true)
        let proxy = try AnswerDroppingProxy(target: server.server.port, lossRate: 0.3, seed: 21)
        defer { proxy.stop() }
        let remote = TestServer.remote(URL(string: "http://127.0.0.1:\(proxy.port)")!, .v3)
        let device = SyncContext(
            store: try SQLiteStore(path: scratch.url.appendingPathComponent("device.sqlite").path), remote: remote)
        let table = device.table("things")
        let count = 1_600
        try await device.write { writes in
            try writes.insert(
                contentsOf: (0..<count).map { ["id": .string("bulk-\($0)"), "n": .int(Int64($0))] }, into: "things")
        }
        let failedPushes = try await Self.pushUntilTheQueueIsEmpty(device, atMost: 100)
        #expect(try await device.operationErrors().isEmpty, "no conflict, no failure")
        #expect(failedPushes > 0, "the proxy lost nothing")
        let onServer = try await Self.expectServerHoldsTheDevicesItems(server, table, .v3, applied: count)
        #expect(onServer.count == count)
        try await server.stop()
    }

    /// Pushes while operations are queued, at most `atMost` times, each push without a failed
    /// operation; answers how many pushes a lost request or answer stopped.
    static func pushUntilTheQueueIsEmpty(_ device: SyncContext, atMost: Int) async throws -> Int {
        var failedPushes = 0
        var attempts = 0
        while try await device.queuedOperationCount() > 0 {
            attempts += 1
            guard attempts <= atMost else {
                Issue.record("the push does not finish")
                break
            }
            do {
                let result = try await device.push()
                #expect(result.failed.isEmpty, "\(result.failed.map(\.message))")
            } catch {
                // (`catch where` on a typed throw crashes Swift 6.3.1's SILGen.)
                guard error.code == .network || error.code == .cancelled else { throw error }
                failedPushes += 1
            }
        }
        return failedPushes
    }

    /// Checks that the server's items of `things` are the device's, and that the server applied
    /// exactly `applied` writes to the table (each applied write takes one stamp of the table's
    /// write sequence: none was applied twice). Answers the server's ids.
    static func expectServerHoldsTheDevicesItems(
        _ server: TestServer, _ table: SyncTable, _ version: ProtocolVersion, applied expected: Int
    ) async throws -> [String] {
        let onServer = try await server.items("things", version)
        let local = try await table.query(TableQuery().top(100_000)).items
        #expect(
            Dictionary(uniqueKeysWithValues: local.map { ($0.id!, appFields($0)) }) == onServer.mapValues(appFields))
        let applied = try await DatabaseQueue(path: server.databasePath).read { db in
            try Int.fetchOne(db, sql: "SELECT last_version FROM ferry_tables WHERE name = 'things'") ?? -1
        }
        #expect(applied == expected, "the server applied \(applied) writes for \(expected) operations")
        return Array(onServer.keys)
    }
}
