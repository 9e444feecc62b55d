import StoreConformance
import SyncCore
import SyncTesting
import Synchronization
import Testing

@Suite("Local writes")
struct LocalWriteTests {
    @Test(arguments: StoreKind.allCases)
    func insertGeneratesAnIDAndQueuesOneInsert(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        let todos = device.table()
        let saved = try await todos.insert(["title": "Milk", "done": false, "version": "forged", "updatedAt": "x"])
        let id = try #require(saved.id)
        #expect(ItemID.isValid(id) && id.count == 36)
        #expect(saved == ["id": .string(id), "title": "Milk", "done": false])
        #expect(try await todos.item(id: id) == saved)
        let operations = try await device.operations()
        #expect(operations.map(\.kind) == [.insert])
        #expect(operations.first?.itemID == id)
        #expect(operations.first?.state == .pending)
        #expect(try await todos.queuedOperationCount() == 1)
        #expect(try await device.context.table("other").queuedOperationCount() == 0)

        let given = try await todos.insert(["id": "fixed", "title": "Eggs"])
        #expect(given.id == "fixed")
        await expectSyncError(.itemExists) { try await todos.insert(["id": "fixed"]) }
        await expectSyncError(.invalidItem) { try await todos.insert(["id": "a/b"]) }
        await expectSyncError(.invalidItem) { try await todos.insert(["id": 42]) }
        await expectSyncError(.invalidTableName) { try await device.context.table("__reserved").insert(["id": "x"]) }
        #expect(try await device.context.queuedOperationCount() == 2)
    }

    @Test(arguments: StoreKind.allCases)
    func updateKeepsTheStoredSystemPropertiesAndCapturesTheBase(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        let synced: JSONObject = [
            "id": "a", "title": "Milk", "version": "v9", "updatedAt": "2024-01-01T00:00:00.000Z",
            "createdAt": "2024-01-01T00:00:00.000Z",
        ]
        try await device.store.upsert("todo", [synced])
        let todos = device.table()
        let updated = try await todos.update(["id": "a", "title": "Oat milk", "version": "stale"])
        #expect(updated["version"] == "v9")
        #expect(updated["title"] == "Oat milk")
        let operation = try #require(try await device.operations().first)
        #expect(operation.kind == .update)
        #expect(operation.baseItem == synced)

        // An update of an item that is not stored locally is queued as given (legacy behaviour).
        try await todos.update(["id": "b", "title": "From elsewhere", "version": "v3"])
        #expect(try await todos.item(id: "b")?["version"] == "v3")
        #expect(try await device.operations().map(\.kind) == [.update, .update])
        await expectSyncError(.invalidItem) { try await todos.update(["title": "no id"]) }
    }

    @Test(arguments: StoreKind.allCases)
    func deleteQueuesTheDeletedItemForItsVersion(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        try await device.store.upsert("todo", [["id": "a", "title": "Milk", "version": "v2"]])
        let todos = device.table()
        try await todos.delete(id: "a")
        #expect(try await todos.item(id: "a") == nil)
        let operation = try #require(try await device.operations().first)
        #expect(operation.kind == .delete)
        #expect(operation.item?["version"] == "v2")
        // Delete + delete does nothing more (legacy bug #7: it was an error).
        try await todos.delete(id: "a")
        #expect(try await device.operations().count == 1)
        await expectSyncError(.itemNotFound) { try await todos.delete(id: "never") }
        // Deleting an item that is not stored locally queues a delete with the given item.
        try await todos.delete(["id": "remote", "version": "v7"])
        #expect(try await device.operations().last?.item?["version"] == "v7")
    }

    @Test(arguments: StoreKind.allCases)
    func localQueriesUseTheQueryLanguage(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        let todos = device.table()
        for index in 0..<10 { try await todos.insert(["id": .string("t\(index)"), "n": .int(Int64(index))]) }
        let result = try await todos.query(
            TableQuery().filter(.field("n").ge(5)).orderBy("n", descending: true).top(3).includingTotalCount())
        #expect(result.items.map(\.id) == ["t9", "t8", "t7"])
        #expect(result.totalCount == 5)
        #expect(try await todos.item(id: "t3")?["n"] == 3)
        #expect(try await todos.item(id: "t99") == nil)
    }

