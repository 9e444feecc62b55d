import SyncCore
import Synchronization
import Testing

extension StoreConformanceSuite {
    static func draft(_ table: String, _ itemID: String, _ kind: OperationKind = .insert) -> OperationDraft {
        OperationDraft(
            table: table, itemID: itemID, kind: kind, item: ["id": .string(itemID), "n": 1],
            createdAt: Timestamp(millisecondsSince1970: 1_700_000_000_000))
    }

    static var transactions: [StoreConformanceCheck] {
        [
            .init("operations appended together read back exactly as appended, ids in order") { fixture async throws in
                let odd: JSONObject = [
                    "id": "é/\"q\"", "text": "line\nbreak \u{0} nul 🎬",
                    "nested": ["b": [1, 2.5, true, .null], "a": "x"],
                ]
                var drafts = [draft("todo", "plain"), draft("todo", "é/\"q\"", .update)]
                drafts[0].item = nil
                drafts[1].item = odd
                drafts[1].baseItem = odd.merging(["version": "v1"]) { $1 }
                drafts.append(
                    OperationDraft(
                        table: "other", itemID: "d", kind: .delete, item: ["id": "d"],
                        createdAt: Timestamp(millisecondsSince1970: 1_700_000_000_123)))
                let appended = try await fixture.store.write { [drafts] tx in try tx.appendOperations(drafts) }
                #expect(appended.map(\.id) == appended.map(\.id).sorted() && Set(appended.map(\.id)).count == 3)
                let read = try await fixture.store.read { try $0.operations(after: nil, table: nil, limit: nil) }
                #expect(read == appended)
                #expect(read.map { QueuedOperation(id: $0.id, draft: drafts[read.firstIndex(of: $0)!]) } == read)
            },
            .init("a failed transaction leaves nothing behind: items, operations, errors, tokens") {
                fixture async throws in
                let store = fixture.store
                try await store.upsert("todo", [["id": "keep", "v": 1]])
                do {
                    try await store.write { tx in
                        try tx.upsert("todo", [["id": "new", "v": 1], ["id": "keep", "v": 2]])
                        try tx.delete("todo", ids: ["keep"])
                        _ = try tx.appendOperation(draft("todo", "new"))
                        try tx.saveOperationError(
                            OperationErrorRecord(
                                id: "e1", operationID: 1, table: "todo", itemID: "new", kind: .insert, message: "x"))
                        try tx.setDeltaToken(table: "todo", queryID: "all", value: "token")
                        try tx.define(TableDefinition(name: "todo", indexes: [["v"]]))
                        throw Abort()
                    }
                    Issue.record("the transaction should have thrown")
                } catch is Abort {}
                #expect(try await store.item("todo", id: "keep") == ["id": "keep", "v": 1])
                #expect(try await store.item("todo", id: "new") == nil)
                #expect(try await store.operationCount() == 0)
                #expect(try await store.read { try $0.operationErrors(table: nil) }.isEmpty)
                #expect(try await store.read { try $0.deltaToken(table: "todo", queryID: "all") } == nil)
                #expect(try await store.read { try $0.definition(of: "todo") } == nil)
            },
            .init("an item and its queued operation commit together") { fixture async throws in
                let store = fixture.store
                let operation = try await store.write { tx in
                    try tx.upsert("todo", [["id": "a", "title": "Milk"]])
                    return try tx.appendOperation(draft("todo", "a"))
                }
                #expect(try await store.item("todo", id: "a")?["title"] == "Milk")
                #expect(try await store.read { try $0.operation(id: operation.id) } == operation)
            },
            .init("writes inside a transaction are visible to its own reads") { fixture async throws in
                let seen = try await fixture.store.write { tx in
                    try tx.upsert("todo", [["id": "a", "n": 1]])
                    _ = try tx.appendOperation(draft("todo", "a"))
                    return (
                        try tx.item("todo", id: "a"), try tx.operationCount(table: "todo"),
                        try tx.query("todo", TableQuery()).items.count
                    )
                }
                #expect(seen.0 == ["id": "a", "n": 1])
                #expect(seen.1 == 1)
                #expect(seen.2 == 1)
            },
            .init("a store error inside a transaction rolls back what came before it") { fixture async throws in
                let store = fixture.store
                await expectError(StoreError.self, .invalidItem, "second upsert has a bad id") {
                    try await store.write { tx in
                        try tx.upsert("todo", [["id": "first"]])
                        try tx.upsert("todo", [["id": "bad/id"]])
                    }
                }
                #expect(try await store.item("todo", id: "first") == nil)
                // The store is still usable afterwards.
                try await store.upsert("todo", [["id": "after"]])
                #expect(try await store.item("todo", id: "after") != nil)
            },
        ]
    }

