import ServerStorageConformance
import ServerStorageCore
import ServerStoragePostgreSQL
import StoreConformance
import SyncCore
import Testing

@Suite(
    "PostgreSQLServerStorage conformance",
    .enabled(if: PostgreSQLTestDatabase.url != nil, PostgreSQLTestDatabase.skipReason))
struct PostgreSQLServerStorageConformanceTests {
    @Test("on PostgreSQL", arguments: ServerStorageConformanceSuite.checks)
    func postgreSQL(_ check: ServerStorageCheck) async throws {
        let schema = PostgreSQLTestDatabase.freshSchema()
        do {
            try await check.run { clock in
                ServerStorageFixture(
                    storage: try await PostgreSQLTestDatabase.open(schema: schema, now: clock.now), clock: clock,
                    reopen: { try await PostgreSQLTestDatabase.open(schema: schema, now: clock.now) })
            }
        } catch {
            await PostgreSQLTestDatabase.drop(schema: schema)
            throw error
        }
        await PostgreSQLTestDatabase.drop(schema: schema)
    }

    @Test func everyCheckRunsOnPostgreSQL() async throws {
        let schema = PostgreSQLTestDatabase.freshSchema()
        let clock = ManualClock()
        let fixture = ServerStorageFixture(
            storage: try await PostgreSQLTestDatabase.open(schema: schema, now: clock.now), clock: clock,
            reopen: { try await PostgreSQLTestDatabase.open(schema: schema, now: clock.now) })
        let skipped = await ServerStorageCheck.skipped(ServerStorageConformanceSuite.checks, by: fixture)
        await PostgreSQLTestDatabase.drop(schema: schema)
        #expect(skipped.isEmpty, "skipped: \(skipped)")
    }
}
