import GRDB
import QuerySQL
public import ServerStorageCore
import SyncCore
import Synchronization

/// The catalog: tables by number and their write sequences (`ferry_tables`), and the JSON kinds of
/// undeclared fields (`ferry_fields`).
extension SQLiteServerStorage {
    public func prepare(_ tables: [StorageTable]) async throws {
        for table in tables { try StorageTable.validateName(table.name) }
        try await write("preparing tables") { db in
            for table in tables { _ = try Self.tableRecord(db, table.name, creating: true) }
        }
    }

    public func tableNames() async throws -> [String] {
        try await read("listing tables") { db in
            try String.fetchAll(db, sql: "SELECT name FROM ferry_tables ORDER BY name")
        }
    }

    public func claimTable(_ name: String) async throws -> String {
        try StorageTable.validateName(name)
        if try await number(of: name) != nil { return name }
        // In one write transaction: SQLite's single writer orders racing claims, across processes too.
        return try await write("creating table '\(name)'") { db in
            if try Self.tableRecord(db, name, creating: false) != nil { return name }
            if let other = try String.fetchOne(
                db, sql: "SELECT name FROM ferry_tables WHERE lower(name) = lower(?) ORDER BY name LIMIT 1",
                arguments: [name])
            {
                return other
            }
            _ = try Self.tableRecord(db, name, creating: true)
            return name
        }
    }

    public func tableExists(_ table: String) async throws -> Bool {
        try await number(of: table) != nil
    }

