import StoreConformance
import Testing

@testable import SyncCore

// MARK: - Query strings

@Suite("OData query strings")
struct ODataQueryStringTests: ODataTestSupport {
    @Test func wholeQuery() throws {
        let query = try TableQuery(
            odata:
                "$filter=(price eq 10)&$orderby=title&$skip=10&$top=20&$select=price,title&$inlinecount=allpages&__includeDeleted=true",
            protocolVersion: .v2
        )
        #expect(
            query
                == TableQuery(
                    filter: binary(.equal, field("price"), int(10)),
                    orderBy: [.field("title")],
                    skip: 10,
                    top: 20,
                    select: ["price", "title"],
                    includeTotalCount: true,
                    includeDeleted: true
                )
        )
    }

    @Test func emptyAndDefault() throws {
        for protocolVersion in ProtocolVersion.allCases {
            #expect(try TableQuery(odata: "", protocolVersion: protocolVersion) == TableQuery())
            #expect(try TableQuery(odata: "$filter=", protocolVersion: protocolVersion) == TableQuery())
            #expect(try TableQuery(odata: "$filter= ", protocolVersion: protocolVersion) == TableQuery())
            #expect(try TableQuery(odata: "$orderby=&$select=", protocolVersion: protocolVersion) == TableQuery())
            #expect(try TableQuery(odata: "&&", protocolVersion: protocolVersion) == TableQuery())
        }
    }

    @Test func percentEncodedInput() throws {
        let query = try TableQuery(
            odata: "$filter=%28stringProperty%20eq%20%27a%26b%27%29&%24top=5", protocolVersion: .v3)
        #expect(query.filter == binary(.equal, field("stringProperty"), string("a&b")))
        #expect(query.top == 5)
        let raw = try TableQuery(odata: "$filter=(title eq 'How to dial # & such stuff?')&$top=5", protocolVersion: .v3)
        #expect(raw.filter == binary(.equal, field("title"), string("How to dial # & such stuff?")))
        #expect(raw.top == 5)
        // As Node's query parser and ASP.NET read it (and form encoders write it): '+' is a space, and
        // a literal plus is %2B.
        let plus = try TableQuery(odata: "$filter=x+eq+'a+b'", protocolVersion: .v3)
        #expect(plus.filter == binary(.equal, field("x"), string("a b")))
        let literal = try TableQuery(odata: "$filter=x eq 'a%2Bb'", protocolVersion: .v3)
        #expect(literal.filter == binary(.equal, field("x"), string("a+b")))
    }

    @Test func countOptions() throws {
        #expect(try TableQuery(odata: "$count=true", protocolVersion: .v3).includeTotalCount)
        #expect(try TableQuery(odata: "$count=TRUE", protocolVersion: .v3).includeTotalCount)
        #expect(try !TableQuery(odata: "$count=false", protocolVersion: .v3).includeTotalCount)
        #expect(try TableQuery(odata: "$inlinecount=allpages", protocolVersion: .v2).includeTotalCount)
        #expect(try TableQuery(odata: "$inlinecount=allpages", protocolVersion: .v3).includeTotalCount)
        #expect(try !TableQuery(odata: "$inlinecount=none", protocolVersion: .v2).includeTotalCount)
        #expect(try TableQuery(odata: "$count=false&$inlinecount=allpages", protocolVersion: .v2).includeTotalCount)
        expectQueryError(.invalidOption, option: "$count") {
            _ = try TableQuery(odata: "$count=yes", protocolVersion: .v3)
        }
        expectQueryError(.invalidOption, option: "$count") { _ = try TableQuery(odata: "$count", protocolVersion: .v3) }
        expectQueryError(.invalidOption, option: "$inlinecount") {
            _ = try TableQuery(odata: "$inlinecount=some", protocolVersion: .v2)
        }
    }

    @Test func includeDeleted() throws {
        #expect(try TableQuery(odata: "__includedeleted=true", protocolVersion: .v3).includeDeleted)
        #expect(try TableQuery(odata: "__includeDeleted=true", protocolVersion: .v2).includeDeleted)
        #expect(try TableQuery(odata: "__INCLUDEDELETED=True", protocolVersion: .v2).includeDeleted)
        #expect(try !TableQuery(odata: "__includedeleted=false", protocolVersion: .v3).includeDeleted)
        #expect(try !TableQuery(odata: "__includedeleted=1", protocolVersion: .v3).includeDeleted)
    }

    @Test("$skip and $top", arguments: ["$skip", "$top"])
    func skipAndTop(option: String) throws {
        #expect(
            try TableQuery(odata: "\(option)=0", protocolVersion: .v3)
                == TableQuery(skip: option == "$skip" ? 0 : nil, top: option == "$top" ? 0 : nil)
        )
        let query = try TableQuery(odata: "\(option)=42", protocolVersion: .v2)
        #expect((option == "$skip" ? query.skip : query.top) == 42)
        for bad in ["-1", "NaN", "1.5", "", " ", "%2B1", "0x10", "1e3", "99999999999999999999999", "ten", "%2D1"] {
            for protocolVersion in ProtocolVersion.allCases {
                expectQueryError(.invalidOption, option: option) {
                    _ = try TableQuery(odata: "\(option)=\(bad)", protocolVersion: protocolVersion)
                }
            }
        }
    }

    @Test func unknownOptions() throws {
        // Parameters without '$' are ignored: the peers send `orderby=releaseDate asc`.
        let query = try TableQuery(
            odata: "$filter=year eq 1&orderby=releaseDate asc&foo=bar&ZUMO-API-VERSION=2.0.0",
            protocolVersion: .v3
        )
        #expect(query == TableQuery(filter: binary(.equal, field("year"), int(1))))
        expectQueryError(.invalidOption, option: "$expand") {
            _ = try TableQuery(odata: "$expand=x", protocolVersion: .v3)
        }
        expectQueryError(.invalidOption, option: "$foo") {
            _ = try TableQuery(odata: "$top=1&$foo", protocolVersion: .v2)
        }
    }

    @Test func optionNamesIgnoreCase() throws {
        let query = try TableQuery(odata: "$FILTER=a eq 1&$Top=3&$ORDERBY=a", protocolVersion: .v3)
        #expect(query == TableQuery(filter: binary(.equal, field("a"), int(1)), orderBy: [.field("a")], top: 3))
    }

    @Test("a repeated option is an error")
    func repeatedOption() {
        expectQueryError(.invalidOption, option: "$top") {
            _ = try TableQuery(odata: "$top=1&$top=2", protocolVersion: .v3)
        }
        expectQueryError(.invalidOption, option: "$filter") {
            _ = try TableQuery(odata: "$filter=a&$Filter=b", protocolVersion: .v3)
        }
    }

    @Test func errorsNameTheOptionAndPosition() {
        expectQueryError(.syntax, at: 7, option: "$filter") {
            _ = try TableQuery(odata: "$filter=year gt", protocolVersion: .v3)
        }
        expectQueryError(.syntax, at: 7, option: "$filter") {
            _ = try TableQuery(odata: "$top=5&$filter=year%20gt", protocolVersion: .v3)
        }
        expectQueryError(.syntax, at: 6, option: "$filter") {
            _ = try TableQuery(odata: "$filter=(year - 1900) ge 100", protocolVersion: .v3)
        }
        expectQueryError(.tooLong) {
            _ = try TableQuery(odata: "$filter=a eq 1", protocolVersion: .v3, limits: QueryLimits(maximumLength: 10))
        }
        let error = queryError { _ = try TableQuery(odata: "$filter=year gt", protocolVersion: .v3) }
        #expect(error?.description == "invalid query: $filter at 7: expected an operand after 'gt'")
    }

    @Test func orderBy() throws {
        func orderBy(_ text: String) throws(QueryError) -> [SortKey] {
            try TableQuery(odata: "$orderby=" + text, protocolVersion: .v3).orderBy
        }
        #expect(try orderBy("title") == [.field("title")])
        #expect(try orderBy("title asc") == [.field("title")])
        #expect(try orderBy("title desc") == [.field("title", descending: true)])
        #expect(try orderBy("title DESC") == [.field("title", descending: true)])
        #expect(try orderBy("year desc,title asc") == [.field("year", descending: true), .field("title")])
        #expect(try orderBy(" year  desc , title ") == [.field("year", descending: true), .field("title")])
        #expect(try orderBy("year(releaseDate) desc") == [SortKey(call(.year, field("releaseDate")), descending: true)])
        #expect(try orderBy("(a add b)") == [SortKey(binary(.add, field("a"), field("b")))])
        expectQueryError(.syntax, at: 9, option: "$orderby") { _ = try orderBy("duration fizz") }
        expectQueryError(.syntax, at: 6, option: "$orderby") { _ = try orderBy("title,") }
        expectQueryError(.syntax, at: 0, option: "$orderby") { _ = try orderBy(",title") }
        expectQueryError(.syntax, at: 11, option: "$orderby") { _ = try orderBy("title desc asc") }
        expectQueryError(.syntax, at: 5, option: "$orderby") { _ = try orderBy("year - 1") }
        expectQueryError(.unknownFunction, at: 0, option: "$orderby") { _ = try orderBy("foo(a)") }
    }

    @Test func select() throws {
        func select(_ text: String) throws(QueryError) -> [String]? {
            try TableQuery(odata: "$select=" + text, protocolVersion: .v3).select
        }
        #expect(try select("price") == ["price"])
        #expect(try select("id,stringValue") == ["id", "stringValue"])
        #expect(try select(" id , title ") == ["id", "title"])
        #expect(try select("Id,StringValue") == ["Id", "StringValue"])
        #expect(try select("*") == nil)
        #expect(try select("") == nil)
        expectQueryError(.syntax, at: 5, option: "$select") { _ = try select("year rating") }
        expectQueryError(.syntax, at: 3, option: "$select") { _ = try select("id,,title") }
        expectQueryError(.syntax, at: 3, option: "$select") { _ = try select("id,") }
        expectQueryError(.syntax, at: 0, option: "$select") { _ = try select("1abc") }
        expectQueryError(.syntax, at: 1, option: "$select") { _ = try select("a-b") }
        expectQueryError(.unsupported, at: 1, option: "$select") { _ = try select("a/b") }
    }

    @Test("the peers' 400 cases")
    func peerErrors() {
        expectQueryError(.syntax, option: "$filter") {
            _ = try TableQuery(odata: "$filter=(year - 1900) ge 100", protocolVersion: .v3)
        }
        expectQueryError(.syntax, option: "$orderby") {
            _ = try TableQuery(odata: "$orderby=duration fizz", protocolVersion: .v3)
        }
        expectQueryError(.syntax, option: "$select") {
            _ = try TableQuery(odata: "$select=year rating", protocolVersion: .v3)
        }
        for text in ["$skip=-1", "$skip=NaN", "$top=-1", "$top=NaN"] {
            expectQueryError(.invalidOption) { _ = try TableQuery(odata: text, protocolVersion: .v3) }
        }
    }
}

