import ServerStorageCore
import StoreConformance
import SyncCore
import Testing

extension ServerStorageConformanceSuite {
    /// A table whose declared fields exercise every way the evaluator types a value.
    static let catalog = StorageTable(
        name: "catalog",
        schema: TableSchema(fields: [
            "rating": .enumeration(["Unrated", "G", "PG", "PG13", "R"]), "day": .date, "stamp": .dateTimeOffset,
            "time": .timeOfDay, "guid": .guid, "mixed": .json, "label": .string,
        ]))

    static let strings: [String] = [
        "", "a", "A", "ab", "abc", "b", "ä", "Ä", "Straße", "🎬 film", "it's", "'; DROP TABLE ferry_tables; --",
        "2024-01-01", "2024-01-01T10:00:00.000Z", "10:30:00", "PG", "PG13", "R", "x%_y", "the end",
    ]

    static let numbers: [JSONValue] = [
        0, 1, -1, 2, 3, 42, 1.5, -2.25, 2.0, 1e10, .int(9_007_199_254_740_993), .int(Int64.max), .int(Int64.min), 0.1,
    ]

    /// Deterministic rows with values of every kind, some soft-deleted.
    static func catalogRows(_ random: inout SeededRandom) -> [(id: String, content: JSONObject, deleted: Bool)] {
        var rows: [(String, JSONObject, Bool)] = []
        let ratings: [JSONValue] = ["Unrated", "G", "PG", "PG13", "R", "R", "PG", .null]
        for index in 0..<64 {
            var item: JSONObject = [:]
            func maybe(_ key: String, _ value: @autoclosure () -> JSONValue) {
                switch Int.random(in: 0..<8, using: &random) {
                case 0: break  // missing
                case 1: item[key] = .null
                default: item[key] = value()
                }
            }
            maybe("n", numbers.randomElement(using: &random)!)
            maybe("s", .string(strings.randomElement(using: &random)!))
            maybe("b", .bool(Bool.random(using: &random)))
            maybe("rating", ratings.randomElement(using: &random)!)
            maybe(
                "day",
                .string(
                    "20\(Int.random(in: 10...30, using: &random))-0\(Int.random(in: 1...9, using: &random))-1\(Int.random(in: 0...9, using: &random))"
                ))
            maybe(
                "stamp",
                .string(
                    ["2024-01-01T10:00:00.000Z", "2024-01-01T12:00:00+02:00", "2023-12-31", "not a date"].randomElement(
                        using: &random)!))
            maybe("time", .string(["07:14:00", "12:00:00.500", "23:59:59", "noon"].randomElement(using: &random)!))
            maybe(
                "guid",
                .string(
                    ["29386779-34b1-464a-bb5b-4053c2ee61b3", "29386779-34B1-464A-BB5B-4053C2EE61B3", "other"]
                        .randomElement(using: &random)!))
            let mixed: [JSONValue] = [
                1, 2.5, "1", "b", true, false, [1, 2], ["k": "v"], ["k": "w", "a": [1]], [], [:],
            ]
            maybe("mixed", mixed.randomElement(using: &random)!)
            maybe("label", .string(strings.randomElement(using: &random)!))
            maybe("j", [["a": 1], ["a": 2], ["b": .null]].randomElement(using: &random)!)
            let id = index % 7 == 0 ? "Item-\(index)" : "item-\(String(index, radix: 16))"
            rows.append((id, item, index % 9 == 4))
        }
        return rows
    }

    static func seedCatalog(_ storage: any ServerStorage, _ clock: ManualClock, seed: UInt64) async throws
        -> [StoredItem]
    {
        var random = SeededRandom(seed: seed)
        var stored: [StoredItem] = []
        for row in catalogRows(&random) {
            if Bool.random(using: &random) { clock.advance(by: Int64.random(in: 0...3, using: &random)) }
            var item = try await storage.insert(into: catalog, id: row.id, content: row.content, owner: nil)
            if row.deleted {
                item = try await storage.replace(
                    in: catalog, id: item.id, expectedVersion: item.version, content: item.content, deleted: true,
                    owner: .all)
            }
            stored.append(item)
        }
        return stored
    }

