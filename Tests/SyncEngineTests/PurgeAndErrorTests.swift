import SyncCore
import SyncTesting
import Testing

@Suite("Purge")
struct PurgeTests {
    @Test(arguments: StoreKind.allCases)
    func aPurgeRefusesWhileTheTableHasPendingOperations(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let device = try Device(kind: kind, server: server)
        server.seed("todo", PullTests.rows(4))
        try await device.table().pull()
        try await device.table().insert(["id": "local"])
        await expectSyncError(.queuedOperations) { try await device.table().purge() }
        #expect(try await device.table().query().items.count == 5)
        // Pending operations on another table do not block it.
        try await device.context.push()
        try await device.table("other").insert(["id": "x"])
        let removed = try await device.table().purge(TableQuery().filter(.field("n").lt(2)))
        #expect(removed == 2)
        #expect(try await device.table().query().items.map(\.id) == ["local", "r002", "r003"])
        #expect(try await device.table().purge() == 3)
    }

    @Test(arguments: StoreKind.allCases)
    func aForcedPurgeDropsOperationsErrorsAndDeltaTokens(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let device = try Device(kind: kind, server: server)
        server.seed("todo", PullTests.rows(3))
        try await device.table().pull(queryID: "all")
        try await device.table().insert(["id": "a"])
        try await device.table().insert(["id": "b"])
        try await device.table("other").insert(["id": "o"])
        server.inject(.status(400, "no"), on: .insert, itemID: "a")
        _ = try await device.context.push()
        try await device.table().update(["id": "r000", "n": 9])
        #expect(try await device.table().queuedOperationCount() == 2)
        let removed = try await device.table().purge(force: true)
        #expect(removed == 5)  // r000…r002, a (failed) and b (pushed)
        #expect(try await device.table().queuedOperationCount() == 0)
        #expect(try await device.context.operationErrors(table: "todo").isEmpty)
        #expect(try await device.store.read { try $0.deltaTokens(table: "todo") }.isEmpty)
        #expect(try await device.context.queuedOperationCount(table: "other") == 0)  // o was pushed
        // With its delta token gone, the next pull brings everything back.
        #expect(try await device.table().pull(queryID: "all").items.received == 4)
    }

    /// A forced purge with a filter dropped the whole table's queue: an item it kept stayed on the
    /// device with its insert gone, never pushed, while nothing was queued any more.
    @Test(arguments: StoreKind.allCases)
    func aForcedPurgeOfSomeItemsKeepsTheOthersQueuedChanges(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let device = try Device(kind: kind, server: server)
        server.seed("todo", PullTests.rows(3))
        try await device.table().pull(queryID: "all")
        try await device.table().insert(["id": "kept", "n": 10])
        try await device.table().update(["id": "r000", "n": 20])
        try await device.table().update(["id": "r001", "n": 1])
        server.inject(.status(400, "no"), on: .update, itemID: "r001")
        _ = try await device.context.push()
        try await device.table().update(["id": "r000", "n": 21])
        try await device.table().insert(["id": "gone", "n": 30])
        try await device.table().delete(id: "r002")
        #expect(try await device.table().queuedOperationCount() == 4)  // r001 (failed), r000, gone, r002
        let removed = try await device.table().purge(TableQuery().filter(.field("n").ge(20)), force: true)
        #expect(removed == 2)  // r000 and gone
        let left = try await device.context.queuedOperations(table: "todo")
        #expect(Set(left.map(\.itemID)) == ["r001", "r002"], "\(left)")
        #expect(try await device.context.operationErrors(table: "todo").map(\.itemID) == ["r001"])
        // The kept insert had been pushed; the kept delete still goes.
        #expect(try await device.table().item(id: "kept") != nil)
        #expect(server.row("todo", id: "kept") != nil)
        _ = try await device.context.push()
        #expect(!server.rows("todo").contains { $0.id == "r002" }, "the kept delete reached the server")
    }

