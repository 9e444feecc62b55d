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
        let operation = PendingOperation(id: 41, draft: old)
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

@Suite("SQLiteStore query compilation")
struct SQLiteQueryCompilationTests {
    /// Generated filters, sort keys and pages over generated items: the store must return the
    /// evaluator's ids, in the evaluator's order, with the evaluator's count.
    @Test func compiledQueriesAgreeWithTheEvaluator() async throws {
        let store = try SQLiteStore.inMemory()
        var random = SeededRandom(seed: 0x5EED_F00D)
        let items = QueryFuzz.items(&random, count: 90, withNUL: false)
        // Strings holding NUL make a table fall back to the evaluator: a table of its own.
        let itemsWithNUL = QueryFuzz.items(&random, count: 40, withNUL: true)
        let tables: [(String, TableSchema, [JSONObject])] = [
            ("plain", .schemaless, items), ("typed", QueryFuzz.typedSchema, items), ("nul", .schemaless, itemsWithNUL),
        ]
        try await store.write { tx in
            for (name, schema, items) in tables {
                try tx.define(
                    SyncCore.TableDefinition(name: name, schema: schema, indexes: [["n"], ["s", "n"], ["d"]]))
                try tx.upsert(name, items)
            }
        }
        var compared = 0
        var withoutNUL = 0
        var inSQL = 0
        var failures: [String] = []
        for round in 0..<2000 {
            let query = QueryFuzz.query(&random)
            for (name, schema, items) in tables {
                compared += 1
                let expected: QueryResult
                do {
                    expected = try QueryEvaluator(schema: schema).evaluate(
                        query, over: items.sorted { $0.id! < $1.id! })
                } catch {
                    await #expect(throws: StoreError.self) { try await store.query(name, query) }
                    continue
                }
                let actual = try await store.query(name, query)
                if actual.items.compactMap(\.id) != expected.items.compactMap(\.id)
                    || actual.totalCount != expected.totalCount
                {
                    failures.append(
                        "round \(round) on \(name): \(query.odataQueryString(dialect: .v3))\n  store:     \(actual.items.compactMap(\.id)) \(actual.totalCount ?? -1)\n  evaluator: \(expected.items.compactMap(\.id)) \(expected.totalCount ?? -1)"
                    )
                }
                if name != "nul" {
                    withoutNUL += 1
                    if try await store.strategy(for: query, table: name) == .sql { inSQL += 1 }
                }
            }
        }
        for failure in failures.prefix(20) { Issue.record("\(failure)") }
        #expect(failures.isEmpty, "\(failures.count) of \(compared) queries disagree")
        print(
            "◇ compiled queries: \(compared - failures.count) of \(compared) agree with the evaluator; on the tables without NUL text \(inSQL) of \(withoutNUL) ran entirely in SQL"
        )
        #expect(inSQL * 10 >= withoutNUL * 7, "only \(inSQL) of \(withoutNUL) queries ran entirely in SQL")
    }

