import StoreConformance
import Testing

@testable import SyncCore

@Suite("OData $filter literals, functions and names")
struct ODataLiteralParsingTests: ODataTestSupport {
    @Test func literals() {
        expectFilter("x eq 'abc'", binary(.equal, field("x"), string("abc")))
        expectFilter("x eq ''", binary(.equal, field("x"), string("")))
        expectFilter("x eq 'a''b''c'", binary(.equal, field("x"), string("a'b'c")))
        expectFilter("x eq ''''''''", binary(.equal, field("x"), string("'''")))
        expectFilter("x eq 'Léon: The Professional'", binary(.equal, field("x"), string("Léon: The Professional")))
        expectFilter("x eq '(test'", binary(.equal, field("x"), string("(test")))
        expectFilter("x eq 42", binary(.equal, field("x"), int(42)))
        expectFilter("x eq 0", binary(.equal, field("x"), int(0)))
        expectFilter("x eq 9223372036854775807", binary(.equal, field("x"), int(.max)))
        expectFilter("x eq 1.5", binary(.equal, field("x"), double(1.5)))
        expectFilter("x eq 1e5", binary(.equal, field("x"), double(100_000)))
        expectFilter("x eq 1.5E-3", binary(.equal, field("x"), double(0.0015)))
        expectFilter("x eq 2.5e+2", binary(.equal, field("x"), double(250)))
        expectFilter("x eq 2.0M", binary(.equal, field("x"), decimal(2)))
        expectFilter("x eq 42m", binary(.equal, field("x"), decimal(42)))
        expectFilter("x eq 1.5d", binary(.equal, field("x"), double(1.5)))
        expectFilter("x eq 2D", binary(.equal, field("x"), double(2)))
        expectFilter("x eq 1.5f", binary(.equal, field("x"), double(1.5)))
        expectFilter("x eq 3F", binary(.equal, field("x"), double(3)))
        expectFilter("x eq 42L", binary(.equal, field("x"), int(42)))
        expectFilter("x eq 42l", binary(.equal, field("x"), int(42)))
        expectFilter("x eq true", binary(.equal, field("x"), bool(true)))
        expectFilter("x eq false", binary(.equal, field("x"), bool(false)))
        expectFilter("x eq null", binary(.equal, field("x"), null))
        expectFilter("x eq INF", binary(.equal, field("x"), double(.infinity)))
        expectFilter("true", bool(true))
        expectFilter("null", null)
    }

    @Test func badLiterals() {
        expectFilterError("x eq 9223372036854775808", .syntax, at: 5)
        expectFilterError("x eq 1.5L", .syntax, at: 5)
        expectFilterError("x eq 1.", .syntax, at: 5)
        expectFilterError("x eq 1e", .syntax, at: 5)
        expectFilterError("x eq 12abc", .syntax, at: 5)
        expectFilterError("x eq 1e999", .syntax, at: 5)
        expectFilterError("x eq .5", .syntax, at: 5)
        expectFilterError("x eq 'abc", .syntax, at: 5)
        expectFilterError("x eq 'it''s", .syntax, at: 5)
        expectFilterError("x eq \"abc\"", .syntax, at: 5)
    }

