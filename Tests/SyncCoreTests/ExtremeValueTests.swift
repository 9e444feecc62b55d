import Testing

@testable import SyncCore

/// Extreme numbers, lengths and dates: each of these trapped (killing the process, a server with
/// it) before the arithmetic on the query path was made total. A trap ends the test run, so these
/// tests pass by returning at all, and then pin the value the evaluator defines.
@Suite("Queries with extreme values")
struct ExtremeValueTests: ODataTestSupport {
    let evaluator = QueryEvaluator()
    let row: JSONObject = ["id": "r1", "big": .int(.max), "small": .int(.min), "text": "hello", "huge": 1e308]

    func value(_ expression: QueryExpression) -> JSONValue { evaluator.evaluate(expression, in: row) }

    // MARK: substring

    @Test func substringWithTheLargestLengthIsTheRestOfTheText() throws {
        // The probe that crashed the server: Int64(from) + length overflowed.
        let query = try TableQuery(
            odata: "$filter=substring('hello',1,9223372036854775807) eq 'x'", protocolVersion: .v3)
        #expect(try evaluator.evaluate(query, over: [row]).items.isEmpty)
        let matching = try TableQuery(
            odata: "$filter=substring('hello',1,9223372036854775807) eq 'ello'", protocolVersion: .v3)
        #expect(try evaluator.evaluate(matching, over: [row]).items.count == 1)
        #expect(value(call(.substring, string("hello"), int(1), int(.max))) == "ello")
        #expect(value(call(.substring, field("text"), int(5), int(.max))) == "")
        #expect(value(call(.substring, field("text"), int(2), field("big"))) == "llo")
    }

    @Test func substringClampsEveryStartAndLength() {
        #expect(value(call(.substring, field("text"), field("big"))) == "")
        #expect(value(call(.substring, field("text"), field("big"), field("big"))) == "")
        #expect(value(call(.substring, field("text"), field("small"))) == "hello")
        #expect(value(call(.substring, field("text"), field("small"), field("big"))) == "hello")
        #expect(value(call(.substring, field("text"), field("small"), int(2))) == "he")
        #expect(value(call(.substring, field("text"), int(1), field("small"))) == "")
        #expect(value(call(.substring, field("text"), int(1), int(-1))) == "")
        #expect(value(call(.substring, field("text"), int(.max), int(.min))) == "")
        // A start or length that is not an integer, or a wrong argument count, gives null.
        #expect(value(call(.substring, field("text"), double(1))) == .null)
        #expect(value(call(.substring, field("text"), int(1), field("huge"))) == .null)
        #expect(value(call(.substring, field("text"))) == .null)
        #expect(value(call(.substring, field("text"), int(1), int(1), int(1))) == .null)
    }

    // MARK: arithmetic and casts

    @Test func integerOverflowBecomesFloatingPointInEveryOperator() {
        #expect(value(.binary(.add, field("big"), field("big"))) == .double(2 * 9_223_372_036_854_775_807.0))
        #expect(value(.binary(.subtract, field("small"), int(1))) == .double(-9_223_372_036_854_775_808.0 - 1))
        #expect(value(.binary(.multiply, field("small"), int(-1))) == .double(9_223_372_036_854_775_808.0))
        #expect(value(.binary(.divide, field("small"), int(-1))) == .double(9_223_372_036_854_775_808.0))
        #expect(value(.binary(.modulo, field("small"), int(-1))) == 0)
        #expect(value(.unary(.negate, field("small"))) == .double(9_223_372_036_854_775_808.0))
        #expect(value(.binary(.multiply, field("huge"), field("huge"))) == .double(.infinity))
        #expect(value(.function(.round, [.binary(.multiply, field("huge"), int(10))])) == .double(.infinity))
    }

