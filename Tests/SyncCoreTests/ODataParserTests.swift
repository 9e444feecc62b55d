import StoreConformance
import Testing

@testable import SyncCore

// MARK: - Helpers shared by the OData test files

/// Helpers for the OData suites; a suite adopts the protocol to call them unqualified without adding global names
/// to the test module.
protocol ODataTestSupport {}

extension ODataTestSupport {

    /// Shorthands for expected trees.
    func field(_ name: String) -> QueryExpression { .field(name) }
    func int(_ value: Int64) -> QueryExpression { .literal(.int(value)) }
    func double(_ value: Double) -> QueryExpression { .literal(.double(value)) }
    func decimal(_ value: Double) -> QueryExpression { .literal(.decimal(value)) }
    func string(_ value: String) -> QueryExpression { .literal(.string(value)) }
    func bool(_ value: Bool) -> QueryExpression { .literal(.bool(value)) }
    var null: QueryExpression { .literal(.null) }
    func binary(_ op: BinaryOperator, _ lhs: QueryExpression, _ rhs: QueryExpression) -> QueryExpression {
        .binary(op, lhs, rhs)
    }
    func call(_ function: QueryFunction, _ arguments: QueryExpression...) -> QueryExpression {
        .function(function, arguments)
    }
    func date(_ text: String) -> QueryExpression { .literal(.date(CalendarDate(iso8601: text)!)) }
    func instant(_ text: String) -> QueryExpression { .literal(.dateTimeOffset(Timestamp(iso8601: text)!)) }
    func time(_ text: String) -> QueryExpression { .literal(.timeOfDay(TimeOfDay(iso8601: text)!)) }

    /// Parses a `$filter` value.
    func parseFilter(_ text: String, _ dialect: ProtocolVersion = .v3, limits: QueryLimits = .default)
        throws(QueryError)
        -> QueryExpression
    {
        try QueryExpression(odataFilter: text, dialect: dialect, limits: limits)
    }

    /// The error `body` throws, or `nil`.
    func queryError(_ body: () throws -> Void) -> QueryError? {
        do {
            try body()
            return nil
        } catch let error as QueryError {
            return error
        } catch {
            Issue.record("expected a QueryError, got \(error)")
            return nil
        }
    }