    static var systemTables: [StoreConformanceCheck] {
        [
            .init("operations get strictly increasing ids and list in queue order") { fixture async throws in
                let store = fixture.store
                let appended = try await store.write { tx in
                    try ["a", "b", "c", "d"].enumerated().map { index, id in
                        try tx.appendOperation(draft(index % 2 == 0 ? "t1" : "t2", id))
                    }
                }
                #expect(appended.map(\.id) == appended.map(\.id).sorted())
                #expect(Set(appended.map(\.id)).count == 4)
                let all = try await store.read { try $0.operations(after: nil, table: nil, limit: nil) }
                #expect(all == appended)
                let t1 = try await store.read { try $0.operations(after: nil, table: "t1", limit: nil) }
                #expect(t1.map(\.itemID) == ["a", "c"])
                let afterFirst = try await store.read { try $0.operations(after: appended[0].id, table: nil, limit: 2) }
                #expect(afterFirst.map(\.itemID) == ["b", "c"])
                #expect(try await store.operationCount(table: "t2") == 2)
                #expect(try await store.operationCount() == 4)
            },
            .init("the operations of several items come in queue order, of those items and table only") {
                fixture async throws in
                let store = fixture.store
                let appended = try await store.write { tx in
                    try [("t1", "a"), ("t1", "b"), ("t2", "a"), ("t1", "A"), ("t1", "a"), ("t1", "c\"d")].map {
                        try tx.appendOperation(draft($0, $1))
                    }
                }
                let read = try await store.read { try $0.operations(table: "t1", itemIDs: ["a", "c\"d", "zz", "a"]) }
                #expect(read == [appended[0], appended[4], appended[5]])
                #expect(try await store.read { try $0.operations(table: "t2", itemIDs: ["b"]) }.isEmpty)
                #expect(try await store.read { try $0.operations(table: "t1", itemIDs: []) }.isEmpty)
            },
            .init("an operation round-trips its items and state, and can be updated and deleted") {
                fixture async throws in
                let store = fixture.store
                var operation = try await store.write { tx in
                    try tx.appendOperation(
                        OperationDraft(
                            table: "todo", itemID: "x", kind: .delete, item: sample, baseItem: ["id": "x", "v": 0.5],
                            createdAt: Timestamp(millisecondsSince1970: 1_234)))
                }
                #expect(operation.item == sample)
                #expect(operation.baseItem == ["id": "x", "v": 0.5])
                #expect(operation.state == .pending)
                operation.state = .inFlight
                operation.kind = .update
                operation.attempts = 3
                let updated = operation
                try await store.write { try $0.updateOperation(updated) }
                #expect(try await store.read { try $0.operation(id: updated.id) } == updated)
                #expect(try await store.read { try $0.operations(table: "todo", itemID: "x") } == [updated])
                // An update that gives the operation another table and item moves it in every read.
                var moving = updated
                moving.table = "notes"
                moving.itemID = "y"
                let moved = moving
                try await store.write { try $0.updateOperation(moved) }
                #expect(try await store.read { try $0.operation(id: updated.id) } == moved)
                #expect(try await store.read { try $0.operations(table: "todo", itemID: "x") }.isEmpty)
                #expect(try await store.read { try $0.operations(table: "notes", itemIDs: ["y", "x"]) } == [moved])
                #expect(try await store.read { try $0.operations(after: nil, table: "todo", limit: nil) }.isEmpty)
                try await store.write { try $0.updateOperation(updated) }
                #expect(try await store.read { try $0.operations(table: "todo", itemID: "x") } == [updated])
                try await store.write { try $0.deleteOperations(ids: [updated.id, 999_999]) }
                #expect(try await store.read { try $0.operation(id: updated.id) } == nil)
                await expectError(StoreError.self, .notFound, "update of a deleted operation") {
                    try await store.write { try $0.updateOperation(updated) }
                }
            },
            .init("deleting one operation says whether it was queued") { fixture async throws in
                let store = fixture.store
                let (kept, removed) = try await store.write { tx in
                    (try tx.appendOperation(draft("todo", "a")), try tx.appendOperation(draft("todo", "b")))
                }
                #expect(try await store.write { try $0.deleteOperation(id: removed.id) })
                #expect(try await store.write { try $0.deleteOperation(id: removed.id) } == false)
                #expect(try await store.write { try $0.deleteOperation(id: 999_999) } == false)
                #expect(try await store.read { try $0.operations(after: nil, table: nil, limit: nil) } == [kept])
                // A removal rolled back with its transaction is undone.
                await expectError(StoreError.self, .notFound, "update of a missing operation") {
                    try await store.write { tx in
                        _ = try tx.deleteOperation(id: kept.id)
                        try tx.updateOperation(removed)
                    }
                }
                #expect(try await store.read { try $0.operation(id: kept.id) } == kept)
            },
            .init("operation ids are never reused, even after the queue drains") { fixture async throws in
                let store = fixture.store
                let first = try await store.write { tx in
                    try (0..<3).map { try tx.appendOperation(draft("t", "i\($0)")) }
                }
                try await store.write { try $0.deleteOperations(ids: first.map(\.id)) }
                #expect(try await store.operationCount() == 0)
                let next = try await store.write { try $0.appendOperation(draft("t", "again")) }
                #expect(next.id > first.map(\.id).max()!)
            },
            .init("operation errors are kept oldest first, replaced by id, filtered and deleted") {
                fixture async throws in
                let store = fixture.store
                let e1 = OperationErrorRecord(
                    id: "e1", operationID: 7, table: "t1", itemID: "a", kind: .update, statusCode: 412,
                    message: "conflict",
                    clientItem: ["id": "a", "v": 1], serverItem: ["id": "a", "v": 2, "version": "xyz"],
                    createdAt: Timestamp(millisecondsSince1970: 10))
                let e2 = OperationErrorRecord(
                    id: "e2", operationID: 8, table: "t2", itemID: "b", kind: .insert, message: "bad")
                try await store.write { tx in
                    try tx.saveOperationError(e1)
                    try tx.saveOperationError(e2)
                }
                #expect(try await store.read { try $0.operationErrors(table: nil) } == [e1, e2])
                #expect(try await store.read { try $0.operationErrors(table: "t2") } == [e2])
                #expect(try await store.read { try $0.operationError(id: "e1") } == e1)
                // One operation's errors: by table and operation id, oldest first, no other's.
                let e3 = OperationErrorRecord(
                    id: "e3", operationID: 7, table: "t1", itemID: "a", kind: .update, message: "again")
                let e4 = OperationErrorRecord(
                    id: "e4", operationID: 7, table: "t2", itemID: "c", kind: .delete, message: "other table")
                try await store.write { tx in
                    try tx.saveOperationError(e3)
                    try tx.saveOperationError(e4)
                }
                #expect(try await store.read { try $0.operationErrors(table: "t1", operationID: 7) } == [e1, e3])
                #expect(try await store.read { try $0.operationErrors(table: "t2", operationID: 7) } == [e4])
                #expect(try await store.read { try $0.operationErrors(table: "t2", operationID: 9) }.isEmpty)
                try await store.write { try $0.deleteOperationErrors(ids: ["e3", "e4"]) }
                var changed = e1
                changed.message = "still a conflict"
                let replacement = changed
                try await store.write { try $0.saveOperationError(replacement) }
                #expect(try await store.read { try $0.operationErrors(table: nil) }.count == 2)
                #expect(try await store.read { try $0.operationError(id: "e1") }?.message == "still a conflict")
                try await store.write { try $0.deleteOperationErrors(ids: ["e1", "missing"]) }
                #expect(try await store.read { try $0.operationErrors(table: nil) } == [e2])
            },
            .init("an operation that fails again keeps its error: the same id, with the new details") {
                fixture async throws in
                let server = ConflictingTable()
                let context = SyncContext(store: fixture.store) { _ in server }
                try await fixture.store.write {
                    try $0.upsert("todo", [["id": "a", "title": "base", "version": "v1"]])
                }
                try await context.table("todo").update(["id": "a", "title": "mine"])
                let first = try #require(try await context.push().failed.first)
                #expect(first.statusCode == 412 && first.serverItem?["version"] == "s1")
                let again = try #require(try await context.push().failed.first)
                #expect(again.id == first.id, "a repeated failure of one operation is the same error")
                #expect(again.serverItem?["version"] == "s2", "with the details of the newest failure")
                #expect(again.createdAt == first.createdAt)
                #expect(try await context.operationErrors() == [again])
                #expect(try await fixture.store.operationCount() == 1)
                // Resolved by the id the first push gave: the error and the operation go.
                try await context.resolveError(first.id, .discardLocalChange)
                #expect(try await context.operationErrors().isEmpty)
                #expect(try await fixture.store.operationCount() == 0)
            },
            .init("delta tokens are kept per table and query id, replaced and removed") { fixture async throws in
                let store = fixture.store
                try await store.write { tx in
                    try tx.setDeltaToken(table: "t1", queryID: "all", value: "1")
                    try tx.setDeltaToken(table: "t1", queryID: "mine", value: "2")
                    try tx.setDeltaToken(table: "t2", queryID: "all", value: "3")
                    try tx.setDeltaToken(table: "t1", queryID: "all", value: "4")
                }
                #expect(try await store.read { try $0.deltaToken(table: "t1", queryID: "all") } == "4")
                #expect(try await store.read { try $0.deltaTokens(table: "t1") } == ["all": "4", "mine": "2"])
                try await store.write { try $0.setDeltaToken(table: "t1", queryID: "all", value: nil) }
                #expect(try await store.read { try $0.deltaTokens(table: "t1") } == ["mine": "2"])
                #expect(try await store.read { try $0.deltaToken(table: "t2", queryID: "all") } == "3")
            },
        ]
    }

