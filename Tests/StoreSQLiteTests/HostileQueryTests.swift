import StoreConformance
@testable import StoreSQLite
import SyncCore
import Testing

@Suite("SQLiteStore with hostile queries")
struct SQLiteHostileQueryTests {
    static func store(_ items: [JSONObject], schema: TableSchema = .schemaless) async throws -> SQLiteStore {
        let store = try SQLiteStore.inMemory()
        try await store.write { tx in
            try tx.define(SyncCore.TableDefinition(name: "t", schema: schema, indexes: [["n"]]))
            try tx.upsert("t", items)
        }
        return store
    }

    /// What `ferry query --filter "substring('hello',1,9223372036854775807) eq 'x'"` runs on a local
    /// store; the evaluator's `Int64(from) + length` trapped inside SQLite's `ferry_fn` before.
    @Test func substringWithTheLargestLengthAnswersInsteadOfCrashing() async throws {
        let store = try await Self.store([
            ["id": "a", "s": "hello", "n": .int(.max)], ["id": "b", "s": "hello", "n": .int(.min)],
        ])
        func ids(_ filter: String) async throws -> [String] {
            try await store.query("t", TableQuery(odata: "$filter=" + filter, protocolVersion: .v3)).items.compactMap(
                \.id)
        }
        #expect(try await ids("substring('hello',1,9223372036854775807) eq 'x'") == [])
        #expect(try await ids("substring('hello',1,9223372036854775807) eq 'ello'") == ["a", "b"])
        #expect(try await ids("substring(s,1,9223372036854775807) eq 'ello'") == ["a", "b"])
        #expect(try await ids("substring(s,n) eq ''") == ["a"])
        #expect(try await ids("substring(s,2,n) eq 'llo'") == ["a"])
        #expect(try await ids("substring(s,n,n) eq ''") == ["a", "b"])
        #expect(try await ids("substring(s,-9223372036854775808,2) eq 'he'") == ["a", "b"])
        #expect(
            try await store.strategy(
                for: TableQuery(odata: "$filter=substring(s,2,n) eq 'llo'", protocolVersion: .v3), table: "t") == .sql)
    }

    @Test func extremeArithmeticAndCastsInSQLGiveTheEvaluatorsAnswer() async throws {
        let items: [JSONObject] = [
            ["id": "a", "n": .int(.max), "s": "1e999"], ["id": "b", "n": .int(.min), "s": "nan"],
            ["id": "c", "n": 1e308, "s": "2147483648"], ["id": "d", "n": 0, "s": "-0"],
        ]
        let store = try await Self.store(items)
        let filters = [
            "n add n gt 0", "n sub 1 lt 0", "n mul -1 gt 0", "n div -1 gt 0", "n mod -1 eq 0", "-n gt 0",
            "n mul 10 eq INF", "n mul 1e308 ne n mul 1e308", "cast(n, Edm.Int32) eq null", "cast(n, Edm.Int64) eq null",
            "cast(s, Edm.Double) eq null", "cast(s, Edm.Int32) eq null", "cast(s, Edm.Int64) gt 0",
            "cast(n, Edm.Double) gt 9.2e18", "round(n mul 10) eq INF", "floor(n) eq n", "length(s) gt 2",
            "indexof(s, 'e') eq 1",
        ]
        let evaluator = QueryEvaluator()
        for filter in filters {
            let query = try TableQuery(odata: "$filter=" + filter, protocolVersion: .v3)
            let expected = try evaluator.evaluate(query, over: items).items.compactMap(\.id)
            #expect(try await store.query("t", query).items.compactMap(\.id) == expected, "\(filter)")
        }
    }

    /// A negative top or skip (possible only in code) is refused; the largest are answered.
    @Test func negativeTopAndSkipAreRefusedAndTheLargestAnswered() async throws {
        let store = try await Self.store([["id": "a", "n": 1], ["id": "b", "n": 2]])
        for order in [[SortKey](), [SortKey(.field("n"))]] {
            var query = TableQuery(orderBy: order)
            query.top = -1
            await #expect(throws: StoreError.self) { try await store.query("t", query) }
            query.top = .max
            query.skip = .min
            await #expect(throws: StoreError.self) { try await store.query("t", query) }
            query.skip = nil
            #expect(try await store.query("t", query).items.compactMap(\.id) == ["a", "b"])
            query.skip = .max
            #expect(try await store.query("t", query).items.isEmpty)
        }
    }

    /// Hostile trees (extreme integers and doubles, NaN and infinities from arithmetic, extreme
    /// dates, every function with 0 to 4 arguments, casts to every type, deep nesting, extreme skip
    /// and top) over rows holding extreme values: the store gives the evaluator's ids in the
    /// evaluator's order and count, or refuses with an error, and never traps.
    @Test func hostileQueriesAgreeWithTheEvaluatorOrAreRefused() async throws {
        var random = SeededRandom(seed: 0x5EED_BAD)
        let items = HostileQueries.items(&random, count: 40)
        let tables: [(String, TableSchema)] = [("plain", .schemaless), ("typed", HostileQueries.typedSchema)]
        let store = try SQLiteStore.inMemory()
        try await store.write { tx in
            for (name, schema) in tables {
                try tx.define(SyncCore.TableDefinition(name: name, schema: schema, indexes: [["n"], ["s", "n"]]))
                try tx.upsert(name, items)
            }
        }
        let sorted = items.sorted { $0.id! < $1.id! }
        var agreed = 0
        var refused = 0
        var inSQL = 0
        var failures: [String] = []
        for round in 0..<400 {
            let query = HostileQueries.query(&random)
            for (name, schema) in tables {
                let expected = try? QueryEvaluator(schema: schema).evaluate(query, over: sorted)
                let actual: QueryResult
                do {
                    actual = try await store.query(name, query)
                } catch {
                    refused += 1
                    continue
                }
                guard let expected else {
                    failures.append("round \(round) on \(name): the evaluator refused what the store answered")
                    continue
                }
                if actual.items.compactMap(\.id) == expected.items.compactMap(\.id)
                    && actual.totalCount == expected.totalCount
                {
                    agreed += 1
                } else {
                    failures.append(
                        "round \(round) on \(name): \(query.odataQueryString(protocolVersion: .v3))\n  store:     \(actual.items.compactMap(\.id)) \(actual.totalCount ?? -1)\n  evaluator: \(expected.items.compactMap(\.id)) \(expected.totalCount ?? -1)"
                    )
                }
                if try await store.strategy(for: query, table: name) == .sql { inSQL += 1 }
            }
        }
        for failure in failures.prefix(10) { Issue.record("\(failure)") }
        #expect(failures.isEmpty, "\(failures.count) hostile queries disagree")
        print(
            "◇ hostile queries on SQLiteStore: \(agreed) agree with the evaluator (\(inSQL) entirely in SQL), \(refused) refused"
        )
        #expect(agreed > 600)
    }
}
