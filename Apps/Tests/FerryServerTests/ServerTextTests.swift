import ServerTestSupport
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

    /// The query's escapes must make UTF-8, as the path's must: `'%FF'` matched a stored U+FFFD.
    @Test func aQueryStringIsUTF8OnceDecoded() {
        for valid in ["", "$top=5", "$filter=title%20eq%20'caf%C3%A9'", "a=100%", "a=%zz", "a=%C3%A9%", "a=%4"] {
            #expect(TableRequest.decodesAsUTF8(valid), "\(valid)")
        }
        for invalid in ["$filter=title%20eq%20'%FF'", "a=%C0%AF", "a=%ED%A0%80", "a=%C3"] {
            #expect(!TableRequest.decodesAsUTF8(invalid), "\(invalid)")
        }
    }

    @Test func headersAreFoundByNameInAnyCaseAndNothingElse() {
        let headers = RequestHeaders([
            ("Content-Type", "application/json"), ("If-Match", "\"1\""), ("if-match", "\"2\""), ("X-a[", "x"),
        ])
        #expect(headers["content-type"] == "application/json")
        #expect(headers["CONTENT-TYPE"] == "application/json")
        #expect(headers["Content-Typ"] == nil)
        #expect(headers["Content-Types"] == nil)
        #expect(headers[""] == nil)
        // Only letters fold: `[` (0x5B) is not `{` (0x7B).
        #expect(headers["x-A["] == "x")
        #expect(headers["x-a{"] == nil)
        #expect(headers.values("IF-MATCH") == ["\"1\"", "\"2\""])
        #expect(headers.list("If-Match") == "\"1\", \"2\"")
    }

    /// RFC 9110 § 8.8.2.1: no answer is modified after it was sent. `Date` is moved up to
    /// `Last-Modified` when Hummingbird's cached `Date` lags; `Last-Modified` stays as stamped.
    @Test func anAnswerIsNeverDatedBeforeItsLastModified() async throws {
        #expect(
            HTTPDate.answerDate("Sun, 06 Nov 1994 08:49:37 GMT", lastModified: "Sun, 06 Nov 1994 08:49:38 GMT")
                == "Sun, 06 Nov 1994 08:49:38 GMT")
        #expect(
            HTTPDate.answerDate("Sun, 06 Nov 1994 08:49:38 GMT", lastModified: "Sun, 06 Nov 1994 08:49:38 GMT") == nil)
        #expect(
            HTTPDate.answerDate("Sun, 06 Nov 1994 08:49:39 GMT", lastModified: "Sun, 06 Nov 1994 08:49:38 GMT") == nil)
        #expect(
            HTTPDate.answerDate(nil, lastModified: "Sun, 06 Nov 1994 08:49:38 GMT") == "Sun, 06 Nov 1994 08:49:38 GMT")
        #expect(HTTPDate.answerDate("Sun, 06 Nov 1994 08:49:37 GMT", lastModified: "garbage") == nil)
        // Over HTTP: writes spread over more than two seconds cross the cache's refreshes (before,
        // 9 of 40 were dated before they were modified).
        let configuration = ServerConfiguration(host: "127.0.0.1", port: 0, logger: .quietTest)
        let server = try await ReferenceServer.startInMemory(configuration)
        for step in 0..<40 {
            let answer = try await LoopbackHTTP.send(
                port: server.port, method: "POST", target: "/tables/dated",
                headers: [("Content-Type", "application/json")], body: Array(#"{"id":"d\#(step)"}"#.utf8))
            #expect(answer.status == 201)
            let sent = answer.headers["date"].flatMap { HTTPDate.parse($0) }
            let modified = answer.headers["last-modified"].flatMap { HTTPDate.parse($0) }
            #expect(sent != nil && modified != nil && sent! >= modified!, "\(answer.headers)")
            try await Task.sleep(for: .milliseconds(55))
        }
        try await server.shutdown()
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
