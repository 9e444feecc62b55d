package import QuerySQL
@_spi(StoreSupport) package import SyncCore

/// The layout both SQL backends (ServerStorageSQLite and ServerStoragePostgreSQL) give a table, and
/// the limits their queries compile under: defined once, each backend brings only its dialect.
///
/// Each table is one SQL table `ferry_items_<n>`, named by its catalog number (never by its name):
/// `id` (the primary key), `item` (the JSON of the item's own fields), `created_at` and
/// `updated_at` (milliseconds, `updated_at` unique per table), `version` (the table's write
/// sequence), `deleted` and `owner` (indexed with `updated_at`).
package enum ServerSQLLayout {
    /// The SQL name of the table with catalog number `number`.
    package static func tableName(_ number: Int64) -> String { "ferry_items_\(number)" }

    /// The statements that create the table with catalog number `number` and its indexes.
    package static func createStatements(_ number: Int64, dialect: SQLDialect) -> [String] {
        let table = tableName(number)
        let create =
            dialect == .postgreSQL
            ? """
            CREATE TABLE \(table) (
                id text COLLATE "C" PRIMARY KEY,
                item jsonb NOT NULL,
                created_at bigint NOT NULL,
                updated_at bigint NOT NULL,
                version bigint NOT NULL,
                deleted boolean NOT NULL,
                owner text COLLATE "C"
            )
            """
            : """
            CREATE TABLE \(table) (
                id TEXT PRIMARY KEY NOT NULL,
                item TEXT NOT NULL,
                created_at INTEGER NOT NULL,
                updated_at INTEGER NOT NULL,
                version INTEGER NOT NULL,
                deleted INTEGER NOT NULL,
                owner TEXT
            ) WITHOUT ROWID
            """
        return [
            create,
            "CREATE UNIQUE INDEX \(table)_updated ON \(table) (updated_at)",
            "CREATE INDEX \(table)_owner ON \(table) (owner, updated_at) WHERE owner IS NOT NULL",
        ]
    }

    /// The columns of a table as the query compiler sees them: the item's own fields in `item`,
    /// `id`, `createdAt`, `updatedAt` (milliseconds, never NULL) and `deleted` in their columns, and
    /// `version` unreadable (its number does not sort like the tag queries see).
    package static let queryLayout = SQLTableLayout(
        updatedAt: .init(name: "updated_at"), createdAt: .init(name: "created_at"), deletedColumn: "deleted",
        unreadableFields: ["version"], itemHoldsSystemFields: false)

    /// What one compiled filter may hold, whatever a client sends: well inside SQLite's limits
    /// (expression depth 1000, 32,766 arguments) and PostgreSQL's (65,535 parameters, the parser's
    /// stack).
    package static let limits = SQLCompiler.Limits(maximumDepth: 48, maximumOperands: 200, maximumArguments: 5_000)

    /// The query compiler for `table` in `dialect`.
    package static func compiler(
        _ table: StorageTable, dialect: SQLDialect, assumesRegularSortKeys: Bool = true
    ) -> SQLCompiler {
        SQLCompiler(
            schema: table.schema, layout: queryLayout, dialect: dialect, limits: limits,
            assumesRegularSortKeys: assumesRegularSortKeys)
    }

    /// The owner scope as SQL (`nil` for every owner). An owner no storage can compare exactly
    /// (GRDB binds text up to its first U+0000; PostgreSQL text cannot hold it) is refused, never
    /// cut.
    package static func ownerCondition(_ owner: OwnerScope) throws -> SQLFragment? {
        switch owner {
        case .all: return nil
        case .owner(let subject):
            try OwnerScope.validateSubject(subject)
            return "owner = \(bind: subject)"
        }
    }

    /// The item's JSON text. What JSON text cannot hold exactly (a NaN or an infinity, nesting
    /// deeper than the parser reads back) is refused rather than written as `null`.
    package static func itemText(_ content: JSONObject, _ table: String) throws -> String {
        var buffer = JSONTextBuffer()
        let problems = buffer.appendJSON(.object(content))
        guard problems.isEmpty else {
            let what =
                problems.nonFinite ? "a number JSON cannot hold (NaN or infinite)" : "nesting too deep to read back"
            throw StorageError(.fieldKind, "the item for '\(table)' holds \(what)")
        }
        return String(decoding: buffer.array, as: UTF8.self)
    }
}
