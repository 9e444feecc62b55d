import StoreMemory
import SyncCore
import Testing

/// The example in README.md, kept compiling and true.
@Test func theReadmeExampleWorks() async throws {
    let store = MemoryStore()
    try await store.write { tx in
        try tx.upsert("todo", [["id": "1", "title": "Buy milk", "done": false]])
        _ = try tx.appendOperation(OperationDraft(table: "todo", itemID: "1", kind: .insert))
    }
    let open = try await store.query(
        "todo", TableQuery().filter(QueryExpression.field("done").eq(false)).orderBy("title"))
    #expect(open.items.map(\.id) == ["1"])
    #expect(try await store.operationCount(table: "todo") == 1)
}
