import FerryServer
import Foundation
import Logging
import ServerStorageCore
import ServerStorageSQLite
import ServerTestSupport
import SyncCore
import Testing

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
            // Reads nothing (socket buffers fill, then nothing moves) until the server says it gave
            // up: a fixed pause was shorter than making the 20 MB page on a loaded machine, and the
            // reader then got it whole.
            let deadline = Date().addingTimeInterval(60)
            while !log.contains("the client read nothing of the response"), Date() < deadline {
                Thread.sleep(forTimeInterval: 0.05)
            }
            #expect(log.contains("the client read nothing of the response"), "the server never gave up")
            #expect(throws: LoopbackHTTP.Failure.self, "the server gave up on a reader that stopped") {
                try connection.receive()
            }
            #expect(try connection.isClosedByServer())
        }
        try await server.shutdown()
    }
}
