import Testing

@testable import SyncCore

@Suite("Query evaluator")
struct QueryEvaluatorTests {
    let evaluator = QueryEvaluator()
    let item: JSONObject = [
        "id": "m1", "title": "Léon: The Professional", "year": 1994, "duration": 110, "score": 8.5,
        "releaseDate": "1994-09-14T00:00:00.000Z", "day": "1994-09-14", "time": "07:14:00", "rating": .null,
        "winner": false, "guid": "6F9619FF-8B86-D011-B42D-00CF4FC964FF",
    ]

    func value(_ expression: QueryExpression) -> JSONValue { evaluator.evaluate(expression, in: item) }
    func field(_ name: String) -> QueryExpression { .field(name) }
    func int(_ value: Int64) -> QueryExpression { .literal(.int(value)) }
    func double(_ value: Double) -> QueryExpression { .literal(.double(value)) }
    func string(_ value: String) -> QueryExpression { .literal(.string(value)) }
    func call(_ function: QueryFunction, _ arguments: QueryExpression...) -> QueryExpression {
        .function(function, arguments)
    }

    @Test func integerDivisionTruncatesAndRealDivisionDoesNot() {
        #expect(value(.binary(.divide, field("year"), int(1000))) == 1)
        #expect(value(.binary(.divide, field("year"), double(1000))) == .double(1.994))
        #expect(value(.binary(.divide, int(-7), int(2))) == -3)
        #expect(value(.binary(.modulo, int(-7), int(2))) == -1)
        #expect(value(.binary(.divide, field("year"), int(0))) == .null)
        #expect(value(.binary(.modulo, field("year"), int(0))) == .null)
        #expect(value(.binary(.add, .literal(.int(.max)), int(1))) == .double(9_223_372_036_854_775_808))
        #expect(value(.binary(.divide, .literal(.int(.min)), int(-1))) == .double(9_223_372_036_854_775_808))
        #expect(value(.binary(.multiply, field("score"), int(2))) == .double(17))
        #expect(value(.binary(.add, field("title"), int(1))) == .null)
    }

    @Test func roundingIsBankersRounding() {
        #expect(value(call(.round, double(2.5))) == .double(2))
        #expect(value(call(.round, double(3.5))) == .double(4))
        #expect(value(call(.round, double(-2.5))) == .double(-2))
        #expect(value(call(.floor, double(-1.5))) == .double(-2))
        #expect(value(call(.ceiling, double(1.2))) == .double(2))
        #expect(value(call(.round, int(7))) == 7)
        #expect(value(call(.round, string("x"))) == .null)
    }

    @Test func comparisonsWithNullAreFalseExceptEqAndNe() {
        func matches(_ op: BinaryOperator, _ lhs: QueryExpression, _ rhs: QueryExpression) -> Bool {
            evaluator.matches(.binary(op, lhs, rhs), item)
        }
        let null = QueryExpression.literal(.null)
        #expect(matches(.equal, field("rating"), null))
        #expect(matches(.equal, field("missing"), null))
        #expect(!matches(.notEqual, field("rating"), null))
        #expect(matches(.notEqual, field("title"), null))
        for op in [BinaryOperator.greaterThan, .greaterThanOrEqual, .lessThan, .lessThanOrEqual] {
            #expect(!matches(op, field("rating"), string("A")))
            #expect(!matches(op, field("rating"), null))
            #expect(!matches(op, string("A"), field("missing")))
        }
        #expect(!matches(.equal, field("rating"), string("R")))
        #expect(matches(.notEqual, field("rating"), string("R")))
        #expect(!evaluator.matches(.unary(.not, .binary(.equal, field("rating"), string("R"))), ["rating": "R"]))
    }

    @Test func stringsCompareOrdinallyAndCaseSensitively() {
        #expect(evaluator.matches(.binary(.lessThan, string("Zebra"), string("apple")), item))
        #expect(!evaluator.matches(.binary(.equal, string("abc"), string("ABC")), item))
        #expect(evaluator.matches(.binary(.greaterThan, string("é"), string("z")), item))
        #expect(ordinalCompare("a", "ab") < 0)
        #expect(ordinalCompare("", "") == 0)
    }

