import Foundation
import ServerStorage
import ServerStorageConformance
import ServerStorageSQLite
import SyncCore
import Testing

@Suite("SQLiteServerStorage conformance")
struct SQLiteServerStorageConformanceTests {
    @Test("in memory", arguments: ServerStorageConformance.checks)
    func memory(_ check: ServerStorageCheck) async throws {
        try await check.run { clock in
            ServerStorageFixture(
                storage: try SQLiteServerStorage(location: .memory, configuration: .init(now: clock.now)), clock: clock)
        }
    }

    @Test("in a file", arguments: ServerStorageConformance.checks)
    func file(_ check: ServerStorageCheck) async throws {
        let directory = try TemporaryDirectory()
        let path = directory.path + "/server.sqlite"
        try await check.run { clock in
            ServerStorageFixture(
                storage: try SQLiteServerStorage(location: .file(path), configuration: .init(now: clock.now)),
                clock: clock,
                reopen: { try SQLiteServerStorage(location: .file(path), configuration: .init(now: clock.now)) })
        }
    }
}

/// A directory under the system's temporary directory, removed when the value is released.
final class TemporaryDirectory: Sendable {
    let path: String

    init() throws {
        path = NSTemporaryDirectory() + "ferry-server-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    deinit {
        try? FileManager.default.removeItem(atPath: path)
    }
}