    @Test func castsOfValuesThatDoNotFitGiveNull() {
        for type in [EdmType.int32, .int64] {
            #expect(value(.cast(field("huge"), type)) == .null)
            #expect(value(.cast(double(.nan), type)) == .null)
            #expect(value(.cast(double(.infinity), type)) == .null)
            #expect(value(.cast(double(-9.3e18), type)) == .null)
            #expect(value(.cast(string("99999999999999999999"), type)) == .null)
        }
        #expect(value(.cast(field("big"), .int64)) == .int(.max))
        #expect(value(.cast(field("big"), .int32)) == .null)
        #expect(value(.cast(int(2_147_483_648), .int32)) == .null)
        #expect(value(.cast(int(-2_147_483_648), .int32)) == -2_147_483_648)
        #expect(value(.cast(double(2_147_483_647.9), .int32)) == 2_147_483_647)
        #expect(value(.cast(field("small"), .double)) == .double(-9_223_372_036_854_775_808.0))
        for text in ["1e999", "-1e999", "inf", "nan", "NaN"] {
            #expect(value(.cast(string(text), .double)) == .null)
            #expect(value(.cast(string(text), .decimal)) == .null)
        }
        #expect(value(.cast(string("1e308"), .double)) == .double(1e308))
    }

    // MARK: dates