    @Test func stringFunctionsCountUTF16UnitsLikeDotNet() {
        #expect(value(call(.length, field("title"))) == 22)
        #expect(value(call(.indexOf, field("title"), string("The"))) == 6)
        #expect(value(call(.indexOf, field("title"), string("zzz"))) == -1)
        #expect(value(call(.substring, field("title"), int(6))) == "The Professional")
        #expect(value(call(.substring, field("title"), int(0), int(4))) == "Léon")
        #expect(value(call(.substring, field("title"), int(100))) == "")
        #expect(value(call(.toLower, field("title"))) == "léon: the professional")
        #expect(value(call(.toUpper, string("léon"))) == "LÉON")
        #expect(value(call(.trim, string("  x y \t"))) == "x y")
        #expect(value(call(.concat, field("title"), string("!"))) == "Léon: The Professional!")
        #expect(value(call(.concat, string("n="), int(3))) == "n=3")
        #expect(value(call(.replace, string("a-b-c"), string("-"), string("+"))) == "a+b+c")
        #expect(value(call(.contains, field("title"), string("Pro"))) == true)
        #expect(value(call(.contains, field("title"), string("pro"))) == false)
        #expect(value(call(.startsWith, field("title"), string("Lé"))) == true)
        #expect(value(call(.endsWith, field("title"), string("nal"))) == true)
        #expect(value(call(.contains, field("rating"), string("x"))) == .null)
        #expect(value(call(.length, int(5))) == .null)
    }

    @Test func datePartsReadDatesStoredAsText() {
        #expect(value(call(.year, field("releaseDate"))) == 1994)
        #expect(value(call(.month, field("releaseDate"))) == 9)
        #expect(value(call(.day, field("day"))) == 14)
        #expect(value(call(.hour, field("time"))) == 7)
        #expect(value(call(.minute, field("time"))) == 14)
        #expect(value(call(.second, field("time"))) == 0)
        #expect(value(call(.hour, field("releaseDate"))) == 0)
        #expect(value(call(.year, field("time"))) == .null)
        #expect(value(call(.year, field("title"))) == .null)
        let instant = QueryExpression.literal(.dateTimeOffset(Timestamp(millisecondsSince1970: 1_724_444_574_291)))
        #expect(value(call(.second, instant)) == 54)
    }

    @Test func textComparesAsADateAgainstTypedLiterals() throws {
        let date = QueryExpression.literal(.date(CalendarDate(year: 1994, month: 9, day: 14)!))
        let instant = QueryExpression.literal(.dateTimeOffset(try Timestamp(parsing: "1994-09-14T00:00:00Z")))
        let later = QueryExpression.literal(.dateTimeOffset(try Timestamp(parsing: "1994-09-14T00:00:00.001Z")))
        let time = QueryExpression.literal(.timeOfDay(TimeOfDay(hour: 7, minute: 14)!))
        #expect(evaluator.matches(.binary(.equal, field("day"), date), item))
        #expect(evaluator.matches(.binary(.equal, field("releaseDate"), instant), item))
        #expect(evaluator.matches(.binary(.equal, field("releaseDate"), date), item))
        #expect(evaluator.matches(.binary(.lessThan, field("releaseDate"), later), item))
        #expect(evaluator.matches(.binary(.equal, field("time"), time), item))
        #expect(!evaluator.matches(.binary(.equal, field("title"), date), item))
        #expect(!evaluator.matches(.binary(.lessThan, field("title"), date), item))
        let guid = QueryExpression.literal(.guid("6f9619ff-8b86-d011-b42d-00cf4fc964ff"))
        #expect(evaluator.matches(.binary(.equal, field("guid"), guid), item))
    }

    @Test func inMatchesAnyListedValue() {
        #expect(evaluator.matches(.isIn(field("year"), [int(1990), int(1994)]), item))
        #expect(!evaluator.matches(.isIn(field("year"), [string("1994")]), item))
        #expect(!evaluator.matches(.isIn(field("year"), []), item))
    }

    @Test func castsConvertBetweenTypes() {
        #expect(value(.cast(field("releaseDate"), .date)) == "1994-09-14")
        #expect(value(.cast(field("day"), .dateTimeOffset)) == "1994-09-14T00:00:00.000Z")
        #expect(value(.cast(field("year"), .string)) == "1994")
        #expect(value(.cast(field("score"), .int32)) == 8)
        #expect(value(.cast(string("12"), .int64)) == 12)
        #expect(value(.cast(string("true"), .boolean)) == true)
        #expect(value(.cast(field("title"), .date)) == .null)
    }

    @Test func enumerationsSortByCaseOrderAndCompareByName() throws {
        let schema = TableSchema(fields: ["rating": .enumeration(["Unrated", "G", "PG", "R"])])
        let evaluator = QueryEvaluator(schema: schema)
        let items: [JSONObject] = [
            ["id": "1", "rating": "R"], ["id": "2", "rating": "G"], ["id": "3", "rating": "Unrated"],
            ["id": "4", "rating": "PG"],
        ]
        let sorted = try evaluator.evaluate(TableQuery(orderBy: [.field("rating")]), over: items)
        #expect(sorted.items.compactMap(\.id) == ["3", "2", "4", "1"])
        let above = try evaluator.evaluate(
            TableQuery(filter: .binary(.greaterThan, field("rating"), string("G"))), over: items)
        #expect(above.items.compactMap(\.id) == ["1", "4"])
        #expect(evaluator.matches(.binary(.equal, field("rating"), string("PG")), items[3]))
    }