    @Test func temporalLiterals() {
        let midnight = instant("1994-10-14T00:00:00.000Z")
        // 3.0 casts and bare forms
        expectFilter("d eq cast(1994-10-14,Edm.Date)", binary(.equal, field("d"), date("1994-10-14")))
        expectFilter("d eq cast( 1994-10-14 , Edm.Date )", binary(.equal, field("d"), date("1994-10-14")))
        expectFilter("d eq cast(1994-10-14,'Edm.Date')", binary(.equal, field("d"), date("1994-10-14")))
        expectFilter("d eq CAST(1994-10-14,edm.date)", binary(.equal, field("d"), date("1994-10-14")))
        expectFilter("d eq 1994-10-14", binary(.equal, field("d"), date("1994-10-14")))
        expectFilter(
            "u gt cast(2024-08-23T20:22:54.291Z,Edm.DateTimeOffset)",
            binary(.greaterThan, field("u"), instant("2024-08-23T20:22:54.291Z"))
        )
        expectFilter(
            "u gt 2024-08-23T20:22:54.291Z",
            binary(.greaterThan, field("u"), instant("2024-08-23T20:22:54.291Z"))
        )
        expectFilter(
            "u gt 2024-08-23T22:22:54.291+02:00",
            binary(.greaterThan, field("u"), instant("2024-08-23T20:22:54.291Z"))
        )
        expectFilter(
            "u ge cast(1960-01-01T05:30:00Z,Edm.DateTimeOffset)",
            binary(.greaterThanOrEqual, field("u"), instant("1960-01-01T05:30:00.000Z"))
        )
        expectFilter("d eq cast(1994-10-14,Edm.DateTimeOffset)", binary(.equal, field("d"), midnight))
        expectFilter("t le cast(07:14:00,Edm.TimeOfDay)", binary(.lessThanOrEqual, field("t"), time("07:14:00")))
        expectFilter(
            "t le cast(18:33:45.876,Edm.TimeOfDay)",
            binary(.lessThanOrEqual, field("t"), time("18:33:45.876"))
        )
        expectFilter("t gt 12:15:00", binary(.greaterThan, field("t"), time("12:15:00")))
        // casts of strings parse the string
        expectFilter("d eq cast('1994-10-14',Edm.Date)", binary(.equal, field("d"), date("1994-10-14")))
        expectFilter("d eq cast('1994-10-14T00:00:00Z',Edm.DateTimeOffset)", binary(.equal, field("d"), midnight))
        expectFilter("t eq cast('07:14',Edm.TimeOfDay)", binary(.equal, field("t"), time("07:14:00")))
        // 2.0 forms
        expectFilter("d eq datetime'1994-10-14T00:00:00.000Z'", binary(.equal, field("d"), midnight))
        expectFilter("d eq datetimeoffset'1994-10-14T00:00:00.000Z'", binary(.equal, field("d"), midnight))
        expectFilter("d eq datetimeoffset'1994-10-14T02:00:00+02:00'", binary(.equal, field("d"), midnight))
        expectFilter("d eq datetime'1994-10-14'", binary(.equal, field("d"), midnight))
        expectFilter("d eq datetime'1994-10-14T00:00:00'", binary(.equal, field("d"), midnight))
        expectFilter(
            "published eq datetime'2011-11-21T05:16:21.010Z'",
            binary(.equal, field("published"), instant("2011-11-21T05:16:21.010Z"))
        )
        // invalid text
        expectFilterError("d eq 1994-13-14", .syntax, at: 5)
        expectFilterError("d eq cast(1994-02-30,Edm.Date)", .syntax, at: 10)
        expectFilterError("d eq 2024-08-23T25:00:00Z", .syntax, at: 5)
        expectFilterError("d eq 2024-08-23T20:00:00", .syntax, at: 5)
        expectFilterError("t eq 25:00:00", .syntax, at: 5)
        expectFilterError("d eq datetime'yesterday'", .syntax, at: 5)
        expectFilterError("d eq datetimeoffset''", .syntax, at: 5)
        expectFilterError("d eq cast('soon',Edm.Date)", .syntax, at: 10)
        expectFilterError("d eq cast('1994-10-14',Edm.TimeOfDay)", .syntax, at: 10)
        expectFilterError("d eq time'PT1H'", .unsupported, at: 5)
        expectFilterError("d eq foo'bar'", .syntax, at: 5)
    }

    @Test func guids() {
        let guid = QueryExpression.literal(.guid("0f8fad5b-d9cb-469f-a165-70867728950e"))
        expectFilter("g eq cast(0f8fad5b-d9cb-469f-a165-70867728950e,Edm.Guid)", binary(.equal, field("g"), guid))
        expectFilter("g eq cast(0F8FAD5B-D9CB-469F-A165-70867728950E,Edm.Guid)", binary(.equal, field("g"), guid))
        expectFilter("g eq 0f8fad5b-d9cb-469f-a165-70867728950e", binary(.equal, field("g"), guid))
        expectFilter("g eq guid'0F8FAD5B-D9CB-469F-A165-70867728950E'", binary(.equal, field("g"), guid))
        expectFilter("g eq cast('0f8fad5b-d9cb-469f-a165-70867728950e',Edm.Guid)", binary(.equal, field("g"), guid))
        expectFilter(
            "g in (deadbeef-0000-0000-0000-000000000000, 0f8fad5b-d9cb-469f-a165-70867728950e)",
            .isIn(field("g"), [.literal(.guid("deadbeef-0000-0000-0000-000000000000")), guid])
        )
        expectFilterError("g eq guid'nope'", .syntax, at: 5)
        expectFilterError("g eq cast('nope',Edm.Guid)", .syntax, at: 10)
    }

    @Test func casts() {
        expectFilter("cast(x,Edm.Int32) eq 1", binary(.equal, .cast(field("x"), .int32), int(1)))
        expectFilter("cast(x, 'Edm.String') eq 'a'", binary(.equal, .cast(field("x"), .string), string("a")))
        expectFilter("cast(d,Edm.Date) eq 1994-10-14", binary(.equal, .cast(field("d"), .date), date("1994-10-14")))
        expectFilter("x eq cast(5,Edm.Double)", binary(.equal, field("x"), double(5)))
        expectFilter("x eq cast(5,Edm.String)", binary(.equal, field("x"), string("5")))
        expectFilter("x eq cast(2.5,Edm.Decimal)", binary(.equal, field("x"), decimal(2.5)))
        expectFilter("x eq cast(-5,Edm.Int64)", binary(.equal, field("x"), int(-5)))
        expectFilter("x eq cast('true',Edm.Boolean)", binary(.equal, field("x"), bool(true)))
        expectFilter("x eq cast(null,Edm.Date)", binary(.equal, field("x"), null))
        expectFilterError("x eq cast(x,Edm.Foo)", .unsupported, at: 12)
        expectFilterError("x eq cast(x,Geography.Point)", .unsupported, at: 12)
        expectFilterError("cast(Edm.Date) eq x", .unsupported, at: 0)
        expectFilterError("x eq cast(x)", .syntax, at: 11)
        expectFilterError("x eq cast(x,1)", .syntax, at: 12)
        expectFilterError("x eq cast(x,Edm.Date,1)", .syntax, at: 20)
        expectFilterError("x eq cast(true,Edm.Date)", .typeMismatch, at: 10)
        expectFilterError("x eq cast(3000000000,Edm.Int32)", .typeMismatch, at: 10)
    }

