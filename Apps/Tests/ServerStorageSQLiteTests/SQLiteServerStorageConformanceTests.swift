import Foundation
import ServerStorageCore
import ServerStorageConformance
import ServerStorageSQLite
import StoreConformance
import SyncCore
import Testing

@Suite("SQLiteServerStorage conformance", .timeLimit(.minutes(10)))
struct SQLiteServerStorageConformanceTests {
    static func inMemory(_ clock: ManualClock) throws -> ServerStorageFixture {
        ServerStorageFixture(
            storage: try SQLiteServerStorage(location: .memory, configuration: .init(now: clock.now)), clock: clock)
    }

    @Test("in memory", arguments: ServerStorageConformanceSuite.checks)
    func memory(_ check: ServerStorageCheck) async throws {
        try await check.run { clock in try Self.inMemory(clock) }
    }

    @Test func inMemoryOnlyTheReopeningCheckIsSkippedAndItIsReported() async throws {
        let skipped = await ServerStorageCheck.skipped(
            ServerStorageConformanceSuite.checks, by: try Self.inMemory(ManualClock()))
        #expect(
            skipped.map(\.name) == [
                "a key claimed in a transaction has one effect across two storages on one database",
                "rows, field kinds and the write sequence survive closing and reopening",
            ])
        try await ServerStorageConformanceSuite.reportSkipped(by: try Self.inMemory(ManualClock()))
    }

    @Test("in a file", arguments: ServerStorageConformanceSuite.checks)
    func file(_ check: ServerStorageCheck) async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/server.sqlite"
        try await check.run { clock in
            ServerStorageFixture(
                storage: try SQLiteServerStorage(location: .file(path), configuration: .init(now: clock.now)),
                clock: clock,
                reopen: { try SQLiteServerStorage(location: .file(path), configuration: .init(now: clock.now)) },
                openAnother: { try SQLiteServerStorage(location: .file(path), configuration: .init(now: clock.now)) })
        }
    }
}
