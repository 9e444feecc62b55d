import StoreConformance
import Testing

@testable import SyncCore

@Suite("OData encoding")
struct ODataEncoderTests: ODataTestSupport {
    /// Encodes `expression` in both protocol versions and compares with the expected texts.
    func expectEncoding(
        _ expression: QueryExpression,
        v3: String,
        v2: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        #expect(expression.odata(protocolVersion: .v3) == v3, sourceLocation: sourceLocation)
        #expect(expression.odata(protocolVersion: .v2) == v2, sourceLocation: sourceLocation)
    }

    @Test func comparisonsAndLogic() {
        expectEncoding(
            binary(
                .and,
                binary(.greaterThanOrEqual, field("year"), int(1930)),
                binary(.lessThanOrEqual, field("year"), int(1940))
            ),
            v3: "((year ge 1930) and (year le 1940))",
            v2: "((year ge 1930) and (year le 1940))"
        )
        expectEncoding(
            binary(.or, binary(.or, field("a"), field("b")), field("c")),
            v3: "(a or b or c)",
            v2: "(a or b or c)"
        )
        expectEncoding(.unary(.not, field("booleanValue")), v3: "not (booleanValue)", v2: "not (booleanValue)")
        expectEncoding(
            .unary(.not, binary(.greaterThan, field("price"), int(10))),
            v3: "not (price gt 10)",
            v2: "not (price gt 10)"
        )
        expectEncoding(field("deleted"), v3: "deleted", v2: "deleted")
        expectEncoding(
            binary(.greaterThan, binary(.multiply, binary(.add, field("price"), int(1)), int(2)), int(30)),
            v3: "(((price add 1) mul 2) gt 30)",
            v2: "(((price add 1) mul 2) gt 30)"
        )
        expectEncoding(
            binary(.equal, .unary(.negate, field("a")), int(-8)),
            v3: "(-(a) eq -8)",
            v2: "(-(a) eq -8)"
        )
    }

    @Test func literals() {
        expectEncoding(binary(.equal, field("s"), string("it's")), v3: "(s eq 'it''s')", v2: "(s eq 'it''s')")
        expectEncoding(binary(.equal, field("s"), string("Amélie")), v3: "(s eq 'Amélie')", v2: "(s eq 'Amélie')")
        expectEncoding(binary(.equal, field("s"), null), v3: "(s eq null)", v2: "(s eq null)")
        expectEncoding(binary(.equal, field("b"), bool(false)), v3: "(b eq false)", v2: "(b eq false)")
        expectEncoding(
            binary(.equal, field("i"), int(.min)),
            v3: "(i eq -9223372036854775808)",
            v2: "(i eq -9223372036854775808)"
        )
        expectEncoding(binary(.equal, field("d"), double(2)), v3: "(d eq 2.0)", v2: "(d eq 2.0)")
        expectEncoding(binary(.equal, field("d"), double(0.1)), v3: "(d eq 0.1)", v2: "(d eq 0.1)")
        expectEncoding(binary(.equal, field("d"), double(1e300)), v3: "(d eq 1e300)", v2: "(d eq 1e300)")
        expectEncoding(binary(.equal, field("d"), double(0.00001)), v3: "(d eq 1e-05)", v2: "(d eq 1e-05)")
        expectEncoding(binary(.equal, field("d"), double(-1e16)), v3: "(d eq -1e16)", v2: "(d eq -1e16)")
        expectEncoding(binary(.equal, field("d"), double(-.infinity)), v3: "(d eq -INF)", v2: "(d eq -INF)")
        expectEncoding(binary(.equal, field("m"), decimal(2)), v3: "(m eq 2.0M)", v2: "(m eq 2.0M)")
        expectEncoding(binary(.equal, field("m"), decimal(42)), v3: "(m eq 42.0M)", v2: "(m eq 42.0M)")
    }