    /// Runs `query` on the storage and on the evaluator and reports any difference.
    static func compare(
        _ storage: any ServerStorage, _ rows: [StoredItem], _ query: StorageQuery,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> QueryPlan? {
        let description =
            "filter \(query.filter.map { $0.odata(protocolVersion: .v3) } ?? "-"), order "
            + query.orderBy.map { "\($0.expression.odata(protocolVersion: .v3))\($0.descending ? " desc" : "")" }
            .joined(separator: ",") + ", skip \(query.skip), limit \(query.limit.map(String.init) ?? "-")"
        let expected = try QueryEvaluator(schema: catalog.schema).evaluate(
            TableQuery(
                filter: query.filter, orderBy: query.orderBy, skip: query.skip, top: query.limit,
                includeTotalCount: true, includeDeleted: query.includeDeleted),
            over: rows.map(\.queryable))
        let page = try await storage.query(catalog, query)
        let expectedIDs = expected.items.compactMap(\.id)
        #expect(page.items.map(\.id) == expectedIDs, "\(description) [\(page.plan)]", sourceLocation: sourceLocation)
        if query.includeTotalCount {
            #expect(page.totalCount == expected.totalCount, "count: \(description)", sourceLocation: sourceLocation)
        }
        let more = (expected.totalCount ?? 0) > query.skip + expectedIDs.count
        #expect(page.hasMore == more, "hasMore: \(description)", sourceLocation: sourceLocation)
        return page.plan
    }

    static func field(_ name: String) -> QueryExpression { .field(name) }
    static func literal(_ value: QueryLiteral) -> QueryExpression { .literal(value) }

    static var queries: [ServerStorageCheck] {
        [
            .init("fixed queries give exactly what the evaluator gives") { fixture async throws in
                let rows = try await seedCatalog(fixture.storage, fixture.clock, seed: 7)
                var plans: [QueryPlan: Int] = [:]
                let someTime = rows[20].updatedAt
                let filters: [QueryExpression?] = [
                    nil,
                    .binary(.equal, field("s"), literal(.string("a"))),
                    .binary(.greaterThan, field("n"), literal(.int(1))),
                    .binary(.lessThanOrEqual, literal(.double(1.5)), field("n")),
                    .binary(.notEqual, field("b"), literal(.bool(true))),
                    .binary(.equal, field("s"), literal(.null)),
                    .binary(.notEqual, field("mixed"), literal(.null)),
                    .binary(.equal, field("rating"), literal(.string("PG13"))),
                    .binary(.greaterThan, field("rating"), literal(.string("PG"))),
                    .binary(.lessThan, field("rating"), literal(.string("Q"))),
                    .binary(.equal, field("mixed"), literal(.int(1))),
                    .binary(.greaterThanOrEqual, field("mixed"), literal(.string("1"))),
                    .binary(.greaterThan, field("updatedAt"), literal(.dateTimeOffset(someTime))),
                    .binary(.lessThan, field("createdAt"), literal(.string(someTime.iso8601))),
                    .binary(.equal, field("deleted"), literal(.bool(true))),
                    .binary(.equal, field("id"), literal(.string("item-3"))),
                    .binary(.greaterThan, field("id"), literal(.string("item-3"))),
                    .isIn(
                        field("id"), [literal(.string("item-1")), literal(.string("Item-7")), literal(.string("x"))]),
                    .isIn(field("n"), [literal(.int(1)), literal(.double(2)), literal(.string("a"))]),
                    .function(.startsWith, [field("s"), literal(.string("a"))]),
                    .function(.endsWith, [field("label"), literal(.string("end"))]),
                    .function(.contains, [field("s"), literal(.string("'"))]),
                    .binary(.equal, .function(.contains, [field("s"), literal(.string("b"))]), literal(.bool(false))),
                    .unary(.not, .function(.startsWith, [field("s"), literal(.string("a"))])),
                    field("b"),
                    .unary(.not, field("b")),
                    .binary(
                        .or, .binary(.equal, field("s"), literal(.string("a"))),
                        .binary(.and, field("b"), .binary(.lessThan, field("n"), literal(.int(3))))),
                    // These ran in the evaluator before the shared compiler (now only `version` does):
                    .binary(.equal, .function(.toLower, [field("s")]), literal(.string("a"))),
                    .binary(.greaterThan, field("day"), literal(.date(CalendarDate(year: 2020, month: 1, day: 1)!))),
                    .binary(.equal, field("guid"), literal(.guid("29386779-34b1-464a-bb5b-4053c2ee61b3"))),
                    .binary(.equal, .binary(.add, field("n"), literal(.int(1))), literal(.int(3))),
                    .binary(.equal, field("s"), field("label")),
                    .binary(.notEqual, field("version"), literal(.string(rows[3].versionTag))),
                    .binary(
                        .and, .binary(.equal, field("b"), literal(.bool(true))),
                        .binary(.lessThan, .function(.length, [field("s")]), literal(.int(3)))),
                ]
                let orders: [[SortKey]] = [
                    [], [.field("s")], [.field("n", descending: true)], [.field("mixed")],
                    [.field("j", descending: true)],
                    [.field("b"), .field("s", descending: true)], [.field("updatedAt", descending: true)],
                    [.field("rating")], [.field("day")], [.field("version")], [.field("id", descending: true)],
                    [.field("deleted"), .field("createdAt")],
                ]
                for filter in filters {
                    for (index, order) in orders.enumerated() {
                        for includeDeleted in [false, true] {
                            let query = StorageQuery(
                                filter: filter, orderBy: order, skip: index % 3 == 0 ? 0 : 5,
                                limit: index % 2 == 0 ? 10 : nil, includeDeleted: includeDeleted,
                                includeTotalCount: true)
                            if let plan = try await compare(fixture.storage, rows, query) {
                                plans[plan, default: 0] += 1
                            }
                        }
                    }
                }
                #expect((plans[.database] ?? 0) > 100, "too few queries ran wholly in the database: \(plans)")
                #expect((plans[.evaluator] ?? 0) > 60, "too few queries used the evaluator fallback: \(plans)")
            },
            .init("random queries give exactly what the evaluator gives (seeded sweep)") { fixture async throws in
                let rows = try await seedCatalog(fixture.storage, fixture.clock, seed: 11)
                var random = SeededRandom(seed: 20_241_121)
                var plans: [QueryPlan: Int] = [:]
                for _ in 0..<400 {
                    let filter =
                        Int.random(in: 0..<10, using: &random) == 0 ? nil : randomFilter(&random, rows: rows, depth: 0)
                    var order: [SortKey] = []
                    for _ in 0..<Int.random(in: 0...2, using: &random) {
                        order.append(
                            .field(sortable.randomElement(using: &random)!, descending: Bool.random(using: &random)))
                    }
                    let query = StorageQuery(
                        filter: filter, orderBy: order, skip: Int.random(in: 0...3, using: &random) * 4,
                        limit: Bool.random(using: &random) ? Int.random(in: 0...20, using: &random) : nil,
                        includeDeleted: Int.random(in: 0..<4, using: &random) == 0, includeTotalCount: true)
                    if let plan = try await compare(fixture.storage, rows, query) { plans[plan, default: 0] += 1 }
                }
                #expect((plans[.database] ?? 0) > 40, "\(plans)")
                #expect((plans[.evaluator] ?? 0) > 40, "\(plans)")
            },
            .init("paging with skip and limit walks every row once; counts exclude soft-deleted rows") {
                fixture async throws in
                let rows = try await seedCatalog(fixture.storage, fixture.clock, seed: 3)
                let live = rows.filter { !$0.deleted }
                var seen: [String] = []
                var skip = 0
                while true {
                    let page = try await fixture.storage.query(
                        catalog, StorageQuery(orderBy: [.field("n")], skip: skip, limit: 9, includeTotalCount: true))
                    #expect(page.totalCount == live.count)
                    seen += page.items.map(\.id)
                    skip += page.items.count
                    if !page.hasMore { break }
                }
                #expect(seen.count == live.count)
                #expect(Set(seen) == Set(live.map(\.id)))
                let empty = try await fixture.storage.query(catalog, StorageQuery(limit: 0, includeTotalCount: true))
                #expect(empty.items.isEmpty && empty.hasMore && empty.totalCount == live.count)
            },
            .init("a query naming a field a closed schema does not declare fails as invalid") { fixture async throws in
                let closed = StorageTable(
                    name: "closed", schema: TableSchema(fields: ["a": .string], allowsUndeclaredFields: false))
                try await fixture.storage.prepare([closed])
                await expectError(StorageError.self, .invalidQuery, "unknown field") {
                    try await fixture.storage.query(
                        closed, StorageQuery(filter: .binary(.equal, .field("missing"), .literal(.int(1)))))
                }
                await expectError(StorageError.self, .invalidQuery, "negative skip") {
                    try await fixture.storage.query(closed, StorageQuery(skip: -1))
                }
                #expect(try await fixture.storage.query(closed, StorageQuery(orderBy: [.field("a")])).items.isEmpty)
            },
            .init("the substring probe and other extreme values answer instead of crashing") { fixture async throws in
                // One unauthenticated GET with this filter killed the server (an Int64 overflow trap).
                let table = StorageTable(name: "extremes", schema: HostileQueries.typedSchema)
                try await fixture.storage.prepare([table])
                let rows: [JSONObject] = [
                    ["s": "hello", "n": .int(.max)], ["s": "hello", "n": .int(.min)], ["s": "", "n": 1e308],
                ]
                var stored: [StoredItem] = []
                for (index, row) in rows.enumerated() {
                    stored.append(
                        try await fixture.storage.insert(into: table, id: "e\(index)", content: row, owner: nil))
                }
                let filters = [
                    "substring('hello',1,9223372036854775807) eq 'x'", "substring(s,1,9223372036854775807) eq 'ello'",
                    "substring(s,n) eq ''", "substring(s,n,n) eq ''", "n add 1 gt n", "n mul n gt 0", "-n lt 0",
                    "cast(n, Edm.Int32) eq null", "n mul 10 eq INF", "n ne NaN", "n lt INF", "n eq -INF",
                ]
                for filter in filters {
                    let parsed = try QueryExpression(odataFilter: filter, protocolVersion: .v3)
                    let expected = try QueryEvaluator(schema: table.schema).evaluate(
                        TableQuery(filter: parsed), over: stored.map(\.queryable))
                    let page = try await fixture.storage.query(table, StorageQuery(filter: parsed))
                    #expect(page.items.map(\.id) == expected.items.compactMap(\.id), "\(filter) [\(page.plan)]")
                }
                let probe = try QueryExpression(
                    odataFilter: "substring('hello',1,9223372036854775807) eq 'ello'", protocolVersion: .v3)
                #expect(try await fixture.storage.query(table, StorageQuery(filter: probe)).items.count == 3)
            },
            .init("hostile queries give what the evaluator gives, or are refused (seeded fuzz)") {
                fixture async throws in
                // Extreme integers and doubles, NaN and infinities made by arithmetic, extreme dates, every
                // function with 0 to 4 arguments, casts to every type, deep nesting, extreme skip and limit,
                // over rows holding Int64.max, Int64.min, 1e308, empty and long strings and dates.
                var random = SeededRandom(seed: 0xBAD_5E4E)
                // Declared as JSON: the rows mix kinds in one field, which undeclared fields refuse.
                let table = StorageTable(
                    name: "hostile_fuzz",
                    schema: TableSchema(fields: ["n": .json, "m": .json, "s": .json, "d": .json]))
                try await fixture.storage.prepare([table])
                var stored: [StoredItem] = []
                for item in HostileQueries.items(&random, count: 30) {
                    var content = item
                    let id = content.removeValue(forKey: "id")?.stringValue ?? "x"
                    stored.append(try await fixture.storage.insert(into: table, id: id, content: content, owner: nil))
                }
                let evaluator = QueryEvaluator(schema: table.schema)
                var agreed = 0
                var refused = 0
                var plans: [QueryPlan: Int] = [:]
                for _ in 0..<250 {
                    var generated = HostileQueries.query(&random)
                    generated.includeTotalCount = Bool.random(using: &random)
                    let query = StorageQuery(
                        filter: generated.filter, orderBy: generated.orderBy, skip: generated.skip ?? 0,
                        limit: generated.top, includeDeleted: true, includeTotalCount: generated.includeTotalCount)
                    let page: StoragePage
                    do {
                        page = try await fixture.storage.query(table, query)
                    } catch is StorageError {
                        refused += 1
                        continue
                    }
                    var check = generated
                    check.includeTotalCount = true
                    check.includeDeleted = true
                    let expected = try evaluator.evaluate(check, over: stored.map(\.queryable))
                    let description = check.odataQueryString(protocolVersion: .v3)
                    #expect(page.items.map(\.id) == expected.items.compactMap(\.id), "\(description) [\(page.plan)]")
                    if query.includeTotalCount { #expect(page.totalCount == expected.totalCount, "\(description)") }
                    agreed += 1
                    plans[page.plan, default: 0] += 1
                }
                #expect(agreed > 150, "\(agreed) answered, \(refused) refused")
                #expect((plans[.database] ?? 0) > 10, "\(plans)")
            },
            .init("hostile literals and field names are data, never SQL") { fixture async throws in
                let storage = fixture.storage
                let table = StorageTable(name: "hostile")
                let names = ["a'b", "a\"b", "a\\b", "a.b", "a]b", "$.x", "' OR 1=1 --", "x) OR (1=1"]
                for (index, name) in names.enumerated() {
                    _ = try await storage.insert(
                        into: table, id: "r\(index)",
                        content: [name: .string("' OR '1'='1"), "plain": .int(Int64(index))],
                        owner: nil)
                }
                for name in names {
                    let page = try await storage.query(
                        table,
                        StorageQuery(
                            filter: .binary(.equal, .field(name), .literal(.string("' OR '1'='1"))),
                            orderBy: [.field(name, descending: true)]))
                    #expect(page.items.count == 1, "field \(name)")
                    let none = try await storage.query(
                        table, StorageQuery(filter: .binary(.equal, .field("plain"), .literal(.string("1 OR 1=1")))))
                    #expect(none.items.isEmpty)
                }
                #expect(try await storage.tableNames() == ["hostile"])
            },
        ]
    }

    static let filterable = [
        "id", "updatedAt", "createdAt", "deleted", "version", "n", "s", "b", "mixed", "rating", "day", "stamp", "time",
        "guid", "label", "j", "missing",
    ]
    static let sortable = [
        "id", "updatedAt", "createdAt", "deleted", "n", "s", "b", "mixed", "rating", "label", "j", "missing", "day",
        "version",
    ]

    static func randomLiteral(_ random: inout SeededRandom, rows: [StoredItem]) -> QueryLiteral {
        switch Int.random(in: 0..<12, using: &random) {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &random))
        case 2, 3:
            if case .int(let value) = numbers.randomElement(using: &random)! { return .int(value) }
            return .int(Int64.random(in: -3...50, using: &random))
        case 4: return .double([1.5, 2.0, -2.25, 0.1, 9_007_199_254_740_992.0].randomElement(using: &random)!)
        case 5, 6, 7: return .string(strings.randomElement(using: &random)!)
        case 8: return .dateTimeOffset(rows.randomElement(using: &random)!.updatedAt)
        case 9: return .date(CalendarDate(year: Int.random(in: 2010...2030, using: &random), month: 1, day: 15)!)
        case 10: return .timeOfDay(TimeOfDay(hour: Int.random(in: 0...23, using: &random), minute: 0)!)
        default: return .guid("29386779-34b1-464a-bb5b-4053c2ee61b3")
        }
    }

