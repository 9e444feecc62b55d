import SyncCore
import SyncTesting
import Testing

/// Push: conflicts, as kept, resolved by the server's side, the client's, a merge, or a handler.
extension PushTests {
    @Test(arguments: StoreKind.allCases)
    func aConflictIsKeptByDefault(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let device = try Device(kind: kind, server: server)
        server.seed("todo", [["id": "a", "title": "base"]])
        try await device.table().pull()
        try await device.table().update(["id": "a", "title": "mine"])
        server.touch("todo", ids: ["a"], set: ["title": "theirs"])
        let result = try await device.context.push()
        let error = try #require(result.failed.first)
        #expect(error.statusCode == 412)
        #expect(error.kind == .update)
        #expect(error.serverItem?["title"] == "theirs")
        #expect(error.clientItem?["title"] == "mine")
        #expect(try await device.operations().map(\.state) == [.failed])
        #expect(server.row("todo", id: "a")?["title"] == "theirs")
    }

    @Test(arguments: StoreKind.allCases)
    func serverWinsTakesTheServersItem(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let device = try Device(kind: kind, server: server, handler: .serverWins)
        server.seed("todo", [["id": "a", "title": "base"]])
        try await device.table().pull()
        try await device.table().update(["id": "a", "title": "mine"])
        server.touch("todo", ids: ["a"], set: ["title": "theirs"])
        let result = try await device.context.push()
        #expect(result.pushed == 1)
        #expect(try await device.table().item(id: "a")?["title"] == "theirs")
        #expect(try await device.table().item(id: "a")?.version == server.row("todo", id: "a")?.version)
        #expect(try await device.operations().isEmpty)
        // The copy the conflict left is the one a pull gives (it kept `deleted: false`, which a
        // filter on `deleted` then told apart from another device's copy).
        let other = try Device("other", kind: kind, server: server)
        try await other.table().pull()
        #expect(try await device.table().item(id: "a") == other.table().item(id: "a"))
    }

    @Test(arguments: StoreKind.allCases)
    func clientWinsRetriesAgainstTheServersVersion(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let handler = RecordingConflictHandler(fallback: .useClient)
        let device = try Device(kind: kind, server: server, handler: handler)
        server.seed("todo", [["id": "a", "title": "base"], ["id": "d", "title": "base"]])
        try await device.table().pull()
        try await device.table().update(["id": "a", "title": "mine"])
        try await device.table().delete(id: "d")
        try await device.table().insert(["id": "new", "title": "mine"])
        server.touch("todo", ids: ["a", "d"], set: ["title": "theirs"])
        server.seed("todo", [["id": "new", "title": "theirs"]])
        let result = try await device.context.push()
        #expect(result.pushed == 3)
        #expect(handler.seen.map(\.status) == [412, 412, 409])
        #expect(handler.seen.map(\.kind) == [.update, .delete, .insert])
        #expect(server.row("todo", id: "a")?["title"] == "mine")
        #expect(server.row("todo", id: "d")?.isDeleted == true)
        #expect(server.row("todo", id: "new")?["title"] == "mine")
        #expect(try await device.table().item(id: "a")?.version == server.row("todo", id: "a")?.version)
        #expect(try await device.operations().isEmpty)
    }

    /// A conflict on an operation whose item was deleted locally while it was in flight: the client's
    /// latest intent (the delete) is what wins.
    @Test(arguments: StoreKind.allCases)
    func clientWinsAppliesTheEditsQueuedDuringTheConflictingRequest(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let handler = RecordingConflictHandler(fallback: .useClient)
        let device = try Device(kind: kind, server: server, handler: handler)
        server.seed("todo", [["id": "a", "title": "base"]])
        try await device.table().pull()
        let todos = device.table()
        try await todos.update(["id": "a", "title": "mine"])
        server.inject(
            .hook {
                _ = try? await todos.delete(id: "a")
                server.touch("todo", ids: ["a"], set: ["title": "theirs"])
                return nil
            }, on: .update)
        let result = try await device.context.push()
        #expect(result.failed.isEmpty)
        #expect(handler.seen.map(\.status) == [412])
        #expect(server.row("todo", id: "a")?.isDeleted == true)
        #expect(try await device.operations().isEmpty)
        #expect(try await todos.item(id: "a") == nil)
    }