    /// Legacy bug #16: a purge resets the delta tokens that would never bring the purged items back.
    @Test(arguments: StoreKind.allCases)
    func aPurgeResetsTheDeltaTokensItInvalidates(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let device = try Device(kind: kind, server: server)
        server.seed("todo", PullTests.rows(6))
        try await device.table().pull(TableQuery().filter(.field("n").lt(3)), queryID: "low")
        try await device.table().pull(TableQuery().filter(.field("n").ge(3)), queryID: "high")
        try await device.table().pull(queryID: "all")
        #expect(try await device.table().purge(TableQuery().filter(.field("n").eq(4))) == 1)
        let tokens = try await device.store.read { try $0.deltaTokens(table: "todo") }
        #expect(Set(tokens.keys) == ["low"])
        #expect(
            try await device.table().pull(TableQuery().filter(.field("n").lt(3)), queryID: "low").items.received == 0)
        let back = try await device.table().pull(TableQuery().filter(.field("n").ge(3)), queryID: "high")
        #expect(back.items.received == 3)
        #expect(try await device.table().item(id: "r004") != nil)
    }
}

@Suite("Errors table")
struct ErrorResolutionTests {
    /// A failed update (412) and a failed insert (400), recorded by one context.
    static func failures(_ device: Device) async throws -> (
        conflict: OperationErrorRecord, rejected: OperationErrorRecord
    ) {
        device.server.seed("todo", [["id": "a", "title": "base"]])
        try await device.table().pull()
        try await device.table().update(["id": "a", "title": "mine"])
        try await device.table().insert(["id": "b", "title": "mine"])
        device.server.touch("todo", ids: ["a"], set: ["title": "theirs"])
        device.server.inject(.status(400, "title too short"), on: .insert)
        let failed = try await device.context.push().failed
        try #require(failed.count == 2)
        return (failed[0], failed[1])
    }

    @Test(arguments: StoreKind.allCases)
    func discardingTheLocalChangeRestoresTheServersCopy(_ kind: StoreKind) async throws {
        var device = try Device(kind: kind, server: ModelServer())
        let (conflict, rejected) = try await Self.failures(device)
        try await device.restart()  // the actions work from the store alone
        try await device.context.resolveError(conflict.id, .discardLocalChange)
        try await device.context.resolveError(rejected.id, .discardLocalChange)
        #expect(try await device.table().item(id: "a")?["title"] == "theirs")
        #expect(try await device.table().item(id: "b") == nil)
        #expect(try await device.operations().isEmpty)
        #expect(try await device.context.operationErrors().isEmpty)
        await expectSyncError(.notFound) { try await device.context.resolveError(conflict.id, .useServer) }
    }

    @Test(arguments: StoreKind.allCases)
    func takingTheServersItem(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        let (conflict, rejected) = try await Self.failures(device)
        try await device.context.resolveError(conflict.id, .useServer)
        #expect(try await device.table().item(id: "a")?.version == device.server.row("todo", id: "a")?.version)
        await expectSyncError(.invalidResolution) { try await device.context.resolveError(rejected.id, .useServer) }
        #expect(try await device.operations().map(\.itemID) == ["b"])
    }

    @Test(arguments: StoreKind.allCases)
    func keepingMineRetriesAgainstTheServersVersion(_ kind: StoreKind) async throws {
        var device = try Device(kind: kind, server: ModelServer())
        let (conflict, rejected) = try await Self.failures(device)
        try await device.restart()
        await expectSyncError(.invalidItem) {
            try await device.context.resolveError(conflict.id, .useMerged(["id": "zzz"]))
        }
        try await device.context.resolveError(conflict.id, .useClient)
        try await device.context.resolveError(rejected.id, .useMerged(["id": "b", "title": "a longer title"]))
        #expect(try await device.operations().map(\.state) == [.pending, .pending])
        #expect(try await device.context.operationErrors().isEmpty)
        let result = try await device.context.push()
        #expect(result.pushed == 2)
        #expect(device.server.row("todo", id: "a")?["title"] == "mine")
        #expect(device.server.row("todo", id: "b")?["title"] == "a longer title")
    }

    @Test(arguments: StoreKind.allCases)
    func changingTheOperation(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        let (conflict, rejected) = try await Self.failures(device)
        // The conflicting update becomes a delete (against the server's version): it goes through.
        try await device.context.resolveError(conflict.id, .changeOperation(.delete))
        #expect(try await device.table().item(id: "a") == nil)
        // The rejected insert becomes an insert of another item body.
        try await device.context.resolveError(
            rejected.id, .changeOperation(.insert, item: ["id": "b", "title": "fixed"]))
        #expect(try await device.operations().map(\.kind) == [.delete, .insert])
        #expect(try await device.context.push().pushed == 2)
        #expect(device.server.row("todo", id: "a")?.isDeleted == true)
        #expect(device.server.row("todo", id: "b")?["title"] == "fixed")

        // A failed delete turned back into an update restores the item locally.
        device.server.seed("todo", [["id": "c", "title": "base"]])
        try await device.table().pull()
        try await device.table().delete(id: "c")
        device.server.inject(.status(400, "no"), on: .delete)
        let failed = try #require(try await device.context.push().failed.first)
        try await device.context.resolveError(failed.id, .changeOperation(.update))
        #expect(try await device.table().item(id: "c")?["title"] == "base")
        #expect(try await device.operations().map(\.kind) == [.update])
    }