    /// Expects `body` to throw a ``QueryError`` with `code`, and, when given, `position` and `option`.
    func expectQueryError(
        _ code: QueryError.Code,
        at position: Int? = nil,
        option: String? = nil,
        sourceLocation: SourceLocation = #_sourceLocation,
        _ body: () throws -> Void
    ) {
        guard let error = queryError(body) else {
            Issue.record("expected a \(code) error, but it succeeded", sourceLocation: sourceLocation)
            return
        }
        #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
        if let position { #expect(error.position == position, "\(error)", sourceLocation: sourceLocation) }
        if let option { #expect(error.option == option, "\(error)", sourceLocation: sourceLocation) }
    }

    /// Expects the filter `text` to fail with `code` at `position` in both dialects.
    func expectFilterError(
        _ text: String,
        _ code: QueryError.Code,
        at position: Int?,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        for dialect in ProtocolVersion.allCases {
            expectQueryError(code, at: position, option: "$filter", sourceLocation: sourceLocation) {
                _ = try parseFilter(text, dialect)
            }
        }
    }

    /// Expects the filter `text` to parse to `expected` in both dialects.
    func expectFilter(
        _ text: String,
        _ expected: QueryExpression,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        for dialect in ProtocolVersion.allCases {
            do {
                let parsed = try parseFilter(text, dialect)
                #expect(parsed == expected, "\(dialect.rawValue): \(text)", sourceLocation: sourceLocation)
            } catch {
                Issue.record("\(dialect.rawValue): \(text) failed: \(error)", sourceLocation: sourceLocation)
            }
        }
    }

    /// The value `body` returns, or `nil` when it throws a ``QueryError`` (any other outcome is impossible: the
    /// error type is typed).
    func queryErrorOrValue<T>(_ body: () throws(QueryError) -> T) -> T? {
        do {
            return try body()
        } catch {
            #expect(!error.reason.isEmpty)
            return nil
        }
    }
}

// MARK: - $filter

@Suite("OData $filter parsing")
struct ODataFilterParsingTests: ODataTestSupport {
    @Test("comparison operators", arguments: BinaryOperator.allCases.filter(\.isComparison))
    func comparisons(op: BinaryOperator) {
        expectFilter("year \(op.rawValue) 1994", binary(op, field("year"), int(1994)))
        expectFilter("(year \(op.rawValue) 1994)", binary(op, field("year"), int(1994)))
        expectFilter("  year   \(op.rawValue)\t1994  ", binary(op, field("year"), int(1994)))
    }

    @Test("arithmetic operators", arguments: BinaryOperator.allCases.filter(\.isArithmetic))
    func arithmetic(op: BinaryOperator) {
        expectFilter(
            "(price \(op.rawValue) 2) gt 30",
            binary(.greaterThan, binary(op, field("price"), int(2)), int(30))
        )
    }

    @Test func logicalOperators() {
        expectFilter(
            "year ge 1930 and year le 1940",
            binary(
                .and,
                binary(.greaterThanOrEqual, field("year"), int(1930)),
                binary(.lessThanOrEqual, field("year"), int(1940))
            )
        )
        expectFilter("a or b", binary(.or, field("a"), field("b")))
        expectFilter("not a", .unary(.not, field("a")))
        expectFilter("not(booleanValue)", .unary(.not, field("booleanValue")))
        expectFilter("not (price gt 10)", .unary(.not, binary(.greaterThan, field("price"), int(10))))
    }

    @Test func precedence() {
        // or < and
        expectFilter("a or b and c", binary(.or, field("a"), binary(.and, field("b"), field("c"))))
        expectFilter("a and b or c", binary(.or, binary(.and, field("a"), field("b")), field("c")))
        // and < eq
        expectFilter(
            "a eq 1 and b ne 2",
            binary(.and, binary(.equal, field("a"), int(1)), binary(.notEqual, field("b"), int(2)))
        )
        // eq < gt
        expectFilter("a eq b gt c", binary(.equal, field("a"), binary(.greaterThan, field("b"), field("c"))))
        expectFilter("a gt b eq c", binary(.equal, binary(.greaterThan, field("a"), field("b")), field("c")))
        // gt < add < mul
        expectFilter(
            "a add b mul c gt d",
            binary(.greaterThan, binary(.add, field("a"), binary(.multiply, field("b"), field("c"))), field("d"))
        )
        expectFilter(
            "a mul b add c eq d",
            binary(.equal, binary(.add, binary(.multiply, field("a"), field("b")), field("c")), field("d"))
        )
        // unary binds tightest
        expectFilter("not a eq true", binary(.equal, .unary(.not, field("a")), bool(true)))
        expectFilter("-a add 1 eq 0", binary(.equal, binary(.add, .unary(.negate, field("a")), int(1)), int(0)))
        // in sits with gt ge lt le, above eq and below add
        expectFilter(
            "a eq b in (1, 2)",
            binary(.equal, field("a"), .isIn(field("b"), [int(1), int(2)]))
        )
        expectFilter("a add 1 in (2)", .isIn(binary(.add, field("a"), int(1)), [int(2)]))
        expectFilter(
            "x in ('a') or y in ('b')",
            binary(.or, .isIn(field("x"), [string("a")]), .isIn(field("y"), [string("b")]))
        )
        // the peers' unparenthesized forms
        expectFilter(
            "(year ge 1930 and year le 1940) or (year ge 1950 and year le 1960)",
            binary(
                .or,
                binary(
                    .and,
                    binary(.greaterThanOrEqual, field("year"), int(1930)),
                    binary(.lessThanOrEqual, field("year"), int(1940))
                ),
                binary(
                    .and,
                    binary(.greaterThanOrEqual, field("year"), int(1950)),
                    binary(.lessThanOrEqual, field("year"), int(1960))
                )
            )
        )
        expectFilter(
            "bestPictureWinner eq true and ceiling(duration div 60.0) eq 2",
            binary(
                .and,
                binary(.equal, field("bestPictureWinner"), bool(true)),
                binary(.equal, call(.ceiling, binary(.divide, field("duration"), double(60))), int(2))
            )
        )
    }

    @Test func leftAssociativity() {
        expectFilter(
            "a sub b sub c eq 0",
            binary(.equal, binary(.subtract, binary(.subtract, field("a"), field("b")), field("c")), int(0))
        )
        expectFilter(
            "a div b mod c eq 0",
            binary(.equal, binary(.modulo, binary(.divide, field("a"), field("b")), field("c")), int(0))
        )
        expectFilter("a or b or c", binary(.or, binary(.or, field("a"), field("b")), field("c")))
    }

    @Test func parenthesesOverridePrecedence() {
        expectFilter("(a or b) and c", binary(.and, binary(.or, field("a"), field("b")), field("c")))
        expectFilter("((((a))))", field("a"))
        expectFilter(
            "a mul (b add c) eq d",
            binary(.equal, binary(.multiply, field("a"), binary(.add, field("b"), field("c"))), field("d"))
        )
    }

    @Test func unaryMinus() {
        expectFilter("price eq -8", binary(.equal, field("price"), int(-8)))
        expectFilter("price eq - 8", binary(.equal, field("price"), int(-8)))
        expectFilter("price eq -(8)", binary(.equal, field("price"), int(-8)))
        expectFilter("price eq - -8", binary(.equal, field("price"), int(8)))
        expectFilter("price eq -0.5", binary(.equal, field("price"), double(-0.5)))
        expectFilter("price eq -2.0M", binary(.equal, field("price"), decimal(-2)))
        expectFilter("price eq -9223372036854775808", binary(.equal, field("price"), int(.min)))
        expectFilter("-price gt 1", binary(.greaterThan, .unary(.negate, field("price")), int(1)))
        expectFilter(
            "-(price add 1) gt 1",
            binary(.greaterThan, .unary(.negate, binary(.add, field("price"), int(1))), int(1))
        )
        expectFilter(
            "x eq -(-9223372036854775808)",
            binary(.equal, field("x"), .unary(.negate, int(.min)))
        )
        expectFilter("x eq -INF", binary(.equal, field("x"), double(-.infinity)))
    }

    @Test("'-' is not a binary operator")
    func minusIsNotBinary() {
        expectFilterError("(year - 1900) ge 100", .syntax, at: 6)
        expectFilterError("year - 1900 ge 100", .syntax, at: 5)
        expectFilterError("(year -1900) ge 100", .syntax, at: 6)
        expectFilterError("year sub 1900 - 1 ge 100", .syntax, at: 14)
    }

    @Test func inOperator() {
        expectFilter("x in (1, 2, 3)", .isIn(field("x"), [int(1), int(2), int(3)]))
        expectFilter("id in ( 'IT', 'GR', 'EG' )", .isIn(field("id"), [string("IT"), string("GR"), string("EG")]))
        expectFilter("stringValue in ('A','B')", .isIn(field("stringValue"), [string("A"), string("B")]))
        expectFilter("x in ('a')", .isIn(field("x"), [string("a")]))
        expectFilter(
            "tolower(x) in (tolower(y), 'b')",
            .isIn(call(.toLower, field("x")), [call(.toLower, field("y")), string("b")])
        )
        expectFilterError("x in ()", .syntax, at: 6)
        expectFilterError("x in 'a'", .syntax, at: 5)
        expectFilterError("x in ('a' 'b')", .syntax, at: 10)
        expectFilterError("x in ('a',", .syntax, at: 10)
        expectFilterError("1 in ('a')", .typeMismatch, at: 6)
    }

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

    @Test func typeMismatches() {
        // function arguments
        expectFilterError("tolower(42) eq 'x'", .typeMismatch, at: 8)
        expectFilterError("contains(title, 1)", .typeMismatch, at: 16)
        expectFilterError("startswith(true, 'a')", .typeMismatch, at: 11)
        expectFilterError("round('x') eq 1", .typeMismatch, at: 6)
        expectFilterError("floor(2024-01-01) eq 1", .typeMismatch, at: 6)
        expectFilterError("year(42) eq 1", .typeMismatch, at: 5)
        expectFilterError("year(true) eq 1", .typeMismatch, at: 5)
        expectFilterError("year(12:00:00) eq 1", .typeMismatch, at: 5)
        expectFilterError("hour(cast(1994-10-14,Edm.Date)) eq 1", .typeMismatch, at: 5)
        expectFilterError("substring(s, 'a') eq 'x'", .typeMismatch, at: 13)
        expectFilterError("length(tolower(a)) eq length(1)", .typeMismatch, at: 29)
        // dates stored as text are fine in date functions
        expectFilter("year('1994-10-14') eq 1994", binary(.equal, call(.year, string("1994-10-14")), int(1994)))
        expectFilter("hour(12:00:00) eq 12", binary(.equal, call(.hour, time("12:00:00")), int(12)))
        // arithmetic
        expectFilterError("'a' add 1 eq 2", .typeMismatch, at: 0)
        expectFilterError("x add true eq 2", .typeMismatch, at: 6)
        expectFilterError("tolower(x) mul 2 eq 2", .typeMismatch, at: 0)
        expectFilterError("-'a' eq x", .typeMismatch, at: 1)
        // logic
        expectFilterError("not 5", .typeMismatch, at: 4)
        expectFilterError("not 'a'", .typeMismatch, at: 4)
        expectFilterError("1 and true", .typeMismatch, at: 0)
        expectFilterError("a or 'b'", .typeMismatch, at: 5)
        expectFilterError("(a add 1) or b", .typeMismatch, at: 0)
        expectFilterError("a and length(b)", .typeMismatch, at: 6)
        // comparisons of literals of clearly different kinds
        expectFilterError("'a' eq 1", .typeMismatch, at: 4)
        expectFilterError("true eq 1", .typeMismatch, at: 5)
        expectFilterError("x eq (1 eq 'a')", .typeMismatch, at: 8)
        expectFilterError("12:00:00 lt 1994-10-14", .typeMismatch, at: 9)
        expectFilter("true eq false", binary(.equal, bool(true), bool(false)))
        expectFilter("'(test' eq 'test)'", binary(.equal, string("(test"), string("test)")))
        expectFilter("1 eq 1.5", binary(.equal, int(1), double(1.5)))
        expectFilter("'1994-10-14' eq 1994-10-14", binary(.equal, string("1994-10-14"), date("1994-10-14")))
        expectFilter("null eq 1", binary(.equal, null, int(1)))
        // the whole filter must be able to be Boolean
        expectFilterError("42", .typeMismatch, at: 0)
        expectFilterError("'john'", .typeMismatch, at: 0)
        expectFilterError("('john')", .typeMismatch, at: 0)
        expectFilterError("year add 1", .typeMismatch, at: 0)
        expectFilterError("tolower(title)", .typeMismatch, at: 0)
        expectFilterError("1994-10-14", .typeMismatch, at: 0)
    }

    @Test func syntaxErrorsWithPositions() {
        expectFilterError("year gt", .syntax, at: 7)
        expectFilterError("year gt ", .syntax, at: 8)
        expectFilterError("", .syntax, at: 0)
        expectFilterError("   ", .syntax, at: 3)
        expectFilterError("eq 5", .syntax, at: 0)
        expectFilterError("year gt 5 5", .syntax, at: 10)
        expectFilterError("year gt 5 foo", .syntax, at: 10)
        expectFilterError("year rating", .syntax, at: 5)
        expectFilterError("(year gt 5", .syntax, at: 10)
        expectFilterError("year gt 5)", .syntax, at: 9)
        expectFilterError("()", .syntax, at: 1)
        expectFilterError("year gt @", .syntax, at: 8)
        expectFilterError("year and and x", .syntax, at: 9)
        expectFilterError("not", .syntax, at: 3)
        expectFilterError("a eq 1,", .syntax, at: 6)
        expectFilterError("a EQ 1", .syntax, at: 2)  // operators are lowercase
        expectFilterError("a has 1", .unsupported, at: 2)
        #expect(queryError { _ = try parseFilter("year gt") }?.reason == "expected an operand after 'gt'")
    }

    @Test("positions count characters, not bytes")
    func characterPositions() {
        expectFilterError("title eq 'Amélie' and 5", .typeMismatch, at: 22)
        expectFilterError("title eq '🎬🎬' and 'x'", .typeMismatch, at: 18)
        expectFilterError("title eq 'é' é", .syntax, at: 13)
    }

    @Test func garbageNeverCrashes() {
        let inputs = [
            "\u{0}", "\u{0}\u{1}\u{2}", "%FF%FE", "'''", ")))(((", "((((", "))))", ",,,,", "----", "- - -", "not not",
            "🎬 eq 1", "a eq '\u{FFFD}'", "é", "a\u{301} eq 1", "\\", "a eq 1 ; drop table", "cast(", "cast(,)",
            "cast(x,", "x in (", "x in", "tolower(", "tolower(,)", "'", "datetime'", "guid'", "1994-", "12:",
            "1e+", "0x10", "a eq 1 or", "\u{202E}x eq 1", String(repeating: "(", count: 50) + "a",
            String(repeating: ")", count: 50), String(repeating: "'", count: 1001), "a eq b eq c eq d",
            "- -", "-", "not -", "x eq -'1'", "x eq --1", "x eq - - - - - 1 1",
        ]
        for input in inputs {
            for dialect in ProtocolVersion.allCases {
                // Either result is fine; the point is that nothing traps.
                _ = try? parseFilter(input, dialect)
                _ = try? TableQuery(odata: "$filter=" + input, dialect: dialect)
                _ = try? TableQuery(odata: input, dialect: dialect)
            }
        }
        expectFilterError("\u{0}", .syntax, at: 0)
        expectFilterError("é", .syntax, at: 0)
    }

    @Test func randomInputNeverCrashes() {
        var generator = SeededRandom(seed: 0xF_E77)
        let alphabet = Array("ab()',- 01.9eEMdLm:T/Z%&=é$@_\u{0}\"".unicodeScalars)
        for _ in 0..<3000 {
            let length = Int.random(in: 0..<40, using: &generator)
            var text = String.UnicodeScalarView()
            for _ in 0..<length { text.append(alphabet.randomElement(using: &generator)!) }
            let input = String(text)
            for dialect in ProtocolVersion.allCases {
                if let parsed = try? parseFilter(input, dialect) {
                    // Whatever parses must also re-encode and parse back.
                    let back = try? parseFilter(parsed.odata(dialect: dialect), dialect)
                    if dialect == .v3 || ODataEncoderTests.usesOnlyV2Forms(parsed) {
                        #expect(back == parsed, "\(input)")
                    } else {
                        #expect(back != nil, "\(input)")
                    }
                }
            }
        }
    }

    @Test("random token sequences either parse and round-trip or throw")
    func randomTokens() {
        let tokens = [
            "a", "year", "title", "eq", "ne", "gt", "le", "and", "or", "not", "add", "sub", "mul", "div", "mod", "in",
            "(", ")", "(", ")", ",", "-", "1", "-2", "2.5", "3M", "1e3", "'x'", "'it''s'", "true", "null", "tolower(",
            "contains(", "substringof(", "cast(", "Edm.Date", "Edm.String", "1994-10-14", "12:00:00",
            "2024-08-23T20:22:54.291Z", "datetime'2011-11-21T05:16:21.010Z'",
            "guid'0f8fad5b-d9cb-469f-a165-70867728950e'", "round(", "year(", "length(", "concat(", "INF", "asc",
        ]
        var generator = SeededRandom(seed: 42)
        var parsedCount = 0
        for _ in 0..<20_000 {
            let count = Int.random(in: 1...12, using: &generator)
            let input = (0..<count).map { _ in tokens.randomElement(using: &generator)! }
                .joined(separator: Bool.random(using: &generator) ? " " : "  ")
            for dialect in ProtocolVersion.allCases {
                guard let parsed = queryErrorOrValue({ () throws(QueryError) in try parseFilter(input, dialect) })
                else { continue }
                parsedCount += 1
                let encoded = parsed.odata(dialect: dialect)
                let back = try? parseFilter(encoded, dialect)
                if dialect == .v3 || ODataEncoderTests.usesOnlyV2Forms(parsed) {
                    #expect(back == parsed, "\(dialect.rawValue): \(input) → \(encoded)")
                } else if let back {
                    #expect((try? parseFilter(back.odata(dialect: dialect), dialect)) == back, "\(input)")
                } else {
                    Issue.record("\(input) → \(encoded) does not parse")
                }
            }
        }
        #expect(parsedCount > 300)
    }
}

// MARK: - Limits

@Suite("OData limits")
struct ODataLimitTests: ODataTestSupport {
    @Test func oneMegabyteFilterIsTooLong() {
        let text = "a eq '" + String(repeating: "x", count: 1_048_576) + "'"
        let clock = ContinuousClock()
        let elapsed = clock.measure {
            expectQueryError(.tooLong, option: "$filter") { _ = try parseFilter(text) }
            expectQueryError(.tooLong) { _ = try TableQuery(odata: "$filter=" + text, dialect: .v3) }
        }
        #expect(elapsed < .seconds(2))
    }

    @Test func lengthLimitBoundary() throws {
        let limits = QueryLimits(maximumLength: 6, maximumDepth: 100)
        #expect(try parseFilter("a eq 1", limits: limits) == binary(.equal, field("a"), int(1)))
        expectQueryError(.tooLong) { _ = try parseFilter("a eq 10", limits: limits) }
        // measured in UTF-8 bytes
        expectQueryError(.tooLong) { _ = try parseFilter("é eq 1", limits: limits) }
    }

    @Test func tenThousandParentheses() {
        let text = String(repeating: "(", count: 10_000) + "a" + String(repeating: ")", count: 10_000)
        expectFilterError(text, .tooDeep, at: 100)
    }

    @Test func tenThousandNots() {
        let text = String(repeating: "not ", count: 10_000) + "a"
        expectFilterError(text, .tooDeep, at: nil)
    }

    @Test func tenThousandNestedCalls() {
        let limits = QueryLimits(maximumLength: 1_000_000, maximumDepth: 100)
        func expectTooDeep(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) {
            for dialect in ProtocolVersion.allCases {
                expectQueryError(.tooDeep, option: "$filter", sourceLocation: sourceLocation) {
                    _ = try parseFilter(text, dialect, limits: limits)
                }
            }
        }
        let text =
            String(repeating: "tolower(", count: 10_000) + "a" + String(repeating: ")", count: 10_000) + " eq 'a'"
        expectTooDeep(text)
        let casts = String(repeating: "cast(", count: 10_000) + "a" + String(repeating: ",Edm.String)", count: 10_000)
        expectTooDeep(casts)
        let lists = String(repeating: "a in (", count: 10_000) + "a" + String(repeating: ")", count: 10_000)
        expectTooDeep(lists)
        let minus = String(repeating: "-", count: 10_000) + "a eq 1"
        expectTooDeep(minus)
    }

    @Test("a 100,000-term chain fails fast without recursion")
    func longChain() {
        let term = "a eq 1"
        let text = Array(repeating: term, count: 100_000).joined(separator: " or ")
        let limits = QueryLimits(maximumLength: 2_000_000, maximumDepth: 100)
        let clock = ContinuousClock()
        let elapsed = clock.measure {
            for dialect in ProtocolVersion.allCases {
                expectQueryError(.tooDeep, option: "$filter") { _ = try parseFilter(text, dialect, limits: limits) }
            }
            let andChain = Array(repeating: term, count: 100_000).joined(separator: " and ")
            expectQueryError(.tooDeep) { _ = try parseFilter(andChain, limits: limits) }
        }
        #expect(elapsed < .seconds(5))
    }

    @Test func depthLimitBoundary() throws {
        let limits = QueryLimits(maximumLength: 65_536, maximumDepth: 3)
        // Nesting of parentheses counts.
        #expect(try parseFilter("(((a)))", limits: limits) == field("a"))
        expectQueryError(.tooDeep, at: 3) { _ = try parseFilter("((((a))))", limits: limits) }
        // And so does the depth of the tree: or(or(eq, eq), eq) is 3 deep.
        #expect(throws: Never.self) { try parseFilter("a eq 1 or a eq 2 or a eq 3", limits: limits) }
        expectQueryError(.tooDeep) { _ = try parseFilter("a eq 1 or a eq 2 or a eq 3 or a eq 4", limits: limits) }
        expectQueryError(.tooDeep) { _ = try parseFilter("not not not not a", limits: limits) }
    }

    @Test func ninetyNineTermChainParsesAtTheDefaultDepth() throws {
        let text = Array(repeating: "a eq 1", count: 99).joined(separator: " or ")
        let parsed = try parseFilter(text)
        #expect(try parseFilter(parsed.odata(dialect: .v3)) == parsed)
    }
}

// MARK: - Query strings

@Suite("OData query strings")
struct ODataQueryStringTests: ODataTestSupport {
    @Test func wholeQuery() throws {
        let query = try TableQuery(
            odata:
                "$filter=(price eq 10)&$orderby=title&$skip=10&$top=20&$select=price,title&$inlinecount=allpages&__includeDeleted=true",
            dialect: .v2
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
        for dialect in ProtocolVersion.allCases {
            #expect(try TableQuery(odata: "", dialect: dialect) == TableQuery())
            #expect(try TableQuery(odata: "$filter=", dialect: dialect) == TableQuery())
            #expect(try TableQuery(odata: "$filter= ", dialect: dialect) == TableQuery())
            #expect(try TableQuery(odata: "$orderby=&$select=", dialect: dialect) == TableQuery())
            #expect(try TableQuery(odata: "&&", dialect: dialect) == TableQuery())
        }
    }

    @Test func percentEncodedInput() throws {
        let query = try TableQuery(odata: "$filter=%28stringProperty%20eq%20%27a%26b%27%29&%24top=5", dialect: .v3)
        #expect(query.filter == binary(.equal, field("stringProperty"), string("a&b")))
        #expect(query.top == 5)
        let raw = try TableQuery(odata: "$filter=(title eq 'How to dial # & such stuff?')&$top=5", dialect: .v3)
        #expect(raw.filter == binary(.equal, field("title"), string("How to dial # & such stuff?")))
        #expect(raw.top == 5)
        // As Node's query parser and ASP.NET read it (and form encoders write it): '+' is a space, and
        // a literal plus is %2B.
        let plus = try TableQuery(odata: "$filter=x+eq+'a+b'", dialect: .v3)
        #expect(plus.filter == binary(.equal, field("x"), string("a b")))
        let literal = try TableQuery(odata: "$filter=x eq 'a%2Bb'", dialect: .v3)
        #expect(literal.filter == binary(.equal, field("x"), string("a+b")))
    }

    @Test func countOptions() throws {
        #expect(try TableQuery(odata: "$count=true", dialect: .v3).includeTotalCount)
        #expect(try TableQuery(odata: "$count=TRUE", dialect: .v3).includeTotalCount)
        #expect(try !TableQuery(odata: "$count=false", dialect: .v3).includeTotalCount)
        #expect(try TableQuery(odata: "$inlinecount=allpages", dialect: .v2).includeTotalCount)
        #expect(try TableQuery(odata: "$inlinecount=allpages", dialect: .v3).includeTotalCount)
        #expect(try !TableQuery(odata: "$inlinecount=none", dialect: .v2).includeTotalCount)
        #expect(try TableQuery(odata: "$count=false&$inlinecount=allpages", dialect: .v2).includeTotalCount)
        expectQueryError(.invalidOption, option: "$count") { _ = try TableQuery(odata: "$count=yes", dialect: .v3) }
        expectQueryError(.invalidOption, option: "$count") { _ = try TableQuery(odata: "$count", dialect: .v3) }
        expectQueryError(.invalidOption, option: "$inlinecount") {
            _ = try TableQuery(odata: "$inlinecount=some", dialect: .v2)
        }
    }

    @Test func includeDeleted() throws {
        #expect(try TableQuery(odata: "__includedeleted=true", dialect: .v3).includeDeleted)
        #expect(try TableQuery(odata: "__includeDeleted=true", dialect: .v2).includeDeleted)
        #expect(try TableQuery(odata: "__INCLUDEDELETED=True", dialect: .v2).includeDeleted)
        #expect(try !TableQuery(odata: "__includedeleted=false", dialect: .v3).includeDeleted)
        #expect(try !TableQuery(odata: "__includedeleted=1", dialect: .v3).includeDeleted)
    }

    @Test("$skip and $top", arguments: ["$skip", "$top"])
    func skipAndTop(option: String) throws {
        #expect(
            try TableQuery(odata: "\(option)=0", dialect: .v3)
                == TableQuery(skip: option == "$skip" ? 0 : nil, top: option == "$top" ? 0 : nil)
        )
        let query = try TableQuery(odata: "\(option)=42", dialect: .v2)
        #expect((option == "$skip" ? query.skip : query.top) == 42)
        for bad in ["-1", "NaN", "1.5", "", " ", "%2B1", "0x10", "1e3", "99999999999999999999999", "ten", "%2D1"] {
            for dialect in ProtocolVersion.allCases {
                expectQueryError(.invalidOption, option: option) {
                    _ = try TableQuery(odata: "\(option)=\(bad)", dialect: dialect)
                }
            }
        }
    }

    @Test func unknownOptions() throws {
        // Parameters without '$' are ignored: the peers send `orderby=releaseDate asc`.
        let query = try TableQuery(
            odata: "$filter=year eq 1&orderby=releaseDate asc&foo=bar&ZUMO-API-VERSION=2.0.0",
            dialect: .v3
        )
        #expect(query == TableQuery(filter: binary(.equal, field("year"), int(1))))
        expectQueryError(.invalidOption, option: "$expand") { _ = try TableQuery(odata: "$expand=x", dialect: .v3) }
        expectQueryError(.invalidOption, option: "$foo") { _ = try TableQuery(odata: "$top=1&$foo", dialect: .v2) }
    }

    @Test func optionNamesIgnoreCase() throws {
        let query = try TableQuery(odata: "$FILTER=a eq 1&$Top=3&$ORDERBY=a", dialect: .v3)
        #expect(query == TableQuery(filter: binary(.equal, field("a"), int(1)), orderBy: [.field("a")], top: 3))
    }

    @Test("a repeated option is an error")
    func repeatedOption() {
        expectQueryError(.invalidOption, option: "$top") { _ = try TableQuery(odata: "$top=1&$top=2", dialect: .v3) }
        expectQueryError(.invalidOption, option: "$filter") {
            _ = try TableQuery(odata: "$filter=a&$Filter=b", dialect: .v3)
        }
    }

    @Test func errorsNameTheOptionAndPosition() {
        expectQueryError(.syntax, at: 7, option: "$filter") {
            _ = try TableQuery(odata: "$filter=year gt", dialect: .v3)
        }
        expectQueryError(.syntax, at: 7, option: "$filter") {
            _ = try TableQuery(odata: "$top=5&$filter=year%20gt", dialect: .v3)
        }
        expectQueryError(.syntax, at: 6, option: "$filter") {
            _ = try TableQuery(odata: "$filter=(year - 1900) ge 100", dialect: .v3)
        }
        expectQueryError(.tooLong) {
            _ = try TableQuery(odata: "$filter=a eq 1", dialect: .v3, limits: QueryLimits(maximumLength: 10))
        }
        let error = queryError { _ = try TableQuery(odata: "$filter=year gt", dialect: .v3) }
        #expect(error?.description == "invalid query: $filter at 7: expected an operand after 'gt'")
    }

    @Test func orderBy() throws {
        func orderBy(_ text: String) throws(QueryError) -> [SortKey] {
            try TableQuery(odata: "$orderby=" + text, dialect: .v3).orderBy
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
            try TableQuery(odata: "$select=" + text, dialect: .v3).select
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
            _ = try TableQuery(odata: "$filter=(year - 1900) ge 100", dialect: .v3)
        }
        expectQueryError(.syntax, option: "$orderby") {
            _ = try TableQuery(odata: "$orderby=duration fizz", dialect: .v3)
        }
        expectQueryError(.syntax, option: "$select") { _ = try TableQuery(odata: "$select=year rating", dialect: .v3) }
        for text in ["$skip=-1", "$skip=NaN", "$top=-1", "$top=NaN"] {
            expectQueryError(.invalidOption) { _ = try TableQuery(odata: text, dialect: .v3) }
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

    @Test func itemsAccessor() {
        var parameters = ODataParameters([("a", "1")])
        parameters.items.append(("b", "2"))
        #expect(parameters.rawQueryString == "a=1&b=2")
        #expect(parameters == ODataParameters(parsing: "a=1&b=2"))
        #expect(Set([parameters, ODataParameters(parsing: "a=1&b=2")]).count == 1)
    }
}