    @Test func temporalLiterals() {
        expectEncoding(
            binary(.greaterThan, field("updatedAt"), instant("2024-08-23T20:22:54.291Z")),
            v3: "(updatedAt gt cast(2024-08-23T20:22:54.291Z,Edm.DateTimeOffset))",
            v2: "(updatedAt gt datetimeoffset'2024-08-23T20:22:54.291Z')"
        )
        expectEncoding(
            binary(.equal, field("releaseDate"), date("1994-10-14")),
            v3: "(releaseDate eq cast(1994-10-14,Edm.Date))",
            v2: "(releaseDate eq datetime'1994-10-14T00:00:00.000Z')"
        )
        expectEncoding(
            binary(.lessThan, field("t"), time("07:14:00")),
            v3: "(t lt cast(07:14:00,Edm.TimeOfDay))",
            v2: "(t lt '07:14:00')"
        )
        expectEncoding(
            binary(.lessThan, field("t"), time("18:33:45.876")),
            v3: "(t lt cast(18:33:45.876,Edm.TimeOfDay))",
            v2: "(t lt '18:33:45.876')"
        )
        expectEncoding(
            binary(.equal, field("g"), .literal(.guid("0f8fad5b-d9cb-469f-a165-70867728950e"))),
            v3: "(g eq cast(0f8fad5b-d9cb-469f-a165-70867728950e,Edm.Guid))",
            v2: "(g eq guid'0f8fad5b-d9cb-469f-a165-70867728950e')"
        )
        expectEncoding(
            binary(.equal, .cast(field("d"), .date), date("2000-01-01")),
            v3: "(cast(d,Edm.Date) eq cast(2000-01-01,Edm.Date))",
            v2: "(cast(d,Edm.Date) eq datetime'2000-01-01T00:00:00.000Z')"
        )
    }

    @Test func functions() {
        expectEncoding(
            call(.contains, field("title"), string("Star")),
            v3: "contains(title,'Star')",
            v2: "substringof('Star',title)"
        )
        expectEncoding(
            call(.startsWith, call(.toLower, field("title")), string("the")),
            v3: "startswith(tolower(title),'the')",
            v2: "startswith(tolower(title),'the')"
        )
        expectEncoding(
            binary(.equal, call(.substring, field("name"), int(0), int(1)), string("x")),
            v3: "(substring(name,0,1) eq 'x')",
            v2: "(substring(name,0,1) eq 'x')"
        )
        expectEncoding(
            binary(.equal, call(.round, binary(.divide, field("duration"), double(60))), int(2)),
            v3: "(round((duration div 60.0)) eq 2)",
            v2: "(round((duration div 60.0)) eq 2)"
        )
    }

    @Test func inLists() {
        expectEncoding(
            .isIn(field("rating"), [string("G"), string("PG")]),
            v3: "(rating in ('G','PG'))",
            v2: "((rating eq 'G') or (rating eq 'PG'))"
        )
        expectEncoding(
            .isIn(field("id"), [string("IT"), string("GR"), string("EG")]),
            v3: "(id in ('IT','GR','EG'))",
            v2: "((id eq 'IT') or (id eq 'GR') or (id eq 'EG'))"
        )
        expectEncoding(.isIn(field("id"), [int(1)]), v3: "(id in (1))", v2: "(id eq 1)")
        expectEncoding(.isIn(field("id"), []), v3: "false", v2: "false")
        expectEncoding(.unary(.not, .isIn(field("id"), [int(1)])), v3: "not (id in (1))", v2: "not (id eq 1)")
    }