    static func randomFilter(_ random: inout SeededRandom, rows: [StoredItem], depth: Int) -> QueryExpression {
        let field = QueryExpression.field(filterable.randomElement(using: &random)!)
        let ops: [BinaryOperator] = [.equal, .notEqual, .greaterThan, .greaterThanOrEqual, .lessThan, .lessThanOrEqual]
        switch Int.random(in: 0..<(depth < 3 ? 12 : 7), using: &random) {
        case 0, 1, 2:
            return .binary(ops.randomElement(using: &random)!, field, .literal(randomLiteral(&random, rows: rows)))
        case 3:
            return .binary(ops.randomElement(using: &random)!, .literal(randomLiteral(&random, rows: rows)), field)
        case 4:
            let function = [QueryFunction.contains, .startsWith, .endsWith].randomElement(using: &random)!
            return .function(function, [field, .literal(.string(strings.randomElement(using: &random)!))])
        case 5:
            let list = (0..<Int.random(in: 0...4, using: &random)).map { _ in
                QueryExpression.literal(randomLiteral(&random, rows: rows))
            }
            return .isIn(field, list)
        case 6:
            return field
        case 7, 8:
            return .binary(
                Bool.random(using: &random) ? .and : .or, randomFilter(&random, rows: rows, depth: depth + 1),
                randomFilter(&random, rows: rows, depth: depth + 1))
        case 9:
            return .unary(.not, randomFilter(&random, rows: rows, depth: depth + 1))
        case 10:
            return .binary(
                ops.randomElement(using: &random)!, randomFilter(&random, rows: rows, depth: depth + 1),
                .literal(Bool.random(using: &random) ? .bool(Bool.random(using: &random)) : .null))
        default:
            // Constructs only the evaluator runs.
            switch Int.random(in: 0..<3, using: &random) {
            case 0: return .binary(.equal, .function(.toUpper, [field]), .literal(.string("A")))
            case 1: return .binary(.greaterThan, .binary(.multiply, field, .literal(.int(2))), .literal(.int(3)))
            default: return .binary(ops.randomElement(using: &random)!, field, .field("n"))
            }
        }
    }
}
