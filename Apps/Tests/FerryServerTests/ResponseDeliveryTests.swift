import FerryServer
import Foundation
import Logging
import ServerStorageCore
import ServerStorageSQLite
import ServerTestSupport
import SyncCore
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Responses arrive whole: large pages, slow readers, and every way a connection ends (HTTP/1.0,
/// which nginx speaks to its upstreams by default; `Connection: close`; keep-alive).
@Suite("Response delivery", .timeLimit(.minutes(3)))
struct ResponseDeliveryTests {
    /// 40 items of 500 KB: one page of about 20 MB.
    static let items = 40
    static let pagePath = "/tables/big?$top=40"

    static func start(connections: ConnectionLimits = ConnectionLimits(), logger: Logger = .quietTest) async throws
        -> ReferenceServer
    {
        var configuration = ServerConfiguration(
            host: "127.0.0.1", port: 0, tables: [TableSettings(name: "big")], logger: logger)
        configuration.connections = connections
        // One page of 20 MB is the point here (delivery, not paging): above the 8 MiB page budget.
        configuration.limits.maximumPageBytes = 32 << 20
        let storage = try sqliteStorage(.memory, logger: .quietTest)
        try await storage.prepare([StorageTable(name: "big")])
        let filler = String(repeating: "x", count: 500_000)
        for index in 0..<items {
            _ = try await storage.insert(
                into: StorageTable(name: "big"), id: String(format: "i%02d", index), content: ["text": .string(filler)],
                owner: nil)
        }
        return try await ReferenceServer.start(configuration, storage: storage, ownsStorage: true)
    }

    static func expectWholePage(_ response: LoopbackHTTP.Response, _ what: String) {
        #expect(response.status == 200, "\(what): \(response.status)")
        let items = (try? JSONValue(parsingUTF8: response.body))?.objectValue?["items"]?.arrayValue
        #expect(
            items?.count == Self.items, "\(what): a page of \(items?.count ?? -1) items, \(response.body.count) bytes")
    }

    @Test(arguments: ["HTTP/1.0", "HTTP/1.1 close", "HTTP/1.1 keep-alive"])
    func aLargePageArrivesWholeToASlowReader(_ mode: String) async throws {
        let server = try await Self.start()
        let port = server.port
        try await offThePool {
            let connection = try LoopbackHTTP.KeptAlive(port: port)
            let version = mode == "HTTP/1.0" ? "HTTP/1.0" : "HTTP/1.1"
            let headers: [(String, String)] = mode == "HTTP/1.1 close" ? [("Connection", "close")] : []
            try connection.send("GET", Self.pagePath, version: version, headers: headers)
            // About 80 pauses of 20 ms while reading: the server writes faster than this reader reads.
            Self.expectWholePage(try connection.receive(step: 256 * 1024, pause: .milliseconds(20)), mode)
            if mode == "HTTP/1.1 keep-alive" {
                try connection.send("GET", Self.pagePath)
                Self.expectWholePage(try connection.receive(), "the second request on the connection")
            } else {
                #expect(try connection.isClosedByServer(), "\(mode): the server closes after the response")
            }
        }
        try await server.shutdown()
    }

    @Test func aResponseThatTakesLongerThanTheIdleTimeoutToReadArrivesWhole() async throws {
        // Before, the idle timer started when the response was queued, and cut it after 300 ms.
        let server = try await Self.start(connections: ConnectionLimits(idleTimeout: .milliseconds(300)))
        let port = server.port
        try await offThePool {
            let connection = try LoopbackHTTP.KeptAlive(port: port)
            try connection.send("GET", Self.pagePath)
            Self.expectWholePage(try connection.receive(step: 1 << 20, pause: .milliseconds(100)), "a 2 s read")
        }
        try await server.shutdown()
    }

    @Test func aReaderThatStopsReadingIsClosedAfterTheWriteTimeout() async throws {
        let log = CapturedLog()
        var logger = Logger(label: "test.server") { _ in CapturingLogHandler(captured: log) }
        logger.logLevel = .debug
        let server = try await Self.start(
            connections: ConnectionLimits(idleTimeout: .seconds(30), writeTimeout: .milliseconds(500)), logger: logger)
        let port = server.port
        try await offThePool {
            let connection = try LoopbackHTTP.KeptAlive(port: port)
            try connection.send("GET", Self.pagePath)
            try connection.expectClosedForReadingNothing(log: log)
        }
        try await server.shutdown()
    }

    /// A request answered before its body was read (413 by its `Content-Length`) on a connection
    /// that then closes: the server reads the rest of the body before it closes, so the client
    /// sends it all, and reads the answer and a clean end. Closing at once reset the connection:
    /// the client's last read failed (errno 104), and a client still sending lost the answer.
    @Test(arguments: ["HTTP/1.0", "HTTP/1.1 close"])
    func anAnswerBeforeTheBodyEndsIsFollowedByACleanClose(_ mode: String) async throws {
        let server = try await Self.start()
        let port = server.port
        try await offThePool {
            let fd = try LoopbackHTTP.connect(port: port)
            defer { close(fd) }
            let body = [UInt8](repeating: UInt8(ascii: "x"), count: 3 << 20)
            var head = "POST /tables/big \(mode.hasPrefix("HTTP/1.0") ? "HTTP/1.0" : "HTTP/1.1")\r\nHost: 127.0.0.1\r\n"
            head += "Content-Type: application/json\r\nContent-Length: \(body.count)\r\n"
            if mode.hasSuffix("close") { head += "Connection: close\r\n" }
            let request = Array((head + "\r\n").utf8) + body
            var sent = 0
            while sent < request.count {
                // MSG_NOSIGNAL: a reset is an error here, not a SIGPIPE that ends the test process.
                let count = request[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                guard count > 0 else { break }
                sent += count
            }
            #expect(sent == request.count, "\(mode): sent \(sent) of \(request.count) bytes (errno \(errno))")
            var received: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65_536)
            var failure: Int32?
            while true {
                let count = read(fd, &buffer, buffer.count)
                if count < 0 { failure = errno }
                if count <= 0 { break }
                received.append(contentsOf: buffer[0..<count])
            }
            #expect(failure == nil, "\(mode): the connection ended with errno \(failure ?? 0), not a clean close")
            let text = String(decoding: received, as: UTF8.self)
            #expect(text.hasPrefix("HTTP/1.1 413"), "\(mode): \(text.prefix(200))")
            #expect(text.contains("bodyTooLarge"), "\(mode): \(text.prefix(400))")
        }
        try await server.shutdown()
    }

    /// A request answered before its body was read, on a connection that would stay open
    /// (HTTP/1.1 keep-alive): the answer says `Connection: close`, and the connection ends soon
    /// after, whether the client sends the rest of its body or stops at the answer (as a client
    /// that heard it may). It stayed open waiting for that body until the request timeout (here
    /// ten minutes; the 409 of an upload sent from the wrong offset held a connection for as long).
    @Test(arguments: [true, false])
    func anAnswerBeforeTheBodyEndsClosesAKeepAliveConnection(sendsTheRest: Bool) async throws {
        let server = try await Self.start(connections: ConnectionLimits(requestTimeout: .seconds(600)))
        let port = server.port
        try await offThePool {
            let fd = try LoopbackHTTP.connect(port: port)
            defer { close(fd) }
            let body = [UInt8](repeating: UInt8(ascii: "x"), count: 3 << 20)
            let head = "POST /tables/big HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            try LoopbackHTTP.writeAll(fd, Array((head + "Content-Length: \(body.count)\r\n\r\n").utf8))
            try LoopbackHTTP.writeAll(fd, Array(body[..<65_536]))
            if sendsTheRest { try LoopbackHTTP.writeAll(fd, Array(body[65_536...])) }
            // Bounds a hang only: the server's request timeout is ten minutes, its linger 5 s.
            let (received, closed) = LoopbackHTTP.readUntilClosed(fd, seconds: 120)
            let text = String(decoding: received, as: UTF8.self)
            #expect(text.hasPrefix("HTTP/1.1 413"), "\(text.prefix(200))")
            #expect(text.lowercased().contains("connection: close"), "\(text.prefix(400))")
            #expect(closed, "the server kept the connection open: \(text.prefix(200))")
        }
        try await server.shutdown()
    }

    /// RFC 9110 § 10.1.1: `Expect: 100-continue` is answered with a 100 at once, and the request
    /// then goes on as usual on the same connection. It was never answered: a client waited its
    /// own timeout (curl: one second) before each body it sent so.
    @Test func aClientExpecting100ContinueGetsItAtOnce() async throws {
        let server = try await Self.start()
        let port = server.port
        try await offThePool {
            let fd = try LoopbackHTTP.connect(port: port)
            defer { close(fd) }
            let body = Array(#"{"id":"e1","title":"expected"}"#.utf8)
            let head =
                "POST /tables/big HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                + "Expect: 100-continue\r\nContent-Length: \(body.count)\r\n\r\n"
            try LoopbackHTTP.writeAll(fd, Array(head.utf8))
            let interim = LoopbackHTTP.readUntilClosed(fd, seconds: 10) { received in
                String(decoding: received, as: UTF8.self).contains("\r\n\r\n")
            }
            #expect(String(decoding: interim.bytes, as: UTF8.self) == "HTTP/1.1 100 Continue\r\n\r\n")
            try LoopbackHTTP.writeAll(fd, body)
            let final = LoopbackHTTP.readUntilClosed(fd, seconds: 10) { received in
                String(decoding: received, as: UTF8.self).contains("\"expected\"")
            }
            #expect(String(decoding: final.bytes, as: UTF8.self).hasPrefix("HTTP/1.1 201"))
        }
        try await server.shutdown()
    }
}
