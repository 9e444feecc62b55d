import SyncCore
import SyncTesting
import Testing

@Suite("Operation queue: collapse rules")
struct CollapseTests {
    /// A synced item in the store and on the server (version known).
    static func seedSynced(_ device: Device, _ items: [JSONObject]) async throws {
        device.server.seed("todo", items)
        try await device.table().pull()
    }

    @Test(arguments: StoreKind.allCases)
    func insertThenUpdateIsOneInsertWithTheLatestFields(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        let todos = device.table()
        try await todos.insert(["id": "a", "title": "first"])
        try await todos.update(["id": "a", "title": "second"])
        try await todos.update(["id": "a", "title": "third"])
        #expect(try await device.operations().map(\.kind) == [.insert])
        let result = try await device.context.push()
        #expect(result.pushed == 1)
        #expect(device.server.requests.map(\.kind) == [.insert])
        #expect(device.server.row("todo", id: "a")?["title"] == "third")
    }

    @Test(arguments: StoreKind.allCases)
    func insertThenDeleteLeavesNothing(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        let todos = device.table()
        try await todos.insert(["id": "a"])
        try await todos.delete(id: "a")
        #expect(try await device.operations().isEmpty)
        #expect(try await todos.item(id: "a") == nil)
        #expect(try await device.context.push().pushed == 0)
        #expect(device.server.requests.isEmpty)
    }

    @Test(arguments: StoreKind.allCases)
    func updatesCollapseAndKeepTheFirstBase(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        try await Self.seedSynced(device, [["id": "a", "title": "base"]])
        let base = try #require(try await device.table().item(id: "a"))
        try await device.table().update(["id": "a", "title": "one"])
        try await device.table().update(["id": "a", "title": "two"])
        let operations = try await device.operations()
        #expect(operations.map(\.kind) == [.update])
        #expect(operations.first?.baseItem == base)
        device.server.clearRequests()
        try await device.context.push()
        #expect(device.server.requests.map(\.kind) == [.update])
        #expect(device.server.requests.first?.ifVersion == base.version)
        #expect(device.server.row("todo", id: "a")?["title"] == "two")
    }

    @Test(arguments: StoreKind.allCases)
    func updateThenDeleteIsADeleteAgainstTheBaseVersion(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        try await Self.seedSynced(device, [["id": "a", "title": "base"]])
        let version = try #require(try await device.table().item(id: "a")?.version)
        try await device.table().update(["id": "a", "title": "one"])
        try await device.table().delete(id: "a")
        let operations = try await device.operations()
        #expect(operations.map(\.kind) == [.delete])
        #expect(operations.first?.item?.version == version)
        device.server.clearRequests()
        try await device.context.push()
        #expect(device.server.requests.map(\.kind) == [.delete])
        #expect(device.server.requests.first?.ifVersion == version)
        #expect(device.server.row("todo", id: "a")?.isDeleted == true)
    }

    /// Legacy bug #7: delete then insert was an error; it is an update of the item the server still has.
    @Test(arguments: StoreKind.allCases)
    func deleteThenInsertIsAnUpdate(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        try await Self.seedSynced(device, [["id": "a", "title": "base"]])
        let version = try #require(try await device.table().item(id: "a")?.version)
        try await device.table().delete(id: "a")
        let recreated = try await device.table().insert(["id": "a", "title": "again"])
        #expect(recreated.version == version)
        #expect(try await device.operations().map(\.kind) == [.update])
        await expectSyncError(.itemExists) { try await device.table().insert(["id": "a"]) }
        device.server.clearRequests()
        try await device.context.push()
        #expect(device.server.requests.map(\.kind) == [.update])
        #expect(device.server.requests.first?.ifVersion == version)
        #expect(device.server.row("todo", id: "a")?["title"] == "again")
    }

    @Test(arguments: StoreKind.allCases)
    func disallowedCombinationsAreRefused(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        try await Self.seedSynced(device, [["id": "a"], ["id": "b"]])
        let todos = device.table()
        try await todos.delete(id: "a")
        await expectSyncError(.invalidOperation) { try await todos.update(["id": "a", "title": "x"]) }
        try await todos.update(["id": "b", "title": "x"])
        await expectSyncError(.itemExists) { try await todos.insert(["id": "b"]) }
        try await todos.insert(["id": "c"])
        await expectSyncError(.itemExists) { try await todos.insert(["id": "c"]) }
        #expect(try await device.operations().map(\.kind) == [.delete, .update, .insert])
    }