    /// Legacy bug #5: a local write whose queue write fails must not stay half-done.
    @Test(arguments: StoreKind.allCases)
    func aWriteAndItsOperationCommitTogether(_ kind: StoreKind) async throws {
        let storage = try TestStore(kind)
        let failing = FailingQueueStore(storage.store)
        let context = SyncContext(store: failing, remote: ModelServer().remote())
        let todos = context.table("todo")
        try await storage.store.upsert("todo", [["id": "kept", "v": 1, "version": "v1"]])
        try await todos.insert(["id": "other"])
        failing.fails.withLock { $0 = true }
        let error = await expectSyncError(.store) { try await todos.insert(["id": "new", "v": 1]) }
        #expect(error?.description.contains("queue is full") == true)
        await expectSyncError(.store) { try await todos.update(["id": "kept", "v": 2]) }
        await expectSyncError(.store) { try await todos.delete(id: "kept") }
        failing.fails.withLock { $0 = false }
        #expect(try await todos.item(id: "new") == nil)
        #expect(try await todos.item(id: "kept")?["v"] == 1)
        #expect(try await context.queuedOperationCount() == 1)
    }

    struct Todo: Codable, Sendable, Equatable {
        enum Priority: String, Codable, Sendable { case low, high }
        var id: String?
        var title: String
        var done = false
        var count: Int = 0
        var ratio: Double = 0.5
        var due: Timestamp?
        var tags: [String] = []
        var priority: Priority = .low
        var note: Note?
        var version: String?

        struct Note: Codable, Sendable, Equatable {
            var text: String
            var lines: [Int]
        }
    }

    @Test(arguments: StoreKind.allCases)
    func typedTablesRoundTripCodableModels(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        let todos = device.context.table("todo", of: Todo.self)
        var milk = try await todos.insert(
            Todo(
                title: "Milk", count: 3, due: Timestamp(millisecondsSince1970: 1_700_000_000_123), tags: ["a", "b"],
                priority: .high, note: Todo.Note(text: "2%", lines: [1, 2])))
        let id = try #require(milk.id)
        #expect(ItemID.isValid(id))
        // Integers stay integers in the stored JSON.
        let stored = try #require(try await device.table().item(id: id))
        #expect(stored["count"] == 3)
        #expect(stored["due"] == "2023-11-14T22:13:20.123Z")
        #expect(stored["note"] == ["text": "2%", "lines": [1, 2]])
        #expect(stored["note"]?["lines"]?.arrayValue?.first == .int(1))
        #expect(try await todos.item(id: id) == milk)

        milk.done = true
        try await todos.update(milk)
        _ = try await todos.insert(Todo(id: "", title: "Empty id gets one"))
        let done = try await todos.query(TableQuery().filter(.field("done").eq(true)))
        #expect(done == [milk])
        #expect(try await todos.query().count == 2)
        try await todos.delete(milk)
        #expect(try await todos.item(id: id) == nil)

        try await device.table().insert(["id": "bad", "title": 42])
        await expectSyncError(.invalidItem) { _ = try await todos.item(id: "bad") }

        // The typed table syncs like any other.
        try await device.context.push()
        #expect(device.server.rows("todo").count == 2)
    }
}

/// A store whose queue writes fail on demand, to show that the item write is rolled back with them.
final class FailingQueueStore: LocalStore {
    let base: any LocalStore
    let fails = Mutex(false)

    init(_ base: any LocalStore) { self.base = base }

    var capabilities: StoreCapabilities { base.capabilities }
    var commits: StoreCommits { base.commits }

    func read<Result: Sendable>(_ body: @Sendable (any StoreReader) throws -> Result) async throws -> Result {
        try await base.read(body)
    }

