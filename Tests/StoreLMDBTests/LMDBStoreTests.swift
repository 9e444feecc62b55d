import CLMDB
import Foundation
import StoreConformance
@testable import StoreLMDB
import SyncCore
import Testing

@Suite("LMDBStore")
struct LMDBStoreTests {
    @Test func declaresItsCapabilitiesAndOpensThroughTheFactory() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store: LMDBStore = try .lmdb(path: directory.path + "/a.ferry")
        #expect(store.capabilities == [.persistent, .concurrentReaders])
        #expect(store.path == directory.path + "/a.ferry")
        #expect(try await store.read { try $0.tableNames() } == [])
        #expect(try directory.contents() == ["a.ferry"])
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: directory.path + "/a.ferry").sorted() == [
                "data.mdb", "lock.mdb",
            ])
        try await store.close()
        try await StoreConformanceSuite.reportSkipped(by: try StoreFixture(opening: .lmdb))
    }

    @Test func commitsAreDurableByDefault() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        #expect(LMDBStore.Configuration().syncsEveryCommit)
        for syncs in [true, false] {
            let store = try LMDBStore(
                path: directory.path + "/\(syncs)", configuration: LMDBStore.Configuration(syncsEveryCommit: syncs))
            var flags: UInt32 = 0
            #expect(mdb_env_get_flags(store.environment.handle, &flags) == MDB_SUCCESS)
            #expect((flags & UInt32(MDB_NOSYNC) != 0) == !syncs)
            #expect(flags & UInt32(MDB_NOTLS) != 0)
            try await store.close()
        }
    }

    @Test func operationIndexesFollowUpdatesThatMoveAnOperation() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try LMDBStore(path: directory.path + "/s")
        var moved = try await store.write { tx in
            _ = try tx.appendOperation(OperationDraft(table: "a", itemID: "x", kind: .insert))
            return try tx.appendOperation(OperationDraft(table: "a", itemID: "y", kind: .insert))
        }
        moved.table = "b"
        moved.itemID = "z"
        let update = moved
        try await store.write { try $0.updateOperation(update) }
        let (inA, inB, ofY, ofZ, counts) = try await store.read { reader in
            (
                try reader.operations(after: nil, table: "a", limit: nil).map(\.itemID),
                try reader.operations(after: nil, table: "b", limit: nil),
                try reader.operations(table: "a", itemID: "y"),
                try reader.operations(table: "b", itemID: "z"),
                [
                    try reader.operationCount(table: "a"), try reader.operationCount(table: "b"),
                    try reader.operationCount(table: nil),
                ]
            )
        }
        #expect(inA == ["x"])
        #expect(inB == [update])
        #expect(ofY.isEmpty)
        #expect(ofZ == [update])
        #expect(counts == [1, 1, 2])
        let afterFirst = try await store.read { try $0.operations(after: 1, table: "b", limit: 1) }
        #expect(afterFirst == [update])
        #expect(try await store.read { try $0.operations(after: .max, table: nil, limit: nil) }.isEmpty)
        #expect(try await store.read { try $0.operations(after: -5, table: nil, limit: 0) }.isEmpty)
        try await store.close()
    }

    @Test func longIDsThatShareAKeyLiveTogether() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try LMDBStore(path: directory.path + "/s")
        // 240 × "é" is 480 UTF-8 bytes: the most an item key holds of an id.
        let prefix = String(repeating: "é", count: 240)
        let ids = [prefix, prefix + "b", prefix + "a", prefix + "é", String(repeating: "日", count: 255), "short"]
        for id in ids { #expect(ItemID.isValid(id)) }
        let stamp = { (n: Int64) in JSONValue.string(Timestamp(millisecondsSince1970: n * 1000).iso8601) }
        try await store.upsert(
            "long",
            ids.enumerated().map { ["id": .string($1), "n": .int(Int64($0)), "updatedAt": stamp(Int64($0 % 2))] })
        for (index, id) in ids.enumerated() {
            #expect(try await store.item("long", id: id)?["n"] == .int(Int64(index)))
        }
        #expect(try await store.item("long", id: prefix + "c") == nil)
        #expect(try await store.read { try $0.count("long") } == 6)
        let sorted = ids.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        #expect(try await store.query("long").items.compactMap(\.id) == sorted)
        let descending = try await store.query("long", TableQuery(orderBy: [.field("id", descending: true)]))
        #expect(descending.items.compactMap(\.id) == sorted.reversed())
        let byTime = try await store.query("long", TableQuery(orderBy: [.field("updatedAt"), .field("id")]))
        let expected = try QueryEvaluator().evaluate(
            TableQuery(orderBy: [.field("updatedAt"), .field("id")]), over: try await store.query("long").items)
        #expect(byTime == expected)

        // Replace one (new updatedAt), delete two; the rest of the bucket stays.
        try await store.upsert("long", [["id": .string(prefix + "a"), "n": 10, "updatedAt": stamp(9)]])
        #expect(try await store.delete("long", ids: [prefix, prefix + "é", prefix + "zz"]) == 2)
        #expect(try await store.item("long", id: prefix + "a")?["n"] == 10)
        #expect(try await store.item("long", id: prefix + "b")?["n"] == 1)
        #expect(try await store.item("long", id: prefix) == nil)
        #expect(try await store.read { try $0.count("long") } == 4)
        let newest = try await store.query("long", TableQuery(orderBy: [.field("updatedAt", descending: true)], top: 1))
        #expect(newest.items.compactMap(\.id) == [prefix + "a"])
        let inRange = try await store.query(
            "long",
            TableQuery(
                filter: .binary(
                    .lessThan, .field("updatedAt"), .literal(.dateTimeOffset(Timestamp(millisecondsSince1970: 5000))))))
        #expect(Set(inRange.items.compactMap(\.id)) == [prefix + "b", String(repeating: "日", count: 255), "short"])
        try await store.close()
    }

    @Test func aThrowingBodyLeavesTheTableCatalogAsItWas() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try LMDBStore(path: directory.path + "/s")
        await #expect(throws: Abort.self) {
            try await store.write { tx in
                try tx.upsert("fresh", [["id": "1"]])
                throw Abort()
            }
        }
        #expect(try await store.read { try $0.tableNames() } == [])
        try await store.write { tx in
            try tx.define(TableDefinition(name: "defined"))
            try tx.upsert("items", [["id": "1"]])
            #expect(try tx.tableNames() == ["defined", "items"])
            try tx.delete("items", ids: ["1"])
            #expect(try tx.tableNames() == ["defined"])
        }
        #expect(try await store.read { try $0.tableNames() } == ["defined"])
        try await store.close()
    }
}