    static var persistence: [StoreConformanceCheck] {
        [
            .init("everything survives closing and reopening the store", requires: [.persistent, .openingAtAPath]) {
                fixture async throws in
                let store = fixture.store
                let definition = TableDefinition(
                    name: "todo", schema: TableSchema(fields: ["n": .integer]), indexes: [["n"]])
                let error = OperationErrorRecord(
                    id: "e1", operationID: 1, table: "todo", itemID: "a", kind: .insert, message: "m")
                let operation = try await store.write { tx in
                    try tx.define(definition)
                    try tx.upsert("todo", [sample.merging(["id": "a"]) { $1 }])
                    try tx.setDeltaToken(table: "todo", queryID: "q", value: "tok")
                    try tx.saveOperationError(error)
                    return try tx.appendOperation(draft("todo", "a"))
                }
                try await store.close()
                let reopened = try fixture.reopen()
                #expect(try await reopened.item("todo", id: "a") == sample.merging(["id": "a"]) { $1 })
                #expect(try await reopened.read { try $0.definition(of: "todo") } == definition)
                #expect(try await reopened.read { try $0.operation(id: operation.id) } == operation)
                #expect(try await reopened.read { try $0.operationError(id: "e1") } == error)
                #expect(try await reopened.read { try $0.deltaToken(table: "todo", queryID: "q") } == "tok")
                try await reopened.write { try $0.deleteOperations(ids: [operation.id]) }
                let next = try await reopened.write { try $0.appendOperation(draft("todo", "b")) }
                #expect(next.id > operation.id)
                try await reopened.close()
            }
        ]
    }