    @Test func theSyncQueriesRunInSQLOnTheirIndexes() async throws {
        let store = try SQLiteStore.inMemory()
        let items: [JSONObject] = (0..<200).map {
            [
                "id": .string("i\(String($0 + 1000))"),
                "updatedAt": .string(Timestamp(millisecondsSince1970: Int64($0 / 3) * 1000).iso8601),
                "n": .int(Int64($0 % 7)),
            ]
        }
        try await store.write { tx in
            try tx.define(SyncCore.TableDefinition(name: "todo", indexes: [["n"]]))
            try tx.upsert("todo", items)
        }
        let cursor = Timestamp(millisecondsSince1970: 20_000)
        let keyset = TableQuery(
            filter: .binary(
                .or, .binary(.greaterThan, .field("updatedAt"), .literal(.dateTimeOffset(cursor))),
                .binary(
                    .and, .binary(.equal, .field("updatedAt"), .literal(.dateTimeOffset(cursor))),
                    .binary(.greaterThan, .field("id"), .literal(.string("i1061"))))),
            orderBy: [.field("updatedAt"), .field("id")], top: 10, includeDeleted: true)
        #expect(try await store.strategy(for: keyset, table: "todo") == .sql)
        let page = try await store.query("todo", keyset)
        #expect(page.items.compactMap(\.id) == (1062..<1072).map { "i\($0)" })

        let plans = try await store.database.read { db in
            let reader = SQLiteReader(db: db, place: "test")
            let entry = try #require(try reader.entry("todo"))
            let runner = QueryRunner(reader: reader, table: "todo", entry: entry)
            func explain(_ query: TableQuery) throws -> String {
                let plan = try runner.plan(query)
                let orderBy = SQLFragment.joined(plan.order ?? [], separator: ", ")
                let sql: SQLFragment =
                    "EXPLAIN QUERY PLAN SELECT item FROM \(SQLFragment(text: entry.sqlName)) \(plan.whereClause) ORDER BY \(orderBy) LIMIT 10"
                return try Row.fetchAll(db, sql: sql.text, arguments: sql.statementArguments).map {
                    $0["detail"] as String
                }
                .joined(separator: "; ")
            }
            let byField = TableQuery(filter: .binary(.equal, .field("n"), .literal(.int(3))))
            return (try explain(keyset), try explain(byField))
        }
        #expect(plans.0.contains("items_1_updatedAt"), "\(plans.0)")
        #expect(!plans.0.contains("TEMP B-TREE"), "\(plans.0)")
        #expect(plans.1.contains("items_1_ix_0"), "\(plans.1)")
    }

    @Test func valuesAreBoundSoInjectionFindsNothingAndHarmsNothing() async throws {
        let store = try SQLiteStore.inMemory()
        let hostile = [
            "'; DROP TABLE ferry_operations; --", "' OR '1'='1", "\" OR 1=1 --", "x') OR 1=1 --", "%", "_", "*",
            "[a-z]",
            "\\", "') UNION SELECT sql FROM sqlite_master --",
        ]
        try await store.write { tx in
            try tx.upsert("t", [["id": "a", "s": "plain"], ["id": "b", "s": .string(hostile[1])]])
            _ = try tx.appendOperation(OperationDraft(table: "t", itemID: "a", kind: .insert))
        }
        for value in hostile {
            for filter in [
                QueryExpression.binary(.equal, .field("s"), .literal(.string(value))),
                .function(.contains, [.field("s"), .literal(.string(value))]),
                .binary(.greaterThan, .field("id"), .literal(.string(value))),
                .isIn(.field("s"), [.literal(.string(value)), .literal(.string(value + "'"))]),
            ] {
                let query = TableQuery(filter: filter)
                let expected = try QueryEvaluator().evaluate(
                    query, over: [["id": "a", "s": "plain"], ["id": "b", "s": .string(hostile[1])]])
                #expect(try await store.query("t", query).items.compactMap(\.id) == expected.items.compactMap(\.id))
            }
        }
        #expect(try await store.operationCount() == 1)
        #expect(try await store.read { try $0.count("t") } == 2)
    }

    @Test func queriesBeyondSQLitesLimitsStillGetTheEvaluatorsAnswer() async throws {
        let store = try SQLiteStore.inMemory()
        let items: [JSONObject] = (0..<50).map { ["id": .string("i\($0)"), "n": .int(Int64($0))] }
        try await store.upsert("t", items)
        // A chain of 900 `or`s is written flat; 301 nested `not`s nest deeper than SQLite's parser
        // accepts, and the evaluator answers instead.
        let chain = (0..<900).reduce(QueryExpression.literal(.bool(false))) { partial, index in
            .binary(.or, partial, .binary(.equal, .field("n"), .literal(.int(Int64(index * 7)))))
        }
        let nested = (0..<301).reduce(QueryExpression.binary(.lessThan, .field("n"), .literal(.int(10)))) {
            partial, _ in
            .unary(.not, partial)
        }
        for filter in [chain, nested] {
            let query = TableQuery(
                filter: filter, orderBy: [.field("n", descending: true)], top: 3, includeTotalCount: true)
            let expected = try QueryEvaluator().evaluate(query, over: items)
            #expect(try await store.query("t", query) == expected)
        }
        #expect(try await store.strategy(for: TableQuery(filter: chain), table: "t") == .sql)
    }

