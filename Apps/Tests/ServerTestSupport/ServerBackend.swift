import Foundation
public import Logging
public import ServerStorageCore
import ServerStoragePostgreSQL
import ServerStorageSQLite
import Testing

/// The server storages the HTTP and end-to-end tests run on.
///
/// ```swift
/// @Test(arguments: ServerBackend.allCases)
/// func roundTrip(_ backend: ServerBackend) async throws {
///     let database = try await backend.database()   // skips the test when PostgreSQL is not set up
///     let storage = try await database.open(logger: logger)
///     …
///     await database.remove()
/// }
/// ```
public enum ServerBackend: String, CaseIterable, Sendable, CustomStringConvertible {
    case sqlite
    case postgreSQL

    public var description: String { rawValue }

    /// A new, empty database of this backend: a SQLite file in a temporary directory, or a fresh
    /// schema of the test PostgreSQL server. Skips the current test, with the reason, when the
    /// backend is PostgreSQL and `FERRY_TEST_POSTGRES_URL` is not set.
    public func database() async throws -> TestDatabase {
        switch self {
        case .sqlite:
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
                "ferry-server-" + UUID().uuidString)
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            return TestDatabase(location: .sqlite(directory.appendingPathComponent("server.sqlite").path))
        case .postgreSQL:
            guard TestPostgreSQL.isAvailable else { try Test.cancel("SKIPPED: \(TestPostgreSQL.skipReason)") }
            return TestDatabase(location: .postgreSQL(schema: await TestPostgreSQL.freshSchema()))
        }
    }
}

/// One test database: opened as often as a test restarts its server, removed at the end.
public struct TestDatabase: Sendable {
    enum Location: Sendable {
        case sqlite(String)
        case postgreSQL(schema: String)
    }

    let location: Location

    /// A SQLite database file at `path` (created when first opened).
    public static func sqlite(path: String) -> TestDatabase {
        TestDatabase(location: .sqlite(path))
    }

    /// Opens a storage on the database (again, after a restart, with the same rows).
    public func open(logger: Logger) async throws -> any ServerStorage {
        switch location {
        case .sqlite(let path):
            return try SQLiteServerStorage(location: .file(path), configuration: .init(logger: logger))
        case .postgreSQL(let schema):
            guard let url = TestPostgreSQL.url else { throw StorageError(.unavailable, "no test PostgreSQL") }
            return try await PostgreSQLServerStorage.open(url, configuration: .init(logger: logger, schema: schema))
        }
    }

    /// What `ferry serve` takes as `--db` for this database.
    public var serveArgument: String {
        switch location {
        case .sqlite(let path): "sqlite:" + path
        case .postgreSQL(let schema):
            (TestPostgreSQL.urlText ?? "") + ((TestPostgreSQL.urlText ?? "").contains("?") ? "&" : "?") + "schema="
                + schema
        }
    }

    /// Deletes the database.
    public func remove() async {
        switch location {
        case .sqlite(let path):
            try? FileManager.default.removeItem(at: URL(fileURLWithPath: path).deletingLastPathComponent())
        case .postgreSQL(let schema):
            await TestPostgreSQL.drop(schema: schema)
        }
    }
}