// MARK: - ODataParameters

@Suite("ODataParameters")
struct ODataParametersTests: ODataTestSupport {
    @Test func splitsOutsideQuotes() {
        let parameters = ODataParameters(parsing: "$filter=(title eq 'a&b=c') and (x eq 'it''s&')&$top=5")
        #expect(parameters.items.map(\.name) == ["$filter", "$top"])
        #expect(parameters.items.map(\.value) == ["(title eq 'a&b=c') and (x eq 'it''s&')", "5"])
    }

    @Test func percentDecodes() {
        let parameters = ODataParameters(parsing: "%24filter=%28a%20eq%20%27%C3%A9%27%29&x=1+2&y=%zz%&z")
        #expect(
            parameters.parameters == [
                .init(name: "$filter", value: "(a eq 'é')"),
                .init(name: "x", value: "1 2"),
                .init(name: "y", value: "%zz%"),
                .init(name: "z", value: ""),
            ]
        )
        #expect(ODataParameters(parsing: "?a=1").items.first?.name == "a")
        #expect(ODataParameters(parsing: "a=b=c").value(for: "a") == "b=c")
    }

    @Test func valueIgnoresCase() {
        let parameters = ODataParameters(parsing: "__includeDeleted=true&$Top=3")
        #expect(parameters.value(for: "__includedeleted") == "true")
        #expect(parameters.value(for: "$TOP") == "3")
        #expect(parameters.value(for: "$skip") == nil)
    }

    @Test func nextPage() {
        let parameters = ODataParameters(parsing: "$count=true&$top=125&$filter=x")
        #expect(parameters.nextPage(skip: 100, top: 25) == "$count=true&$filter=x&$skip=100&$top=25")
        #expect(ODataParameters(parsing: "$skip=5&$filter=x").nextPage(skip: 105, top: nil) == "$filter=x&$skip=105")
        #expect(ODataParameters(parsing: "").nextPage(skip: 100, top: nil) == "$skip=100")
        let quoted = ODataParameters(parsing: "$filter=(t%20eq%20'a%26b')&$TOP=10&$Skip=0")
        #expect(quoted.nextPage(skip: 5, top: 5) == "$filter=(t eq 'a&b')&$skip=5&$top=5")
        #expect(
            quoted.nextPageParameters(skip: 5, top: 5).percentEncodedQueryString
                == "$filter=(t%20eq%20'a%26b')&$skip=5&$top=5"
        )
        // The raw next page reads back to the same parameters.
        #expect(
            ODataParameters(parsing: quoted.nextPage(skip: 5, top: 5)) == quoted.nextPageParameters(skip: 5, top: 5)
        )
    }

    /// A value with an odd `'` (a fuzzer's `tag=%27`): its quote is encoded in the link, so that
    /// reading the link back does not take the rest of the query into that value (the next page
    /// lost its `$filter` and `$skip`, and paging never ended).
    @Test func aLoneQuoteInAValueDoesNotSwallowTheRestOfTheLink() {
        let parameters = ODataParameters(parsing: "tag=%27&$filter=n%20eq%201&$top=300")
        #expect(parameters.value(for: "tag") == "'" && parameters.value(for: "$filter") == "n eq 1")
        let link = parameters.nextPageParameters(skip: 100, top: 200).percentEncodedQueryString
        #expect(link == "tag=%27&$filter=n%20eq%201&$skip=100&$top=200")
        let back = ODataParameters(parsing: link)
        #expect(back.value(for: "tag") == "'" && back.value(for: "$filter") == "n eq 1", "\(back)")
        #expect(back.value(for: "$skip") == "100" && back.value(for: "$top") == "200")
        #expect(PercentEncoding.queryComponent("'a' and 'b'") == "'a'%20and%20'b'", "paired quotes stay readable")
    }

    @Test func itemsAccessor() {
        var parameters = ODataParameters([("a", "1")])
        parameters.items.append(("b", "2"))
        #expect(parameters.rawQueryString == "a=1&b=2")
        #expect(parameters == ODataParameters(parsing: "a=1&b=2"))
        #expect(Set([parameters, ODataParameters(parsing: "a=1&b=2")]).count == 1)
    }
}
