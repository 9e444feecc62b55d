import SyncCore
import Testing

@testable import FerryServer

@Suite("Text the server reads and writes on its hot paths")
struct ServerTextTests {
    @Test func findsThePatternAnywhereWithoutCaseAndNothingElse() {
        #expect("application/json; charset=utf-8".utf8.containsASCII("json"))
        #expect("application/problem+JSON".utf8.containsASCII("json"))
        #expect("JSON".utf8.containsASCII("json"))
        #expect(!"application/jso".utf8.containsASCII("json"))
        #expect(!"text/plain".utf8.containsASCII("json"))
        #expect(!"".utf8.containsASCII("json"))
        #expect("https://example.org/tables/todo".utf8.containsASCII("://"))
        #expect(!"todo/a:b//c".utf8.containsASCII("://"))
        // Not ASCII: compared byte for byte, never folded.
        #expect(!"ｊｓｏｎ".utf8.containsASCII("json"))
        #expect("é-json".utf8.containsASCII("json"))
    }

    @Test func httpDatesAreRightWhateverSecondCameBefore() throws {
        let cases: [(Int64, String)] = [
            (784_111_777_000, "Sun, 06 Nov 1994 08:49:37 GMT"), (784_111_777_999, "Sun, 06 Nov 1994 08:49:37 GMT"),
            (784_111_778_000, "Sun, 06 Nov 1994 08:49:38 GMT"), (0, "Thu, 01 Jan 1970 00:00:00 GMT"),
            (-1, "Wed, 31 Dec 1969 23:59:59 GMT"), (1_724_444_574_291, "Fri, 23 Aug 2024 20:22:54 GMT"),
        ]
        // Each in turn, twice, and interleaved: a remembered second never answers for another.
        for (milliseconds, text) in cases + cases.reversed() + cases {
            #expect(HTTPDate.format(Timestamp(millisecondsSince1970: milliseconds)) == text, "\(milliseconds)")
            #expect(HTTPDate.format(Timestamp(millisecondsSince1970: milliseconds)) == text, "\(milliseconds)")
        }
    }
}