    @Test(arguments: StoreKind.allCases)
    func threeWayMergeKeepsBothSidesChanges(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let device = try Device(kind: kind, server: server, handler: .threeWayMerge())
        server.seed("todo", [["id": "a", "title": "base", "notes": "base", "n": 1]])
        try await device.table().pull()
        try await device.table().update(["id": "a", "title": "mine", "notes": "base", "n": 2])
        server.touch("todo", ids: ["a"], set: ["notes": "theirs", "n": 3])
        #expect(try await device.context.push().pushed == 1)
        let row = try #require(server.row("todo", id: "a"))
        #expect(row["title"] == "mine")  // only the client changed it
        #expect(row["notes"] == "theirs")  // only the server changed it
        #expect(row["n"] == 2)  // both changed it: the client is preferred
        #expect(try await device.table().item(id: "a")?.userFields == row.userFields)

        let merged = ThreeWayMergeConflictHandler.merge(
            base: ["id": "x", "a": 1, "b": 1], client: ["id": "x", "a": 2, "b": 1],
            server: ["id": "x", "a": 1, "b": 3, "version": "v"], preferring: .server)
        #expect(merged == ["id": "x", "a": 2, "b": 3, "version": "v"])
    }

    @Test(arguments: StoreKind.allCases)
    func aMergedItemIsStoredAndSent(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let handler = RecordingConflictHandler(answers: [.useMerged(["id": "a", "title": "both"])])
        let device = try Device(kind: kind, server: server, handler: handler)
        server.seed("todo", [["id": "a", "title": "base"]])
        try await device.table().pull()
        let base = try await device.table().item(id: "a")
        try await device.table().update(["id": "a", "title": "mine"])
        server.touch("todo", ids: ["a"], set: ["title": "theirs"])
        #expect(try await device.context.push().pushed == 1)
        #expect(server.row("todo", id: "a")?["title"] == "both")
        #expect(try await device.table().item(id: "a")?["title"] == "both")
        #expect(handler.seen.first?.baseItem == base)
        #expect(handler.seen.first?.serverItem?["title"] == "theirs")
    }

    /// The server deleted the item the client updated: the deletion wins (it cannot be revived), unless
    /// the handler keeps the error.
    @Test(arguments: StoreKind.allCases)
    func anUpdateOfAServerDeletedItem(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let device = try Device(kind: kind, server: server, handler: .clientWins)
        server.seed("todo", [["id": "a"], ["id": "b"]])
        try await device.table().pull()
        try await device.table().update(["id": "a", "title": "mine"])
        server.softDelete("todo", ids: ["a"])
        #expect(try await device.context.push().pushed == 1)
        #expect(try await device.table().item(id: "a") == nil)

        let keeping = try Device(kind: kind, server: server)
        try await keeping.table().pull()
        try await keeping.table().update(["id": "b", "title": "mine"])
        server.softDelete("todo", ids: ["b"])
        let result = try await keeping.context.push()
        #expect(result.failed.map(\.statusCode) == [404])
        #expect(try await keeping.context.operationErrors().first?.serverItem == nil)
    }

    /// Legacy bug #9: a 409 without the server's item: the engine reads it.
    @Test(arguments: StoreKind.allCases)
    func aConflictWithoutTheServersItemReadsIt(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let handler = RecordingConflictHandler()
        let device = try Device(kind: kind, server: server, handler: handler)
        server.seed("todo", [["id": "a", "title": "theirs"]])
        try await device.table().insert(["id": "a", "title": "mine"])
        server.inject(.status(409, "duplicate key"), on: .insert)
        _ = try await device.context.push()
        #expect(handler.seen.first?.serverItem?["title"] == "theirs")
        #expect(try await device.context.operationErrors().first?.serverItem?["title"] == "theirs")
    }

    @Test(arguments: StoreKind.allCases)
    func aConflictThatKeepsComingBackIsRecordedAfterAFewRounds(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let handler = RecordingConflictHandler(fallback: .useClient)
        let device = try Device(kind: kind, server: server, handler: handler)
        server.seed("todo", [["id": "a", "title": "base"]])
        try await device.table().pull()
        try await device.table().update(["id": "a", "title": "mine"])
        server.setFaultPolicy { request in
            guard request.kind == .update else { return nil }
            return .hook {
                server.touch("todo", ids: ["a"], set: ["title": "busy"])
                return nil
            }
        }
        let result = try await device.context.push()
        #expect(result.failed.count == 1)
        #expect(handler.seen.count == 4)  // the first answer, then three more rounds
        #expect(result.failed.first?.message.contains("kept changing") == true)
    }

    /// A handler that throws keeps the conflict.
    @Test func aThrowingHandlerKeepsTheConflict() async throws {
        struct Broken: ConflictHandler {
            struct Failure: Error {}
            func resolve(_ conflict: SyncConflict) async throws -> ConflictResolution { throw Failure() }
        }
        let server = ModelServer()
        let device = try Device(kind: .memory, server: server, handler: Broken())
        server.seed("todo", [["id": "a"]])
        try await device.table().insert(["id": "a", "title": "mine"])
        #expect(try await device.context.push().failed.map(\.statusCode) == [409])
    }
}