    @Test func queryParameters() throws {
        let query = TableQuery(
            filter: binary(
                .and,
                binary(.equal, field("rating"), string("G")),
                binary(.greaterThan, field("updatedAt"), instant("2024-08-23T20:22:54.291Z"))
            ),
            orderBy: [.field("updatedAt"), SortKey(call(.year, field("releaseDate")), descending: true)],
            skip: 0,
            top: 50,
            select: ["id", "title"],
            includeTotalCount: true,
            includeDeleted: true
        )
        let v3 = query.odataParameters(protocolVersion: .v3)
        #expect(v3.map(\.name) == ["$filter", "$orderby", "$skip", "$top", "$select", "$count", "__includedeleted"])
        #expect(
            v3.map(\.value) == [
                "((rating eq 'G') and (updatedAt gt cast(2024-08-23T20:22:54.291Z,Edm.DateTimeOffset)))",
                "updatedAt,year(releaseDate) desc", "0", "50", "id,title", "true", "true",
            ]
        )
        let v2 = query.odataParameters(protocolVersion: .v2)
        #expect(
            v2.map(\.name) == ["$filter", "$orderby", "$skip", "$top", "$select", "$inlinecount", "__includedeleted"]
        )
        #expect(v2[0].value == "((rating eq 'G') and (updatedAt gt datetimeoffset'2024-08-23T20:22:54.291Z'))")
        #expect(v2[5].value == "allpages")
        #expect(TableQuery().odataParameters(protocolVersion: .v3).isEmpty)
        #expect(TableQuery().odataQueryString(protocolVersion: .v3) == "")
        #expect(
            query.odataQueryString(protocolVersion: .v3)
                == "$filter=((rating%20eq%20'G')%20and%20(updatedAt%20gt%20cast(2024-08-23T20:22:54.291Z,Edm.DateTimeOffset)))"
                + "&$orderby=updatedAt,year(releaseDate)%20desc&$skip=0&$top=50&$select=id,title&$count=true&__includedeleted=true"
        )
        for protocolVersion in ProtocolVersion.allCases {
            #expect(
                try TableQuery(
                    odata: query.odataQueryString(protocolVersion: protocolVersion), protocolVersion: protocolVersion)
                    == query)
        }
    }

    @Test func percentEncoding() throws {
        #expect(PercentEncoding.queryComponent("AZaz09-._~$''(),:") == "AZaz09-._~$''(),:")
        // A lone quote is encoded: a reader keeps '…' together across '&' (ODataParameters).
        #expect(PercentEncoding.queryComponent("it's") == "it%27s")
        #expect(PercentEncoding.queryComponent(" &=+#%") == "%20%26%3D%2B%23%25")
        #expect(PercentEncoding.queryComponent("é🎬") == "%C3%A9%F0%9F%8E%AC")
        #expect(PercentEncoding.queryComponent("/?*!@;\"[]") == "%2F%3F%2A%21%40%3B%22%5B%5D")
        // A path segment keeps RFC 3986's unreserved characters only.
        #expect(PercentEncoding.pathSegment("Ab-._~9") == "Ab-._~9")
        #expect(PercentEncoding.pathSegment("a b/c?d#e%f") == "a%20b%2Fc%3Fd%23e%25f")
        #expect(PercentEncoding.pathSegment("$'(),:;=+&@!*") == "%24%27%28%29%2C%3A%3B%3D%2B%26%40%21%2A")
        #expect(PercentEncoding.pathSegment("é") == "%C3%A9")
        let query = TableQuery(filter: binary(.equal, field("title"), string("Amélie & co + 100%")))
        #expect(
            query.odataQueryString(protocolVersion: .v3)
                == "$filter=(title%20eq%20'Am%C3%A9lie%20%26%20co%20%2B%20100%25')"
        )
        #expect(try TableQuery(odata: query.odataQueryString(protocolVersion: .v3), protocolVersion: .v3) == query)
    }

    // MARK: Round trips

    /// Hand-written filters: `parse(encode(parse(q))) == parse(q)` in both protocol versions.
    static let filters: [String] = [
        "year eq 1994", "year ne 1994", "year gt 1999 and year lt 2010", "year ge 2000 or year le 1900",
        "(year ge 1930 and year le 1940) or (year ge 1950 and year le 1960)", "not(bestPictureWinner eq true)",
        "not bestPictureWinner", "bestPictureWinner", "deleted eq false", "rating eq null", "rating ne 'PG-13'",
        "title eq 'It''s'", "title eq ''''''''", "title eq 'Léon: The Professional'", "title eq '🎬 & #?%'",
        "(year sub 1900) ge 80", "((year div 1000.5) eq 2) and (rating eq 'R')", "(year add 10) le 2000",
        "(price mul 2) gt 30", "(price mod 2) eq 1", "price eq -8", "price eq -0.5", "price eq - 8",
        "-price lt 0", "-(price add 1) lt 0", "x eq -(-9223372036854775808)", "x eq 9223372036854775807",
        "x eq 2.0M", "x eq 42M", "x eq -1.5m", "x eq 1e300", "x eq 5e-324", "x eq 1.5d", "x eq 42L", "x eq INF",
        "x eq -INF", "x eq 0.1", "x eq 123456789.123456789", "ceiling(duration div 60.0) eq 2",
        "floor(duration div 60.0) eq 2", "round(duration div 60.0) eq 2", "startswith(tolower(title), 'the')",
        "endswith(toupper(title), 'ER')", "contains(title, 'Star')", "substringof('Star', title)",
        "length(title) gt 10", "indexof(title, 'x') eq 0", "substring(title, 1) eq 'x'",
        "substring(title, 0, 1) eq 'x'", "concat(title, 'er') eq 'lager'", "replace(title, 'x', 'y') eq 'y'",
        "trim(title) eq 'x'", "year(releaseDate) eq 1994", "month(releaseDate) eq 11", "day(releaseDate) eq 1",
        "hour(updatedAt) eq 3", "minute(updatedAt) eq 21", "second(updatedAt) eq 0",
        "releaseDate eq datetime'1994-10-14T00:00:00.000Z'", "releaseDate ge datetimeoffset'1999-12-31T00:00:00.000Z'",
        "updatedAt gt cast(2024-08-23T20:22:54.291Z,Edm.DateTimeOffset)", "updatedAt gt 2024-08-23T20:22:54.291Z",
        "releaseDate eq cast(1994-10-14,Edm.Date)", "releaseDate lt 2000-01-01",
        "timeOnly le cast(07:14:00,Edm.TimeOfDay)", "timeOnly gt 12:15:00",
        "timeOnly eq cast(18:33:45.876,Edm.TimeOfDay)",
        "g eq cast(0f8fad5b-d9cb-469f-a165-70867728950e,Edm.Guid)", "g eq guid'0F8FAD5B-D9CB-469F-A165-70867728950E'",
        "cast(x, Edm.String) eq '5'", "cast(x, Edm.Int32) eq 5", "x eq cast(5, Edm.Double)",
        "rating in ('G', 'PG')", "id in ( 'IT', 'GR', 'EG' )", "x in (1)", "not (x in (1, 2))",
        "tolower(x) in (tolower('A'), 'b')", "true eq false", "(true or true) and (id eq 1)", "'(test' eq 'test)'",
        "a eq b eq c", "a eq b gt c", "not a eq true", "(((a)))", "x eq null or y ne null",
    ]

    /// Filters that use no 3.0-only form, so the 2.0 encoding must read back to the same tree.
    static func usesOnlyV2Forms(_ expression: QueryExpression) -> Bool {
        switch expression {
        case .literal(.date), .literal(.timeOfDay), .isIn: false
        case .literal, .field: true
        case .unary(_, let operand), .cast(let operand, _): usesOnlyV2Forms(operand)
        case .binary(_, let lhs, let rhs): usesOnlyV2Forms(lhs) && usesOnlyV2Forms(rhs)
        case .function(_, let arguments): arguments.allSatisfy(usesOnlyV2Forms)
        }
    }

    @Test("parse(encode(parse(q))) == parse(q)", arguments: filters)
    func roundTrip(filter: String) throws {
        #expect(Self.filters.count >= 60)
        for protocolVersion in ProtocolVersion.allCases {
            let parsed = try parseFilter(filter, protocolVersion)
            let encoded = parsed.odata(protocolVersion: protocolVersion)
            let reparsed = try parseFilter(encoded, protocolVersion)
            if protocolVersion == .v3 || Self.usesOnlyV2Forms(parsed) {
                #expect(reparsed == parsed, "\(protocolVersion.rawValue): \(filter) → \(encoded)")
            } else {
                // 3.0-only forms change shape once, then stay put.
                #expect(
                    try parseFilter(reparsed.odata(protocolVersion: protocolVersion), protocolVersion) == reparsed,
                    "\(encoded)")
            }
            // The whole query string round-trips too.
            let query = try TableQuery(
                odata: "$filter=" + filter + "&$orderby=title desc&$top=3", protocolVersion: protocolVersion)
            let back = try TableQuery(
                odata: query.odataQueryString(protocolVersion: protocolVersion), protocolVersion: protocolVersion)
            if protocolVersion == .v3 || Self.usesOnlyV2Forms(parsed) { #expect(back == query) }
        }
    }

    @Test("2.0 rewrites 3.0-only forms")
    func v2Rewrites() throws {
        let parsed = try parseFilter("rating in ('G', 'PG') and d eq 1994-10-14 and t eq 07:14:00", .v3)
        let reparsed = try parseFilter(parsed.odata(protocolVersion: .v2), .v2)
        #expect(
            reparsed
                == binary(
                    .and,
                    binary(
                        .and,
                        binary(
                            .or,
                            binary(.equal, field("rating"), string("G")),
                            binary(.equal, field("rating"), string("PG"))
                        ),
                        binary(.equal, field("d"), instant("1994-10-14T00:00:00Z"))
                    ),
                    binary(.equal, field("t"), string("07:14:00"))
                )
        )
    }

    @Test("random trees round-trip")
    func randomTrees() throws {
        var generator = SeededRandom(seed: 20_240_823)
        var checked = 0
        for _ in 0..<4000 {
            let tree = RandomTree.expression(depth: 5, using: &generator)
            for protocolVersion in ProtocolVersion.allCases {
                // The parser may reject a random tree (type mismatches); what it accepts must be stable.
                guard let first = try? parseFilter(tree.odata(protocolVersion: protocolVersion), protocolVersion) else {
                    continue
                }
                let second = try parseFilter(first.odata(protocolVersion: protocolVersion), protocolVersion)
                #expect(
                    second == first, "\(protocolVersion.rawValue): \(first.odata(protocolVersion: protocolVersion))")
                checked += 1
            }
        }
        #expect(checked > 1000)
    }
}