    static var concurrency: [StoreConformanceCheck] {
        [
            .init("readers beside a writer never see a transaction half done") { fixture async throws in
                let store = fixture.store
                try await store.upsert("pair", [["id": "a", "n": 0], ["id": "b", "n": 0]])
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        for n in 1...200 {
                            try await store.write { tx in
                                try tx.upsert("pair", [["id": "a", "n": .int(Int64(n))]])
                                try tx.upsert("pair", [["id": "b", "n": .int(Int64(n))]])
                            }
                        }
                    }
                    for _ in 0..<3 {
                        group.addTask {
                            var last: Int64 = 0
                            for _ in 0..<200 {
                                let (a, b) = try await store.read { reader in
                                    (
                                        try reader.item("pair", id: "a")?["n"]?.intValue,
                                        try reader.item("pair", id: "b")?["n"]?.intValue
                                    )
                                }
                                #expect(a == b, "a reader saw a half-applied transaction")
                                let value = a ?? 0
                                #expect(value >= last, "a reader went back in time")
                                last = value
                            }
                        }
                    }
                    try await group.waitForAll()
                }
                #expect(try await store.item("pair", id: "a")?["n"] == 200)
            }
        ]
    }
}

/// A server table whose copy of every item is always newer than the device's: each update is
/// refused with a 412 carrying the server's item, at a new version each time.
final class ConflictingTable: RemoteTable {
    private let versions = Mutex(0)

    func insert(_ item: JSONObject) async throws(RemoteError) -> JSONObject { item }
    func update(_ item: JSONObject, ifVersion version: String?) async throws(RemoteError) -> JSONObject {
        let version = versions.withLock { count in
            count += 1
            return count
        }
        var server = item
        server["title"] = "theirs"
        server["version"] = .string("s\(version)")
        throw RemoteError(status: 412, "precondition failed", serverItem: server)
    }
    func delete(id: String, ifVersion version: String?) async throws(RemoteError) {}
    func item(id: String) async throws(RemoteError) -> JSONObject? { nil }
    func query(_ query: TableQuery) async throws(RemoteError) -> RemotePage { RemotePage(items: []) }
}
