import Foundation
import GRDB
import ServerStorage
import ServerStorageSQLite
import StoreConformance
import SyncCore
import Testing

@Suite("SQLiteServerStorage specifics")
struct SQLiteServerStorageTests {
    @Test func refusesFilesThatAreNotItsDatabases() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let garbage = directory.path + "/garbage.sqlite"
        try Data(repeating: 0x5A, count: 4096).write(to: URL(fileURLWithPath: garbage))
        #expect {
            try SQLiteServerStorage(location: .file(garbage))
        } throws: { error in
            (error as? StorageError)?.code == .corrupt
        }
        let foreign = directory.path + "/foreign.sqlite"
        let queue = try DatabaseQueue(path: foreign)
        try await queue.write { db in try db.execute(sql: "CREATE TABLE customers (id INTEGER PRIMARY KEY)") }
        try queue.close()
        #expect {
            try SQLiteServerStorage(location: .file(foreign))
        } throws: { error in
            (error as? StorageError)?.code == .corrupt && "\(error)".contains("another application")
        }
        // Its own file opens again.
        let own = directory.path + "/own.sqlite"
        try await SQLiteServerStorage(location: .file(own)).close()
        try await SQLiteServerStorage(location: .file(own)).close()
    }

    @Test func recordsTheKindOfEachUndeclaredField() async throws {
        let storage = try SQLiteServerStorage(location: .memory)
        let table = StorageTable(name: "t", schema: TableSchema(fields: ["declared": .string]))
        _ = try await storage.insert(
            into: table, id: "1", content: ["a": 1, "b": "x", "c": .null, "declared": 5, "d": [1]], owner: nil)
        #expect(try await storage.fieldKinds(of: "t") == ["a": .number, "b": .string, "d": .array])
        try await storage.close()
    }

    @Test func queriesOnIndexedColumnsUseTheDatabasePlan() async throws {
        let storage = try SQLiteServerStorage(location: .memory)
        let table = StorageTable(name: "feed")
        for index in 0..<30 {
            _ = try await storage.insert(into: table, id: "r\(index)", content: ["n": .int(Int64(index))], owner: nil)
        }
        let keyset = try await storage.query(
            table,
            StorageQuery(
                filter: .binary(
                    .greaterThan, .field("updatedAt"), .literal(.dateTimeOffset(Timestamp(millisecondsSince1970: 0)))),
                orderBy: [.field("updatedAt")], limit: 10))
        #expect(keyset.plan == .database)
        #expect(keyset.items.count == 10 && keyset.hasMore)
        let computed = try await storage.query(
            table,
            StorageQuery(filter: .binary(.equal, .binary(.modulo, .field("n"), .literal(.int(7))), .literal(.int(0)))))
        #expect(computed.plan == .evaluator)
        #expect(computed.items.map(\.id) == ["r0", "r14", "r21", "r28", "r7"])
        try await storage.close()
    }
}
