import FerryServer
import Foundation
import Logging
import ServerStorageCore
import ServerStorageSQLite
import ServerTestSupport
import SyncCore
import Synchronization
import Testing

/// The operator probe: a 5xx logged two lines, the storage's warning without the request id, then
/// the request's error line. Now one line per error, with the request id and the storage's reason.
@Suite("One log line per server error", .timeLimit(.minutes(5)))
struct ServerErrorLogTests {
    @Test func aStorageFailureIsOneLineWithTheRequestIDAndTheReason() async throws {
        let captured = CapturedLog()
        var logger = Logger(label: "test.server") { _ in CapturingLogHandler(captured: captured) }
        logger.logLevel = .info
        let storage = try HeldWriter.storageQuicklyBusy()
        let configuration = ServerConfiguration(
            host: "127.0.0.1", port: 0, tables: [TableSettings(name: "todo")], logger: logger)
        let server = try await ReferenceServer.start(configuration, storage: storage, ownsStorage: false)
        let live = LiveServer(server: server)
        let held = await HeldWriter.hold(storage)
        let reply = try await live.send("POST", "/tables/todo", json: ["id": "late"])
        #expect(reply.status == 503, "\(reply.text)")
        // A batch whose write fails: the batch's one line says so, with its request id.
        let batch: JSONValue = ["requests": [["method": "POST", "url": "todo", "body": ["id": "b"]]]]
        let batched = try await live.send("POST", "/tables/$batch", json: batch)
        #expect(batched.json?["responses"]?.arrayValue?.first?["status"] == 503, "\(batched.text)")
        try await held.release()
        try await server.shutdown()
        try await storage.close()

        let entries = captured.entries.withLock { $0 }
        let serious = entries.filter { $0.level >= .warning }
        #expect(serious.count == 2, "\(serious.map(\.message))")
        let line = try #require(serious.first { $0.message.hasPrefix("POST /tables/todo 503") })
        #expect(line.metadata["request.id"] != nil, "\(line.metadata)")
        #expect(line.metadata["ferry.error"].map { "\($0)".isEmpty == false } == true, "\(line.metadata)")
        let batchLine = try #require(serious.first { $0.message.hasPrefix("POST /tables/$batch 200") })
        #expect(batchLine.metadata["request.id"] != nil, "\(batchLine.metadata)")
        #expect(batchLine.message.contains("503"), "\(batchLine.message)")
        #expect(!entries.contains { $0.message.hasPrefix("storage ") }, "\(entries.map(\.message))")
    }
}
