import FerryServer
import Foundation
import ServerStorageCore
import ServerStorageSQLite
import ServerTestSupport
import SyncCore
import Testing

/// A full disk is said as such: 507 with `Retry-After` and its own code, nothing written, reads
/// still answered.
@Suite("A full storage", .timeLimit(.minutes(2)))
struct StorageFullTests {
    @Test func writesToAFullDatabaseAre507WithRetryAfterAndReadsGoOn() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-full-" + UUID().uuidString)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        // The same error SQLite gives on a full disk (SQLITE_FULL), from a size limit.
        let storage = try SQLiteServerStorage(
            location: .file(directory.appendingPathComponent("full.sqlite").path),
            configuration: .init(logger: .quietTest, maximumSize: 256 * 1024))
        var configuration = ServerConfiguration(
            host: "127.0.0.1", port: 0, tables: [TableSettings(name: "todo")], logger: .quietTest)
        configuration.limits.maximumBodySize = 64 * 1024
        let server = try await ReferenceServer.start(configuration, storage: storage, ownsStorage: true)
        let live = LiveServer(server: server)
        let text = String(repeating: "z", count: 20_000)
        var full: LiveServer.Reply?
        var written = 0
        for index in 0..<100 {
            let reply = try await live.send(
                "POST", "/tables/todo", json: ["id": .string("f\(index)"), "text": .string(text)])
            if reply.status != 201 {
                full = reply
                break
            }
            written += 1
        }
        let answer = try #require(full, "the database never filled up")
        #expect(answer.status == 507, "\(answer.text)")
        #expect(answer.header("Retry-After") != nil)
        #expect(answer.json?.objectValue?["code"] == "storageFull")
        #expect(try await live.send("GET", "/tables/todo/f\(written)").status == 404, "nothing of it was written")
        let read = try await live.send("GET", "/tables/todo?$top=1")
        #expect(read.status == 200, "reads go on: \(read.text)")
        try await server.shutdown()
    }
}
