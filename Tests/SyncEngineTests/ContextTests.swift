import SyncCore
import SyncTesting
import Synchronization
import Testing

@Suite("SyncContext")
struct ContextTests {
    /// Legacy bug #23: pulls of different tables are not serialized behind one global queue.
    @Test func pullsOfDifferentTablesRunSideBySide() async throws {
        let server = ModelServer()
        let device = try Device(kind: .memory, server: server)
        server.seed("a", [["id": "1"]])
        server.seed("b", [["id": "1"]])
        let flags = Mutex((aInside: false, bSawA: false))
        server.inject(
            .hook {
                flags.withLock { $0.aInside = true }
                // Wait (boundedly) for b's pull to get through while a's request is on the wire.
                for _ in 0..<100_000 where !flags.withLock({ $0.bSawA }) { await Task.yield() }
                flags.withLock { $0.aInside = false }
                return nil
            }, on: .query, table: "a")
        server.inject(
            .hook {
                flags.withLock { $0.bSawA = $0.aInside }
                return nil
            }, on: .query, table: "b")
        let context = device.context
        let pullA = Task { try await context.table("a").pull() }
        for _ in 0..<100_000 where !flags.withLock({ $0.aInside }) { await Task.yield() }
        try await context.table("b").pull()
        _ = try await pullA.value
        #expect(flags.withLock { $0.bSawA })
        #expect(try await context.table("a").item(id: "1") != nil)
    }

    /// Two contexts on one store see the same queue (state lives in the store only; legacy bugs #24
    /// and #25 had the queue depend on which client the context was bound to).
    @Test(arguments: StoreKind.allCases)
    func aSecondContextOnTheSameStoreSeesTheQueue(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let device = try Device(kind: kind, server: server)
        try await device.table().insert(["id": "a"])
        let other = SyncContext(store: device.store, remote: server.remote(device: "other"))
        #expect(try await other.queuedOperationCount() == 1)
        #expect(try await other.push().pushed == 1)
        #expect(try await device.context.queuedOperationCount() == 0)
    }

    struct Shape: Codable, Equatable, Sendable {
        enum Kind: Codable, Equatable, Sendable {
            case circle(radius: Double)
            case polygon(sides: Int8, points: [[Int]])
        }
        var id: String
        var kind: Kind
        var big: UInt64
        var small: Int16
        var float: Float
        var maybe: Bool?
        var nested: [String: [Int]]
    }

    @Test func codableModelsEncodeToExactJSON() async throws {
        let device = try Device(kind: .memory, server: ModelServer())
        let shapes = device.context.table("shape", of: Shape.self)
        let polygon = Shape(
            id: "p", kind: .polygon(sides: 3, points: [[0, 0], [1, 0], [0, 1]]), big: 1 << 40, small: -3,
            float: 0.5, maybe: nil, nested: ["a": [1, 2]])
        let circle = Shape(id: "c", kind: .circle(radius: 2), big: 0, small: 0, float: 1, maybe: true, nested: [:])
        try await shapes.insert(polygon)
        try await shapes.insert(circle)
        #expect(try await shapes.item(id: "p") == polygon)
        #expect(try await shapes.item(id: "c") == circle)
        let stored = try #require(try await device.table("shape").item(id: "p"))
        #expect(stored["big"] == .int(1 << 40))
        #expect(stored["float"] == .double(0.5))
        #expect(stored["maybe"] == .null)  // nil is written as null
        #expect(stored["kind"] == ["polygon": ["sides": 3, "points": [[0, 0], [1, 0], [0, 1]]]])
        // Out-of-range and non-finite values are refused with a clear error.
        let huge = Shape(id: "h", kind: .circle(radius: .infinity), big: 0, small: 0, float: 0, maybe: nil, nested: [:])
        await expectSyncError(.invalidItem) { try await shapes.insert(huge) }
        try await device.table("shape").insert([
            "id": "x", "kind": ["circle": ["radius": 1]], "big": -1, "small": 0,
            "float": 0, "nested": [:],
        ])
        await expectSyncError(.invalidItem) { _ = try await shapes.item(id: "x") }
    }

    @Test func errorsDescribeThemselvesInOneLine() {
        let remote = RemoteError(status: 412, "the version does not match", serverItem: ["id": "a"])
        #expect(remote.code == .conflict)
        #expect(remote.description == "the version does not match (HTTP 412)")
        #expect(RemoteError(status: 401, "x").code == .unauthorized)
        #expect(RemoteError(status: 410, "x").code == .notFound)
        #expect(RemoteError(status: 422, "x").code == .badRequest)
        #expect(RemoteError(status: 502, "x").code == .server)
        let error = SyncError(.network, "push of insert todo/a: offline", underlying: RemoteError(.network, "offline"))
        #expect(error.remoteError?.code == .network)
        #expect(!error.description.contains("\n"))
        do {
            throw error
        } catch SyncError.Code.network {
            // matched by code
        } catch {
            Issue.record("the code pattern did not match")
        }
    }

    /// One bad table name is one error code, whichever call meets it first.
    @Test func aBadTableNameIsTheSameErrorCodeForEveryCall() async throws {
        let server = ModelServer()
        let device = try Device(kind: .memory, server: server)
        let table = device.context.table("bad name")
        await expectSyncError(.invalidTableName, "insert") { try await table.insert(["id": "1"]) }
        await expectSyncError(.invalidTableName, "delete") { try await table.delete(id: "1") }
        await expectSyncError(.invalidTableName, "pull") { try await table.pull() }
        await expectSyncError(.invalidTableName, "purge") { try await table.purge() }
        await expectSyncError(.invalidTableName, "query") { _ = try await table.query() }
        do {
            try await device.context.store.upsert("bad name", [["id": "1"]])
            Issue.record("the store accepted a bad table name")
        } catch let error as StoreError {
            #expect(error.code == .invalidTableName, "\(error)")
        }
        #expect(server.requests.isEmpty)
    }
}
