import SyncCore
import Testing

/// A client store's conformance check: ``ConformanceCheck`` run against a ``StoreFixture``.
public typealias StoreConformanceCheck = ConformanceCheck<StoreFixture>

/// The shared suite every `LocalStore` must pass.
///
/// A store's test target runs every check; those the store cannot run (a capability it does not
/// declare, no way to open it at a path, no peer data) are reported as skipped with the reason:
///
/// ```swift
/// @Test(arguments: StoreConformanceSuite.all)
/// func conformance(_ check: StoreConformanceCheck) async throws {
///     try await check.run { StoreFixture(store: MemoryStore()) }
/// }
/// ```
public enum StoreConformanceSuite: Sendable {
    /// Every check.
    public static var all: [StoreConformanceCheck] {
        let groups: [[StoreConformanceCheck]] = [
            crud, ids, queries, transactions, systemTables, persistence, concurrency, handles, lifecycle, typedModels,
            commits, attachments,
        ]
        return groups.flatMap { $0 }
    }

    /// The checks `fixture` cannot run, each with the reason; the fixture is closed afterwards.
    public static func skipped(by fixture: StoreFixture) async -> [(name: String, reason: String)] {
        await StoreConformanceCheck.skipped(all, by: fixture)
    }

    /// Reports the checks each fixture cannot run by cancelling the current test with their
    /// names and reasons, so that they show in the test output; returns when every fixture can run
    /// every check. The fixtures are closed afterwards.
    ///
    /// Each store target calls it at the end of the test of its declared capabilities:
    ///
    /// ```swift
    /// try await StoreConformanceSuite.reportSkipped(by: StoreFixture(store: MemoryStore()))
    /// ```
    public static func reportSkipped(by fixtures: StoreFixture...) async throws {
        var lines: [String] = []
        for fixture in fixtures {
            let name = "\(type(of: fixture.store))\(fixture.hooks == nil ? "" : " at a path")"
            for (check, reason) in await skipped(by: fixture) { lines.append("\(name): \"\(check)\" (\(reason))") }
        }
        try StoreConformanceCheck.report(skipped: lines)
    }
}

/// Thrown by a check that cannot pass; carries a readable reason.
struct ConformanceFailure: Error, CustomStringConvertible {
    var description: String
}

extension StoreError: CodedError {}

extension StoreConformanceSuite {
    static let sample: JSONObject = [
        "id": "item-1", "title": "Léon: The Professional 🎬", "count": 42, "ratio": 0.5, "whole": 3.0,
        "big": .int(Int64.max), "small": .int(Int64.min), "flag": true, "nothing": .null,
        "tags": ["a", 1, 2.5, false, .null], "nested": ["deep": ["deeper": [1, 2, 3]]],
        "quote": "she said \"hi\"\n\t\\ /", "empty": "", "updatedAt": "2024-08-23T20:22:54.291Z",
    ]