    @Test func oddFieldNamesWork() async throws {
        let store = try SQLiteStore.inMemory()
        let names = [
            "we\"ird", "a'b", "[x]", "a.b", "$.c", "ünïcödé", "🎬", "back\\slash", "space name", "", "semi;colon",
            "new\nline",
        ]
        var items: [JSONObject] = []
        for index in 0..<12 {
            var item: JSONObject = ["id": .string("i\(index)")]
            for (position, name) in names.enumerated() { item[name] = .int(Int64((index * 7 + position) % 5)) }
            items.append(item)
        }
        let written = items
        try await store.write { tx in
            try tx.define(SyncCore.TableDefinition(name: "odd", indexes: names.map { [$0] }))
            try tx.upsert("odd", written)
        }
        for name in names {
            for query in [
                TableQuery(filter: .binary(.greaterThanOrEqual, .field(name), .literal(.int(3)))),
                TableQuery(orderBy: [.field(name, descending: true)]),
                TableQuery(
                    filter: .binary(.notEqual, .field(name), .literal(.null)), orderBy: [.field(name)], select: [name]),
            ] {
                let expected = try QueryEvaluator().evaluate(query, over: items)
                let actual = try await store.query("odd", query)
                #expect(actual == expected, "field \(name.debugDescription)")
            }
        }
        #expect(try await store.item("odd", id: "i3") == items[3])
    }

    @Test func unicodeTextFollowsTheEvaluator() async throws {
        let store = try SQLiteStore.inMemory()
        let texts = [
            "é", "e\u{301}", "K", "\u{212A}", "Straße", "İstanbul", "ǅ", "日本語", "🎬x", " padded\u{3000}", "a\u{0}b",
        ]
        let items: [JSONObject] = texts.enumerated().map { ["id": .string("i\($0.offset)"), "s": .string($0.element)] }
        let schema = TableSchema(fields: ["s": .enumeration(["K", "é", "Straße"])])
        try await store.write { tx in
            try tx.upsert("plain", items)
            try tx.define(SyncCore.TableDefinition(name: "cases", schema: schema))
            try tx.upsert("cases", items)
        }
        let filters: [QueryExpression] = [
            .binary(.equal, .function(.toUpper, [.field("s")]), .literal(.string("STRASSE"))),
            .binary(.equal, .function(.length, [.field("s")]), .literal(.int(2))),
            .binary(.equal, .function(.indexOf, [.field("s"), .literal(.string("x"))]), .literal(.int(2))),
            .binary(.equal, .function(.substring, [.field("s"), .literal(.int(1))]), .literal(.string("x"))),
            .binary(.equal, .function(.trim, [.field("s")]), .literal(.string("padded"))),
            .binary(.equal, .field("s"), .literal(.string("K"))),
            .binary(.lessThan, .field("s"), .literal(.string("é"))),
            .function(.contains, [.field("s"), .literal(.string("\u{301}"))]),
        ]
        for (table, schema) in [("plain", TableSchema.schemaless), ("cases", schema)] {
            for filter in filters {
                let query = TableQuery(filter: filter, orderBy: [.field("s")])
                let expected = try QueryEvaluator(schema: schema).evaluate(query, over: items)
                #expect(try await store.query(table, query) == expected, "\(table): \(filter)")
            }
        }
    }
}

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

/// Generates items and queries that exercise the evaluator's corner cases.
enum QueryFuzz {
    static let typedSchema = TableSchema(fields: [
        "d": .dateTimeOffset, "day": .date, "t": .timeOfDay, "e": .enumeration(["G", "PG", "R", "K"]), "g": .guid,
        "s": .string, "n": .integer,
    ])

