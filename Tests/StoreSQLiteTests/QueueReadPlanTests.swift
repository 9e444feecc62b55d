import GRDB
@testable import StoreSQLite
import SyncCore
import Testing

/// How SQLite runs the queue reads a push makes for each batch: they must look up the batch's
/// items, never walk the whole queue (that made a push quadratic in the queue's length).
@Suite("SQLiteStore queue read plans")
struct QueueReadPlanTests {
    @Test func theOperationsOfSomeItemsAreLookedUpByItemNotReadThroughTheQueue() async throws {
        let store = try SQLiteStore.inMemory()
        try await store.write { tx in
            _ = try tx.appendOperations(
                (0..<3_000).map { OperationDraft(table: "todo", itemID: "item-\($0)", kind: .insert) })
            _ = try tx.appendOperations(
                (0..<50).map { OperationDraft(table: "todo", itemID: "item-\($0 * 7)", kind: .update) })
        }
        let wanted = ["item-7", "item-2999", "item-14", "missing"]
        let (plan, found) = try await store.database.read { db in
            let plan = try Row.fetchAll(
                db, sql: "EXPLAIN QUERY PLAN " + SQLiteReader.operationsOfItemsSQL,
                arguments: ["todo", SQLiteReader.jsonArray(wanted)]
            )
            .map { $0["detail"] as String? ?? "" }.joined(separator: "; ")
            let found = try SQLiteReader(db: db, place: "test").operations(table: "todo", itemIDs: wanted)
            return (plan, found)
        }
        #expect(plan.contains("ferry_operations_item (tableName=? AND itemId=?)"), "\(plan)")
        #expect(!plan.contains("ferry_operations_table"), "\(plan)")
        // Still in queue order: the insert of each item before its update.
        #expect(found.map(\.itemID) == ["item-7", "item-14", "item-2999", "item-7", "item-14"])
        #expect(found.map(\.kind) == [.insert, .insert, .insert, .update, .update])
        #expect(found.map(\.id) == found.map(\.id).sorted())
    }
}
