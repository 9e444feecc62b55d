import FerryServer
import Logging
import Foundation
import ServerStorageCore
import ServerStorageSQLite
import ServerTestSupport
import Synchronization
import SyncCore
import Testing

/// A server stops within its grace period, whatever its requests do.
@Suite("Server shutdown", .timeLimit(.minutes(2)))
struct ShutdownTests {
    @Test func aShutdownEndsWithinItsGracePeriodEvenWhenARequestIgnoresCancellation() async throws {
        let storage = StuckStorage(try sqliteStorage(.memory, logger: .quietTest))
        var configuration = ServerConfiguration(host: "127.0.0.1", port: 0, logger: .quietTest)
        configuration.shutdownGracePeriod = .milliseconds(500)
        let server = try await ReferenceServer.start(configuration, storage: storage, ownsStorage: true)
        let port = server.port
        let stuckRequest = Task {
            try? await LoopbackHTTP.send(
                port: port, method: "POST", target: "/tables/stuck", headers: [("Content-Type", "application/json")],
                body: Array(#"{"id":"a"}"#.utf8))
        }
        try await eventually("the insert is stuck in the storage") { storage.stuckCount == 1 }
        let other = try await LoopbackHTTP.send(
            port: port, method: "GET", target: "/tables/todo", headers: [], body: nil)
        #expect(other.status == 200, "the server answers other requests meanwhile")

        // Before: the graceful shutdown waited for the stuck request for ever.
        try await within(.seconds(30), "the shutdown") { try await server.shutdown() }
        storage.release()
        _ = await stuckRequest.value
    }

    /// A request the end of the grace period cancels is logged as the stop it is (503, the server
    /// stopping), not as a fault of the server's (it was `500 … CancellationError()`).
    @Test func aRequestCutByTheStopIsLoggedAsTheStop() async throws {
        let storage = StuckStorage(try sqliteStorage(.memory, logger: .quietTest))
        let captured = CapturedLog()
        var logger = Logger(label: "test.server") { _ in CapturingLogHandler(captured: captured) }
        logger.logLevel = .info
        var configuration = ServerConfiguration(host: "127.0.0.1", port: 0, logger: logger)
        configuration.shutdownGracePeriod = .milliseconds(300)
        let server = try await ReferenceServer.start(configuration, storage: storage, ownsStorage: true)
        let port = server.port
        let cutRequest = Task {
            try? await LoopbackHTTP.send(
                port: port, method: "POST", target: "/tables/cancellable",
                headers: [("Content-Type", "application/json")], body: Array(#"{"id":"a"}"#.utf8))
        }
        try await eventually("the insert waits in the storage") { storage.cancellableCount == 1 }
        try await within(.seconds(30), "the shutdown") { try await server.shutdown() }
        _ = await cutRequest.value
        let entries = captured.entries.withLock { $0 }
        let lines = entries.map(\.message)
        let line = lines.first { $0.hasPrefix("POST /tables/cancellable") }
        #expect(line?.hasPrefix("POST /tables/cancellable 503: the server is stopping") == true, "\(lines)")
        #expect(!entries.contains { "\($0.message) \($0.metadata)".contains("CancellationError") }, "\(lines)")
    }

    /// A stop lets a request in flight finish and answer, within the grace period; new connections
    /// are refused meanwhile.
    @Test func aShutdownLetsARequestInFlightFinish() async throws {
        let storage = StuckStorage(try sqliteStorage(.memory, logger: .quietTest))
        var configuration = ServerConfiguration(host: "127.0.0.1", port: 0, logger: .quietTest)
        configuration.shutdownGracePeriod = .seconds(60)
        let server = try await ReferenceServer.start(configuration, storage: storage, ownsStorage: true)
        let port = server.port
        let slowRequest = Task {
            try await LoopbackHTTP.send(
                port: port, method: "POST", target: "/tables/slow", headers: [("Content-Type", "application/json")],
                body: Array(#"{"id":"a","title":"kept"}"#.utf8))
        }
        try await eventually("the insert waits in the storage") { storage.slowCount == 1 }
        let stopping = Task { try await server.shutdown() }
        try await eventually("the server no longer accepts connections") {
            (try? await LoopbackHTTP.send(port: port, method: "GET", target: "/health", headers: [], body: nil)) == nil
        }
        #expect(storage.slowCount == 1, "the request in flight was not cancelled")
        storage.proceed()
        let answer = try await slowRequest.value
        #expect(answer.status == 201, "\(answer.status)")
        #expect(String(decoding: answer.body, as: UTF8.self).contains("\"title\":\"kept\""))
        try await within(.seconds(30), "the shutdown") { try await stopping.value }
    }
}
