import Logging
import PostgresNIO
import QuerySQL
import ServerStorageCore

/// The versioned schema of a Ferry server database on PostgreSQL.
///
/// `ferry_migrations` records the versions applied. `apply(on:schema:)` runs in one transaction
/// that first takes a transaction-scoped advisory lock, so that instances starting together apply
/// each migration exactly once: the second waits for the first to commit, then finds nothing to do.
///
/// The lock is the schema's: (`lockKey`, `hashtext(schema)`). Servers of other schemas in the same
/// database start without waiting for each other (before, one key for the whole database let a
/// stalled start elsewhere hold every other start back). A session that stops talking mid-migration
/// (its client hung, or a proxy between them swallows the connection) loses the lock after
/// `idle_in_transaction_session_timeout`, one minute, instead of holding it for ever.
enum PostgreSQLMigrations {
    /// The advisory lock's first key: "FRSV" (Ferry server) as a number.
    static let lockKey: Int32 = 0x4652_5356

    /// The migrations in order; a version is never edited once released, only followed by another.
    static let all: [(version: Int, name: String, sql: [String])] = [
        (
            1, "catalog",
            [
                """
                CREATE TABLE ferry_tables (
                    name text COLLATE "C" PRIMARY KEY,
                    number bigint NOT NULL UNIQUE,
                    created_at bigint NOT NULL,
                    last_updated_at bigint NOT NULL,
                    last_version bigint NOT NULL
                )
                """,
                "CREATE SEQUENCE ferry_table_numbers",
                """
                CREATE TABLE ferry_fields (
                    table_name text COLLATE "C" NOT NULL,
                    field text COLLATE "C" NOT NULL,
                    kind text NOT NULL,
                    PRIMARY KEY (table_name, field)
                )
                """,
            ]
        ),
        (
            2, "outcomes",
            [
                """
                CREATE TABLE ferry_outcomes (
                    scope text COLLATE "C" NOT NULL,
                    key text COLLATE "C" NOT NULL,
                    fingerprint text NOT NULL,
                    status bigint NOT NULL,
                    headers text NOT NULL,
                    body text,
                    recorded_at bigint NOT NULL,
                    PRIMARY KEY (scope, key)
                )
                """,
                "CREATE INDEX ferry_outcomes_recorded ON ferry_outcomes (recorded_at)",
            ]
        ),
        (
            3, "blobs",
            [
                """
                CREATE TABLE ferry_uploads (
                    number bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    id text COLLATE "C" NOT NULL UNIQUE,
                    length bigint NOT NULL,
                    received bigint NOT NULL,
                    created_at bigint NOT NULL,
                    updated_at bigint NOT NULL,
                    sha256 text COLLATE "C"
                )
                """,
                "CREATE INDEX ferry_uploads_updated ON ferry_uploads (updated_at)",
                """
                CREATE TABLE ferry_blobs (
                    sha256 text COLLATE "C" PRIMARY KEY,
                    size bigint NOT NULL,
                    content bigint NOT NULL UNIQUE,
                    created_at bigint NOT NULL
                )
                """,
                """
                CREATE TABLE ferry_blob_chunks (
                    content bigint NOT NULL,
                    start bigint NOT NULL,
                    bytes bytea NOT NULL,
                    PRIMARY KEY (content, start)
                )
                """,
                // Out of line and uncompressed: attachments are mostly compressed already (images,
                // video, archives), and reads of a range need no decompression.
                "ALTER TABLE ferry_blob_chunks ALTER COLUMN bytes SET STORAGE EXTERNAL",
            ]
        ),
    ]

    /// The newest version this build knows.
    static var latest: Int { all.last?.version ?? 0 }

    static func apply(on session: PostgreSQLSession, schema: String?) async throws {
        try await session.execute("BEGIN")
        do {
            try await session.execute("SET LOCAL idle_in_transaction_session_timeout = '60s'")
            // A validated name (lowercase letters, digits and underscores), as a literal.
            let schemaName = schema.map { "'\($0)'" } ?? "current_schema()"
            try await session.execute("SELECT pg_advisory_xact_lock(\(lockKey), hashtext(\(schemaName)))")
            if let schema {
                // A validated name: lowercase letters, digits and underscores.
                try await session.execute("CREATE SCHEMA IF NOT EXISTS \(schema)")
            }
            try await session.execute(
                """
                CREATE TABLE IF NOT EXISTS ferry_migrations (
                    version integer PRIMARY KEY,
                    name text NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now()
                )
                """)
            var applied: Set<Int> = []
            for row in try await session.rows("SELECT version FROM ferry_migrations") {
                applied.insert(try row.decode(Int.self))
            }
            if let newest = applied.max(), newest > latest {
                throw StorageError(
                    .corrupt,
                    "the database's Ferry schema is version \(newest); this build knows up to \(latest): upgrade ferry")
            }
            for migration in all where !applied.contains(migration.version) {
                for statement in migration.sql {
                    try await session.execute(statement)
                }
                _ = try await session.rows(
                    "INSERT INTO ferry_migrations (version, name) VALUES (\(bind: Int64(migration.version)), \(bind: migration.name))"
                )
                session.logger.notice(
                    "applied a schema migration",
                    metadata: ["ferry.migration": "\(migration.version) \(migration.name)"])
            }
            try await session.execute("COMMIT")
        } catch {
            try? await session.execute("ROLLBACK", cancellable: false)
            throw error
        }
    }
}
