import Foundation
import GRDB
import StoreConformance
@testable import StoreSQLite
import SyncCore
import Testing

// MARK: - The shared suite

@Suite("SQLiteStore conformance, file")
struct SQLiteFileStoreConformanceTests {
    @Test(arguments: StoreConformance.checks(for: [.persistent, .concurrentReaders, .declaredIndexes]))
    func conformance(_ check: StoreConformanceCheck) async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/store.ferry"
        try await check.run {
            StoreFixture(store: try SQLiteStore(path: path), reopen: { try SQLiteStore(path: path) })
        }
    }

    @Test func skipsNothing() throws {
        #expect(StoreConformance.skipped(for: [.persistent, .concurrentReaders, .declaredIndexes]).isEmpty)
    }
}

@Suite("SQLiteStore conformance, memory")
struct SQLiteMemoryStoreConformanceTests {
    @Test(arguments: StoreConformance.checks(for: [.declaredIndexes]))
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
    }

    @Test func aCleanCloseLeavesOnlyTheDatabaseFile() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/device.ferry"
        let store = try SQLiteStore(path: path)
        try await store.upsert("todo", [["id": "1", "title": "Milk"]])
        // Reads open reader connections beside the writer; closing must still remove the WAL files.
        async let first = store.item("todo", id: "1")
        async let second = store.read { try $0.tableNames() }
        _ = try await (first, second)
        try await store.close()
        let files = try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
        #expect(files == ["device.ferry"])
        let reopened = try SQLiteStore(path: path)
        #expect(try await reopened.item("todo", id: "1")?["title"] == "Milk")
        try await reopened.close()
    }

    @Test func aTransactionHandleCannotBeUsedAfterItsTransaction() async throws {
        let store = try SQLiteStore.inMemory()
        let escaped = EscapedHandle()
        try await store.write { tx in escaped.set(tx) }
        let error = #expect(throws: StoreError.self) { try escaped.handle?.upsert("t", [["id": "1"]]) }
        #expect(error?.code == .closed)
        #expect(try await store.item("t", id: "1") == nil)
    }

    @Test func aStoreWrittenByThisVersionReopensWithItsQueue() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/queue.ferry"
        let store = try SQLiteStore(path: path)
        let queued = try await store.write { tx in
            try tx.upsert("todo", [["id": "a", "title": "Milk"]])
            return try (0..<5).map {
                try tx.appendOperation(OperationDraft(table: "todo", itemID: "a\($0)", kind: .insert))
            }
        }
        try await store.write { try $0.deleteOperations(ids: [queued[4].id]) }
        try await store.close()

        let reopened = try SQLiteStore(path: path)
        let operations = try await reopened.read { try $0.operations(after: nil, table: nil, limit: nil) }
        #expect(operations == Array(queued.prefix(4)))
        // The high-water mark survives: the deleted last id is not reused.
        let next = try await reopened.write {
            try $0.appendOperation(OperationDraft(table: "todo", itemID: "b", kind: .update))
        }
        #expect(next.id == queued[4].id + 1)
        try await reopened.close()
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

    @Test func aStoreFromANewerFerryIsRefusedUntouched() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/newer.ferry"
        let store = try SQLiteStore(path: path)
        _ = try await store.write { try $0.appendOperation(OperationDraft(table: "t", itemID: "a", kind: .insert)) }
        try await store.database.write { db in
            try db.execute(sql: "INSERT INTO grdb_migrations (identifier) VALUES ('v99-from-the-future')")
        }
        try await store.close()
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        let error = #expect(throws: StoreError.self) { try SQLiteStore(path: path) }
        #expect(error?.code == .corrupt)
        #expect(error?.message.contains("newer version of Ferry") == true)
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == before)
    }

    @Test func aFileThatIsNotSQLiteIsRefusedUntouched() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        for (name, contents) in [
            ("text.ferry", Data("hello, this is not a database\n".utf8)),
            ("short.ferry", Data("SQLite".utf8)),
            ("binary.ferry", Data((0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 7919) })),
        ] {
            let path = directory.path + "/" + name
            try contents.write(to: URL(fileURLWithPath: path))
            let error = #expect(throws: StoreError.self) { try SQLiteStore(path: path) }
            #expect(error?.code == .corrupt)
            #expect(error?.message.contains(path) == true)
            #expect(error?.message.contains("not a SQLite database") == true)
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == contents)
            #expect(try directory.contents() == [name])
            try FileManager.default.removeItem(atPath: path)
        }
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

    @Test func anotherApplicationsDatabaseIsRefusedUntouched() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/other.sqlite"
        do {
            let queue = try DatabaseQueue(path: path)
            try await queue.write { db in
                try db.execute(
                    sql:
                        "CREATE TABLE players (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO players (name) VALUES ('x')"
                )
            }
            try queue.close()
        }
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        let error = #expect(throws: StoreError.self) { try SQLiteStore(path: path) }
        #expect(error?.code == .corrupt)
        #expect(error?.message.contains("not a Ferry store") == true)
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == before)
    }

    @Test func aReadOnlyLocationIsReportedAndNothingIsCreated() throws {
        // A directory nobody may write: a 0555 directory for ordinary users; root ignores
        // permissions, so root uses sysfs, where files cannot be created.
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        var parent = directory.path + "/locked"
        try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: false)
        try FileManager.default.setAttributes([.posixPermissions: 0o555], ofItemAtPath: parent)
        defer { try? FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: parent) }
        if FileManager.default.createFile(atPath: parent + "/probe", contents: nil) {
            try FileManager.default.removeItem(atPath: parent + "/probe")
            parent = "/sys"
            guard !FileManager.default.createFile(atPath: parent + "/ferry-probe", contents: nil) else {
                try? FileManager.default.removeItem(atPath: parent + "/ferry-probe")
                Issue.record("no read-only location to test with")
                return
            }
        }
        let path = parent + "/store.ferry"
        let before = try FileManager.default.contentsOfDirectory(atPath: parent)
        let error = #expect(throws: StoreError.self) { try SQLiteStore(path: path) }
        #expect(error?.code == .readOnly)
        #expect(error?.message.contains(path) == true)
        #expect(try FileManager.default.contentsOfDirectory(atPath: parent) == before)
    }

    @Test func aDirectoryIsNotAStore() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let error = #expect(throws: StoreError.self) { try SQLiteStore(path: directory.path) }
        #expect(error?.code == .io)
        #expect(error?.message.contains("directory") == true)
    }

    @Test func closingTwiceIsHarmlessAndUseAfterCloseFailsWithClosed() async throws {
        let store = try SQLiteStore.inMemory()
        try await store.close()
        try await store.close()
        await #expect(throws: StoreError.self) { try await store.read { try $0.tableNames() } }
        do {
            _ = try await store.write { try $0.count("t") }
        } catch let error as StoreError {
            #expect(error.code == .closed)
        }
    }

    @Test func arbitraryKeysAndTokensRoundTrip() async throws {
        let store = try SQLiteStore.inMemory()
        let odd = ["nul\u{0}inside", "quote'\"", "🎬", ""]
        try await store.write { tx in
            for key in odd {
                try tx.setDeltaToken(table: "t", queryID: key, value: key + "|value\u{0}")
                try tx.saveOperationError(
                    OperationErrorRecord(id: key, operationID: 1, table: "t", itemID: "a", kind: .insert, message: key))
            }
        }
        let tokens = try await store.read { try $0.deltaTokens(table: "t") }
        #expect(tokens == Dictionary(uniqueKeysWithValues: odd.map { ($0, $0 + "|value\u{0}") }))
        for key in odd {
            #expect(try await store.read { try $0.operationError(id: key) }?.message == key)
        }
        #expect(try await store.read { try $0.operationErrors(table: "t") }.map(\.id) == odd)
    }

    @Test func itemsJSONCannotHoldAreRejected() async throws {
        let store = try SQLiteStore.inMemory()
        var deep: JSONValue = 1
        for _ in 0..<JSONValue.maximumNestingDepth { deep = [deep] }
        var deepest: JSONValue = 1
        for _ in 0..<(JSONValue.maximumNestingDepth - 1) { deepest = [deepest] }
        for item: JSONObject in [
            ["id": "a", "x": .double(.nan)], ["id": "a", "x": [.double(.infinity)]], ["id": "a", "x": deep],
            ["id": "a", "x": ["y": deep]],
        ] {
            // Nothing of the batch is written: the good item beside the bad one stays out too.
            let error = await #expect(throws: StoreError.self) { try await store.upsert("t", [["id": "ok"], item]) }
            #expect(error?.code == .invalidItem)
        }
        #expect(try await store.read { try $0.count("t") } == 0)
        // The deepest nesting the parser reads back is accepted and round-trips.
        try await store.upsert("t", [["id": "b", "x": deepest]])
        #expect(try await store.item("t", id: "b")?["x"] == deepest)
    }
}

// MARK: - Compiled SQL against the evaluator

// MARK: - Helpers

/// Holds a transaction handle past the end of its transaction, to prove that doing so fails.
final class EscapedHandle: @unchecked Sendable {
    // Only touched from one task in the test that uses it.
    var handle: (any StoreTransaction)?
    func set(_ handle: any StoreTransaction) { self.handle = handle }
}

/// A new directory under the system's temporary directory.
struct TemporaryDirectory {
    let path: String

    init() throws {
        path = NSTemporaryDirectory() + "ferry-sqlite-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    func contents() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: path).sorted()
    }

    func remove() {
        try? FileManager.default.removeItem(atPath: path)
    }
}
