import GRDB

/// The versioned schema of the store's own tables, applied with GRDB's `DatabaseMigrator`.
///
/// Migrations only ever add: a store written by an older Ferry opens in a newer one with every
/// queued operation, error, token, definition and item kept. A store written by a *newer* Ferry
/// (a migration this code does not know) is refused with `StoreError.Code.corrupt` rather than
/// guessed at. `ferry_meta` mirrors the version as `schemaVersion` for tools that read the file
/// without GRDB; GRDB's own `grdb_migrations` table is what decides.
///
/// | version | change |
/// | --- | --- |
/// | v1 | `ferry_meta`, `ferry_tables` (catalog), `ferry_operations`, `ferry_errors`, `ferry_delta_tokens` |
/// | v2 | indexes for the per-table queue order and per-table errors |
///
/// Item tables are not created by migrations but on a table's first write (see ``ItemTable``);
/// their layout version is recorded per table in `ferry_tables.layout`, so that a later layout can
/// be migrated table by table.
enum StoreSchema {
    /// The schema version this code writes.
    static let currentVersion: Int64 = 2

    /// The migration identifiers, oldest first.
    static let migrationIdentifiers = ["v1", "v2"]

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE ferry_meta (
                        key TEXT PRIMARY KEY NOT NULL,
                        value NOT NULL
                    );
                    INSERT INTO ferry_meta (key, value) VALUES ('schemaVersion', 1), ('lastOperationId', 0);
                    CREATE TABLE ferry_tables (
                        key INTEGER PRIMARY KEY,
                        name TEXT NOT NULL UNIQUE,
                        layout INTEGER NOT NULL,
                        definition TEXT
                    );
                    CREATE TABLE ferry_operations (
                        id INTEGER PRIMARY KEY,
                        tableName TEXT NOT NULL,
                        itemId TEXT NOT NULL,
                        json TEXT NOT NULL
                    );
                    CREATE INDEX ferry_operations_item ON ferry_operations (tableName, itemId);
                    CREATE TABLE ferry_errors (
                        seq INTEGER PRIMARY KEY,
                        id TEXT NOT NULL UNIQUE,
                        tableName TEXT NOT NULL,
                        json TEXT NOT NULL
                    );
                    CREATE TABLE ferry_delta_tokens (
                        tableName TEXT NOT NULL,
                        queryId TEXT NOT NULL,
                        value TEXT NOT NULL,
                        PRIMARY KEY (tableName, queryId)
                    );
                    """)
        }
        migrator.registerMigration("v2") { db in
            try db.execute(
                sql: """
                    CREATE INDEX ferry_operations_table ON ferry_operations (tableName, id);
                    CREATE INDEX ferry_errors_table ON ferry_errors (tableName, seq);
                    UPDATE ferry_meta SET value = 2 WHERE key = 'schemaVersion';
                    """)
        }
        return migrator
    }
}