    @Test func aClosedSchemaRejectsUnknownFieldsEverywhere() {
        let evaluator = QueryEvaluator(schema: TableSchema(fields: ["title": .string], allowsUndeclaredFields: false))
        let unknown = QueryExpression.binary(.equal, field("missing"), int(20))
        for query in [
            TableQuery(filter: unknown), TableQuery(orderBy: [.field("missing")]), TableQuery(select: ["missing"]),
            TableQuery(filter: .function(.toLower, [.binary(.add, int(1), field("nope"))])),
        ] {
            #expect(throws: QueryError.self) { try evaluator.evaluate(query, over: [item]) }
        }
        do {
            try evaluator.validate(TableQuery(filter: unknown))
        } catch {
            #expect(error.code == .unknownField)
            #expect(error.description == "invalid query: $filter: unknown field 'missing'")
        }
        #expect(
            (try? evaluator.validate(TableQuery(filter: .binary(.equal, field("updatedAt"), .literal(.null))))) != nil)
    }

    @Test func sortingPutsNullsFirstMixesKindsAndBreaksTiesById() throws {
        let items: [JSONObject] = [
            ["id": "d", "v": "text"], ["id": "c", "v": 2], ["id": "b"], ["id": "a", "v": 2], ["id": "e", "v": true],
            ["id": "f", "v": 1.5],
        ]
        let ascending = try evaluator.evaluate(TableQuery(orderBy: [.field("v")]), over: items)
        #expect(ascending.items.compactMap(\.id) == ["b", "e", "f", "a", "c", "d"])
        let descending = try evaluator.evaluate(TableQuery(orderBy: [.field("v", descending: true)]), over: items)
        #expect(descending.items.compactMap(\.id) == ["d", "a", "c", "f", "e", "b"])
    }

    @Test func softDeletedItemsAreHiddenUnlessIncluded() throws {
        let items: [JSONObject] = [["id": "a", "deleted": true], ["id": "b", "deleted": false], ["id": "c"]]
        #expect(try evaluator.evaluate(TableQuery(), over: items).items.count == 2)
        #expect(try evaluator.evaluate(TableQuery(includeDeleted: true), over: items).items.count == 3)
        let count = try evaluator.evaluate(TableQuery(top: 1, includeTotalCount: true), over: items)
        #expect(count.totalCount == 2)
        #expect(count.items.count == 1)
    }
}

@Suite("Deep queries")
struct DeepQueryTests {
    /// A chain of terms is as deep as it is long; at the default limit every consumer of the tree
    /// (evaluator, encoder, hashing, equality) must cope with it on a task's stack.
    @Test func aChainAtTheDefaultDepthLimitParsesEvaluatesEncodesAndHashes() async throws {
        let terms = QueryLimits.default.maximumDepth - 1
        let text = (0..<terms).map { "n eq \($0)" }.joined(separator: " or ")
        let filter = try QueryExpression(
            odataFilter: text, protocolVersion: .v3, limits: QueryLimits(maximumLength: 1 << 20))
        let evaluator = QueryEvaluator()
        #expect(evaluator.matches(filter, ["id": "a", "n": .int(Int64(terms - 1))]))
        #expect(!evaluator.matches(filter, ["id": "a", "n": -1]))
        let encoded = filter.odata(protocolVersion: .v3)
        let again = try QueryExpression(
            odataFilter: encoded, protocolVersion: .v3, limits: QueryLimits(maximumLength: 1 << 20))
        #expect(again == filter)
        #expect(Set([filter, again]).count == 1)
        let tooLong = (0...QueryLimits.default.maximumDepth).map { "n eq \($0)" }.joined(separator: " or ")
        #expect(throws: QueryError.self) {
            try QueryExpression(odataFilter: tooLong, protocolVersion: .v3, limits: QueryLimits(maximumLength: 1 << 20))
        }
    }

    @Test func aTreeBuiltInCodeDeeperThanTheLimitIsRejectedBeforeEvaluation() {
        var deep = QueryExpression.field("flag")
        for _ in 0..<5_000 { deep = .unary(.not, deep) }
        do {
            _ = try QueryEvaluator().evaluate(TableQuery(filter: deep), over: [["id": "a", "flag": true]])
            Issue.record("a 5,000-deep tree should be rejected")
        } catch {
            #expect(error.code == .tooDeep)
        }
    }
}