    public func tableStamps(named names: Set<String>?, changedSince: Int64?) async throws -> [StorageChange] {
        try await read("reading the catalog") { db in
            try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT name, last_version, last_updated_at FROM ferry_tables
                        WHERE last_updated_at >= ? ORDER BY name
                        """),
                arguments: [changedSince ?? Int64.min]
            ).compactMap { row -> StorageChange? in
                let name: String = row[0]
                guard names?.contains(name) ?? true else { return nil }
                return StorageChange(
                    table: name, version: row[1], updatedAt: Timestamp(millisecondsSince1970: row[2]))
            }
        }
    }

    /// The catalog number of `name`, or `nil` when the table does not exist.
    func number(of name: String) async throws -> Int64? {
        if let known = numbers.withLock({ $0[name] }) { return known }
        let found = try await read("reading the catalog") { db in
            try Int64.fetchOne(db, sql: "SELECT number FROM ferry_tables WHERE name = ?", arguments: [name])
        }
        // Not remembered inside a transaction: until it commits, other connections cannot see a
        // table it created (a query using the number would fail).
        if let found, currentTransaction == nil { numbers.withLock { $0[name] = found } }
        return found
    }

    struct TableRecord {
        var number: Int64
        var lastUpdatedAt: Int64
        var lastVersion: Int64
        var sqlName: String { ServerSQLLayout.tableName(number) }
    }

    static func tableRecord(_ db: Database, _ name: String, creating: Bool) throws -> TableRecord? {
        if let row = try Row.fetchOne(
            db.cachedStatement(sql: "SELECT number, last_updated_at, last_version FROM ferry_tables WHERE name = ?"),
            arguments: [name])
        {
            return TableRecord(number: row[0], lastUpdatedAt: row[1], lastVersion: row[2])
        }
        guard creating else { return nil }
        let number = (try Int64.fetchOne(db, sql: "SELECT MAX(number) FROM ferry_tables") ?? 0) + 1
        let record = TableRecord(number: number, lastUpdatedAt: 0, lastVersion: 0)
        try db.execute(
            sql:
                "INSERT INTO ferry_tables (name, number, created_at, last_updated_at, last_version) VALUES (?, ?, ?, 0, 0)",
            arguments: [name, number, systemMilliseconds()])
        for statement in ServerSQLLayout.createStatements(number, dialect: .sqlite) {
            try db.execute(sql: statement)
        }
        return record
    }

    /// Advances the table's write sequence inside the current transaction.
    func nextStamp(_ db: Database, _ name: String, _ record: inout TableRecord) throws -> (
        updatedAt: Int64, version: Int64
    ) {
        let updatedAt = max(configuration.now(), record.lastUpdatedAt + 1)
        let version = record.lastVersion + 1
        record.lastUpdatedAt = updatedAt
        record.lastVersion = version
        try db.cachedStatement(sql: "UPDATE ferry_tables SET last_updated_at = ?, last_version = ? WHERE name = ?")
            .execute(arguments: [updatedAt, version, name])
        return (updatedAt, version)
    }

    /// Fixes the JSON kind of new undeclared fields and rejects values of another kind.
    ///
    /// A field's kind never changes once recorded, so the kinds read from the catalog are kept in
    /// memory and a write whose fields are all known reads nothing.
    func checkFieldKinds(_ db: Database, _ table: StorageTable, _ content: JSONObject) throws {
        let undeclared = Self.undeclaredKinds(table, content)
        if undeclared.isEmpty || rememberKinds(table, undeclared) { return }
        // Only the fields of this write: reading every field of the table made each write with a new
        // field cost as much as the table had fields (a client sending thousands of new names per
        // write slowed every writer, seen at 1.5 s a write after a million).
        var known: [String: String] = [:]
        let names = JSONValue.array(undeclared.map { .string($0.0) }).serialized()
        for row in try Row.fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT field, kind FROM ferry_fields
                    WHERE table_name = ? AND field IN (SELECT value FROM json_each(?))
                    """),
            arguments: [table.name, names])
        {
            known[row[0]] = row[1]
        }
        // What was read is remembered (or, in a batch, forgotten again if the batch rolls back).
        knownFieldKinds.withLock { $0[table.name, default: [:]].merge(known) { _, read in read } }
        for (name, kind) in undeclared.sorted(by: { $0.0 < $1.0 }) {
            if let existing = known[name] {
                guard existing == kind.rawValue else {
                    throw StorageError.fieldKind(table: table.name, field: name, holds: existing, given: kind)
                }
            }
        }
        for (name, kind) in undeclared.sorted(by: { $0.0 < $1.0 }) where known[name] == nil {
            try db.cachedStatement(sql: "INSERT INTO ferry_fields (table_name, field, kind) VALUES (?, ?, ?)")
                .execute(arguments: [table.name, name, kind.rawValue])
        }
    }

    /// Whether the kinds of `content`'s undeclared fields are all known to be right: then
    /// ``checkFieldKinds(_:_:_:)`` neither reads nor writes the catalog.
    func fieldKindsAreKnown(_ table: StorageTable, _ content: JSONObject) -> Bool {
        let undeclared = Self.undeclaredKinds(table, content)
        return undeclared.isEmpty || rememberKinds(table, undeclared)
    }

    private static func undeclaredKinds(_ table: StorageTable, _ content: JSONObject) -> [(String, FieldKind)] {
        content.compactMap { name, value -> (String, FieldKind)? in
            guard table.schema.fields[name] == nil, let kind = FieldKind(of: value) else { return nil }
            return (name, kind)
        }
    }

    private func rememberKinds(_ table: StorageTable, _ undeclared: [(String, FieldKind)]) -> Bool {
        guard let remembered = knownFieldKinds.withLock({ $0[table.name] }) else { return false }
        return undeclared.allSatisfy { remembered[$0.0] == $0.1.rawValue }
    }

    /// The JSON kinds recorded for the undeclared fields of `table`.
    public func fieldKinds(of table: String) async throws -> [String: FieldKind] {
        try await read("reading field kinds") { db in
            var result: [String: FieldKind] = [:]
            for row in try Row.fetchAll(
                db, sql: "SELECT field, kind FROM ferry_fields WHERE table_name = ?", arguments: [table])
            {
                if let kind = FieldKind(rawValue: row[1]) { result[row[0]] = kind }
            }
            return result
        }
    }

    static func existingRecord(_ db: Database, _ name: String, id: String) throws -> TableRecord {
        guard let record = try tableRecord(db, name, creating: false) else {
            throw StorageError.noItem(id: id, inMissingTable: name)
        }
        return record
    }
}