    static let texts: [String] = [
        "a", "B", "b", "abc", "ABC", "é", "e\u{301}", "K", "\u{212A}", "Straße", "ǅ", "日本語", "🎬", " trim me ", "",
        "x'y", "%_*?[", "G", "PG", "R", "pg", "10:30:00", "10:30", "2024-01-01", "2024-01-01T10:00:00.000Z",
        "2024-01-01T11:00:00+02:00", "2023-12-31T23:59:59.999Z", "1999-02-28", "not a date",
        "6F9619FF-8B86-D011-B42D-00C04FC964FF", "6f9619ff-8b86-d011-b42d-00c04fc964ff", "5", "true", "a\u{0}b",
    ]

    static let numbers: [JSONValue] = [
        0, 1, -1, 2, 3, 5, 7, 10, -7, 42, .int(Int64.max), .int(Int64.min), .int(9_007_199_254_740_993), 0.5, -2.5, 3.0,
        2.5, 1e300, -0.0, 1e-7, 123.456,
    ]

    static func value(_ random: inout SeededRandom, flavour: Int, withNUL: Bool) -> JSONValue? {
        let roll = Int.random(in: 0..<100, using: &random)
        switch roll {
        case 0..<6: return nil
        case 6..<12: return .null
        case 12..<20: return .bool(Bool.random(using: &random))
        case 20..<24: return [.int(1), "a", .null]
        case 24..<26: return ["k": 1]
        default: break
        }
        if flavour == 0 || roll < 50 { return numbers.randomElement(using: &random)! }
        return .string(texts.filter { withNUL || !$0.contains("\u{0}") }.randomElement(using: &random)!)
    }

    static func items(_ random: inout SeededRandom, count: Int, withNUL: Bool) -> [JSONObject] {
        (0..<count).map { index in
            var item: JSONObject = ["id": .string(index % 9 == 0 ? "I\(100 + index)" : "i\(100 + index)")]
            for (field, flavour) in [
                ("n", 0), ("m", 0), ("s", 1), ("d", 1), ("day", 1), ("t", 1), ("e", 1), ("g", 1), ("b", 1),
            ] {
                if let value = value(&random, flavour: flavour, withNUL: withNUL) { item[field] = value }
            }
            switch Int.random(in: 0..<10, using: &random) {
            case 0: break
            case 1: item["updatedAt"] = .string("not a date")
            case 2: item["updatedAt"] = .int(5)
            default:
                item["updatedAt"] = .string(
                    Timestamp(millisecondsSince1970: Int64.random(in: 0..<4, using: &random) * 86_400_000).iso8601)
            }
            if Int.random(in: 0..<6, using: &random) == 0 { item["deleted"] = true }
            return item
        }
    }

    static let fields = ["n", "m", "s", "d", "day", "t", "e", "g", "b", "id", "updatedAt", "deleted", "missing"]

