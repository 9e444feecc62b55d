import BlobStorageConformance
import ServerStorageCore
import ServerStoragePostgreSQL
import ServerTestSupport
import StoreConformance
import Testing

@Suite(
    "PostgreSQLBlobStorage conformance",
    .enabled(if: TestPostgreSQL.url != nil, TestPostgreSQL.skipReason), .timeLimit(.minutes(10)))
struct PostgreSQLBlobStorageTests {
    static let chunkSize = BlobStorageLimits.defaultChunkSize

    static func open(_ schema: String) async throws -> OpenedBlobStorage {
        let storage = try await TestPostgreSQL.open(schema: schema, statementTimeout: .seconds(120))
        return OpenedBlobStorage(
            storage: PostgreSQLBlobStorage(storage: storage, configuration: .init(chunkSize: chunkSize)),
            close: { try? await storage.close() })
    }

    @Test("on PostgreSQL", arguments: BlobStorageConformanceSuite.checks)
    func postgreSQL(_ check: BlobStorageCheck) async throws {
        let schema = await TestPostgreSQL.freshSchema()
        do {
            try await check.run {
                let opened = try await Self.open(schema)
                return BlobStorageFixture(
                    storage: opened.storage, chunkSize: Self.chunkSize, openAnother: { try await Self.open(schema) },
                    onClose: opened.close)
            }
        } catch {
            await TestPostgreSQL.drop(schema: schema)
            throw error
        }
        await TestPostgreSQL.drop(schema: schema)
    }

    @Test func everyCheckRunsOnPostgreSQL() async throws {
        let schema = await TestPostgreSQL.freshSchema()
        let opened = try await Self.open(schema)
        let fixture = BlobStorageFixture(
            storage: opened.storage, chunkSize: Self.chunkSize, openAnother: { try await Self.open(schema) },
            onClose: opened.close)
        let skipped = await BlobStorageCheck.skipped(BlobStorageConformanceSuite.checks, by: fixture)
        await TestPostgreSQL.drop(schema: schema)
        #expect(skipped.isEmpty, "skipped: \(skipped)")
    }
}
