import Foundation
import StoreConformance
@testable import StoreLMDB
import SyncCore
import Testing

@Suite("LMDBStore query planning")
struct LMDBQueryTests {
    /// Generated filters, orders and pages over generated items, before and after random edits: the
    /// store must give the evaluator's ids, in the evaluator's order, with the evaluator's count.
    @Test func plannedQueriesAgreeWithTheEvaluator() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try LMDBStore(path: directory.path + "/fuzz")
        var random = SeededRandom(seed: 0x1_4D0B)
        let typed = TableSchema(fields: ["updatedAt": .string, "id": .guid, "n": .integer])
        var tables: [(name: String, schema: TableSchema, items: [String: JSONObject])] = [
            ("regular", .schemaless, [:]), ("irregular", .schemaless, [:]), ("long", .schemaless, [:]),
            ("typed", typed, [:]),
        ]
        for index in tables.indices {
            let name = tables[index].name
            let items = PlanFuzz.items(
                &random, count: 120, irregular: name != "regular", longIDs: name == "long")
            tables[index].items = Dictionary(items.map { ($0.id!, $0) }, uniquingKeysWith: { $1 })
            let schema = tables[index].schema
            try await store.write { tx in
                try tx.define(TableDefinition(name: name, schema: schema))
                try tx.upsert(name, items)
            }
        }
        var compared = 0
        var streamed = 0
        var failures: [String] = []
        for round in 0..<3 {
            if round > 0 {
                // Edits move items in the updatedAt index, into and out of buckets.
                for index in tables.indices {
                    let name = tables[index].name
                    var changed: [JSONObject] = []
                    var removed: [String] = []
                    for id in tables[index].items.keys.sorted() {
                        switch Int.random(in: 0..<6, using: &random) {
                        case 0:
                            removed.append(id)
                            tables[index].items[id] = nil
                        case 1, 2:
                            var item = PlanFuzz.items(
                                &random, count: 1, irregular: name != "regular", longIDs: false)[0]
                            item["id"] = .string(id)
                            changed.append(item)
                            tables[index].items[id] = item
                        default: break
                        }
                    }
                    let fresh = PlanFuzz.items(
                        &random, count: 10, irregular: name != "regular", longIDs: name == "long"
                    )
                    .filter { tables[index].items[$0.id!] == nil }
                    for item in fresh { tables[index].items[item.id!] = item }
                    let upserts = changed + fresh
                    let deletions = removed
                    let counted = try await store.write { tx in
                        let counted = try tx.delete(name, ids: deletions)
                        try tx.upsert(name, upserts)
                        return counted
                    }
                    #expect(counted == deletions.count)
                    #expect(try await store.read { try $0.count(name) } == tables[index].items.count)
                }
            }
            for _ in 0..<400 {
                for table in tables {
                    let query = PlanFuzz.query(&random, ids: table.items.keys.sorted())
                    compared += 1
                    let expected: QueryResult
                    do {
                        expected = try QueryEvaluator(schema: table.schema).evaluate(
                            query, over: Array(table.items.values))
                    } catch {
                        await #expect(throws: StoreError.self) { try await store.query(table.name, query) }
                        continue
                    }
                    let actual = try await store.query(table.name, query)
                    if actual.items != expected.items || actual.totalCount != expected.totalCount {
                        failures.append(
                            "round \(round) on \(table.name): \(query.odataQueryString(protocolVersion: .v3)) \(query.orderBy)\n  store:     \(actual.items.compactMap(\.id).map { String($0.prefix(12)) }) \(actual.totalCount ?? -1)\n  evaluator: \(expected.items.compactMap(\.id).map { String($0.prefix(12)) }) \(expected.totalCount ?? -1)"
                        )
                    }
                    if try await store.plan(for: query, table: table.name)?.streamed == true { streamed += 1 }
                }
            }
        }
        for failure in failures.prefix(20) { Issue.record("\(failure)") }
        #expect(failures.isEmpty, "\(failures.count) of \(compared) queries disagree")
        print(
            "◇ planned queries: \(compared - failures.count) of \(compared) agree with the evaluator; \(streamed) streamed"
        )
        #expect(streamed * 4 >= compared, "only \(streamed) of \(compared) queries were streamed")
        try await store.close()
    }

    @Test func theSyncQueriesArePlannedOntoTheirKeys() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try LMDBStore(path: directory.path + "/plans")
        let items: [JSONObject] = (0..<200).map {
            [
                "id": .string("i\(String($0 + 1000))"),
                "updatedAt": .string(Timestamp(millisecondsSince1970: Int64($0 / 3) * 1000).iso8601),
                "n": .int(Int64($0 % 7)),
            ]
        }
        try await store.upsert("todo", items)
        let cursor = Timestamp(millisecondsSince1970: 20_000)
        let keyset = SyncQueries.keysetPage(after: cursor, id: "i1061", top: 10)
        let keysetPlan = try await store.plan(for: keyset, table: "todo")
        #expect(keysetPlan?.source == .updatedAt(20_000...Int64.max))
        #expect(keysetPlan?.streamed == true)
        #expect(try await store.query("todo", keyset).items.compactMap(\.id) == (1062..<1072).map { "i\($0)" })

        let byID = TableQuery(filter: .isIn(.field("id"), [.literal(.string("i1005")), .literal(.string("i1001"))]))
        #expect(try await store.plan(for: byID, table: "todo")?.source == .ids(["i1001", "i1005"]))
        #expect(try await store.query("todo", byID).items.compactMap(\.id) == ["i1001", "i1005"])

        let equal = TableQuery(filter: .binary(.equal, .field("id"), .literal(.string("i1100"))))
        #expect(try await store.plan(for: equal, table: "todo")?.source == .ids(["i1100"]))

        let range = TableQuery(
            filter: .binary(.greaterThanOrEqual, .field("id"), .literal(.string("i1190"))),
            orderBy: [.field("id", descending: true)],
            top: 3)
        let rangePlan = try await store.plan(for: range, table: "todo")
        #expect(rangePlan?.source == .idRange(IDRange(lower: (Array("i1190".utf8), true))))
        #expect(rangePlan?.streamed == true)
        #expect(try await store.query("todo", range).items.compactMap(\.id) == ["i1199", "i1198", "i1197"])

        let newest = TableQuery(orderBy: [.field("updatedAt", descending: true)], top: 4)
        #expect(
            try await store.plan(for: newest, table: "todo")
                == .init(
                    source: .updatedAt(nil), order: .updatedAt(descending: true, idDescending: false), streamed: true))
        #expect(try await store.query("todo", newest).items.compactMap(\.id) == ["i1198", "i1199", "i1195", "i1196"])

        let page = TableQuery(skip: 10, top: 5)
        #expect(try await store.plan(for: page, table: "todo")?.streamed == true)
        #expect(try await store.query("todo", page).items.compactMap(\.id) == (1010..<1015).map { "i\($0)" })

        let general = TableQuery(filter: .binary(.equal, .field("n"), .literal(.int(3))), orderBy: [.field("n")])
        #expect(
            try await store.plan(for: general, table: "todo") == .init(source: .all, order: .general, streamed: false))

        // One irregular updatedAt: ordering by updatedAt without a bound falls back to the evaluator.
        try await store.upsert("todo", [["id": "odd", "updatedAt": 5]])
        #expect(try await store.plan(for: newest, table: "todo")?.streamed == false)
        #expect(try await store.query("todo", newest).items.compactMap(\.id) == ["i1198", "i1199", "i1195", "i1196"])
        #expect(try await store.plan(for: keyset, table: "todo")?.streamed == true)
        try await store.close()
    }
}

