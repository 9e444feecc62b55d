import FerryServer
import Foundation
import ServerTestSupport
import SyncCore
import Testing

/// `HEAD` is `GET` without the body (RFC 9110 §9.3.2) on tables and items too: it was a 405 there,
/// while the CORS preflight listed `HEAD`, and `HEAD /health` said `Content-Length: 0`.
@Suite("HEAD requests", .timeLimit(.minutes(3)))
struct HeadRequestTests {
    @Test func headIsGetWithoutTheBodyOnAKeptAliveConnection() async throws {
        let server = try await ProtocolTests.start()
        try await ProtocolTests.insertSome(server, count: 5)
        let port = server.server.port
        let paths = ["/tables/todo/t1", "/tables/todo?$top=2", "/tables/todo", "/tables/todo/none", "/health"]
        var gets: [String: LiveServer.Reply] = [:]
        for path in paths { gets[path] = try await server.send("GET", path) }
        let expected = gets
        try await offThePool {
            let connection = try LoopbackHTTP.KeptAlive(port: port)
            for path in paths {
                let get = expected[path]!
                try connection.send("HEAD", path)
                let head = try connection.receive(toHead: true)
                #expect(head.status == get.status, "HEAD \(path): \(head.status), GET \(get.status)")
                #expect(
                    head.headers["content-length"] == String(get.body.count),
                    "HEAD \(path): Content-Length \(head.headers["content-length"] ?? "none"), GET's body \(get.body.count)"
                )
                for name in ["etag", "link", "content-type"] {
                    #expect(head.headers[name] == get.headers[name], "HEAD \(path): \(name)")
                }
                // The next answer on the connection is framed right: no body followed the HEAD's.
                try connection.send("GET", path)
                let after = try connection.receive()
                #expect(after.status == get.status && after.body == get.body, "GET \(path) after its HEAD")
            }
        }
        #expect(gets["/tables/todo/t1"]?.header("ETag") != nil)
        #expect(gets["/tables/todo/none"]?.status == 404)
        try await server.stop()
    }

    @Test func headIsInAllowAndAnswersNoBodyInABatch() async throws {
        let server = try await ProtocolTests.start()
        try await ProtocolTests.insertSome(server, count: 1)
        let options = try await server.send("OPTIONS", "/tables/todo/t0")
        #expect(options.header("Allow")?.contains("HEAD") == true, "\(options.headers)")
        let batch = try await server.send(
            "POST", "/tables/$batch",
            json: [
                "requests": [
                    ["id": "1", "method": "HEAD", "url": "todo/t0"], ["id": "2", "method": "HEAD", "url": "todo/none"],
                ]
            ])
        let answers = batch.json?["responses"]?.arrayValue ?? []
        #expect(answers.map { $0["status"] } == [200, 404], "\(batch.text)")
        #expect(answers.allSatisfy { $0["body"] == nil }, "\(batch.text)")
        #expect(answers.first?["headers"]?["etag"] != nil, "\(batch.text)")
        try await server.stop()
    }
}
