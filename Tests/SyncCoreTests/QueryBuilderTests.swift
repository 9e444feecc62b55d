import Testing

@testable import SyncCore

@Suite("Query builder")
struct QueryBuilderTests: ODataTestSupport {
    let title = QueryExpression.field("title")
    let year = QueryExpression.field("year")

    @Test func valueConversions() {
        #expect(42.queryLiteral == .int(42))
        #expect(Int64(7).queryLiteral == .int(7))
        #expect(2.5.queryLiteral == .double(2.5))
        #expect("x".queryLiteral == .string("x"))
        #expect(true.queryLiteral == .bool(true))
        let instant = Timestamp(millisecondsSince1970: 1_724_444_574_291)
        #expect(instant.queryLiteral == .dateTimeOffset(instant))
        let day = CalendarDate(year: 1994, month: 10, day: 14)!
        #expect(day.queryLiteral == .date(day))
        let time = TimeOfDay(hour: 7, minute: 14)!
        #expect(time.queryLiteral == .timeOfDay(time))
        #expect(QueryLiteral.null.queryLiteral == .null)
        #expect(QueryExpression.value(1) == int(1))
    }

    @Test func comparisons() {
        #expect(year.eq(1994) == binary(.equal, year, int(1994)))
        #expect(year.ne(1994) == binary(.notEqual, year, int(1994)))
        #expect(year.gt(1994) == binary(.greaterThan, year, int(1994)))
        #expect(year.ge(1994) == binary(.greaterThanOrEqual, year, int(1994)))
        #expect(year.lt(1994) == binary(.lessThan, year, int(1994)))
        #expect(year.le(1994) == binary(.lessThanOrEqual, year, int(1994)))
        #expect(title.eq("Up") == binary(.equal, title, string("Up")))
        #expect(field("done").eq(false) == binary(.equal, field("done"), bool(false)))
        #expect(field("rating").eq(QueryLiteral.null) == binary(.equal, field("rating"), null))
        #expect(field("a").eq(field("b")) == binary(.equal, field("a"), field("b")))
        #expect(field("a").ne(field("b")) == binary(.notEqual, field("a"), field("b")))
        #expect(field("a").gt(field("b")) == binary(.greaterThan, field("a"), field("b")))
        #expect(field("a").ge(field("b")) == binary(.greaterThanOrEqual, field("a"), field("b")))
        #expect(field("a").lt(field("b")) == binary(.lessThan, field("a"), field("b")))
        #expect(field("a").le(field("b")) == binary(.lessThanOrEqual, field("a"), field("b")))
        #expect(field("score").gt(2.5) == binary(.greaterThan, field("score"), double(2.5)))
    }

    @Test func isIn() {
        #expect(field("rating").isIn(["G", "PG"]) == .isIn(field("rating"), [string("G"), string("PG")]))
        #expect(year.isIn([1994, 1995]) == .isIn(year, [int(1994), int(1995)]))
        #expect(year.isIn([field("a"), int(1)]) == .isIn(year, [field("a"), int(1)]))
    }

    @Test func strings() {
        #expect(title.contains("Star") == call(.contains, title, string("Star")))
        #expect(title.contains(field("x")) == call(.contains, title, field("x")))
        #expect(title.startsWith("The") == call(.startsWith, title, string("The")))
        #expect(title.startsWith(field("x")) == call(.startsWith, title, field("x")))
        #expect(title.endsWith("er") == call(.endsWith, title, string("er")))
        #expect(title.endsWith(field("x")) == call(.endsWith, title, field("x")))
        #expect(title.lowercased() == call(.toLower, title))
        #expect(title.uppercased() == call(.toUpper, title))
        #expect(title.trimmed() == call(.trim, title))
        #expect(title.length() == call(.length, title))
        #expect(title.lowercased().contains("star").odata(protocolVersion: .v3) == "contains(tolower(title),'star')")
        #expect(title.lowercased().contains("star").odata(protocolVersion: .v2) == "substringof('star',tolower(title))")
    }