    static var crud: [StoreConformanceCheck] {
        [
            .init("an upserted item reads back exactly, integers and doubles kept apart") { fixture async throws in
                let store = fixture.store
                try await store.upsert("todo", [sample])
                let read = try await store.item("todo", id: "item-1")
                #expect(read == sample)
                #expect(read?["whole"] == .double(3.0))
                #expect(read?["count"] == .int(42))
            },
            .init("reading a missing item gives nil, not an error") { fixture async throws in
                #expect(try await fixture.store.item("todo", id: "nope") == nil)
                #expect(try await fixture.store.item("never-written", id: "nope") == nil)
            },
            .init("items by ids reads exactly the stored ones, whatever their ids hold") { fixture async throws in
                let store = fixture.store
                // "é" twice: composed (NFC) and decomposed (NFD), equal as Swift strings, two ids.
                let odd = ["X", "x", "\u{E9}", "e\u{301}", "with space", "[1]", "a,b", "'q'", "0"]
                try await store.upsert("todo", odd.enumerated().map { ["id": .string($1), "n": .int(Int64($0))] })
                try await store.upsert("other", [["id": "missing-here"]])
                let found = try await store.read { try $0.items("todo", ids: odd + ["missing-here", "X"]) }
                #expect(found.count == odd.count)
                for (index, id) in odd.enumerated() {
                    #expect(found[ItemID.Key(id)] == ["id": .string(id), "n": .int(Int64(index))])
                }
                #expect(try await store.read { try $0.items("todo", ids: []) }.isEmpty)
                #expect(try await store.read { try $0.items("never-written", ids: ["X"]) }.isEmpty)
            },
            .init("upsert replaces the whole item") { fixture async throws in
                let store = fixture.store
                try await store.upsert("todo", [["id": "1", "a": 1, "b": 2]])
                try await store.upsert("todo", [["id": "1", "a": 10]])
                #expect(try await store.item("todo", id: "1") == ["id": "1", "a": 10])
                #expect(try await store.read { try $0.count("todo") } == 1)
            },
            .init("delete by ids counts what it removed and ignores absent ids") { fixture async throws in
                let store = fixture.store
                try await store.upsert("todo", [["id": "1"], ["id": "2"], ["id": "3"]])
                #expect(try await store.delete("todo", ids: ["1", "3", "missing"]) == 2)
                #expect(try await store.item("todo", id: "1") == nil)
                #expect(try await store.item("todo", id: "2") != nil)
                #expect(try await store.delete("empty-table", ids: ["x"]) == 0)
            },
            .init("tables are independent and ids are case-sensitive") { fixture async throws in
                let store = fixture.store
                try await store.upsert("a", [["id": "X", "v": 1], ["id": "x", "v": 2]])
                try await store.upsert("b", [["id": "X", "v": 3]])
                #expect(try await store.item("a", id: "X")?["v"] == 1)
                #expect(try await store.item("a", id: "x")?["v"] == 2)
                #expect(try await store.item("b", id: "X")?["v"] == 3)
                #expect(try await store.item("b", id: "x") == nil)
                #expect(try await store.read { try $0.tableNames() } == ["a", "b"])
                #expect(try await store.read { try $0.count("a") } == 2)
            },
            .init("delete by query removes exactly the matching items") { fixture async throws in
                let store = fixture.store
                try await store.upsert("todo", (0..<10).map { ["id": .string("i\($0)"), "n": .int(Int64($0))] })
                let removed = try await store.write {
                    try $0.delete(
                        "todo",
                        matching: TableQuery(filter: .binary(.greaterThanOrEqual, .field("n"), .literal(.int(7)))))
                }
                #expect(removed == 3)
                let left = try await store.query("todo").items.compactMap(\.id)
                #expect(left == (0..<7).map { "i\($0)" })
            },
            .init("a large item of one megabyte round-trips") { fixture async throws in
                let big: JSONObject = ["id": "big", "text": .string(String(repeating: "x", count: 1 << 20))]
                try await fixture.store.upsert("blobs", [big])
                #expect(try await fixture.store.item("blobs", id: "big") == big)
            },
            .init("a table definition is stored and its schema applies to queries") { fixture async throws in
                let store = fixture.store
                let definition = TableDefinition(
                    name: "movies",
                    schema: TableSchema(
                        fields: ["rating": .enumeration(["G", "PG", "R"])], allowsUndeclaredFields: false),
                    indexes: [["rating"]])
                try await store.write { try $0.define(definition) }
                #expect(try await store.read { try $0.definition(of: "movies") } == definition)
                try await store.upsert(
                    "movies", [["id": "1", "rating": "R"], ["id": "2", "rating": "G"], ["id": "3", "rating": "PG"]])
                let sorted = try await store.query("movies", TableQuery(orderBy: [.field("rating")]))
                #expect(sorted.items.compactMap(\.id) == ["2", "3", "1"])
                await expectError(StoreError.self, .invalidQuery, "an undeclared field in a closed schema") {
                    try await store.query(
                        "movies", TableQuery(filter: .binary(.equal, .field("missing"), .literal(.int(20)))))
                }
            },
        ]
    }

