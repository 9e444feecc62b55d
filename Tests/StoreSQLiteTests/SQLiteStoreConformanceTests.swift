import Foundation
import GRDB
import StoreConformance
@testable import StoreSQLite
import SyncCore
import Testing

// MARK: - The shared suite

extension PersistentStoreHooks {
    /// The SQLite store at a path, and how to make the files it must refuse.
    static let sqlite = PersistentStoreHooks(
        open: { try SQLiteStore(path: $0) },
        notAStoreReason: "not a SQLite database",
        placeNotAStore: { bytes, path in try bytes.write(to: URL(fileURLWithPath: path)) },
        writeForeignDatabase: { path in
            let queue = try DatabaseQueue(path: path)
            try await queue.write { db in
                try db.execute(
                    sql:
                        "CREATE TABLE players (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO players (name) VALUES ('x')"
                )
            }
            try queue.close()
        },
        markAsWrittenByNewerFerry: { store in
            try await (store as! SQLiteStore).database.write { db in
                try db.execute(sql: "INSERT INTO grdb_migrations (identifier) VALUES ('v99-from-the-future')")
            }
        })
}

@Suite("SQLiteStore conformance, file")
struct SQLiteFileStoreConformanceTests {
    @Test(arguments: StoreConformanceSuite.all)
    func conformance(_ check: StoreConformanceCheck) async throws {
        try await check.run { try StoreFixture(opening: .sqlite) }
    }
}

@Suite("SQLiteStore conformance, memory")
struct SQLiteMemoryStoreConformanceTests {
    @Test(arguments: StoreConformanceSuite.all)
    func conformance(_ check: StoreConformanceCheck) async throws {
        try await check.run { StoreFixture(store: try SQLiteStore.inMemory()) }
    }
}

// MARK: - The store itself

@Suite("SQLiteStore")
struct SQLiteStoreTests {
    @Test func declaresItsCapabilities() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let file = try SQLiteStore(path: directory.path + "/a.ferry")
        #expect(file.capabilities == [.persistent, .concurrentReaders, .declaredIndexes])
        try await file.close()
        let memory = try SQLiteStore(location: .memory)
        #expect(memory.capabilities == [.declaredIndexes])
        let factory: SQLiteStore = try .sqlite(path: directory.path + "/b.ferry")
        #expect(factory.location == .file(directory.path + "/b.ferry"))
        #expect(try await factory.read { try $0.tableNames() } == [])
        try await factory.close()
        // In memory, it keeps nothing: the checks of reopening and of refusing files skip.
        let skipped = await StoreConformanceSuite.skipped(by: StoreFixture(store: try SQLiteStore.inMemory())).map(
            \.name)
        #expect(skipped.contains("everything survives closing and reopening the store"))
        #expect(!skipped.contains("a handle used after its transaction fails with closed"))
        try await StoreConformanceSuite.reportSkipped(
            by: try StoreFixture(opening: .sqlite), StoreFixture(store: try SQLiteStore.inMemory()))
    }

    @Test func aVersion1StoreIsMigratedWithoutLosingItsQueue() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/old.ferry"
        // A store as the first schema version wrote it.
        let old = OperationDraft(table: "todo", itemID: "x", kind: .update, item: ["id": "x", "n": 1])
        let operation = QueuedOperation(id: 41, draft: old)
        do {
            let queue = try DatabaseQueue(path: path)
            try StoreSchema.migrator.migrate(queue, upTo: "v1")
            try await queue.write { db in
                try db.execute(
                    sql: "INSERT INTO ferry_operations (id, tableName, itemId, json) VALUES (?, ?, ?, ?)",
                    arguments: [
                        operation.id, operation.table, operation.itemID, JSONValue.object(operation.json).serialized(),
                    ])
                try db.execute(sql: "UPDATE ferry_meta SET value = 42 WHERE key = 'lastOperationId'")
            }
            try queue.close()
        }
        let store = try SQLiteStore(path: path)
        #expect(try await store.read { try $0.operations(after: nil, table: nil, limit: nil) } == [operation])
        let next = try await store.write {
            try $0.appendOperation(OperationDraft(table: "todo", itemID: "y", kind: .insert))
        }
        #expect(next.id == 43)
        let version = try await store.database.read { db in
            try Int64.fetchOne(db, sql: "SELECT value FROM ferry_meta WHERE key = 'schemaVersion'")
        }
        #expect(version == StoreSchema.currentVersion)
        try await store.close()
    }

    @Test func aDamagedStoreIsRefusedUntouched() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/damaged.ferry"
        let store = try SQLiteStore(path: path)
        let items: [JSONObject] = (0..<2000).map {
            ["id": .string("item-\($0)"), "text": .string(String(repeating: "x", count: 200))]
        }
        try await store.upsert("todo", items)
        try await store.close()
        var bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(bytes.count > 100_000)
        // Scribble over pages in the middle of the file.
        let start = bytes.count / 2
        for index in start..<(start + 16_384) { bytes[index] = UInt8(truncatingIfNeeded: index &* 31) }
        try bytes.write(to: URL(fileURLWithPath: path))
        let names = try directory.contents()

        let error = #expect(throws: StoreError.self) { try SQLiteStore(path: path) }
        #expect(error?.code == .corrupt)
        #expect(error?.message.contains(path) == true)
        #expect(error?.underlying == nil || error?.underlying is DatabaseError)
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == bytes)
        #expect(try directory.contents() == names)

        // A damaged header page fails at open even without the integrity check.
        var header = bytes
        for index in 100..<4096 { header[index] = 0xA5 }
        try header.write(to: URL(fileURLWithPath: path))
        let quick = SQLiteStore.Configuration(verifiesIntegrityOnOpen: false)
        let headerError = #expect(throws: StoreError.self) { try SQLiteStore(path: path, configuration: quick) }
        #expect(headerError?.code == .corrupt)
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == header)
    }

    @Test func aDirectoryIsNotAStore() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let error = #expect(throws: StoreError.self) { try SQLiteStore(path: directory.path) }
        #expect(error?.code == .io)
        #expect(error?.message.contains("directory") == true)
    }
}