/// Random expression trees for the round-trip property.
enum RandomTree {
    static let fields = ["a", "year", "title", "releaseDate", "_x1"]

    static func literal(using generator: inout SeededRandom) -> QueryLiteral {
        switch Int.random(in: 0..<12, using: &generator) {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &generator))
        case 2: return .int(Int64.random(in: .min ... .max, using: &generator))
        case 3: return .int(Int64.random(in: -100...100, using: &generator))
        case 4:
            let special: [Double] = [
                0, -0.0, 0.1, 1e-300, .leastNonzeroMagnitude, .greatestFiniteMagnitude, -2.5, 1e16, 123.456,
            ]
            return .double(
                Bool.random(using: &generator)
                    ? special.randomElement(using: &generator)! : Double(bitPattern: generator.next()).finiteOrZero
            )
        case 5: return .decimal([0, 2, 42, -1.25, 1e20].randomElement(using: &generator)!)
        case 6:
            let strings = ["", "x", "it's", "''", "Amélie", "🎬 & = + # %", "a\u{301}", "(test", " spaced "]
            return .string(strings.randomElement(using: &generator)!)
        case 7:
            return .dateTimeOffset(
                Timestamp(
                    millisecondsSince1970: Int64.random(
                        in: -30_000_000_000_000...200_000_000_000_000,
                        using: &generator
                    )
                )
            )
        case 8: return .date(CalendarDate(daysSince1970: Int.random(in: -700_000...2_900_000, using: &generator)))
        case 9:
            return .timeOfDay(TimeOfDay(millisecondsSinceMidnight: Int.random(in: 0..<86_400_000, using: &generator)))
        case 10:
            let hex = Array("0123456789abcdef")
            let groups = [8, 4, 4, 4, 12].map { count in
                String((0..<count).map { _ in hex.randomElement(using: &generator)! })
            }
            return .guid(groups.joined(separator: "-"))
        default: return .int(0)
        }
    }

    static func expression(depth: Int, using generator: inout SeededRandom) -> QueryExpression {
        if depth == 0 || Int.random(in: 0..<4, using: &generator) == 0 {
            return Bool.random(using: &generator)
                ? .field(fields.randomElement(using: &generator)!) : .literal(literal(using: &generator))
        }
        switch Int.random(in: 0..<6, using: &generator) {
        case 0:
            return .unary(
                Bool.random(using: &generator) ? .not : .negate,
                expression(depth: depth - 1, using: &generator)
            )
        case 1, 2:
            return .binary(
                BinaryOperator.allCases.randomElement(using: &generator)!,
                expression(depth: depth - 1, using: &generator),
                expression(depth: depth - 1, using: &generator)
            )
        case 3:
            let function = QueryFunction.allCases.randomElement(using: &generator)!
            let count = Int.random(in: function.arity, using: &generator)
            return .function(function, (0..<count).map { _ in expression(depth: depth - 1, using: &generator) })
        case 4:
            let count = Int.random(in: 1...3, using: &generator)
            return .isIn(
                expression(depth: depth - 1, using: &generator),
                (0..<count).map { _ in expression(depth: depth - 1, using: &generator) }
            )
        default:
            return .cast(
                expression(depth: depth - 1, using: &generator),
                EdmType.allCases.randomElement(using: &generator)!
            )
        }
    }
}

extension Double {
    fileprivate var finiteOrZero: Double { isFinite ? self : 0 }
}