    static func literal(_ random: inout SeededRandom) -> QueryLiteral {
        switch Int.random(in: 0..<14, using: &random) {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &random))
        case 2, 3:
            return .int([0, 1, 2, 3, 5, -1, 42, Int64.max, 9_007_199_254_740_992].randomElement(using: &random)!)
        case 4:
            return .double([0.5, 2.5, 3.0, -2.5, 1e300, 9_007_199_254_740_992.0, 1e-7].randomElement(using: &random)!)
        case 5, 6, 7: return .string(texts.filter { !$0.contains("\u{0}") }.randomElement(using: &random)!)
        case 8:
            return .dateTimeOffset(
                Timestamp(millisecondsSince1970: Int64.random(in: 0..<4, using: &random) * 86_400_000))
        case 9: return .date(CalendarDate(year: 2024, month: 1, day: Int.random(in: 1...2, using: &random))!)
        case 10: return .timeOfDay(TimeOfDay(hour: 10, minute: [0, 30].randomElement(using: &random)!)!)
        case 11: return .guid("6F9619FF-8B86-D011-B42D-00C04FC964FF")
        case 12: return .decimal(2.5)
        default: return .string("a\u{0}b")
        }
    }

    static func value(_ random: inout SeededRandom, depth: Int) -> QueryExpression {
        let field = QueryExpression.field(fields.randomElement(using: &random)!)
        switch Int.random(in: 0..<(depth > 2 ? 2 : 12), using: &random) {
        case 0: return field
        case 1: return .literal(literal(&random))
        case 2, 3:
            let op: BinaryOperator = [.add, .subtract, .multiply, .divide, .modulo].randomElement(using: &random)!
            let rhs: QueryExpression =
                Bool.random(using: &random) ? .literal(literal(&random)) : value(&random, depth: depth + 1)
            return .binary(op, value(&random, depth: depth + 1), rhs)
        case 4: return .unary(.negate, value(&random, depth: depth + 1))
        case 5:
            let function: QueryFunction = [
                .length, .toLower, .toUpper, .trim, .year, .month, .day, .hour, .minute, .second, .floor, .ceiling,
                .round,
            ]
            .randomElement(using: &random)!
            return .function(function, [value(&random, depth: depth + 1)])
        case 6:
            let function: QueryFunction = [.indexOf, .concat, .contains, .startsWith, .endsWith].randomElement(
                using: &random)!
            return .function(function, [value(&random, depth: depth + 1), .literal(literal(&random))])
        case 7:
            var arguments = [
                value(&random, depth: depth + 1), .literal(.int(Int64.random(in: -1...3, using: &random))),
            ]
            if Bool.random(using: &random) {
                arguments.append(.literal(.int(Int64.random(in: -1...3, using: &random))))
            }
            return .function(.substring, arguments)
        case 8: return .function(.replace, [field, .literal(.string("a")), .literal(.string("zz"))])
        case 9:
            return .cast(field, [.string, .int64, .double, .dateTimeOffset, .boolean].randomElement(using: &random)!)
        default: return field
        }
    }

    static func filter(_ random: inout SeededRandom, depth: Int = 0) -> QueryExpression {
        switch Int.random(in: 0..<(depth > 2 ? 6 : 12), using: &random) {
        case 0..<5:
            let op: BinaryOperator = [
                .equal, .notEqual, .greaterThan, .greaterThanOrEqual, .lessThan, .lessThanOrEqual,
            ]
            .randomElement(using: &random)!
            let lhs = value(&random, depth: depth + 1)
            let rhs: QueryExpression =
                Int.random(in: 0..<4, using: &random) == 0
                ? value(&random, depth: depth + 1) : .literal(literal(&random))
            return Bool.random(using: &random) ? .binary(op, lhs, rhs) : .binary(op, rhs, lhs)
        case 5: return value(&random, depth: depth + 1)
        case 6, 7:
            return .binary(
                Bool.random(using: &random) ? .and : .or, filter(&random, depth: depth + 1),
                filter(&random, depth: depth + 1))
        case 8: return .unary(.not, filter(&random, depth: depth + 1))
        case 9:
            return .isIn(
                value(&random, depth: depth + 1),
                (0..<Int.random(in: 0...3, using: &random)).map { _ in .literal(literal(&random)) })
        case 10:
            return .function(
                [.contains, .startsWith, .endsWith].randomElement(using: &random)!,
                [.field("s"), .literal(literal(&random))])
        default:
            return .binary(
                .equal, .field(fields.randomElement(using: &random)!), .field(fields.randomElement(using: &random)!))
        }
    }

    static func query(_ random: inout SeededRandom) -> TableQuery {
        var query = TableQuery(filter: Int.random(in: 0..<8, using: &random) == 0 ? nil : filter(&random))
        for _ in 0..<Int.random(in: 0...2, using: &random) {
            let expression: QueryExpression =
                Int.random(in: 0..<5, using: &random) == 0
                ? value(&random, depth: 1) : .field(fields.randomElement(using: &random)!)
            query.orderBy.append(SortKey(expression, descending: Bool.random(using: &random)))
        }
        if Bool.random(using: &random) { query.skip = Int.random(in: 0..<20, using: &random) }
        if Bool.random(using: &random) { query.top = Int.random(in: 0..<30, using: &random) }
        query.includeDeleted = Int.random(in: 0..<3, using: &random) == 0
        query.includeTotalCount = true
        return query
    }
}