    @Test func aStaleErrorIsRemoved() async throws {
        let device = try Device(kind: .memory, server: ModelServer())
        try await device.store.write { tx in
            try tx.saveOperationError(
                OperationErrorRecord(
                    id: "e1", operationID: 999, table: "todo", itemID: "x", kind: .insert, message: "old"))
        }
        await expectSyncError(.notFound) { try await device.context.resolveError("e1", .discardLocalChange) }
        #expect(try await device.context.operationErrors().isEmpty)
        await expectSyncError(.notFound) { try await device.context.resolveError("nope", .discardLocalChange) }
    }
}

@Suite("Progress events")
struct EventTests {
    @Test func pushAndPullReportTheirProgress() async throws {
        let server = ModelServer()
        let device = try Device(kind: .memory, server: server)
        let pushEvents = device.context.events()
        let second = device.context.events()
        try await device.table().insert(["id": "a"])
        try await device.table().insert(["id": "b"])
        server.inject(.status(500, "down"), on: .insert, itemID: "b")
        _ = try await device.context.push()
        let pushed = await collect(pushEvents) { if case .pushFinished = $0 { true } else { false } }
        #expect(pushed.count == 4)
        #expect(pushed.first == .pushStarted(operations: 2))
        #expect(pushed[1] == .operationPushed(table: "todo", itemID: "a", kind: .insert))
        guard case .operationFailed(let record) = pushed[2] else {
            Issue.record("expected a failure event, got \(pushed[2])")
            return
        }
        #expect(record.statusCode == 500)
        guard case .pushFinished(let result, let stoppedBy) = pushed[3] else { return }
        #expect(result.pushed == 1 && stoppedBy == nil)
        // Every stream gets every event.
        #expect(await collect(second) { if case .pushFinished = $0 { true } else { false } } == pushed)

        let pullEvents = device.context.events()
        server.seed("todo", PullTests.rows(5))
        server.clearFaults()
        try await device.table().pull(queryID: "q", options: PullOptions(pageSize: 2, pushesFirst: false))
        let pulled = await collect(pullEvents) { if case .pullFinished = $0 { true } else { false } }
        let pages = pulled.compactMap { event -> PullCounts? in
            if case .pagePulled(_, _, let page) = event { return page }
            return nil
        }
        #expect(pages.map(\.received) == [2, 2, 2])
        #expect(pulled.first == .pullStarted(table: "todo", queryID: "q"))
        #expect(!pulled.contains { if case .pullCounted = $0 { true } else { false } }, "counted without being asked")

        // Asked to count, the pull reports the total of what it will bring, once, before the pages.
        let counted = device.context.events()
        server.seed("todo", PullTests.rows(7, prefix: "counted"))
        let countedPull = try await device.table().pull(
            queryID: "fresh", options: PullOptions(pageSize: 3, pushesFirst: false, countsTotal: true))
        let countedEvents = await collect(counted) { if case .pullFinished = $0 { true } else { false } }
        let totals = countedEvents.compactMap { event -> Int? in
            if case .pullCounted(_, _, let total) = event { return total }
            return nil
        }
        #expect(countedPull.items.received >= 7)
        #expect(totals == [countedPull.items.received], "\(countedEvents)")
        #expect(countedEvents.dropFirst().first.map { if case .pullCounted = $0 { true } else { false } } == true)

        let failing = device.context.events()
        server.inject(.dropBeforeApply, on: .query)
        await expectSyncError(.network) {
            try await device.table().pull(queryID: "q", options: PullOptions(pushesFirst: false))
        }
        let stopped = await collect(failing) { if case .pullFinished = $0 { true } else { false } }
        guard case .pullFinished(_, _, _, let reason)? = stopped.last else { return }
        #expect(reason?.contains("lost") == true)
    }
}