    @Test func datesAndMath() {
        let date = field("releaseDate")
        #expect(date.year() == call(.year, date))
        #expect(date.month() == call(.month, date))
        #expect(date.day() == call(.day, date))
        #expect(date.hour() == call(.hour, date))
        #expect(date.minute() == call(.minute, date))
        #expect(date.second() == call(.second, date))
        let duration = field("duration")
        #expect(duration.rounded() == call(.round, duration))
        #expect(duration.floor() == call(.floor, duration))
        #expect(duration.ceiling() == call(.ceiling, duration))
        #expect(duration.adding(1) == binary(.add, duration, int(1)))
        #expect(duration.subtracting(1) == binary(.subtract, duration, int(1)))
        #expect(duration.multiplied(by: 2) == binary(.multiply, duration, int(2)))
        #expect(duration.divided(by: 60.0) == binary(.divide, duration, double(60)))
        #expect(duration.modulo(7) == binary(.modulo, duration, int(7)))
        #expect(duration.adding(year) == binary(.add, duration, year))
        #expect(duration.subtracting(year) == binary(.subtract, duration, year))
        #expect(duration.multiplied(by: year) == binary(.multiply, duration, year))
        #expect(duration.divided(by: year) == binary(.divide, duration, year))
        #expect(duration.modulo(year) == binary(.modulo, duration, year))
        #expect(
            duration.divided(by: 60.0).rounded().eq(2).odata(protocolVersion: .v3)
                == "(round((duration div 60.0)) eq 2)")
    }

    @Test func logic() {
        let a = field("a").eq(1)
        let b = field("b").eq(2)
        #expect((a && b) == binary(.and, a, b))
        #expect((a || b) == binary(.or, a, b))
        #expect(!a == .unary(.not, a))
        #expect((a || b && !a) == binary(.or, a, binary(.and, b, .unary(.not, a))))
        #expect((year.ge(1930) && year.le(1940)).odata(protocolVersion: .v3) == "((year ge 1930) and (year le 1940))")
    }

    @Test func fluentQueries() throws {
        let query = TableQuery()
            .filter(field("done").eq(false))
            .filter(title.startsWith("Buy"))
            .orderBy("updatedAt", descending: true)
            .orderBy("title")
            .orderBy(year.year())
            .skip(40)
            .top(20)
            .select("id", "title")
            .includingTotalCount()
            .includingDeleted()
        #expect(
            query
                == TableQuery(
                    filter: binary(
                        .and,
                        binary(.equal, field("done"), bool(false)),
                        call(.startsWith, title, string("Buy"))
                    ),
                    orderBy: [.field("updatedAt", descending: true), .field("title"), SortKey(call(.year, year))],
                    skip: 40,
                    top: 20,
                    select: ["id", "title"],
                    includeTotalCount: true,
                    includeDeleted: true
                )
        )
        #expect(
            query.odataQueryString(protocolVersion: .v3)
                == "$filter=((done%20eq%20false)%20and%20startswith(title,'Buy'))&$orderby=updatedAt%20desc,title,year(year)"
                + "&$skip=40&$top=20&$select=id,title&$count=true&__includedeleted=true"
        )
        for protocolVersion in ProtocolVersion.allCases {
            #expect(
                try TableQuery(
                    odata: query.odataQueryString(protocolVersion: protocolVersion), protocolVersion: protocolVersion)
                    == query)
        }
        // The builder returns copies.
        let base = TableQuery().top(5)
        _ = base.top(10).select(["a"])
        #expect(base == TableQuery(top: 5))
    }

    @Test("the incremental-pull query of 3.0 clients")
    func incrementalPull() {
        let token = Timestamp(iso8601: "2024-08-23T20:22:54.291Z")!
        let query = TableQuery()
            .filter(field("updatedAt").gt(token))
            .orderBy("updatedAt")
            .includingTotalCount()
            .includingDeleted()
        #expect(
            query.odataParameters(protocolVersion: .v3).map { "\($0.name)=\($0.value)" }.joined(separator: "&")
                == "$filter=(updatedAt gt cast(2024-08-23T20:22:54.291Z,Edm.DateTimeOffset))&$orderby=updatedAt&$count=true"
                + "&__includedeleted=true"
        )
        #expect(
            query.odataParameters(protocolVersion: .v2).first?.value
                == "(updatedAt gt datetimeoffset'2024-08-23T20:22:54.291Z')"
        )
    }
}
