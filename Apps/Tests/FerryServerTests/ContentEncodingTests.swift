import FerryServer
import Foundation
import Prometheus
import ServerTestSupport
import SyncCore
import Testing

/// The hostile-client probe: `Content-Encoding` on a request body was ignored, so a gzipped body was
/// read as JSON (a 400 "invalid JSON") and `br` on plain JSON was stored as if the header were not
/// there. The server decodes no content coding, and RFC 9110 §8.4.1 says such a request is 415.
@Suite("Content codings of request bodies", .timeLimit(.minutes(5)))
struct ContentEncodingTests {
    /// `{"id":"g1","title":"zipped"}`, gzipped.
    static let gzipped: [UInt8] = [
        0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x03, 0xab, 0x56, 0xca, 0x4c, 0x51, 0xb2, 0x52, 0x4a,
        0x37, 0x54, 0xd2, 0x51, 0x2a, 0xc9, 0x2c, 0xc9, 0x49, 0x05, 0x72, 0xaa, 0x32, 0x0b, 0x0a, 0x52, 0x53, 0x94,
        0x6a, 0x01, 0xb0, 0x61, 0xdb, 0x4a, 0x1c, 0x00, 0x00, 0x00,
    ]

    @Test func aCodedBodyIs415AndNothingIsStored() async throws {
        let (live, _) = try await MetricsTests.start()
        let json = [("Content-Type", "application/json")]
        let zipped = try await live.send(
            "POST", "/tables/todo", headers: json + [("Content-Encoding", "gzip")], body: Self.gzipped)
        #expect(zipped.status == 415, "\(zipped.text)")
        #expect(zipped.json?["code"] == "unsupportedContentEncoding", "\(zipped.text)")
        #expect(zipped.json?["error"]?.stringValue?.contains("gzip") == true, "\(zipped.text)")
        #expect(zipped.header("Accept-Encoding") == "identity")
        #expect(!zipped.text.contains("\n"), "one line: \(zipped.text)")

        // A coding the body does not even have: refused all the same, not stored as it is.
        let plain = Array(#"{"id":"b1"}"#.utf8)
        for coding in ["br", "GZIP", "identity, gzip", "x-custom"] {
            let reply = try await live.send(
                "POST", "/tables/todo", headers: json + [("Content-Encoding", coding)], body: plain)
            #expect(reply.status == 415, "\(coding): \(reply.text)")
        }
        let put = try await live.send(
            "PUT", "/tables/todo/b1", headers: json + [("Content-Encoding", "deflate")], body: plain)
        #expect(put.status == 415, "\(put.text)")
        let batch = try await live.send(
            "POST", "/tables/$batch", headers: json + [("Content-Encoding", "br")],
            body: Array(#"{"requests":[{"method":"POST","url":"todo","body":{"id":"b2"}}]}"#.utf8))
        #expect(batch.status == 415, "\(batch.text)")
        for id in ["g1", "b1", "b2"] {
            #expect(try await live.send("GET", "/tables/todo/\(id)").status == 404, "\(id) was stored")
        }

        // `identity` (any case) is no coding at all.
        let identity = try await live.send(
            "POST", "/tables/todo", headers: json + [("Content-Encoding", "Identity")], body: plain)
        #expect(identity.status == 201, "\(identity.text)")

        // Counted as the refusals they are.
        let samples = try await MetricsTests.scrape(port: live.server.port)
        let refused = MetricsTests.request("/tables/{table}", "POST", 415, table: "todo")
        #expect(samples[MetricsTests.requests, refused] == 5, "\(samples.text)")
        try await live.stop()
    }

    /// A transfer coding but `chunked` (`gzip, chunked`): NIO's parser takes the chunks, and the
    /// gzipped bytes were stored as if they were the JSON. RFC 9112 § 6.1: 501.
    @Test func aTransferCodingButChunkedIs501AndNothingIsStored() async throws {
        let (live, _) = try await MetricsTests.start()
        let body = #"{"id":"t1"}"#
        for coding in ["gzip, chunked", "deflate,chunked", "x-custom , chunked"] {
            let request =
                "POST /tables/todo HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
                + "Transfer-Encoding: \(coding)\r\n\r\n"
                + String(body.utf8.count, radix: 16) + "\r\n\(body)\r\n0\r\n\r\nGET /health HTTP/1.1\r\nHost: a\r\n"
                + "Connection: close\r\n\r\n"
            let (text, _) = try await HardeningTests.exchangeRaw(live.server.port, request, seconds: 20)
            #expect(text.hasPrefix("HTTP/1.1 501 "), "\(coding): \(text)")
            #expect(text.contains("unsupportedTransferEncoding") && text.contains("Content-Length"), "\(text)")
            // The body was read whole (chunked), so the connection goes on to the next request.
            #expect(text.components(separatedBy: "HTTP/1.1 200 ").count == 2, "\(coding): \(text)")
        }
        #expect(try await live.send("GET", "/tables/todo/t1").status == 404, "t1 was stored")
        // Chunked alone is the framing every client may use.
        let chunked =
            "POST /tables/todo HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
            + "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            + String(body.utf8.count, radix: 16) + "\r\n\(body)\r\n0\r\n\r\n"
        let (text, _) = try await HardeningTests.exchangeRaw(live.server.port, chunked, seconds: 20)
        #expect(text.hasPrefix("HTTP/1.1 201 "), "\(text)")
        try await live.stop()
    }
}
