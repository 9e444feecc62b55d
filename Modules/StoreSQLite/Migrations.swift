import GRDB
import SyncCore

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
/// | v3 | an index of each error's operation (the `operationId` of its JSON) |
///
/// Item tables are not created by migrations but on a table's first write (see ``ItemTable``);
/// their layout version is recorded per table in `ferry_tables.layout`, so that a later layout can
/// be migrated table by table.
enum StoreSchema {
    /// The schema version this code writes.
    static let currentVersion: Int64 = 3

    /// The migration identifiers, oldest first.
    static let migrationIdentifiers = ["v1", "v2", "v3"]

    /// The SQL of each migration, oldest first: run by GRDB's migrator in a store file, and by
    /// ``migrateInAppDatabase(_:place:)`` in an app's own database.
    static let steps: [(identifier: String, sql: String)] = [
        (
            "v1",
            """
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
            """
        ),
        (
            "v2",
            """
                CREATE INDEX ferry_operations_table ON ferry_operations (tableName, id);
                CREATE INDEX ferry_errors_table ON ferry_errors (tableName, seq);
                UPDATE ferry_meta SET value = 2 WHERE key = 'schemaVersion';
            """
        ),
        (
            // A push looks up the errors of each operation it completes after a failure: without
            // it, each lookup read every error of the table (StoreBenchmark --only errors).
            "v3",
            """
                CREATE INDEX ferry_errors_operation ON ferry_errors (tableName, \(operationOfError));
                UPDATE ferry_meta SET value = 3 WHERE key = 'schemaVersion';
            """
        ),
    ]

    /// An error's operation id, read from its JSON (`NULL` for a record that is not JSON, which
    /// then cannot stop the store from opening): the expression of the v3 index, which a query
    /// must repeat exactly to use it.
    static let operationOfError = "CASE WHEN json_valid(json) THEN json_extract(json, '$.operationId') END"

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        for step in steps {
            migrator.registerMigration(step.identifier) { db in try db.execute(sql: step.sql) }
        }
        return migrator
    }

    /// Applies the missing migrations inside a database the app owns, in one transaction, without
    /// GRDB's migrator: `grdb_migrations` is the app's (its identifiers, "v1" for one, would collide
    /// with Ferry's), so Ferry's version is `ferry_meta.schemaVersion` alone. Tables created from
    /// then on are named `ferry_items_<key>` (``ItemTable/prefixedLayout``).
    ///
    /// - Throws: `StoreError.Code.corrupt` when the database holds a Ferry schema newer than this
    ///   code, or a table named like Ferry's that is not Ferry's.
    static func migrateInAppDatabase(_ db: Database, place: String) throws {
        let version: Int64
        if try db.tableExists("ferry_meta") {
            guard let stored = try Int64.fetchOne(db, sql: "SELECT value FROM ferry_meta WHERE key = 'schemaVersion'")
            else {
                throw StoreError(.corrupt, "cannot open \(place): its ferry_meta table is not Ferry's")
            }
            version = stored
        } else {
            version = 0
        }
        if version > currentVersion {
            throw StoreError(
                .corrupt,
                "cannot open \(place): its Ferry schema is version \(version), newer than this version of Ferry (\(currentVersion))"
            )
        }
        for step in steps.dropFirst(Int(version)) { try db.execute(sql: step.sql) }
        try db.execute(
            sql: "INSERT OR REPLACE INTO ferry_meta (key, value) VALUES ('newTableLayout', ?)",
            arguments: [ItemTable.prefixedLayout])
    }
}
