import Foundation
import NIOHTTP1
import NIOHTTPCompression
import ServerTestSupport
import SyncCore
import Testing
import Transport

@testable import FerryServer

#if canImport(Glibc)
    import Glibc
#endif

/// `ferry serve --compress`: JSON answers of 1 KiB or more are compressed for clients that ask;
/// small answers, change feeds and attachment downloads never are, and nothing is by default.
@Suite("Compressed answers", .timeLimit(.minutes(3)))
struct AnswerCompressionTests {
    static let gzip = [("Accept-Encoding", "gzip")]

    /// A server (compressing or not) with 200 items in `todo`.
    static func start(compressing: Bool) async throws -> LiveServer {
        let live = try await LiveServer.start(tables: [], compressesAnswers: compressing)
        let requests = (0..<200).map { index -> JSONValue in
            ["method": "POST", "url": "todo", "body": ["id": .string("t\(index)"), "title": "buy milk"]]
        }
        let batch = try await live.send("POST", "/tables/$batch", json: ["requests": .array(requests)])
        #expect(batch.status == 200, "\(batch.text)")
        return live
    }

    @Test func pagesAreCompressedForClientsThatAsk() async throws {
        let live = try await Self.start(compressing: true)
        let page = try await live.send("GET", "/tables/todo?%24top=200", headers: Self.gzip)
        #expect(page.status == 200)
        #expect(page.header("Content-Encoding") == "gzip", "\(page.headers)")
        #expect(page.body.starts(with: [0x1F, 0x8B]), "gzip's magic")
        let plain = try await live.send("GET", "/tables/todo?%24top=200")
        #expect(plain.header("Content-Encoding") == nil && plain.json != nil, "not asked: as it is")
        #expect(page.body.count * 5 < plain.body.count, "\(page.body.count) of \(plain.body.count) bytes")
        // Ferry's client asks and inflates: the whole page comes.
        let remote = HTTPRemote(
            HTTPRemote.Configuration(serverURL: URL(string: "http://127.0.0.1:\(live.server.port)")!))
        #expect(try await remote.onlineTable("todo").query(TableQuery().top(200)).items.count == 100)
        // HEAD says what GET would, uncompressed (the compressor gave the length of nothing gzipped).
        let head = try await live.send("HEAD", "/tables/todo?%24top=200", headers: Self.gzip)
        #expect(head.status == 200 && head.header("Content-Encoding") == nil, "\(head.headers)")
        #expect(head.header("Content-Length") == plain.header("Content-Length"), "\(head.headers)")
        // A small answer is not worth it.
        let item = try await live.send("GET", "/tables/todo/t1", headers: Self.gzip)
        #expect(item.status == 200 && item.header("Content-Encoding") == nil, "\(item.headers)")
        // A batch's answer (compressed: 100 items) comes whole to Ferry's client too.
        let writes = (0..<100).map {
            RemoteWrite(
                table: "todo", kind: .insert, itemID: "b\($0)", body: ["id": .string("b\($0)"), "title": "tea"])
        }
        let answers = try await remote.sendBatch(writes)
        #expect(answers.count == 100)
        #expect(answers.allSatisfy { (try? $0.get())??["title"] == "tea" }, "\(answers.prefix(2))")
        try await live.stop()
    }

    @Test func nothingIsCompressedByDefault() async throws {
        let live = try await Self.start(compressing: false)
        let page = try await live.send("GET", "/tables/todo?%24top=200", headers: Self.gzip)
        #expect(page.status == 200 && page.header("Content-Encoding") == nil, "\(page.headers)")
        #expect(page.json?["items"]?.arrayValue?.count == 100, "a page of the default size")
        try await live.stop()
    }

    @Test func theChangeFeedIsNeverCompressed() async throws {
        let live = try await Self.start(compressing: true)
        let fd = try LoopbackHTTP.connect(port: live.server.port)
        defer { close(fd) }
        try LoopbackHTTP.writeAll(
            fd,
            Array(
                "GET /tables/$changes HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nAccept-Encoding: gzip\r\n\r\n"
                    .utf8))
        let (bytes, _) = LoopbackHTTP.readUntilClosed(fd, seconds: 10) {
            $0.count > 0 && String(decoding: $0, as: UTF8.self).contains("\r\n\r\n")
        }
        let head = String(decoding: bytes, as: UTF8.self).lowercased()
        #expect(head.hasPrefix("http/1.1 200"), "\(head)")
        #expect(head.contains("text/event-stream") && !head.contains("content-encoding"), "\(head)")
        try await live.stop()
    }

    /// The rule itself, for the answers a test cannot easily make compressible otherwise.
    @Test func onlyJSONOfAKilobyteOrAnUnknownLengthIsCompressed() {
        func intent(_ headers: [(String, String)], status: HTTPResponseStatus = .ok, supported: Bool = true) -> Bool {
            var head = HTTPResponseHead(version: .http1_1, status: status, headers: HTTPHeaders(headers))
            return GuardedHTTP1Channel.compressible(&head, supported) == .compressIfPossible
        }
        let json = ("Content-Type", "application/json; charset=utf-8")
        #expect(intent([json, ("Content-Length", "1024")]))
        #expect(intent([json]), "a length not known ahead")
        #expect(!intent([json, ("Content-Length", "1023")]))
        #expect(!intent([json, ("Content-Length", "5000")], supported: false), "the client did not ask")
        #expect(!intent([("Content-Type", "text/event-stream")]))
        #expect(!intent([json, ("Accept-Ranges", "bytes"), ("Content-Length", "5000")]), "a download")
        #expect(!intent([json, ("Content-Length", "5000")], status: .partialContent))
        #expect(!intent([("Content-Type", "image/png"), ("Content-Length", "5000")]))
    }
}
