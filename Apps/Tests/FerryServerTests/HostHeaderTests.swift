import FerryServer
import Foundation
import ServerTestSupport
import SyncCore
import Testing

/// The hostile-client probe: a request with two `Host` header fields was served (under the first).
/// RFC 9112 §3.2: a server MUST answer 400 to a request with more than one `Host` field, or an
/// invalid one. A proxy in front may have routed it by the other, so the connection ends with it.
@Suite("Host header fields", .timeLimit(.minutes(5)))
struct HostHeaderTests {
    /// The heads (lower case, without the `HTTP/1.1 `) and bodies of the answers in `text`, each
    /// body as long as its `Content-Length` says.
    static func answers(_ text: String) -> [(head: String, body: String)] {
        var rest = Substring(text)
        var answers: [(head: String, body: String)] = []
        while rest.hasPrefix("HTTP/1.1 "), let end = rest.range(of: "\r\n\r\n") {
            let head = rest[..<end.lowerBound].dropFirst("HTTP/1.1 ".count).lowercased()
            let lines = head.components(separatedBy: "\r\n")
            let length = lines.compactMap { $0.hasPrefix("content-length: ") ? Int($0.dropFirst(16)) : nil }.first ?? 0
            let body = rest[end.upperBound...].utf8.prefix(length)
            answers.append((head, String(decoding: body, as: UTF8.self)))
            rest = Substring(String(decoding: rest[end.upperBound...].utf8.dropFirst(length), as: UTF8.self))
        }
        return answers
    }

    @Test func twoHostFieldsAre400AndTheConnectionEnds() async throws {
        let server = try await HardeningTests.start { $0.connections.idleTimeout = .seconds(600) }
        let body = #"{"id":"h1"}"#
        for hosts in [["a", "evil.example"], ["a", "a"], ["a", "b", "c"]] {
            let fields = hosts.map { "Host: \($0)\r\n" }.joined()
            let (text, closed) = try await HardeningTests.exchangeRaw(
                server.port,
                "POST /tables/todo HTTP/1.1\r\n\(fields)Content-Type: application/json\r\n"
                    + "Content-Length: \(body.utf8.count)\r\n\r\n\(body)GET /health HTTP/1.1\r\nHost: a\r\n\r\n")
            #expect(closed, "\(hosts): the connection stayed open: \(text)")
            let answers = Self.answers(text)
            #expect(answers.count == 1, "\(hosts): nothing after the refusal is answered: \(text)")
            let (head, json) = try #require(answers.first)
            #expect(head.hasPrefix("400 "), "\(hosts): \(text)")
            #expect(head.contains("connection: close"), "\(text)")
            #expect((head + "\r\n").contains("content-length: \(json.utf8.count)\r\n"), "\(text)")
            let error = try JSONValue(parsing: json)
            #expect(error["code"] == "invalidHost", "\(json)")
            #expect(error["error"]?.stringValue?.contains("Host") == true, "\(json)")
        }
        // Whatever the route: the health check too.
        let (health, _) = try await HardeningTests.exchangeRaw(
            server.port, "GET /health HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n")
        #expect(health.hasPrefix("HTTP/1.1 400 "), "\(health)")
        #expect(try await HardeningTests.send(server, "GET", "/tables/todo/h1").status == 404, "h1 was stored")
        try await server.shutdown()
    }

    /// RFC 9112 §3.2: an HTTP/1.1 request without `Host` is a 400 (it was served); an HTTP/1.0
    /// request may come without one, and a client cannot pass for either with the field the
    /// server marks the first with.
    @Test func anHTTP11RequestWithoutHostIs400() async throws {
        let server = try await HardeningTests.start { $0.connections.idleTimeout = .seconds(600) }
        for target in ["/tables/todo", "/health"] {
            let (text, closed) = try await HardeningTests.exchangeRaw(server.port, "GET \(target) HTTP/1.1\r\n\r\n")
            let answers = Self.answers(text)
            let (head, json) = try #require(answers.first, "\(target): \(text)")
            #expect(head.hasPrefix("400 "), "\(target): \(text)")
            #expect(closed && head.contains("connection: close"), "\(target): \(text)")
            let error = try JSONValue(parsing: json)
            #expect(error["code"] == "invalidHost", "\(json)")
            #expect(error["error"]?.stringValue?.contains("no Host") == true, "\(json)")
        }
        let (old, _) = try await HardeningTests.exchangeRaw(server.port, "GET /tables/todo HTTP/1.0\r\n\r\n")
        #expect(old.hasPrefix("HTTP/1.0 200 ") || old.hasPrefix("HTTP/1.1 200 "), "HTTP/1.0 needs no Host: \(old)")
        let (marked, _) = try await HardeningTests.exchangeRaw(
            server.port, "GET /tables/todo HTTP/1.0\r\nx-ferry-missing-host: 1\r\n\r\n")
        #expect(marked.contains(" 200 "), "the marker sent by a client is taken off: \(marked)")
        let (hosted, _) = try await HardeningTests.exchangeRaw(
            server.port, "GET /tables/todo HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        #expect(hosted.hasPrefix("HTTP/1.1 200 "), "\(hosted)")
        try await server.shutdown()
    }

    /// An invalid `Host` is a 400 even when the server's links come from its configured public URL
    /// (the `Host` was checked only to build links from it).
    @Test func anInvalidHostIs400WhateverBuildsTheLinks() async throws {
        let server = try await HardeningTests.start {
            $0.publicURL = "https://api.example.com"
            $0.connections.idleTimeout = .seconds(600)
        }
        let (text, _) = try await HardeningTests.exchangeRaw(
            server.port, "GET /tables/todo HTTP/1.1\r\nHost: a\"b<c>\r\nConnection: close\r\n\r\n")
        #expect(text.hasPrefix("HTTP/1.1 400 "), "\(text)")
        #expect(text.contains("invalidHost"), "\(text)")
        let good = try await HardeningTests.send(server, "GET", "/tables/todo")
        #expect(good.status == 200)
        try await server.shutdown()
    }
}