/// Items and queries that exercise the planner: ids and updatedAt in every form.
enum PlanFuzz {
    /// A prefix of 480 UTF-8 bytes: ids starting with it share one key (a bucket).
    static let longPrefix = String(repeating: "é", count: 240)

    static func items(_ random: inout SeededRandom, count: Int, irregular: Bool, longIDs: Bool) -> [JSONObject] {
        (0..<count).map { _ in
            var id = "i\(Int.random(in: 100..<400, using: &random))"
            if longIDs, Bool.random(using: &random) {
                id =
                    longPrefix + ["", "a", "b", "ab", "é", "z\(Int.random(in: 0..<9, using: &random))"].randomElement(
                        using: &random)!
            } else if Int.random(in: 0..<10, using: &random) == 0 {
                id = "I\(Int.random(in: 0..<50, using: &random))"
            }
            var item: JSONObject = ["id": .string(id), "n": .int(Int64.random(in: 0..<5, using: &random))]
            switch Int.random(in: 0..<12, using: &random) {
            case 0: break
            case 1: item["updatedAt"] = .null
            case 2: item["updatedAt"] = .string("2024-01-0\(Int.random(in: 1...3, using: &random))")
            case 3 where irregular: item["updatedAt"] = .int(Int64.random(in: 0..<3, using: &random))
            case 4 where irregular:
                item["updatedAt"] = .string(["not a date", "zz", "2024-13-01"].randomElement(using: &random)!)
            case 5 where irregular: item["updatedAt"] = .bool(Bool.random(using: &random))
            case 6 where irregular: item["updatedAt"] = [1, 2]
            default:
                item["updatedAt"] = .string(
                    Timestamp(
                        millisecondsSince1970: 1_704_067_200_000 + Int64.random(in: 0..<6, using: &random) * 43_200_000
                    )
                    .iso8601)
            }
            if Int.random(in: 0..<6, using: &random) == 0 { item["deleted"] = true }
            return item
        }
    }