    func write<Result: Sendable>(_ body: @Sendable (any StoreTransaction) throws -> Result) async throws -> Result {
        let fails = fails.withLock { $0 }
        return try await base.write { tx in try body(FailingTransaction(base: tx, fails: fails)) }
    }

    func close() async throws { try await base.close() }
}

struct FailingTransaction: StoreTransaction {
    let base: any StoreTransaction
    let fails: Bool

    private func check() throws {
        if fails { throw StoreError(.full, "the queue is full") }
    }

    func item(_ table: String, id: String) throws -> JSONObject? { try base.item(table, id: id) }
    func query(_ table: String, _ query: TableQuery) throws -> QueryResult { try base.query(table, query) }
    func count(_ table: String) throws -> Int { try base.count(table) }
    func tableNames() throws -> [String] { try base.tableNames() }
    func definition(of table: String) throws -> TableDefinition? { try base.definition(of: table) }
    func operations(after afterID: Int64?, table: String?, limit: Int?) throws -> [QueuedOperation] {
        try base.operations(after: afterID, table: table, limit: limit)
    }
    func operations(table: String, itemID: String) throws -> [QueuedOperation] {
        try base.operations(table: table, itemID: itemID)
    }
    func operation(id: Int64) throws -> QueuedOperation? { try base.operation(id: id) }
    func operationCount(table: String?) throws -> Int { try base.operationCount(table: table) }
    func operationErrors(table: String?) throws -> [OperationErrorRecord] { try base.operationErrors(table: table) }
    func operationError(id: String) throws -> OperationErrorRecord? { try base.operationError(id: id) }
    func deltaToken(table: String, queryID: String) throws -> String? {
        try base.deltaToken(table: table, queryID: queryID)
    }
    func deltaTokens(table: String) throws -> [String: String] { try base.deltaTokens(table: table) }
    func define(_ definition: TableDefinition) throws { try base.define(definition) }
    func upsert(_ table: String, _ items: [JSONObject]) throws { try base.upsert(table, items) }
    func delete(_ table: String, ids: [String]) throws -> Int { try base.delete(table, ids: ids) }
    func delete(_ table: String, matching query: TableQuery) throws -> Int { try base.delete(table, matching: query) }
    func appendOperation(_ draft: OperationDraft) throws -> QueuedOperation {
        try check()
        return try base.appendOperation(draft)
    }
    func updateOperation(_ operation: QueuedOperation) throws {
        try check()
        try base.updateOperation(operation)
    }
    func deleteOperations(ids: [Int64]) throws { try base.deleteOperations(ids: ids) }
    func saveOperationError(_ error: OperationErrorRecord) throws { try base.saveOperationError(error) }
    func deleteOperationErrors(ids: [String]) throws { try base.deleteOperationErrors(ids: ids) }
    func setDeltaToken(table: String, queryID: String, value: String?) throws {
        try base.setDeltaToken(table: table, queryID: queryID, value: value)
    }
}

@Suite("Atomic multi-item writes")
struct AtomicWriteTests {
    struct Refused: Error, Equatable {}

    @Test(arguments: StoreKind.allCases)
    func everyItemAndOperationCommitsTogether(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        _ = try await device.table().insert(["id": "old", "title": "Old"])
        let list = try await device.context.write { writes in
            let list = try writes.insert(["title": "Groceries"], into: "lists")
            for title in ["Milk", "Eggs"] {
                try writes.insert(["id": .string(title.lowercased()), "title": .string(title)], into: "todo")
            }
            try writes.update(["id": "milk", "title": "Oat milk"], in: "todo")
            try writes.delete(id: "old", from: "todo")
            #expect(try writes.item("todo", id: "milk")?["title"] == "Oat milk", "a write sees its own changes")
            return list
        }
        #expect(try await device.context.table("lists").item(id: list.id ?? "") == list)
        #expect(try await device.table().query().items.compactMap(\.id).sorted() == ["eggs", "milk"])
        #expect(try await device.table().item(id: "milk")?["title"] == "Oat milk")
        // The insert of "old" and its delete collapse away; milk's insert absorbs its update.
        let kinds = try await device.operations().map { "\($0.table)/\($0.itemID)/\($0.kind)" }.sorted()
        #expect(kinds == ["lists/\(list.id ?? "")/insert", "todo/eggs/insert", "todo/milk/insert"])
    }