// MARK: - Crash atomicity

@Suite("SQLiteStore crash atomicity")
struct SQLiteCrashAtomicityTests {
    @Test func killedWritersLeaveWholeTransactionsOnly() async throws {
        let writer = try #require(CrashAtomicity.writerURL(), "StoreCrashWriter was not built beside the tests")
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/crash.ferry"
        let report = try await CrashAtomicity.run(
            writer: writer, storeArgument: "sqlite:\(path)", rounds: 30, seed: 0x5eed_c0de,
            open: { try SQLiteStore(path: path) })
        print("crash atomicity (SQLiteStore): \(report)")
        #expect(report.failures.isEmpty, "\(report.failures)")
        #expect(report.rounds == 30)
        #expect(report.committed > 30, "the writer must commit transactions between kills")
    }
}

// MARK: - Full disk

@Suite("SQLiteStore on a full disk")
struct SQLiteFullDiskTests {
    /// Writes pages of 100 items of about 1 KB until the store refuses one; returns the pages that
    /// committed and the error.
    static func fill(_ store: SQLiteStore) async throws -> (pages: Int, error: StoreError?) {
        let padding = String(repeating: "p", count: 1_000)
        for page in 0..<100_000 {
            let items: [JSONObject] = (0..<100).map { ["id": .string("p\(page)-\($0)"), "pad": .string(padding)] }
            do {
                try await store.write { tx in
                    try tx.upsert("fill", items)
                    _ = try tx.appendOperation(OperationDraft(table: "fill", itemID: "p\(page)-0", kind: .insert))
                }
            } catch let error as StoreError {
                return (page, error)
            }
        }
        return (100_000, nil)
    }

    @Test func aSizeCapRefusesTheWriteWholeAndKeepsTheStoreUsable() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/capped.ferry"
        let store = try SQLiteStore(path: path, configuration: .init(maximumSize: 1 << 20))
        let (pages, error) = try await Self.fill(store)
        let failure = try #require(error)
        #expect(failure.code == .full)
        #expect(!failure.description.contains("\n"))
        #expect(pages > 0)
        // Nothing of the refused page, everything of the others.
        #expect(try await store.read { try $0.count("fill") } == pages * 100)
        #expect(try await store.operationCount(table: "fill") == pages)
        #expect(try await store.item("fill", id: "p\(pages)-0") == nil)
        // Still usable: delete frees room, and a later write succeeds.
        _ = try await store.delete("fill", ids: (0..<100).map { "p0-\($0)" })
        try await store.upsert("fill", [["id": "after", "pad": "small"]])
        try await store.close()
        let reopened = try SQLiteStore(path: path)
        #expect(try await reopened.read { try $0.count("fill") } == (pages - 1) * 100 + 1)
        try await reopened.close()
    }

    @Test(
        .enabled(
            if: Tmpfs.canMount,
            "SKIPPED: cannot mount a small tmpfs here (needs root); the size-cap test covers SQLITE_FULL"))
    func aRealFullDiskGivesAClearErrorAndLosesNothing() async throws {
        let mount = try Tmpfs(megabytes: 2)
        defer { mount.unmount() }
        let path = mount.path + "/full.ferry"
        let store = try SQLiteStore(path: path)
        let (pages, error) = try await Self.fill(store)
        let failure = try #require(error)
        #expect(failure.code == .full, "\(failure)")
        #expect(pages > 0)
        #expect(try await store.read { try $0.count("fill") } == pages * 100)
        #expect(try await store.operationCount(table: "fill") == pages)
        try await store.close()
        // Reopening on the full disk reads everything that committed, nothing of the refused write.
        let reopened = try SQLiteStore(path: path, configuration: .init(verifiesIntegrityOnOpen: true))
        #expect(try await reopened.read { try $0.count("fill") } == pages * 100)
        #expect(try await reopened.item("fill", id: "p\(pages)-0") == nil)
        try await reopened.close()
    }
}

