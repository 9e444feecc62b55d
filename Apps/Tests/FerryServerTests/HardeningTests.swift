import FerryServer
import Foundation
import Logging
import ServerStorageCore
import ServerTestSupport
import SyncCore
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What an outside probe of the server found (one defect per test), each checked over real HTTP.
@Suite("Server hardening over HTTP", .timeLimit(.minutes(10)))
struct HardeningTests {
    static func start(
        tables: [TableSettings] = [TableSettings(name: "todo")],
        configure: (inout ServerConfiguration) -> Void = { _ in }
    ) async throws -> ReferenceServer {
        var configuration = ServerConfiguration(host: "127.0.0.1", port: 0, tables: tables, logger: .quietTest)
        configuration.authSecret = LiveServer.secret
        configure(&configuration)
        return try await ReferenceServer.startInMemory(configuration)
    }

    static func send(
        _ server: ReferenceServer, _ method: String, _ target: String, headers: [(String, String)] = [],
        json: String? = nil
    ) async throws -> LoopbackHTTP.Response {
        var all = headers
        if json != nil, !headers.contains(where: { $0.0.lowercased() == "content-type" }) {
            all.append(("Content-Type", "application/json"))
        }
        return try await LoopbackHTTP.send(
            port: server.port, method: method, target: target, headers: all, body: json.map { Array($0.utf8) })
    }

    static func text(_ response: LoopbackHTTP.Response) -> String { String(decoding: response.body, as: UTF8.self) }

    /// Sends `bytes` on a new connection and reads until the server closes it (at most 20 s).
    static func exchangeRaw(_ port: Int, _ bytes: String, seconds: Int = 60) async throws -> (
        text: String, closed: Bool
    ) {
        try await offThePool {
            let fd = try LoopbackHTTP.connect(port: port)
            defer { close(fd) }
            if !bytes.isEmpty { try LoopbackHTTP.writeAll(fd, Array(bytes.utf8)) }
            let (received, closed) = LoopbackHTTP.readUntilClosed(fd, seconds: seconds)
            return (String(decoding: received, as: UTF8.self), closed)
        }
    }

    // MARK: 2. Token subjects