    @Test func theFirstAndLastInstantsHaveDatesAndMidnights() {
        let first = Timestamp(millisecondsSince1970: .min)
        let last = Timestamp(millisecondsSince1970: .max)
        // The first instant's date starts before the first instant: its midnight saturates.
        #expect(first.date.midnightUTC == first)
        #expect(last.date.midnightUTC <= last)
        #expect(first.iso8601.hasPrefix("-292275055-"))
        #expect(last.iso8601.hasPrefix("292278994-"))
        let compared = QueryExpression.binary(
            .lessThanOrEqual, .literal(.dateTimeOffset(first)), .literal(.date(first.date)))
        #expect(value(compared) == true)
        #expect(
            value(.cast(.cast(.literal(.dateTimeOffset(first)), .date), .dateTimeOffset))
                == .string(first.iso8601))
        #expect(value(call(.year, .literal(.dateTimeOffset(first)))) == -292_275_055)
        #expect(value(call(.year, .literal(.dateTimeOffset(last)))) == 292_278_994)
    }

    @Test func datesWithExtremeYearsNeitherTrapNorWrap() throws {
        let latest = try #require(CalendarDate(year: .max, month: 12, day: 31))
        let earliest = try #require(CalendarDate(year: .min, month: 1, day: 1))
        #expect(latest.midnightUTC == Timestamp(millisecondsSince1970: .max))
        #expect(earliest.midnightUTC == Timestamp(millisecondsSince1970: .min))
        #expect(earliest < latest)
        #expect(earliest.iso8601 == "-\(Int.min.magnitude)-01-01")
        #expect(CalendarDate(daysSince1970: .max).year == 1_000_000_000)
        #expect(CalendarDate(daysSince1970: .min).year == -1_000_000_000)
        #expect(CalendarDate(year: 999_999_999, month: 2, day: 29) == nil)
        let late = try #require(CalendarDate(year: 999_999_999, month: 12, day: 31))
        #expect(CalendarDate(daysSince1970: late.daysSince1970) == late)
        var garbled = late
        garbled.month = .max
        garbled.day = .min
        _ = garbled.daysSince1970
        let literal = QueryExpression.literal(.date(latest))
        #expect(
            value(.binary(.greaterThan, literal, .literal(.dateTimeOffset(Timestamp(millisecondsSince1970: 0)))))
                == true)
        #expect(value(.cast(literal, .dateTimeOffset)) == .string(Timestamp(millisecondsSince1970: .max).iso8601))
        #expect(value(call(.year, literal)) == .int(Int64(Int.max)))
    }

    // MARK: the parser

    @Test func extremeLiteralsParseOrFailWithAQueryError() throws {
        #expect(try parseFilter("n eq -9223372036854775808") == binary(.equal, field("n"), int(.min)))
        #expect(try parseFilter("n eq 9223372036854775807") == binary(.equal, field("n"), int(.max)))
        expectQueryError(.syntax) { _ = try parseFilter("n eq 9223372036854775808") }
        expectQueryError(.syntax) { _ = try parseFilter("n eq -9223372036854775809") }
        expectQueryError(.syntax) { _ = try parseFilter("n eq 1e309") }
        expectQueryError(.syntax) { _ = try parseFilter("n eq -1e309") }
        expectQueryError(.syntax) { _ = try parseFilter("n eq 99999999999999999999999999L") }
        // -(-Int64.min) does not fold to an integer: it stays a negation, which the evaluator makes a double.
        let negated = try parseFilter("-(-9223372036854775808) eq n")
        #expect(evaluator.evaluate(negated, in: ["n": 9_223_372_036_854_775_808.0]) == true)
        #expect(try parseFilter("n lt INF") == binary(.lessThan, field("n"), double(.infinity)))
        #expect(evaluator.evaluate(try parseFilter("n ne NaN"), in: ["n": 1]) == true)
        #expect(
            evaluator.evaluate(try parseFilter("(1e308 mul 1e308) sub (1e308 mul 1e308) eq n"), in: ["n": 1]) == false)
        expectQueryError(.typeMismatch) { _ = try parseFilter("cast(2147483648, Edm.Int32) eq n") }
        expectQueryError(.typeMismatch) { _ = try parseFilter("cast(1e300, Edm.Int64) eq n") }
        expectQueryError(.typeMismatch) { _ = try parseFilter("cast(NaN, Edm.Int32) eq n") }
        expectQueryError(.syntax) { _ = try parseFilter("cast('99999999999', Edm.Int32) eq n") }
        #expect(try parseFilter("cast(-2147483648, Edm.Int32) eq n") == binary(.equal, int(-2_147_483_648), field("n")))
    }

    @Test func extremeDatesParseOrFailWithAQueryError() throws {
        _ = try parseFilter("d lt 9999-12-31T23:59:59.999+23:59")
        _ = try parseFilter("d gt 0000-01-01T00:00:00-23:59")
        // Offsets that carry the instant out of years 0000 to 9999 (no text of it parses back).
        expectQueryError(.syntax) { _ = try parseFilter("d lt 9999-12-31T23:59:59.999-23:59") }
        expectQueryError(.syntax) { _ = try parseFilter("d gt 0000-01-01T00:00:00+23:59") }
        _ = try parseFilter("year(0000-01-01) eq 0")
        expectQueryError(.syntax) { _ = try parseFilter("d eq 99999-01-01") }
        expectQueryError(.syntax) { _ = try parseFilter("d eq 999999999-01-01T00:00:00Z") }
        expectQueryError(.syntax) { _ = try parseFilter("d eq datetimeoffset'999999999-01-01T00:00:00Z'") }
        expectQueryError(.syntax) { _ = try parseFilter("d eq 2024-13-01") }
        expectQueryError(.syntax) { _ = try parseFilter("d eq 99:99:99") }
        #expect(Timestamp(iso8601: "+999999999-01-01T00:00:00Z") == nil)
        #expect(CalendarDate(iso8601: "-999999999-01-01") == nil)
    }

    @Test func topAndSkipBeyondIntAreQueryErrors() throws {
        let largest = try TableQuery(odata: "$top=9223372036854775807&$skip=9223372036854775807", protocolVersion: .v3)
        #expect(largest.top == .max && largest.skip == .max)
        #expect(try evaluator.evaluate(largest, over: [row]).items.isEmpty)
        expectQueryError(.invalidOption) { _ = try TableQuery(odata: "$top=9223372036854775808", protocolVersion: .v3) }
        expectQueryError(.invalidOption) {
            _ = try TableQuery(odata: "$skip=99999999999999999999", protocolVersion: .v3)
        }
        expectQueryError(.invalidOption) { _ = try TableQuery(odata: "$top=-1", protocolVersion: .v3) }
        // Built in code, negative values mean an empty page and no skip.
        var negative = TableQuery()
        negative.top = .min
        negative.skip = .min
        #expect(try evaluator.evaluate(negative, over: [row]).items.isEmpty)
        negative.top = nil
        #expect(try evaluator.evaluate(negative, over: [row]).items.count == 1)
    }
}
