import Foundation
import Logging
import PostgresNIO
import ServerStorageCore
import ServerStoragePostgreSQL
import Testing

/// The PostgreSQL server the tests use: `$FERRY_TEST_POSTGRES_URL` (CI starts one with
/// `Tools/postgres`). Without it the PostgreSQL tests are skipped, with this reason.
enum PostgreSQLTestDatabase {
    static let variable = "FERRY_TEST_POSTGRES_URL"

    static let url: PostgreSQLURL? = ProcessInfo.processInfo.environment[variable].flatMap { try? PostgreSQLURL($0) }

    static let skipReason: Comment =
        "FERRY_TEST_POSTGRES_URL is not set: start a server with `export FERRY_TEST_POSTGRES_URL=$(bash Tools/postgres)`"

    /// A fresh schema name, so that each test has an empty database of its own.
    static func freshSchema() -> String {
        "ferry_test_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(20)
    }

    /// Opens a storage in `schema` of the test database.
    static func open(schema: String, now: @escaping @Sendable () -> Int64, connections: Int = 8) async throws
        -> PostgreSQLServerStorage
    {
        guard let url else { throw StorageError(.unavailable, "no test database") }
        return try await PostgreSQLServerStorage.open(
            url,
            configuration: .init(maximumConnections: connections, now: now, schema: schema))
    }

    /// Runs one SQL statement on the test database, outside any storage (to drop a schema, or to
    /// cut a storage's connections).
    static func execute(_ sql: String) async throws {
        guard let url else { return }
        let configuration = PostgresConnection.Configuration(
            host: url.host, port: url.port, username: url.user, password: url.password, database: url.database,
            tls: .disable)
        let connection = try await PostgresConnection.connect(
            configuration: configuration, id: 99, logger: Logger(label: "ferry.test"))
        defer { Task { try? await connection.close() } }
        try await connection.query(PostgresQuery(unsafeSQL: sql), logger: Logger(label: "ferry.test"))
    }

    /// Drops a test's schema and everything in it.
    static func drop(schema: String) async {
        try? await execute("DROP SCHEMA IF EXISTS \(schema) CASCADE")
    }
}