    @Test func aSubjectWithNULIsRefusedAndNeverReachesAnothersRows() async throws {
        let notes = TableSettings(name: "notes", perUser: true)
        let server = try await Self.start(tables: [notes])
        let alice = LiveServer.token("alice")
        let inserted = try await Self.send(
            server, "POST", "/tables/notes", headers: [("X-ZUMO-AUTH", alice)], json: #"{"id":"a1","text":"mine"}"#)
        #expect(inserted.status == 201)
        let mallory = LiveServer.token("alice\u{0}mallory")
        for (method, target, body) in [
            ("GET", "/tables/notes", nil), ("GET", "/tables/notes/a1", nil),
            ("PATCH", "/tables/notes/a1", #"{"text":"theirs"}"#), ("POST", "/tables/notes", #"{"text":"x"}"#),
            ("DELETE", "/tables/notes/a1", nil),
        ] {
            let reply = try await Self.send(
                server, method, target, headers: [("X-ZUMO-AUTH", mallory), ("ZUMO-API-VERSION", "2.0.0")], json: body)
            #expect(reply.status == 401, "\(method) \(target): \(Self.text(reply))")
            #expect(Self.text(reply).contains("U+0000"), "\(Self.text(reply))")
        }
        let mine = try await Self.send(server, "GET", "/tables/notes/a1", headers: [("X-ZUMO-AUTH", alice)])
        #expect(mine.status == 200)
        #expect(Self.text(mine).contains(#""text":"mine""#))
        try await server.shutdown()
    }

    // MARK: 4. Tokens without exp

    @Test func tokensMustExpireUnlessTheServerSaysOtherwise() async throws {
        let verifier = TokenVerifier(secret: LiveServer.secret)
        let forever = verifier.sign(subject: "alice", expiresAt: nil)
        let strict = try await Self.start(tables: [TableSettings(name: "todo", requiresAuth: true)])
        let refused = try await Self.send(strict, "GET", "/tables/todo", headers: [("X-ZUMO-AUTH", forever)])
        #expect(refused.status == 401)
        #expect(Self.text(refused).contains("no expiry"), "\(Self.text(refused))")
        let expiring = try await Self.send(
            strict, "GET", "/tables/todo", headers: [("X-ZUMO-AUTH", LiveServer.token("alice"))])
        #expect(expiring.status == 200)
        try await strict.shutdown()

        let lenient = try await Self.start(tables: [TableSettings(name: "todo", requiresAuth: true)]) {
            $0.allowsTokensWithoutExpiry = true
        }
        let accepted = try await Self.send(lenient, "GET", "/tables/todo", headers: [("X-ZUMO-AUTH", forever)])
        #expect(accepted.status == 200)
        try await lenient.shutdown()
    }

    // MARK: 5. Numbers a double cannot hold

    @Test func numbersNoDoubleCanHoldAreA400NamingTheField() async throws {
        let server = try await Self.start()
        let huge = "1" + String(repeating: "0", count: 400)
        for (body, field) in [
            (#"{"id":"n1","n":1e400}"#, "'n'"), (#"{"id":"n2","n":-1e400}"#, "'n'"),
            (#"{"id":"n3","n":\#(huge)}"#, "'n'"), (#"{"id":"n4","a":{"b":[1,2e999]}}"#, "'a.b[1]'"),
        ] {
            let reply = try await Self.send(server, "POST", "/tables/todo", json: body)
            #expect(reply.status == 400, "\(body.prefix(40)): \(Self.text(reply))")
            #expect(Self.text(reply).contains(field), "\(Self.text(reply))")
        }
        #expect(try await Self.send(server, "POST", "/tables/todo", json: #"{"id":"ok","n":1e300}"#).status == 201)
        let update = try await Self.send(server, "PUT", "/tables/todo/ok", json: #"{"id":"ok","n":1e400}"#)
        #expect(update.status == 400)
        let stored = try await Self.send(server, "GET", "/tables/todo/ok")
        #expect(Self.text(stored).contains(#""n":1e+300"#), "\(Self.text(stored))")
        let count = try await Self.send(server, "GET", "/tables/todo?$count=true")
        #expect(Self.text(count).contains(#""count":1"#), "\(Self.text(count))")
        try await server.shutdown()
    }

    // MARK: 6. HTTP/1.0 and Connection: close

    @Test func connectionsCloseWhenTheRequestDoesNotKeepThemAlive() async throws {
        let server = try await Self.start()
        let port = server.port
        let http10 = try await Self.exchangeRaw(port, "GET /health HTTP/1.0\r\n\r\n")
        #expect(http10.text.hasPrefix("HTTP/1.1 200"), "\(http10.text.prefix(80))")
        #expect(http10.text.lowercased().contains("connection: close"))
        #expect(http10.closed, "an HTTP/1.0 request without keep-alive leaves the connection open")
        let mixedCase = try await Self.exchangeRaw(port, "GET /health HTTP/1.1\r\nHost: h\r\nConnection: Close\r\n\r\n")
        #expect(mixedCase.text.hasPrefix("HTTP/1.1 200"))
        #expect(mixedCase.closed)
        // HTTP/1.0 with keep-alive stays open for a second request on the same connection.
        let received = try await offThePool {
            let fd = try LoopbackHTTP.connect(port: port)
            defer { close(fd) }
            let request = "GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
            try LoopbackHTTP.writeAll(fd, Array((request + request).utf8))
            // Both answers, however long a loaded machine takes (the connection stays open).
            let answers = LoopbackHTTP.readUntilClosed(fd, seconds: 30) { bytes in
                String(decoding: bytes, as: UTF8.self).components(separatedBy: "HTTP/1.1 200").count >= 3
            }
            return String(decoding: answers.bytes, as: UTF8.self)
        }
        #expect(received.components(separatedBy: "HTTP/1.1 200").count == 3, "\(received)")
        try await server.shutdown()
    }

    /// The hostile probe: `CONNECT` got a 404 with a JSON content type but no length and no body
    /// (NIO drops the body of any response to CONNECT), and the connection then hung until the
    /// idle timeout, a pipelined request after it unanswered. Now a whole 405 with the one-line
    /// error, and the connection closes.
    @Test func connectIsAFramed405AndTheConnectionCloses() async throws {
        let server = try await Self.start { $0.connections.idleTimeout = .seconds(600) }
        let (text, closed) = try await Self.exchangeRaw(
            server.port, "CONNECT a:80 HTTP/1.1\r\nHost: a\r\n\r\nGET /health HTTP/1.1\r\nHost: a\r\n\r\n")
        try await server.shutdown()
        #expect(closed, "the connection stayed open: \(text)")
        #expect(text.hasPrefix("HTTP/1.1 405 "), "\(text)")
        let parts = text.components(separatedBy: "\r\n\r\n")
        let head = parts[0].lowercased()
        let body = parts.dropFirst().joined(separator: "\r\n\r\n")
        #expect(head.contains("content-length: \(body.utf8.count)\r\n"), "\(text)")
        #expect(head.contains("connection: close"), "\(text)")
        let error = try JSONValue(parsing: body)
        #expect(error["code"]?.stringValue == "methodNotAllowed", "\(body)")
        #expect(error["error"]?.stringValue?.isEmpty == false, "\(body)")
    }

    /// What NIO's parser cannot read was a 400 with an empty body: it is the one-line JSON error
    /// of every other refusal, and a method it does not know is 405, as other unserved methods are.
    @Test func whatTheParserCannotReadIsRefusedInWords() async throws {
        let server = try await Self.start { $0.connections.idleTimeout = .seconds(600) }
        for (request, status, words) in [
            ("FOO /health HTTP/1.1\r\nHost: a\r\n\r\n", 405, "method"),
            (
                "POST /tables/t HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400,
                "Content-Length"
            ),
            ("GET /health HTTP/1.1\r\nHo st: a\r\n\r\n", 400, "malformed"),
            (
                "GET /health HTTP/1.1\r\nHost: a\r\n" + (0..<1_001).map { "X-\($0): 1\r\n" }.joined() + "\r\n", 400,
                "too large"
            ),
            // Bodies the parser fails inside, after the responder began to read them: one answer
            // whose length is its body's (it was the responder's 400 and the parser's, one after
            // the other, under the second one's length).
            ("POST /tables/t HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: bogus\r\n\r\n{\"a\":1}", 400, "framing"),
            (
                "POST /tables/t HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\nZZ\r\n", 400,
                "chunk"
            ),
        ] {
            let (text, closed) = try await Self.exchangeRaw(server.port, request)
            #expect(closed, "\(request.prefix(20)): the connection stayed open")
            #expect(text.hasPrefix("HTTP/1.1 \(status) "), "\(request.prefix(20)): \(text)")
            let parts = text.components(separatedBy: "\r\n\r\n")
            let body = parts.dropFirst().joined(separator: "\r\n\r\n")
            #expect((parts[0] + "\r\n").lowercased().contains("content-length: \(body.utf8.count)\r\n"), "\(text)")
            let error = try? JSONValue(parsing: body)
            #expect(error?["error"]?.stringValue?.contains(words) == true, "\(request.prefix(20)): \(text)")
            #expect((parts[0] + "\r\n").lowercased().contains("connection: close\r\n"), "\(text)")
        }
        try await server.shutdown()
    }

    /// `If-Match` and `If-None-Match` on several lines are one list (RFC 9110 § 5.3): only the
    /// first line counted, and an item was overwritten although the second line's tag matched.
    @Test func conditionalHeadersOnSeveralLinesAreOneList() async throws {
        let server = try await Self.start()
        let created = try await Self.send(server, "POST", "/tables/todo", json: #"{"id":"a","title":"one"}"#)
        #expect(created.status == 201)
        let etag = try #require(created.headers["etag"])
        let other = "\"AAAAAAAAAAA=\""
        let notNew = try await Self.send(
            server, "PUT", "/tables/todo/a", headers: [("If-None-Match", other), ("If-None-Match", etag)],
            json: #"{"title":"two"}"#)
        #expect(notNew.status == 412, "\(Self.text(notNew))")
        let read = try await Self.send(
            server, "GET", "/tables/todo/a", headers: [("If-None-Match", other), ("If-None-Match", etag)])
        #expect(read.status == 304)
        let matched = try await Self.send(
            server, "PUT", "/tables/todo/a", headers: [("If-Match", other), ("If-Match", etag)],
            json: #"{"title":"three"}"#)
        #expect(matched.status == 200, "\(Self.text(matched))")
        let unmatched = try await Self.send(
            server, "PUT", "/tables/todo/a", headers: [("If-Match", other), ("If-Match", etag)],
            json: #"{"title":"four"}"#)
        #expect(unmatched.status == 412, "the tag changed with the write before")
        #expect(
            try JSONValue(parsing: Self.text(try await Self.send(server, "GET", "/tables/todo/a")))["title"] == "three")
        try await server.shutdown()
    }

    /// Pipelined requests: only the response to the request that asked to close says `close`
    /// (the close of a later request was on every response, and a client dropped the rest), and
    /// nothing after it is answered.
    @Test func onlyTheResponseToTheRequestThatAskedToCloseSaysClose() async throws {
        let server = try await Self.start { $0.connections.idleTimeout = .seconds(600) }
        let get = "GET /health HTTP/1.1\r\nHost: a\r\n\r\n"
        let closing = "GET /health HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
        let (text, closed) = try await Self.exchangeRaw(server.port, get + get + closing + get)
        try await server.shutdown()
        #expect(closed, "the connection stayed open: \(text)")
        let heads = text.components(separatedBy: "HTTP/1.1 ").dropFirst().map { $0.lowercased() }
        #expect(heads.count == 3, "three answered, the one after the close not: \(text)")
        #expect(heads.map { $0.contains("connection: close") } == [false, false, true], "\(text)")
    }

    // MARK: 3. Slow and idle clients

    @Test func slowAndIdleConnectionsAreClosed() async throws {
        let server = try await Self.start {
            $0.connections = ConnectionLimits(idleTimeout: .milliseconds(300), requestTimeout: .milliseconds(500))
        }
        let port = server.port
        for (what, bytes) in [
            ("nothing", ""), ("half a request line", "GET /hea"),
            ("half the headers", "GET /health HTTP/1.1\r\nHost: h\r\nX-Slow: "),
            (
                "a short body",
                "POST /tables/todo HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"id\":"
            ),
        ] {
            let result = try await Self.exchangeRaw(port, bytes)
            #expect(result.closed, "a connection holding \(what) stays open")
        }
        // A kept-alive connection is answered, then closed once idle.
        let keptAlive = try await Self.exchangeRaw(port, "GET /health HTTP/1.1\r\nHost: h\r\n\r\n")
        #expect(keptAlive.text.hasPrefix("HTTP/1.1 200"))
        #expect(keptAlive.closed)
        // Nothing was written by the cut-off insert.
        let count = try await Self.send(server, "GET", "/tables/todo?$count=true")
        #expect(Self.text(count).contains(#""count":0"#), "\(Self.text(count))")
        try await server.shutdown()
    }

    @Test func connectionsWaitingForARequestMakeRoomForNewOnes() async throws {
        let server = try await Self.start { $0.connections.maximumConnections = 8 }
        let port = server.port
        let idle = try await offThePool { try (0..<16).map { _ in try LoopbackHTTP.connect(port: port) } }
        defer { for fd in idle { close(fd) } }
        // The limit is reached many times over by connections that send nothing; /health still answers.
        for _ in 0..<3 {
            let health = try await Self.send(server, "GET", "/health")
            #expect(health.status == 200)
        }
        try await server.shutdown()
    }

    // MARK: 7. Patches, charsets, dates, Host

    @Test func aJSONPatchCannotTouchSystemProperties() async throws {
        let server = try await Self.start(tables: [TableSettings(name: "todo", softDelete: true)])
        #expect(try await Self.send(server, "POST", "/tables/todo", json: #"{"id":"t1","title":"a"}"#).status == 201)
        let patch = [("Content-Type", "application/json-patch+json")]
        for operations in [
            #"[{"op":"remove","path":"/id"}]"#, #"[{"op":"move","from":"/id","path":"/stolen"}]"#,
            #"[{"op":"copy","from":"","path":"/everything"}]"#, #"[{"op":"copy","from":"/version","path":"/v"}]"#,
            #"[{"op":"remove","path":"/updatedAt"}]"#, #"[{"op":"replace","path":"","value":{}}]"#,
            #"[{"op":"add","path":"/ID","value":"x"}]"#, #"[{"op":"replace","path":"/id","value":"t2"}]"#,
        ] {
            let reply = try await Self.send(server, "PATCH", "/tables/todo/t1", headers: patch, json: operations)
            #expect(reply.status == 400, "\(operations): \(reply.status) \(Self.text(reply))")
        }
        let fine = try await Self.send(
            server, "PATCH", "/tables/todo/t1", headers: patch,
            json: #"[{"op":"test","path":"/id","value":"t1"},{"op":"replace","path":"/title","value":"b"}]"#)
        #expect(fine.status == 200, "\(Self.text(fine))")
        let item = Self.text(try await Self.send(server, "GET", "/tables/todo/t1"))
        #expect(item.contains(#""title":"b""#) && !item.contains("stolen") && !item.contains("everything"))
        try await server.shutdown()
    }

    @Test func onlyUTF8BodiesAreRead() async throws {
        let server = try await Self.start()
        for charset in ["utf-16", "UTF-16LE", "\"iso-8859-1\"", "latin1"] {
            let reply = try await Self.send(
                server, "POST", "/tables/todo", headers: [("Content-Type", "application/json; charset=\(charset)")],
                json: #"{"title":"x"}"#)
            #expect(reply.status == 415, "charset \(charset): \(reply.status)")
        }
        for charset in ["utf-8", "UTF-8", "\"utf-8\"", "utf8"] {
            let reply = try await Self.send(
                server, "POST", "/tables/todo", headers: [("Content-Type", "application/json; charset=\(charset)")],
                json: #"{"title":"x"}"#)
            #expect(reply.status == 201, "charset \(charset): \(reply.status)")
        }
        try await server.shutdown()
    }

    @Test func ifModifiedSinceOnlyTakesRealHTTPDates() async throws {
        let server = try await Self.start()
        #expect(try await Self.send(server, "POST", "/tables/todo", json: #"{"id":"d1"}"#).status == 201)
        for header in [
            "Sun, 06 Nov 123456789 08:49:37 GMT", "Sun, 6 Nov 99999 08:49:37 GMT", "Sun, +6 Nov 2999 08:49:37 GMT",
            "Sun, 06 Nov 2999 8:49:37 GMT", "Sun, 06 Nov 2999  08:49:37 GMT",
        ] {
            let reply = try await Self.send(server, "GET", "/tables/todo/d1", headers: [("If-Modified-Since", header)])
            #expect(reply.status == 200, "If-Modified-Since: \(header) gave \(reply.status)")
        }
        // The three forms of RFC 9110 § 5.6.7; the obsolete two were ignored, and a conditional
        // write sent with them went through.
        for header in [
            "Sun, 06 Nov 2999 08:49:37 GMT", "Sunday, 06-Nov-60 08:49:37 GMT", "Sun Nov  6 08:49:37 2999",
            "Sun Nov 16 08:49:37 2999",
        ] {
            let future = try await Self.send(
                server, "GET", "/tables/todo/d1", headers: [("If-Modified-Since", header)])
            #expect(future.status == 304, "If-Modified-Since: \(header) gave \(future.status)")
        }
        for header in ["Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994", "Sunday, 06-Nov-99 08:49:37 GMT"] {
            let stale = try await Self.send(
                server, "PUT", "/tables/todo/d1", headers: [("If-Unmodified-Since", header)], json: #"{"title":"x"}"#)
            #expect(stale.status == 412, "If-Unmodified-Since: \(header) gave \(stale.status)")
        }
        try await server.shutdown()
    }

    @Test func locationIsBuiltFromAValidatedHostOrThePublicURL() async throws {
        let server = try await Self.start()
        let port = server.port
        let hostile = try await Self.exchangeRaw(
            port,
            "POST /tables/todo HTTP/1.1\r\nHost: a\"b<c>\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
                + "Connection: close\r\n\r\n{}")
        #expect(hostile.text.hasPrefix("HTTP/1.1 400"), "\(hostile.text.prefix(200))")
        #expect(!hostile.text.contains("<c>"))
        let good = try await Self.send(server, "POST", "/tables/todo", json: #"{"id":"l1"}"#)
        #expect(good.headers["location"] == "http://127.0.0.1:\(port)/tables/todo/l1")
        try await server.shutdown()

        let published = try await Self.start { $0.publicURL = "https://api.example.com/" }
        let reply = try await Self.send(published, "POST", "/tables/todo", json: #"{"id":"l2"}"#)
        #expect(reply.headers["location"] == "https://api.example.com/tables/todo/l2")
        try await published.shutdown()
        for bad in [
            "ftp://x", "https://", "https://a?b", "https://a b", "https://a:99999", "https://a/b?c", "https://a/b#c",
            "https://a/b c", "https://a/../b", "https://a//b", "https://a/%2e", "https://a/b/./c",
        ] {
            var configuration = ServerConfiguration(port: 0, logger: .quietTest)
            configuration.publicURL = bad
            #expect(throws: ConfigurationError.self, "\(bad)") { try configuration.validate() }
        }
    }

    // MARK: The table list (an extension)

    @Test func theTableListNeedsATokenWhenTheServerHasASecret() async throws {
        let server = try await Self.start(tables: [TableSettings(name: "todo"), TableSettings(name: "notes")])
        #expect(try await Self.send(server, "GET", "/tables").status == 401)
        let listed = try await Self.send(server, "GET", "/tables", headers: [("X-ZUMO-AUTH", LiveServer.token("a"))])
        #expect(listed.status == 200)
        #expect(Self.text(listed) == #"{"tables":["notes","todo"]}"#, "\(Self.text(listed))")
        try await server.shutdown()
    }

    // MARK: 10. '+' in a query string

    @Test func aPlusInTheQueryStringIsASpace() async throws {
        let server = try await Self.start()
        #expect(try await Self.send(server, "POST", "/tables/todo", json: #"{"id":"p1","title":"x"}"#).status == 201)
        #expect(try await Self.send(server, "POST", "/tables/todo", json: #"{"id":"p2","title":"a+b"}"#).status == 201)
        let spaced = try await Self.send(server, "GET", "/tables/todo?$filter=title+eq+'x'&$select=id")
        #expect(spaced.status == 200, "\(Self.text(spaced))")
        #expect(Self.text(spaced).contains(#""id":"p1""#) && !Self.text(spaced).contains("p2"))
        let plus = try await Self.send(server, "GET", "/tables/todo?$filter=title%20eq%20'a%2Bb'&$select=id")
        #expect(Self.text(plus).contains(#""id":"p2""#) && !Self.text(plus).contains("p1"), "\(Self.text(plus))")
        try await server.shutdown()
    }
}