    static func instant(_ random: inout SeededRandom) -> QueryLiteral {
        let milliseconds = 1_704_067_200_000 + Int64.random(in: -1..<7, using: &random) * 43_200_000
        switch Int.random(in: 0..<4, using: &random) {
        case 0: return .date(Timestamp(millisecondsSince1970: milliseconds).date)
        case 1: return .string(Timestamp(millisecondsSince1970: milliseconds).iso8601)
        case 2: return .string("2024-01-02")
        default: return .dateTimeOffset(Timestamp(millisecondsSince1970: milliseconds))
        }
    }

    static func idLiteral(_ random: inout SeededRandom, ids: [String]) -> String {
        switch Int.random(in: 0..<5, using: &random) {
        case 0: return "i\(Int.random(in: 90..<410, using: &random))"
        case 1: return longPrefix + ["", "a", "b"].randomElement(using: &random)!
        case 2: return ["", "I", "i", "j", "\u{10FFFF}"].randomElement(using: &random)!
        default: return ids.randomElement(using: &random) ?? "i1"
        }
    }

    static let comparisons: [BinaryOperator] = [
        .equal, .notEqual, .greaterThan, .greaterThanOrEqual, .lessThan, .lessThanOrEqual,
    ]

    static func filter(_ random: inout SeededRandom, ids: [String], depth: Int = 0) -> QueryExpression {
        switch Int.random(in: 0..<(depth > 2 ? 5 : 9), using: &random) {
        case 0, 1:
            let literal = QueryExpression.literal(.string(idLiteral(&random, ids: ids)))
            let op = comparisons.randomElement(using: &random)!
            return Bool.random(using: &random) ? .binary(op, .field("id"), literal) : .binary(op, literal, .field("id"))
        case 2, 3:
            let literal = QueryExpression.literal(instant(&random))
            let op = comparisons.randomElement(using: &random)!
            return Bool.random(using: &random)
                ? .binary(op, .field("updatedAt"), literal) : .binary(op, literal, .field("updatedAt"))
        case 4:
            let list = (0..<Int.random(in: 0...4, using: &random)).map { _ in
                Int.random(in: 0..<8, using: &random) == 0
                    ? QueryExpression.literal(.int(1)) : .literal(.string(idLiteral(&random, ids: ids)))
            }
            return .isIn(.field("id"), list)
        case 5, 6:
            return .binary(
                Bool.random(using: &random) ? .and : .or, filter(&random, ids: ids, depth: depth + 1),
                filter(&random, ids: ids, depth: depth + 1))
        case 7:
            return .unary(.not, filter(&random, ids: ids, depth: depth + 1))
        default:
            return .binary(
                comparisons.randomElement(using: &random)!, .field("n"),
                .literal(.int(Int64.random(in: 0..<5, using: &random))))
        }
    }

    static func query(_ random: inout SeededRandom, ids: [String]) -> TableQuery {
        var query = TableQuery(filter: Int.random(in: 0..<5, using: &random) == 0 ? nil : filter(&random, ids: ids))
        switch Int.random(in: 0..<8, using: &random) {
        case 0: break
        case 1: query.orderBy = [.field("id", descending: Bool.random(using: &random))]
        case 2, 3: query.orderBy = [.field("updatedAt", descending: Bool.random(using: &random))]
        case 4:
            query.orderBy = [
                .field("updatedAt", descending: Bool.random(using: &random)),
                .field("id", descending: Bool.random(using: &random)),
            ]
        case 5: query.orderBy = [.field("n"), .field("updatedAt", descending: true)]
        case 6: query.orderBy = [.field("id"), .field("n")]
        default: query.orderBy = [.field("updatedAt"), .field("n")]
        }
        if Bool.random(using: &random) { query.skip = Int.random(in: 0..<15, using: &random) }
        if Bool.random(using: &random) { query.top = Int.random(in: 0..<20, using: &random) }
        query.includeDeleted = Int.random(in: 0..<3, using: &random) == 0
        query.includeTotalCount = Bool.random(using: &random)
        if Int.random(in: 0..<5, using: &random) == 0 { query.select = ["id", "updatedAt"] }
        return query
    }
}
