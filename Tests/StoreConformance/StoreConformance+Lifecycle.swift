import Foundation
import SyncCore
import Testing

extension StoreConformanceSuite {
    /// Handles, closing and odd keys: what every store does the same way.
    static var handles: [StoreConformanceCheck] {
        [
            .init("a handle used after its transaction fails with closed") { fixture async throws in
                let store = fixture.store
                let escaped = EscapedHandle()
                try await store.write { tx in escaped.set(tx) }
                let error = #expect(throws: StoreError.self) { try escaped.handle?.upsert("t", [["id": "1"]]) }
                #expect(error?.code == .closed)
                // Readers that run beside a writer hold a snapshot, which ends with their read.
                if store.capabilities.contains(.concurrentReaders) {
                    try await store.read { reader in escaped.set(reader) }
                    let readError = #expect(throws: StoreError.self) { try escaped.reader?.item("t", id: "1") }
                    #expect(readError?.code == .closed)
                }
                #expect(try await store.item("t", id: "1") == nil)
            },
            .init("closing twice is harmless and a closed store fails with closed") { fixture async throws in
                try await fixture.store.upsert("t", [["id": "1"]])
                try await fixture.store.close()
                try await fixture.store.close()
                await expectError(StoreError.self, .closed, "read after close") {
                    try await fixture.store.item("t", id: "1")
                }
                await expectError(StoreError.self, .closed, "read transaction after close") {
                    try await fixture.store.read { try $0.tableNames() }
                }
                await expectError(StoreError.self, .closed, "write after close") {
                    try await fixture.store.upsert("t", [["id": "1"]])
                }
            },
            .init("long and odd keys round-trip in operation errors and delta tokens") { fixture async throws in
                let store = fixture.store
                let long = String(repeating: "k", count: 600)
                let odd = ["nul\u{0}inside", "quote'\"", "🎬", "", long + "1", long + "2", long]
                try await store.write { tx in
                    for key in odd {
                        try tx.setDeltaToken(table: "t", queryID: key, value: key + "|value\u{0}")
                        try tx.setDeltaToken(table: long, queryID: key, value: "long table")
                        try tx.saveOperationError(
                            OperationErrorRecord(
                                id: key, operationID: 1, table: "t", itemID: "a", kind: .insert, message: key))
                    }
                }
                let tokens = try await store.read { try $0.deltaTokens(table: "t") }
                #expect(tokens == Dictionary(uniqueKeysWithValues: odd.map { ($0, $0 + "|value\u{0}") }))
                #expect(try await store.read { try $0.deltaTokens(table: long) }.count == odd.count)
                #expect(try await store.read { try $0.deltaTokens(table: long + "x") }.isEmpty)
                #expect(try await store.read { try $0.deltaToken(table: long, queryID: long + "2") } == "long table")
                for key in odd {
                    #expect(try await store.read { try $0.operationError(id: key) }?.message == key)
                }
                #expect(try await store.read { try $0.operationErrors(table: "t") }.map(\.id) == odd)
                try await store.write { tx in
                    try tx.deleteOperationErrors(ids: [long + "1", long])
                    try tx.setDeltaToken(table: long, queryID: long + "1", value: nil)
                }
                #expect(
                    try await store.read { try $0.operationErrors(table: nil) }.map(\.id)
                        == odd.filter { $0 != long + "1" && $0 != long })
                #expect(try await store.read { try $0.deltaToken(table: long, queryID: long + "1") } == nil)
                #expect(try await store.read { try $0.deltaToken(table: long, queryID: long + "2") } == "long table")
            },
        ]
    }

    /// Opening, closing and refusing files: every persistent store, through its fixture's hooks.
    static var lifecycle: [StoreConformanceCheck] {
        [
            .init(
                "items JSON text cannot hold are rejected and nothing of their batch is written",
                requires: [.persistent]
            ) { fixture async throws in
                let store = fixture.store
                var deep: JSONValue = 1
                for _ in 0..<JSONValue.maximumNestingDepth { deep = [deep] }
                var deepest: JSONValue = 1
                for _ in 0..<(JSONValue.maximumNestingDepth - 1) { deepest = [deepest] }
                for item: JSONObject in [
                    ["id": "a", "x": .double(.nan)], ["id": "a", "x": [.double(.infinity)]], ["id": "a", "x": deep],
                    ["id": "a", "x": ["y": deep]],
                ] {
                    await expectError(StoreError.self, .invalidItem, "\(item)") {
                        try await store.upsert("t", [["id": "ok"], item])
                    }
                }
                #expect(try await store.read { try $0.count("t") } == 0)
                // The deepest nesting the parser reads back is accepted and round-trips.
                try await store.upsert("t", [["id": "b", "x": deepest]])
                #expect(try await store.item("t", id: "b")?["x"] == deepest)
            },
            .init("a clean close leaves only the store in its directory", requires: [.persistent, .openingAtAPath]) {
                fixture async throws in
                let store = fixture.store
                try await store.upsert("todo", [["id": "1", "title": "Milk"]])
                // Concurrent reads may open reader connections or slots beside the writer.
                async let first = store.item("todo", id: "1")
                async let second = store.read { try $0.tableNames() }
                _ = try await (first, second)
                try await store.close()
                #expect(try fixture.directory?.contents() == ["store.ferry"])
                #expect(try await fixture.reopen().item("todo", id: "1")?["title"] == "Milk")
            },
            .init("the queue and its high-water mark survive reopening", requires: [.persistent, .openingAtAPath]) {
                fixture async throws in
                let queued = try await fixture.store.write { tx in
                    try tx.upsert("todo", [["id": "a", "title": "Milk"]])
                    return try (0..<5).map { try tx.appendOperation(draft("todo", "a\($0)")) }
                }
                try await fixture.store.write { try $0.deleteOperations(ids: [queued[4].id]) }
                try await fixture.store.close()
                let reopened = try fixture.reopen()
                let operations = try await reopened.read { try $0.operations(after: nil, table: nil, limit: nil) }
                #expect(operations == Array(queued.prefix(4)))
                // The deleted last id is not reused.
                let next = try await reopened.write { try $0.appendOperation(draft("todo", "b", .update)) }
                #expect(next.id == queued[4].id + 1)
            },
            .init("a read-only location is reported and nothing is created", requires: [.persistent, .openingAtAPath]) {
                fixture async throws in
                let parent = try readOnlyDirectory(in: try #require(fixture.directory))
                defer { try? FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: parent) }
                let path = parent + "/store.ferry"
                let before = try FileManager.default.contentsOfDirectory(atPath: parent)
                let error = await expectError(StoreError.self, .readOnly, "opening in \(parent)") {
                    try fixture.open(at: path)
                }
                #expect(error?.message.contains(path) == true)
                #expect(try FileManager.default.contentsOfDirectory(atPath: parent) == before)
            },
            .init("a store from a newer Ferry is refused untouched", requires: [.persistent, .openingAtAPath]) {
                fixture async throws in
                let (hooks, path) = (try #require(fixture.hooks), try #require(fixture.path))
                _ = try await fixture.store.write { try $0.appendOperation(draft("t", "a")) }
                try await hooks.markAsWrittenByNewerFerry(fixture.store)
                try await fixture.store.close()
                try await expectRefusedUntouched(fixture, at: path, "newer version of Ferry")
            },
            .init("bytes that are not a store are refused untouched", requires: [.persistent, .openingAtAPath]) {
                fixture async throws in
                let (hooks, directory) = (try #require(fixture.hooks), try #require(fixture.directory))
                for (index, bytes) in [
                    Data("hello, this is not a database\n".utf8), Data("SQLite".utf8), Data([1, 2, 3]),
                    Data((0..<8192).map { UInt8(truncatingIfNeeded: $0 &* 7919) }),
                ].enumerated() {
                    let path = directory.path + "/not-a-store-\(index)"
                    try hooks.placeNotAStore(bytes, path)
                    try await expectRefusedUntouched(fixture, at: path, hooks.notAStoreReason)
                }
            },
            .init("another application's database is refused untouched", requires: [.persistent, .openingAtAPath]) {
                fixture async throws in
                let (hooks, directory) = (try #require(fixture.hooks), try #require(fixture.directory))
                let path = directory.path + "/other-application"
                try await hooks.writeForeignDatabase(path)
                try await expectRefusedUntouched(fixture, at: path, "not a Ferry store")
            },
        ]
    }

    /// Opens `path` through the fixture and expects `corrupt`, naming the path and giving `reason`,
    /// with the data files and the directory's entries as they were.
    static func expectRefusedUntouched(
        _ fixture: StoreFixture, at path: String, _ reason: String, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let hooks = try #require(fixture.hooks)
        let directory = try #require(fixture.directory).path
        let (files, entries) = (try hooks.snapshot(path), FileManager.default.subpaths(atPath: directory)?.sorted())
        let error = await expectError(StoreError.self, .corrupt, "opening \(path)", sourceLocation: sourceLocation) {
            try fixture.open(at: path)
        }
        #expect(error?.message.contains(path) == true, "\(error?.message ?? "")", sourceLocation: sourceLocation)
        #expect(error?.message.contains(reason) == true, "\(error?.message ?? "")", sourceLocation: sourceLocation)
        #expect(try hooks.snapshot(path) == files, "the data files changed", sourceLocation: sourceLocation)
        #expect(
            FileManager.default.subpaths(atPath: directory)?.sorted() == entries, "files were created or removed",
            sourceLocation: sourceLocation)
    }

    /// A directory nobody may write: a 0555 directory in `directory` for ordinary users; root
    /// ignores permissions, so root gets sysfs, where files cannot be created.
    static func readOnlyDirectory(in directory: TemporaryDirectory) throws -> String {
        let locked = directory.path + "/locked"
        try FileManager.default.createDirectory(atPath: locked, withIntermediateDirectories: false)
        try FileManager.default.setAttributes([.posixPermissions: 0o555], ofItemAtPath: locked)
        guard FileManager.default.createFile(atPath: locked + "/probe", contents: nil) else { return locked }
        try FileManager.default.removeItem(atPath: locked + "/probe")
        guard !FileManager.default.createFile(atPath: "/sys/ferry-probe", contents: nil) else {
            try? FileManager.default.removeItem(atPath: "/sys/ferry-probe")
            throw ConformanceFailure(description: "no read-only location to test with")
        }
        return "/sys"
    }
}
