import Foundation
import ServerStorageCore
import ServerStoragePostgreSQL
import ServerTestSupport
import SyncCore
import Testing

/// A write whose `COMMIT` was applied but whose answer was lost (the connection cut at that
/// moment) is a success, not a failure: the storage asks PostgreSQL how the transaction ended.
/// Answered 503, the client wrote it again (a 409 for its own id, a second row for the server's).
@Suite(
    "PostgreSQLServerStorage: a commit whose answer is lost",
    .enabled(if: TestPostgreSQL.isAvailable, TestPostgreSQL.skipReason),
    .timeLimit(.minutes(2)))
struct PostgreSQLCommitOutcomeTests {
    static let table = StorageTable(name: "outcomes")

    @Test func aWriteWhoseCommitAnswerIsLostSucceedsOnce() async throws {
        let target = try #require(TestPostgreSQL.url)
        let proxy = try CommitCuttingProxy(target: target.port)
        defer { proxy.stop() }
        var url = target
        url.host = "127.0.0.1"
        url.port = proxy.port
        let schema = await TestPostgreSQL.freshSchema()
        defer { Task { await TestPostgreSQL.drop(schema: schema) } }
        let storage = try await PostgreSQLServerStorage.open(
            url, configuration: .init(maximumConnections: 4, connectionWait: .seconds(5), schema: schema))
        try await storage.prepare([Self.table])
        _ = try await storage.insert(into: Self.table, id: "before", content: ["n": .int(0)], owner: nil)

        proxy.arm()
        let stored = try await storage.insert(into: Self.table, id: "cut", content: ["n": .int(1)], owner: nil)
        #expect(proxy.cuts == 1, "the proxy lost no COMMIT answer")
        #expect(stored.id == "cut")

        // Once, and the storage goes on.
        let ids = try await storage.query(Self.table, StorageQuery()).items.map(\.id).sorted()
        #expect(ids == ["before", "cut"])
        _ = try await storage.insert(into: Self.table, id: "after", content: [:], owner: nil)
        try await storage.close()
    }
}
