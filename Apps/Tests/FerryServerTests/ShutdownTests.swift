import FerryServer
import Foundation
import ServerStorageCore
import ServerStorageSQLite
import ServerTestSupport
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
}
