import Foundation
import Logging
public import PostgresNIO
import ServerStorageCore
public import ServerStoragePostgreSQL
public import Testing

/// The PostgreSQL server the tests use: `$FERRY_TEST_POSTGRES_URL` (CI starts one with
/// `Tools/postgres`). Without it every PostgreSQL test is skipped, with ``skipReason``.
///
/// Each test gets a schema of its own (`ferry_t_…`), so tests run in parallel on one database;
/// the schemas earlier runs left (made more than two hours ago) are dropped the first time a test
/// asks for one.
public enum TestPostgreSQL: Sendable {
    /// The variable naming the test server.
    public static let variable = "FERRY_TEST_POSTGRES_URL"

    /// The test server, when the environment names one.
    public static let url: PostgreSQLURL? = ProcessInfo.processInfo.environment[variable].flatMap {
        try? PostgreSQLURL($0)
    }

    /// The URL as `ferry serve --db` takes it (with the password).
    public static var urlText: String? { ProcessInfo.processInfo.environment[variable] }

    /// Whether the PostgreSQL tests can run.
    public static var isAvailable: Bool { url != nil }

    /// Why the PostgreSQL tests are skipped.
    public static let skipReason: Comment =
        "FERRY_TEST_POSTGRES_URL is not set: start a server with `export FERRY_TEST_POSTGRES_URL=$(bash Tools/postgres)`"

    /// A fresh schema name: `ferry_t_`, the time it was made (seconds since 1970), a random part.
    public static func freshSchema() async -> String {
        await sweep.value
        let made = Int(Date().timeIntervalSince1970)
        return "ferry_t_\(made)_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(16)
    }

    /// Drops the schemas earlier test runs left: those made more than two hours ago (no test run
    /// lasts that long), so test processes running at the same time on one database (two
    /// checkouts, a helper's) never drop each other's.
    private static let sweep = Task {
        guard url != nil else { return }
        _ = try? await execute(
            """
            DO $$ DECLARE s text; BEGIN
              FOR s IN SELECT nspname FROM pg_namespace WHERE nspname LIKE 'ferry\\_t\\_%'
                AND (nspname !~ '^ferry_t_[0-9]{10}_'
                  OR substring(nspname FROM 9 FOR 10)::bigint < extract(epoch FROM now()) - 7200) LOOP
                EXECUTE 'DROP SCHEMA ' || quote_ident(s) || ' CASCADE';
              END LOOP;
            END $$
            """)
    }

    /// Opens a storage in `schema` of the test database.
    public static func open(
        schema: String, now: @escaping @Sendable () -> Int64 = PostgreSQLServerStorage.systemMilliseconds,
        connections: Int = 8, connectionWait: Duration = .seconds(5), statementTimeout: Duration = .seconds(30)
    ) async throws -> PostgreSQLServerStorage {
        guard let url else { throw StorageError(.unavailable, "FERRY_TEST_POSTGRES_URL is not set") }
        return try await PostgreSQLServerStorage.open(
            url,
            configuration: .init(
                maximumConnections: connections, connectionWait: connectionWait, statementTimeout: statementTimeout,
                now: now, schema: schema))
    }

    /// Runs SQL on the test database outside any storage (to drop a schema, hold a lock, or cut a
    /// storage's connections); returns the first column of each row as text.
    @discardableResult
    public static func execute(_ sql: String) async throws -> [String?] {
        guard let url else { return [] }
        let connection = try await connect(url)
        do {
            var values: [String?] = []
            for try await value in try await connection.query(PostgresQuery(unsafeSQL: sql), logger: logger).decode(
                String?.self)
            {
                values.append(value)
            }
            try? await connection.close()
            return values
        } catch {
            try? await connection.close()
            throw error
        }
    }

    /// A connection of the test's own, which it closes.
    public static func connect(_ url: PostgreSQLURL) async throws -> PostgresConnection {
        let configuration = PostgresConnection.Configuration(
            host: url.host, port: url.port, username: url.user, password: url.password, database: url.database,
            tls: .disable)
        return try await PostgresConnection.connect(configuration: configuration, id: 99, logger: logger)
    }

    /// Drops a test's schema and everything in it.
    public static func drop(schema: String) async {
        _ = try? await execute("DROP SCHEMA IF EXISTS \(schema) CASCADE")
    }

    private static let logger = Logger(label: "ferry.test.postgresql")
}