/// A small tmpfs mounted for one test, to fill a real disk.
struct Tmpfs {
    let path: String

    static let canMount: Bool = {
        guard getuid() == 0, let probe = try? Tmpfs(megabytes: 1) else { return false }
        probe.unmount()
        return true
    }()

    init(megabytes: Int) throws {
        path = NSTemporaryDirectory() + "ferry-tmpfs-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let status = try Self.run("/bin/mount", ["-t", "tmpfs", "-o", "size=\(megabytes)m", "tmpfs", path])
        if status != 0 {
            try? FileManager.default.removeItem(atPath: path)
            throw StoreError(.io, "mount failed with status \(status)")
        }
    }

    func unmount() {
        _ = try? Self.run("/bin/umount", [path])
        try? FileManager.default.removeItem(atPath: path)
    }

    static func run(_ tool: String, _ arguments: [String]) throws -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        return process.terminationStatus
    }
}

// MARK: - Index use

@Suite("SQLiteStore declared indexes")
struct SQLiteIndexUseTests {
    /// The SQL and SQLite's plan for `query`.
    static func explain(_ store: SQLiteStore, _ table: String, _ query: TableQuery) async throws -> (String, [String]) {
        try await store.database.read { db in
            let reader = SQLiteReader(db: db, place: "test")
            let entry = try #require(try reader.entry(table))
            let plan = try QueryRunner(reader: reader, table: table, entry: entry).plan(query)
            let order = try #require(plan.order, "the query should run in SQL")
            let sql: SQLFragment =
                "SELECT item FROM \(SQLFragment(text: entry.sqlName)) \(plan.whereClause) ORDER BY \(SQLFragment.joined(order, separator: ", ")) LIMIT 100"
            let details = try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + sql.text, arguments: sql.statementArguments)
                .map { $0["detail"] as String? ?? "" }
            return (sql.text, details)
        }
    }

    @Test func aRangeOnAnIndexedFieldPagesThroughTheIndexInOrder() async throws {
        let store = try SQLiteStore.inMemory()
        let definition = TableDefinition(
            name: "scores", schema: TableSchema(fields: ["score": .integer], allowsUndeclaredFields: true),
            indexes: [["score"]])
        try await store.write { tx in try tx.define(definition) }
        // Numbers, plus values of other kinds the filter must keep out of the page.
        var items: [JSONObject] = (0..<500).map { ["id": .string("r\($0)"), "score": .int(Int64(($0 * 37) % 101))] }
        items += [
            ["id": "s", "score": "77"], ["id": "b", "score": true], ["id": "n", "score": nil], ["id": "m"],
            ["id": "d", "score": 50.5],
        ]
        try await store.upsert("scores", items)
        let evaluator = QueryEvaluator(schema: definition.schema)
        for descending in [false, true] {
            let query = TableQuery(filter: QueryExpression.field("score").ge(50)).orderBy(
                "score", descending: descending
            )
            .top(100)
            let (sql, plan) = try await Self.explain(store, "scores", query)
            #expect(plan.contains { $0.contains("USING INDEX") }, "\(plan)")
            // No sort of every matching row. (Descending, SQLite sorts only the runs of equal scores
            // by id: "TEMP B-TREE FOR RIGHT PART OF ORDER BY", which still stops after the page.)
            #expect(!plan.contains { $0.contains("TEMP B-TREE FOR ORDER BY") }, "\(sql) → \(plan)")
            let expected = try evaluator.evaluate(query, over: items).items
            #expect(try await store.query("scores", query).items == expected)
        }
        // Without the numeric filter the general order (every kind) still applies, and agrees.
        let general = TableQuery().orderBy("score").top(20)
        #expect(try await store.query("scores", general).items == (try evaluator.evaluate(general, over: items).items))
    }
}