@Suite("Errors table: the server's deletion")
struct DeletedOnServerResolutionTests {
    /// An update of an item another device deleted on the server, failed and kept.
    static func updateOfADeletedItem(_ device: Device) async throws -> OperationErrorRecord {
        device.server.seed("todo", [["id": "a", "title": "base"]])
        try await device.table().pull()
        try await device.table().update(["id": "a", "title": "mine"])
        device.server.softDelete("todo", ids: ["a"])
        let failed = try await device.context.push().failed
        return try #require(failed.first)
    }

    /// Keeping mine of an item the server deleted was "resolved" and failed again at every push:
    /// the deletion wins, as in a conflict handler, and the resolution applied says so.
    @Test(arguments: StoreKind.allCases)
    func keepingMineOfAnItemTheServerDeletedTakesTheDeletion(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        let error = try await Self.updateOfADeletedItem(device)
        let applied = try await device.context.resolveError(error.id, .useClient)
        #expect(applied == .useServer)
        #expect(try await device.table().item(id: "a") == nil)
        #expect(try await device.operations().isEmpty)
        #expect(try await device.context.push().failed.isEmpty)
    }

    /// An insert of the id the server keeps for its deleted item would be refused (409) at every push.
    @Test(arguments: StoreKind.allCases)
    func insertingAgainTheIdOfAnItemTheServerDeletedIsRefused(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        let error = try await Self.updateOfADeletedItem(device)
        await expectSyncError(.invalidResolution) {
            try await device.context.resolveError(error.id, .changeOperation(.insert, item: ["title": "again"]))
        }
        // An update of it can never apply either (410 at every push): refused too.
        await expectSyncError(.invalidResolution) {
            try await device.context.resolveError(error.id, .changeOperation(.update, item: ["title": "again"]))
        }
        #expect(try await device.table().item(id: "a")?["title"] == "mine")
    }

    /// An update queued for an item the server never had (404, no base): keeping mine sends it as
    /// an insert, once.
    @Test(arguments: StoreKind.allCases)
    func keepingMineOfAnItemTheServerNeverHadInsertsIt(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        try await device.store.write { tx in
            try tx.upsert("todo", [["id": "n", "title": "never sent"]])
            _ = try tx.appendOperation(OperationDraft(table: "todo", itemID: "n", kind: .update))
        }
        let error = try #require(try await device.context.push().failed.first)
        #expect(error.statusCode == 404)
        #expect(try await device.context.resolveError(error.id, .useClient) == .useClient)
        #expect(try await device.context.push().failed.isEmpty)
        #expect(device.server.row("todo", id: "n")?["title"] == "never sent")
    }

    /// An update of an item a pull removed (another device deleted it on the server), written
    /// without a version: the server answers 404 (2.0) as for an item it never had. It failed at
    /// every push with "never inserted there", and the handler was never asked: the server's
    /// tombstone now makes it the server's deletion, which a client-wins handler gives in to.
    @Test(arguments: StoreKind.allCases)
    func anUpdateOfAnItemAPullRemovedMeetsTheServersDeletion(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let phone = try Device("phone", kind: kind, server: server, handler: .clientWins)
        _ = try await phone.table().insert(["id": "rent", "title": "Pay rent"])
        _ = try await phone.context.push()
        server.softDelete("todo", ids: ["rent"])
        try await phone.table().pull()
        #expect(try await phone.table().item(id: "rent") == nil)
        _ = try await phone.table().update(["id": "rent", "title": "Pay rent", "done": true])
        let pushed = try await phone.context.push()
        #expect(pushed.failed.isEmpty, "\(pushed.failed.map(\.message))")
        #expect(try await phone.table().item(id: "rent") == nil, "the deletion wins")
        #expect(try await phone.operations().isEmpty)
        #expect(server.row("todo", id: "rent")?.isDeleted == true)

        // With the default handler it is a conflict to resolve, said as the server's deletion.
        let kept = try Device("tablet", kind: kind, server: server)
        _ = try await kept.table().update(["id": "rent", "title": "again"])
        let failed = try #require(try await kept.context.push().failed.first)
        #expect(failed.message.contains("deleted on the server"), "\(failed.message)")
        #expect(try await kept.context.resolveError(failed.id, .useClient) == .useServer)
        #expect(try await kept.operations().isEmpty)
    }
}
