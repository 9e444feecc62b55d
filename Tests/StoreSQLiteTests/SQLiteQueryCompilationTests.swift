import Foundation
import GRDB
import QuerySQL
import QuerySQLite
import StoreConformance
@testable import StoreSQLite
import SyncCore
import Testing

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
                        "round \(round) on \(name): \(query.odataQueryString(protocolVersion: .v3))\n  store:     \(actual.items.compactMap(\.id)) \(actual.totalCount ?? -1)\n  evaluator: \(expected.items.compactMap(\.id)) \(expected.totalCount ?? -1)"
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

    /// The same generated queries through the shared compiler on the server storage's layout (system
    /// fields in columns, the item's own fields in `item`, `version` unreadable, the server's
    /// limits), run by SQLite exactly as the server runs them: the evaluator's answer, every time.
    @Test func compiledQueriesAgreeWithTheEvaluatorOnTheServerLayout() throws {
        var random = SeededRandom(seed: 0x5EED_5E7F)
        let layout = SQLTableLayout(
            updatedAt: .init(name: "updated_at"), createdAt: .init(name: "created_at"), deletedColumn: "deleted",
            unreadableFields: ["version"], itemHoldsSystemFields: false)
        let limits = SQLCompiler.Limits(maximumDepth: 48, maximumOperands: 200, maximumArguments: 5_000)
        var configuration = Configuration()
        configuration.prepareDatabase { db in try SQLiteQueryFunctions.register(db) }
        let database = try DatabaseQueue(configuration: configuration)
        var rows: [JSONObject] = []
        try database.write { db in
            try db.execute(
                sql: """
                    CREATE TABLE t (id TEXT PRIMARY KEY NOT NULL, item TEXT NOT NULL, created_at INTEGER NOT NULL,
                        updated_at INTEGER NOT NULL, version INTEGER NOT NULL, deleted INTEGER NOT NULL)
                    """)
            for (index, item) in QueryFuzz.items(&random, count: 90, withNUL: false).enumerated() {
                var content = item
                for name in ["id", "createdAt", "updatedAt", "version", "deleted"] { content[name] = nil }
                let created = Int64.random(in: 0..<4, using: &random) * 86_400_000
                let updated = created + Int64(index)
                let deleted = item["deleted"] == .bool(true)
                try db.execute(
                    sql: "INSERT INTO t VALUES (?, ?, ?, ?, ?, ?)",
                    arguments: [item.id, JSONValue.object(content).serialized(), created, updated, index, deleted])
                var queryable = content
                queryable["id"] = item["id"]
                queryable["createdAt"] = .string(Timestamp(millisecondsSince1970: created).iso8601)
                queryable["updatedAt"] = .string(Timestamp(millisecondsSince1970: updated).iso8601)
                queryable["version"] = .string("v\(1000 - index)")
                queryable["deleted"] = .bool(deleted)
                rows.append(queryable)
            }
        }
        rows.sort { $0.id! < $1.id! }
        var failures: [String] = []
        var inSQL = 0
        var compared = 0
        for round in 0..<2000 {
            let query = QueryFuzz.query(&random)
            let schema = round % 2 == 0 ? TableSchema.schemaless : QueryFuzz.typedSchema
            guard let expected = try? QueryEvaluator(schema: schema).evaluate(query, over: rows) else { continue }
            compared += 1
            let compiler = SQLCompiler(schema: schema, layout: layout, dialect: .sqlite, limits: limits)
            let split = compiler.split(query.filter)
            var conditions = [split.sql].compactMap { $0 }
            if !query.includeDeleted { conditions.append("deleted = 0") }
            let condition = conditions.isEmpty ? "1" : SQLFragment.joined(conditions, separator: " AND ")
            let ids: [String]
            let total: Int?
            if split.residual == nil, var order = try? compiler.order(query.orderBy, filter: query.filter) {
                if let precheck = order.precheck,
                    try database.read({ db in
                        try Bool.fetchOne(
                            db, sql: "SELECT EXISTS (SELECT 1 FROM t WHERE \(precheck.sqliteText))",
                            arguments: precheck.statementArguments)
                    }) ?? false
                {
                    var general = compiler
                    general.assumesRegularSortKeys = false
                    guard let recompiled = try? general.order(query.orderBy, filter: query.filter) else { continue }
                    order = recompiled
                }
                inSQL += 1
                let page = SQLDialect.sqlite.page(limit: query.top.map(Int64.init), offset: Int64(query.skip ?? 0))
                let sql: SQLFragment = "SELECT id FROM t WHERE \(condition) ORDER BY \(order.sql) \(page)"
                let count: SQLFragment = "SELECT COUNT(*) FROM t WHERE \(condition)"
                (ids, total) = try database.read { db in
                    (
                        try String.fetchAll(db, sql: sql.sqliteText, arguments: sql.statementArguments),
                        try Int.fetchOne(db, sql: count.sqliteText, arguments: count.statementArguments)
                    )
                }
            } else {
                // The server's fallback: SQL narrows the rows, the evaluator finishes.
                let sql: SQLFragment = "SELECT id FROM t WHERE \(condition)"
                let selected = Set(
                    try database.read { db in
                        try String.fetchAll(db, sql: sql.sqliteText, arguments: sql.statementArguments)
                    })
                var rest = query
                rest.filter = split.residual
                let result = try QueryEvaluator(schema: schema).evaluate(
                    rest, over: rows.filter { selected.contains($0.id!) })
                (ids, total) = (result.items.compactMap(\.id), result.totalCount)
            }
            if ids != expected.items.compactMap(\.id) || total != expected.totalCount {
                failures.append(
                    "round \(round): \(query.odataQueryString(protocolVersion: .v3))\n  SQL:       \(ids) \(total ?? -1)\n  evaluator: \(expected.items.compactMap(\.id)) \(expected.totalCount ?? -1)"
                )
            }
        }
        for failure in failures.prefix(20) { Issue.record("\(failure)") }
        #expect(failures.isEmpty, "\(failures.count) of \(compared) queries disagree on the server layout")
        #expect(inSQL * 10 >= compared * 6, "only \(inSQL) of \(compared) queries ran entirely in SQL")
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
        let keyset = SyncQueries.keysetPage(after: cursor, id: "i1061", top: 10)
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
                return try Row.fetchAll(db, sql: sql.sqliteText, arguments: sql.statementArguments).map {
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
            let details = try Row.fetchAll(
                db, sql: "EXPLAIN QUERY PLAN " + sql.sqliteText, arguments: sql.statementArguments
            )
            .map { $0["detail"] as String? ?? "" }
            return (sql.sqliteText, details)
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