    @Test(arguments: StoreKind.allCases)
    func aFailureHalfwayLeavesNeitherItemsNorOperations(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        _ = try await device.table().insert(["id": "kept", "title": "Kept"])
        let before = try await device.operations()

        // A change Ferry refuses (an invalid id) after two good ones.
        await expectSyncError(.invalidItem) {
            try await device.context.write { writes in
                try writes.insert(["id": "a", "title": "A"], into: "todo")
                try writes.update(["id": "kept", "title": "Changed"], in: "todo")
                try writes.insert(["id": "a/b"], into: "todo")
            }
        }
        // An error of the app's own, which comes back unchanged.
        await #expect(throws: Refused.self) {
            try await device.context.write { writes in
                try writes.insert(["id": "b", "title": "B"], into: "other")
                throw Refused()
            }
        }
        #expect(try await device.table().query().items.compactMap(\.id) == ["kept"])
        #expect(try await device.table().item(id: "kept")?["title"] == "Kept")
        #expect(try await device.context.table("other").query().items.isEmpty)
        #expect(try await device.operations() == before)
    }
}

@Suite("Inserting many items at once")
struct InsertManyTests {
    @Test(arguments: StoreKind.allCases)
    func manyInsertsMeanWhatOneInsertEachMeans(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        let stored = try await device.context.write { writes in
            try writes.insert(
                contentsOf: [["id": "a", "n": 1], ["n": 2, "version": "forged"], ["id": "c"]], into: "todo")
        }
        #expect(stored.count == 3 && stored[1]["version"] == nil && stored[1].id.map(ItemID.isValid) == true)
        #expect(try await device.table().query().items.count == 3)
        let operations = try await device.operations()
        #expect(operations.map(\.kind) == [.insert, .insert, .insert])
        #expect(operations.map(\.itemID) == stored.compactMap(\.id), "queued in the items' order")
        #expect(operations.map(\.id) == operations.map(\.id).sorted())

        // An id already stored, or twice in one batch: itemExists, and the write rolls back whole.
        for batch: [JSONObject] in [[["id": "x"], ["id": "a"]], [["id": "y"], ["id": "y"]]] {
            await expectSyncError(.itemExists) {
                try await device.context.write { writes in _ = try writes.insert(contentsOf: batch, into: "todo") }
            }
        }
        #expect(try await device.table().query().items.count == 3)
        #expect(try await device.operations() == operations)

        // An item whose delete is still queued: delete + insert collapse into an update, as one
        // insert would do.
        try await device.store.upsert("todo", [["id": "d", "title": "old", "version": "v1"]])  // as pulled
        try await device.table().delete(id: "d")
        _ = try await device.context.write { writes in
            try writes.insert(contentsOf: [["id": "e"], ["id": "d", "title": "new"]], into: "todo")
        }
        let kinds = try await device.operations().filter { ["d", "e"].contains($0.itemID) }.map(\.kind)
        #expect(kinds.sorted { $0.rawValue < $1.rawValue } == [.insert, .update].sorted { $0.rawValue < $1.rawValue })
        #expect(try await device.table().item(id: "d")?["title"] == "new")
    }

    /// A local query the store refuses is `invalidQuery`, as in a pull (a negative `top` was
    /// `store`, the code for a store that failed).
    @Test(arguments: StoreKind.allCases)
    func aQueryTheStoreRefusesIsAnInvalidQuery(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        _ = try await device.table().insert(["id": "a"])
        await expectSyncError(.invalidQuery) { _ = try await device.table().query(TableQuery(top: -1)) }
        await expectSyncError(.invalidQuery) { _ = try await device.table().query(TableQuery(skip: -1)) }
    }
}
