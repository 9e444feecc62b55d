import GRDB
import QuerySQL
import SyncCore

/// The SQL layout of one Ferry table.
///
/// Each Ferry table is one SQL table named `items_<key>`, where `key` is its row in the
/// `ferry_tables` catalog (Ferry names are case-sensitive and SQLite identifiers are not, so names
/// never become identifiers):
///
/// ```sql
/// CREATE TABLE "items_1" (
///     id TEXT PRIMARY KEY NOT NULL,  -- the item's id
///     updatedAt INTEGER,             -- ms since 1970 when updatedAt is an ISO 8601 date-time (or date)
///     updatedAtIrregular INTEGER,    -- 1 when updatedAt is present, not null and not a date-time
///     deleted INTEGER NOT NULL,      -- 1 when deleted is true
///     version TEXT,                  -- the version string
///     hasNUL INTEGER,                -- 1 when the item's JSON holds the escape \u0000
///     item TEXT NOT NULL             -- the whole item: JSONValue.serialized(), the source of truth
/// );
/// CREATE INDEX "items_1_updatedAt" ON "items_1" (updatedAt, id);
/// CREATE INDEX "items_1_irregular" ON "items_1" (updatedAtIrregular) WHERE updatedAtIrregular IS NOT NULL;
/// CREATE INDEX "items_1_nul" ON "items_1" (hasNUL) WHERE hasNUL IS NOT NULL;
/// ```
///
/// The columns are derived from the item on every write; the item text is what reads return.
/// SQLite's `json_extract` ends a string at an escaped NUL character, so while a table holds such
/// an item, queries on it are answered by the evaluator (SQL still narrows the rows). A
/// declared index (`TableDefinition.indexes`) becomes `"items_1_ix_<n>"` on the same expressions
/// the query compiler uses: `json_extract(item, '$."field"')` per field, or the column for `id` and
/// `updatedAt`.
enum ItemTable {
    /// The layout version recorded in `ferry_tables.layout` for tables of a store file.
    static let layout: Int64 = 1
    /// The layout of tables created in an app's own database: the same columns, named
    /// `ferry_items_<key>` so that they cannot collide with the app's tables.
    static let prefixedLayout: Int64 = 2

    /// The columns as the query compiler sees them: the whole item in `item`, and `updatedAt` in
    /// milliseconds with its irregular values flagged.
    static let sqlLayout = SQLTableLayout(
        updatedAt: .init(name: "updatedAt", irregularColumn: "updatedAtIrregular"), itemHoldsSystemFields: true)

    /// The query compiler for a table of this layout.
    static func compiler(_ schema: TableSchema, assumesRegularSortKeys: Bool = true) -> SQLCompiler {
        SQLCompiler(
            schema: schema, layout: sqlLayout, dialect: .sqlite, assumesRegularSortKeys: assumesRegularSortKeys)
    }

    static func name(_ key: Int64, layout: Int64) -> String {
        layout >= prefixedLayout ? "ferry_items_\(key)" : "items_\(key)"
    }

    static func create(_ db: Database, key: Int64, layout: Int64) throws {
        let table = name(key, layout: layout)
        try db.execute(
            sql: """
                CREATE TABLE "\(table)" (
                    id TEXT PRIMARY KEY NOT NULL,
                    updatedAt INTEGER,
                    updatedAtIrregular INTEGER,
                    deleted INTEGER NOT NULL,
                    version TEXT,
                    hasNUL INTEGER,
                    item TEXT NOT NULL
                );
                CREATE INDEX "\(table)_updatedAt" ON "\(table)" (updatedAt, id);
                CREATE INDEX "\(table)_irregular" ON "\(table)" (updatedAtIrregular)
                    WHERE updatedAtIrregular IS NOT NULL;
                CREATE INDEX "\(table)_nul" ON "\(table)" (hasNUL) WHERE hasNUL IS NOT NULL;
                """)
    }

    /// The expression a declared index uses for `field`, or `nil` when the compiler never uses one.
    static func indexExpression(_ field: String, schema: TableSchema) -> String? {
        compiler(schema).indexedExpression(field)
    }

    /// Makes the declared indexes of `definition` exist, and no others.
    static func syncIndexes(_ db: Database, entry: TableEntry, definition: SyncCore.TableDefinition) throws {
        let table = ItemTable.name(entry.key, layout: entry.layout)
        var wanted: [String: String] = [:]
        for (position, fields) in definition.indexes.enumerated() where !fields.isEmpty {
            var expressions = fields.compactMap { indexExpression($0, schema: definition.schema) }
            guard expressions.count == fields.count else { continue }
            // Queries order by `id` last: with it in the index, a page walks the index in order.
            if expressions.last != "id" { expressions.append("id") }
            let index = "\(table)_ix_\(position)"
            wanted[index] = "CREATE INDEX \"\(index)\" ON \"\(table)\" (\(expressions.joined(separator: ", ")))"
        }
        let existing = try Row.fetchAll(
            db, sql: "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND name LIKE ?",
            arguments: [table, "\(table)_ix_%"])
        var kept: Set<String> = []
        for row in existing {
            let index = try row.decode(String.self, forColumn: "name")
            let sql = try row.decode(String?.self, forColumn: "sql")
            if let sql, wanted[index] == sql {
                kept.insert(index)
            } else {
                try db.execute(sql: "DROP INDEX \"\(index)\"")
            }
        }
        for (index, sql) in wanted where !kept.contains(index) {
            try db.execute(sql: sql)
        }
    }

    static func upsertSQL(_ table: String) -> String {
        """
        INSERT INTO \(table) (id, updatedAt, updatedAtIrregular, deleted, version, hasNUL, item)
        VALUES (?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (id) DO UPDATE SET updatedAt = excluded.updatedAt,
            updatedAtIrregular = excluded.updatedAtIrregular, deleted = excluded.deleted,
            version = excluded.version, hasNUL = excluded.hasNUL, item = excluded.item
        """
    }
}

/// A catalog row: a Ferry table's key and definition.
struct TableEntry {
    var key: Int64
    var layout: Int64
    var definition: SyncCore.TableDefinition?

    var sqlName: String { "\"\(ItemTable.name(key, layout: layout))\"" }
    var schema: TableSchema { definition?.schema ?? .schemaless }
}