    @Test("every function by name", arguments: QueryFunction.allCases)
    func functions(function: QueryFunction) throws {
        let arguments: [String] =
            switch function {
            case .substring: ["s", "1"]
            case .replace: ["s", "'a'", "'b'"]
            default: Array(["s", "'x'"].prefix(function.arity.lowerBound))
            }
        let text = "\(function.rawValue)(\(arguments.joined(separator: ", ")))"
        let expectedArguments: [QueryExpression] = arguments.map { text in
            text == "s" ? field("s") : text == "1" ? int(1) : string(String(text.dropFirst().dropLast()))
        }
        let expected = QueryExpression.function(function, expectedArguments)
        let filterText: String
        let filterTree: QueryExpression
        switch function {
        case .contains, .startsWith, .endsWith:
            (filterText, filterTree) = (text, expected)
        case .toLower, .toUpper, .trim, .substring, .concat, .replace:
            (filterText, filterTree) = ("\(text) eq 'v'", binary(.equal, expected, string("v")))
        default:
            (filterText, filterTree) = ("\(text) eq 1", binary(.equal, expected, int(1)))
        }
        expectFilter(filterText, filterTree)
        // Function names match without regard to letter case.
        let shouted = filterText.replacing(
            function.rawValue + "(",
            with: function.rawValue.uppercased() + "("
        )
        expectFilter(shouted, filterTree)
    }

    @Test func substringofSwapsArguments() {
        expectFilter("substringof('Star', title)", call(.contains, field("title"), string("Star")))
        expectFilter("SubstringOf('Star',title)", call(.contains, field("title"), string("Star")))
        expectFilter("contains(title,'Star')", call(.contains, field("title"), string("Star")))
        expectFilterError("substringof('Star')", .wrongArgumentCount, at: 0)
    }

    @Test func nestedFunctions() {
        expectFilter(
            "startswith(tolower(title), 'the')",
            call(.startsWith, call(.toLower, field("title")), string("the"))
        )
        expectFilter(
            "(tolower(stringValue) eq tolower('abc'))",
            binary(.equal, call(.toLower, field("stringValue")), call(.toLower, string("abc")))
        )
        expectFilter(
            "length(concat(trim(a), substring(b, 1, 2))) gt indexof(c, 'x')",
            binary(
                .greaterThan,
                call(.length, call(.concat, call(.trim, field("a")), call(.substring, field("b"), int(1), int(2)))),
                call(.indexOf, field("c"), string("x"))
            )
        )
        expectFilter(
            "round(duration div 60.0) eq 2",
            binary(.equal, call(.round, binary(.divide, field("duration"), double(60))), int(2))
        )
        expectFilter("year (releaseDate) eq 1994", binary(.equal, call(.year, field("releaseDate")), int(1994)))
    }

    @Test func functionErrors() {
        expectFilterError("tolower(a, b) eq 'x'", .wrongArgumentCount, at: 0)
        expectFilterError("x eq tolower()", .wrongArgumentCount, at: 5)
        expectFilterError("substring(a) eq 'x'", .wrongArgumentCount, at: 0)
        expectFilterError("substring(a, 1, 2, 3) eq 'x'", .wrongArgumentCount, at: 0)
        expectFilterError("replace(a, 'b') eq 'x'", .wrongArgumentCount, at: 0)
        expectFilterError("x eq frobnicate(a)", .unknownFunction, at: 5)
        expectFilterError("x eq bogus.func(a)", .unknownFunction, at: 5)
        expectFilterError("geo.distance(pointValue, geography'POINT(-97 38)') lt 0.2", .unsupported, at: 0)
        expectFilterError("isof(x, Edm.String)", .unsupported, at: 0)
        expectFilterError("x eq now()", .unsupported, at: 5)
        expectFilterError("tolower(a eq 'x'", .syntax, at: 16)
        expectFilterError("tolower(a b) eq 'x'", .syntax, at: 10)
    }

    @Test func fieldNames() {
        expectFilter("_private eq 1", binary(.equal, field("_private"), int(1)))
        expectFilter("a1_b2 eq 1", binary(.equal, field("a1_b2"), int(1)))
        expectFilter("year eq 1", binary(.equal, field("year"), int(1)))  // a function name used as a field
        expectFilter("booleanValue", field("booleanValue"))
        expectFilter("deleted", field("deleted"))
        expectFilterError("a/b eq 1", .unsupported, at: 1)
        expectFilterError("tags/any(t: t eq 'x')", .unsupported, at: 4)
        expectFilterError("a.b eq 1", .unsupported, at: 0)
        expectFilterError("$it eq 1", .syntax, at: 0)
    }
}
