import Testing

@testable import FerryServer

@Suite("ASCII search in request and answer text")
struct ASCIISearchTests {
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
}
