import StoreConformance
import Testing

@testable import SyncCore

@Suite("OData $filter errors and hostile input")
struct ODataFilterErrorTests: ODataTestSupport {
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
            for protocolVersion in ProtocolVersion.allCases {
                // Either result is fine; the point is that nothing traps.
                _ = try? parseFilter(input, protocolVersion)
                _ = try? TableQuery(odata: "$filter=" + input, protocolVersion: protocolVersion)
                _ = try? TableQuery(odata: input, protocolVersion: protocolVersion)
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
            for protocolVersion in ProtocolVersion.allCases {
                if let parsed = try? parseFilter(input, protocolVersion) {
                    // Whatever parses must also re-encode and parse back.
                    let back = try? parseFilter(parsed.odata(protocolVersion: protocolVersion), protocolVersion)
                    if protocolVersion == .v3 || ODataEncoderTests.usesOnlyV2Forms(parsed) {
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
            for protocolVersion in ProtocolVersion.allCases {
                guard
                    let parsed = queryErrorOrValue({ () throws(QueryError) in try parseFilter(input, protocolVersion) })
                else { continue }
                parsedCount += 1
                let encoded = parsed.odata(protocolVersion: protocolVersion)
                let back = try? parseFilter(encoded, protocolVersion)
                if protocolVersion == .v3 || ODataEncoderTests.usesOnlyV2Forms(parsed) {
                    #expect(back == parsed, "\(protocolVersion.rawValue): \(input) → \(encoded)")
                } else if let back {
                    #expect(
                        (try? parseFilter(back.odata(protocolVersion: protocolVersion), protocolVersion)) == back,
                        "\(input)")
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
            expectQueryError(.tooLong) { _ = try TableQuery(odata: "$filter=" + text, protocolVersion: .v3) }
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
            for protocolVersion in ProtocolVersion.allCases {
                expectQueryError(.tooDeep, option: "$filter", sourceLocation: sourceLocation) {
                    _ = try parseFilter(text, protocolVersion, limits: limits)
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
            for protocolVersion in ProtocolVersion.allCases {
                expectQueryError(.tooDeep, option: "$filter") {
                    _ = try parseFilter(text, protocolVersion, limits: limits)
                }
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
        #expect(try parseFilter(parsed.odata(protocolVersion: .v3)) == parsed)
    }
}
