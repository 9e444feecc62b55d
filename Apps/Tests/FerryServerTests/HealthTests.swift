import FerryServer
import Foundation
import ServerStorageCore
import ServerStorageSQLite
import Testing

/// Issue 31: readiness (`/health/ready`, and `/health` as before: the database answers) apart from
/// liveness (`/health/live`: the process serves), for a load balancer and an orchestrator.
@Suite("Liveness and readiness", .timeLimit(.minutes(2)))
struct HealthTests {
    @Test func readinessAsksTheDatabaseLivenessDoesNot() async throws {
        let storage = try sqliteStorage(.memory, logger: .quietTest)
        let configuration = ServerConfiguration(host: "127.0.0.1", port: 0, logger: .quietTest)
        let server = try await ReferenceServer.start(configuration, storage: storage, ownsStorage: false)
        func status(_ target: String) async throws -> Int {
            try await LoopbackHTTP.send(port: server.port, method: "GET", target: target, headers: [], body: nil).status
        }
        for target in ["/health", "/health/ready", "/health/live"] {
            #expect(try await status(target) == 200, "\(target)")
        }
        #expect(try await status("/health/other") == 404)
        // The database goes away: not ready, still alive.
        try await storage.close()
        #expect(try await status("/health/ready") == 503)
        #expect(try await status("/health") == 503)
        #expect(try await status("/health/live") == 200)
        try await server.shutdown()
    }
}