    /// Legacy bugs #3 and #4: one operation per item, found in queue order, pushed in queue order
    /// across tables.
    @Test(arguments: StoreKind.allCases)
    func theQueueIsOrderedAndHoldsOneOperationPerItem(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        let todos = device.table("todo")
        let notes = device.table("note")
        try await todos.insert(["id": "t1"])
        try await notes.insert(["id": "n1"])
        try await todos.insert(["id": "t2"])
        try await todos.update(["id": "t1", "v": 2])
        try await notes.update(["id": "n1", "v": 2])
        let operations = try await device.operations()
        #expect(operations.map(\.itemID) == ["t1", "n1", "t2"])
        #expect(operations.map(\.id) == operations.map(\.id).sorted())
        #expect(try await todos.queuedOperationCount() == 2)
        #expect(try await notes.queuedOperationCount() == 1)
        try await device.context.push()
        #expect(device.server.requests.map { "\($0.table)/\($0.itemID ?? "")" } == ["todo/t1", "note/n1", "todo/t2"])
    }

    /// An operation in flight is never collapsed away: the new edit queues a second operation after it.
    @Test(arguments: StoreKind.allCases)
    func editsWhileInFlightQueueASecondOperation(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let device = try Device(kind: kind, server: server)
        let todos = device.table()
        try await todos.insert(["id": "a", "title": "one"])
        let seen = SeenQueue()
        server.inject(
            .hook {
                _ = try? await todos.update(["id": "a", "title": "two"])
                await seen.set(try? await device.operations())
                return nil
            }, on: .insert)
        let result = try await device.context.push()
        let during = try #require(await seen.value)
        #expect(during.map(\.kind) == [.insert, .update])
        #expect(during.map(\.state) == [.inFlight, .pending])
        // Both were pushed: the follow-up update carried the version the insert produced.
        #expect(result.pushed == 2)
        #expect(server.requests.map(\.kind) == [.insert, .update])
        #expect(server.requests[1].ifVersion == server.commits[0].row.version)
        #expect(server.row("todo", id: "a")?["title"] == "two")
        #expect(try await device.operations().isEmpty)
        #expect(try await todos.item(id: "a")?.version == server.row("todo", id: "a")?.version)
    }

    /// Post-flight collapse (legacy bug #3: dead code): when the in-flight operation fails, the edits
    /// queued meanwhile fold into it.
    @Test(arguments: StoreKind.allCases)
    func aFailedInFlightOperationAbsorbsItsFollowUps(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let device = try Device(kind: kind, server: server)
        let todos = device.table()
        try await todos.insert(["id": "a", "title": "one"])
        try await todos.insert(["id": "b", "title": "one"])
        server.inject(
            .hook {
                _ = try? await todos.update(["id": "a", "title": "two"])
                return .status(400, "bad title")
            }, on: .insert, itemID: "a")
        server.inject(
            .hook {
                try? await todos.delete(id: "b")
                return .status(500, "down")
            }, on: .insert, itemID: "b")
        let result = try await device.context.push()
        #expect(result.pushed == 0)
        #expect(result.failed.map(\.itemID) == ["a", "b"])
        // a: insert + update = one failed insert with the latest fields; b: insert + delete = nothing.
        let operations = try await device.operations()
        #expect(operations.map(\.itemID) == ["a"])
        #expect(operations.map(\.kind) == [.insert])
        #expect(operations.map(\.state) == [.failed])
        #expect(try await device.context.operationErrors().map(\.itemID) == ["a"])
        #expect(try await todos.item(id: "a")?["title"] == "two")
        // The next push sends the insert with the latest fields and clears the error.
        let retry = try await device.context.push()
        #expect(retry.pushed == 1)
        #expect(server.row("todo", id: "a")?["title"] == "two")
        #expect(try await device.context.operationErrors().isEmpty)
    }
}

/// A value set from inside a scripted request.
actor SeenQueue {
    var value: [QueuedOperation]?
    func set(_ value: [QueuedOperation]?) { self.value = value }
}
