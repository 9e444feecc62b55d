import ServerStorageConformance
import ServerStorageCore
import ServerStoragePostgreSQL
import ServerTestSupport
import StoreConformance
import SyncCore
import Testing

@Suite(
    "PostgreSQLServerStorage conformance",
    .enabled(if: TestPostgreSQL.url != nil, TestPostgreSQL.skipReason), .timeLimit(.minutes(10)))
struct PostgreSQLServerStorageConformanceTests {
    @Test("on PostgreSQL", arguments: ServerStorageConformanceSuite.checks)
    func postgreSQL(_ check: ServerStorageCheck) async throws {
        let schema = await TestPostgreSQL.freshSchema()
        do {
            try await check.run { clock in
                ServerStorageFixture(
                    storage: try await TestPostgreSQL.open(schema: schema, now: clock.now), clock: clock,
                    reopen: { try await TestPostgreSQL.open(schema: schema, now: clock.now) },
                    openAnother: { try await TestPostgreSQL.open(schema: schema, now: clock.now) })
            }
        } catch {
            await TestPostgreSQL.drop(schema: schema)
            throw error
        }
        await TestPostgreSQL.drop(schema: schema)
    }

    @Test func everyCheckRunsOnPostgreSQL() async throws {
        let schema = await TestPostgreSQL.freshSchema()
        let clock = ManualClock()
        let fixture = ServerStorageFixture(
            storage: try await TestPostgreSQL.open(schema: schema, now: clock.now), clock: clock,
            reopen: { try await TestPostgreSQL.open(schema: schema, now: clock.now) },
            openAnother: { try await TestPostgreSQL.open(schema: schema, now: clock.now) })
        let skipped = await ServerStorageCheck.skipped(ServerStorageConformanceSuite.checks, by: fixture)
        await TestPostgreSQL.drop(schema: schema)
        #expect(skipped.isEmpty, "skipped: \(skipped)")
    }
}