    static let validIDs = [
        "a", "item-1", "ID with spaces", "日本語", "émoji-🎉", "a.b", "...", "under_score", "x:y", "1234",
        String(repeating: "z", count: 255), "#hash", "percent%20", "~tilde", "a'b",
    ]
    static let invalidIDs = [
        "", " ", "   ", "\t", "a/b", "a\\b", "a?b", "a+b", "a`b", "a\"b", ".", "..", "nul\u{0}", "line\nbreak",
        "del\u{7F}", "c1\u{85}", String(repeating: "z", count: 256),
    ]

    static var ids: [StoreConformanceCheck] {
        [
            .init("every valid id is accepted and read back") { fixture async throws in
                try await fixture.store.upsert("ids", validIDs.map { ["id": .string($0)] })
                for id in validIDs {
                    #expect(try await fixture.store.item("ids", id: id)?.id == id, "id \(id.debugDescription)")
                }
            },
            .init("invalid ids, missing ids and non-string ids are rejected with invalidItem") { fixture async throws in
                for id in invalidIDs {
                    await expectError(StoreError.self, .invalidItem, "id \(id.debugDescription)") {
                        try await fixture.store.upsert("ids", [["id": .string(id)]])
                    }
                }
                await expectError(StoreError.self, .invalidItem, "no id") {
                    try await fixture.store.upsert("ids", [["title": "x"]])
                }
                await expectError(StoreError.self, .invalidItem, "numeric id") {
                    try await fixture.store.upsert("ids", [["id": 5]])
                }
                await expectError(StoreError.self, .invalidItem, "null id") {
                    try await fixture.store.upsert("ids", [["id": .null]])
                }
                #expect(try await fixture.store.read { try $0.count("ids") } == 0)
            },
            .init("ids equal only as Swift strings (two Unicode forms) are two items, with their own queue") {
                fixture async throws in
                // "café" composed (NFC) and decomposed (NFD): `==` in Swift, two ids on the server.
                let (composed, decomposed) = ("caf\u{E9}", "cafe\u{301}")
                let store = fixture.store
                try await store.upsert(
                    "ids", [["id": .string(composed), "n": 1], ["id": .string(decomposed), "n": 2]])
                #expect(try await store.read { try $0.count("ids") } == 2)
                #expect(try await store.item("ids", id: composed)?["n"] == 1)
                #expect(try await store.item("ids", id: decomposed)?["n"] == 2)
                for id in [composed, decomposed] {
                    let found = try await store.query("ids", TableQuery(filter: .field("id").eq(id))).items
                    #expect(found.map(\.id) == [id], "id eq \(id.unicodeScalars.count) scalars")
                }
                let both = TableQuery(filter: .field("id").isIn([composed, decomposed]))
                #expect(try await store.query("ids", both).items.count == 2)
                _ = try await store.write { tx in try tx.appendOperation(draft("ids", decomposed, .update)) }
                #expect(try await store.read { try $0.operations(table: "ids", itemID: composed) }.isEmpty)
                #expect(
                    try await store.read { try $0.operations(table: "ids", itemIDs: [composed]) }.isEmpty)
                #expect(
                    try await store.read { try $0.operations(table: "ids", itemIDs: [decomposed]) }.map(\.itemID)
                        == [decomposed])
                #expect(try await store.write { tx in try tx.delete("ids", ids: [composed]) } == 1)
                #expect(try await store.item("ids", id: decomposed)?["n"] == 2)
                #expect(try await store.item("ids", id: composed) == nil)
            },
            .init("a batch with one invalid item writes nothing") { fixture async throws in
                await expectError(StoreError.self, .invalidItem, "mixed batch") {
                    try await fixture.store.upsert("ids", [["id": "good-1"], ["id": "bad/id"], ["id": "good-2"]])
                }
                #expect(try await fixture.store.item("ids", id: "good-1") == nil)
                #expect(try await fixture.store.read { try $0.count("ids") } == 0)
            },
            .init("invalid table names are rejected") { fixture async throws in
                for name in ["", "has space", "semi;colon", "__reserved", "quote'", String(repeating: "t", count: 129)]
                {
                    await expectError(StoreError.self, .invalidTableName, "table \(name.debugDescription)") {
                        try await fixture.store.upsert(name, [["id": "1"]])
                    }
                }
            },
        ]
    }

    static let people: [JSONObject] = [
        ["id": "p1", "name": "Ada", "age": 36, "city": "London", "score": 9.5],
        ["id": "p2", "name": "Alan", "age": 41, "city": "Wilmslow", "score": 8.0],
        ["id": "p3", "name": "Grace", "age": 85, "city": .null, "score": 9.5],
        ["id": "p4", "name": "ada", "age": 36, "city": "Paris"],
        ["id": "p5", "name": "Édith", "age": 47, "city": "Paris", "score": 7.25, "deleted": true],
    ]

    static func ids(_ result: QueryResult) -> [String] { result.items.compactMap(\.id) }

    static var queries: [StoreConformanceCheck] {
        [
            .init("a query without options returns every live item ordered by id") { fixture async throws in
                try await fixture.store.upsert("people", people)
                #expect(ids(try await fixture.store.query("people")) == ["p1", "p2", "p3", "p4"])
                let all = try await fixture.store.query("people", TableQuery(includeDeleted: true))
                #expect(ids(all) == ["p1", "p2", "p3", "p4", "p5"])
            },
            .init("filters compare numbers, strings, nulls and booleans with the protocol's rules") {
                fixture async throws in
                try await fixture.store.upsert("people", people)
                func run(_ filter: String) async throws -> [String] {
                    ids(
                        try await fixture.store.query(
                            "people", TableQuery(filter: try QueryExpression(odataFilter: filter, protocolVersion: .v3))
                        ))
                }
                #expect(try await run("age gt 40") == ["p2", "p3"])
                #expect(try await run("name eq 'Ada'") == ["p1"])
                #expect(try await run("city eq null") == ["p3"])
                #expect(try await run("city ne null") == ["p1", "p2", "p4"])
                #expect(try await run("city gt 'A'") == ["p1", "p2", "p4"])
                #expect(try await run("score ge 9") == ["p1", "p3"])
                #expect(try await run("score eq null") == ["p4"])
                #expect(try await run("startswith(name, 'A')") == ["p1", "p2"])
                #expect(try await run("tolower(name) eq 'ada'") == ["p1", "p4"])
                #expect(try await run("(age div 10) eq 3") == ["p1", "p4"])
                #expect(try await run("age mod 2 eq 1 or city eq 'Paris'") == ["p2", "p3", "p4"])
                #expect(try await run("not (age lt 40) and city ne null") == ["p2"])
                #expect(try await run("length(name) eq 5") == ["p3"])
            },
            .init("order, skip, top and select page through results") { fixture async throws in
                try await fixture.store.upsert("people", people)
                let query = TableQuery(
                    orderBy: [.field("age", descending: true), .field("name")], skip: 1, top: 2, select: ["name"])
                let result = try await fixture.store.query("people", query)
                #expect(result.items == [["name": "Alan"], ["name": "Ada"]])
                let nullsFirst = try await fixture.store.query("people", TableQuery(orderBy: [.field("city")]))
                #expect(ids(nullsFirst) == ["p3", "p1", "p4", "p2"])
                let nullsLast = try await fixture.store.query(
                    "people", TableQuery(orderBy: [.field("city", descending: true)]))
                #expect(ids(nullsLast) == ["p2", "p4", "p1", "p3"])
            },
            .init("ties are broken by id so pages never overlap") { fixture async throws in
                let items: [JSONObject] = (0..<50).map {
                    ["id": .string("t\(String($0).leftPadded(2))"), "group": .int(Int64($0 % 3))]
                }
                try await fixture.store.upsert("ties", items.reversed())
                var seen: [String] = []
                for page in 0..<10 {
                    let query = TableQuery(orderBy: [.field("group")], skip: page * 7, top: 7)
                    seen += ids(try await fixture.store.query("ties", query))
                }
                #expect(seen.count == 50)
                #expect(Set(seen).count == 50)
            },
            .init("the total count is taken before skip and top, with or without paging") { fixture async throws in
                try await fixture.store.upsert("people", people)
                let plain = try await fixture.store.query("people", TableQuery(includeTotalCount: true))
                #expect(plain.totalCount == 4)
                let paged = try await fixture.store.query(
                    "people", TableQuery(skip: 1, top: 1, includeTotalCount: true))
                #expect(paged.totalCount == 4)
                #expect(paged.items.count == 1)
                let countOnly = try await fixture.store.query("people", TableQuery(top: 0, includeTotalCount: true))
                #expect(countOnly.totalCount == 4)
                #expect(countOnly.items.isEmpty)
                #expect(try await fixture.store.query("people").totalCount == nil)
            },
            .init("dates stored as text compare as dates against date literals") { fixture async throws in
                try await fixture.store.upsert(
                    "events",
                    [
                        ["id": "e1", "at": "2024-01-01T10:00:00.000Z"],
                        ["id": "e2", "at": "2024-01-01T11:00:00.000+02:00"],
                        ["id": "e3", "at": "2023-12-31T23:59:59.999Z"],
                    ])
                let filter = QueryExpression.binary(
                    .greaterThanOrEqual, .field("at"),
                    .literal(.dateTimeOffset(try Timestamp(parsing: "2024-01-01T10:00:00Z"))))
                #expect(ids(try await fixture.store.query("events", TableQuery(filter: filter))) == ["e1"])
                let year = QueryExpression.binary(.equal, .function(.year, [.field("at")]), .literal(.int(2024)))
                #expect(ids(try await fixture.store.query("events", TableQuery(filter: year))) == ["e1", "e2"])
            },
            .init("a negative skip or top is rejected with invalidQuery") { fixture async throws in
                await expectError(StoreError.self, .invalidQuery, "negative top") {
                    try await fixture.store.query("people", TableQuery(top: -1))
                }
                await expectError(StoreError.self, .invalidQuery, "negative skip") {
                    try await fixture.store.query("people", TableQuery(skip: -1))
                }
            },
            .init("the peers' query cases give the peers' answers through the store", requires: [.peerData]) {
                fixture async throws in
                try await replayPeerQueries(on: fixture.store)
            },
        ]
    }

    /// Loads each peer dataset into the store and replays every replayable peer query case.
    static func replayPeerQueries(on store: any LocalStore) async throws {
        let cases = try PeerQueryCase.loadAll().filter(\.replayable)
        var loaded: Set<String> = []
        func tableName(_ peerCase: PeerQueryCase) -> String {
            "\(peerCase.dataset)\(peerCase.deletesRatedR ? "-soft" : "")"
        }
        let outcome = await PeerQueryReplay.run(cases) { peerCase, query in
            let table = tableName(peerCase)
            if !loaded.contains(table) {
                var dataset = try PeerDataset.load(peerCase.dataset, deletesRatedR: peerCase.deletesRatedR)
                dataset.definition.name = table
                let definition = dataset.definition
                let items = dataset.items
                try await store.write { tx in
                    try tx.define(definition)
                    try tx.upsert(table, items)
                }
                loaded.insert(table)
            }
            return try await store.query(table, query)
        }
        for failure in outcome.failures.prefix(50) {
            Issue.record("\(failure.name): \(failure.reason)")
        }
        print("◇ \(outcome.summary) (of \(cases.count) replayable cases)")
        #expect(outcome.failures.isEmpty, "\(outcome.summary)")
        #expect(outcome.passed == cases.count)
    }
}
