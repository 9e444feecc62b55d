import GRDB
public import ServerStorageCore
@_spi(StoreSupport) public import SyncCore

/// Reading and writing one item: every write advances the table's sequence in the same
/// transaction and is announced once it commits.
extension SQLiteServerStorage {
    static let columns = "id, item, created_at, updated_at, version, deleted, owner"

    static func decode(_ row: Row) throws -> StoredItem {
        try decode(row, text: row[1])
    }

    /// Decodes a row whose item text (`row[1]`) was read already.
    static func decode(_ row: Row, text: String) throws -> StoredItem {
        let id: String = row[0]
        guard case .object(let content) = try? JSONValue(parsing: text) else {
            throw StorageError(.corrupt, "the stored item '\(id)' is not a JSON object")
        }
        return StoredItem(
            id: id, content: content, createdAt: Timestamp(millisecondsSince1970: row[2]),
            updatedAt: Timestamp(millisecondsSince1970: row[3]), version: row[4], deleted: (row[5] as Int64) != 0,
            owner: row[6])
    }

    static func fetch(_ db: Database, _ record: TableRecord, id: String, owner: OwnerScope) throws -> StoredItem? {
        let row: Row?
        switch owner {
        case .all:
            row = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT \(columns) FROM \(record.sqlName) WHERE id = ?"), arguments: [id])
        case .owner(let subject):
            try OwnerScope.validateSubject(subject)
            row = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT \(columns) FROM \(record.sqlName) WHERE id = ? AND owner = ?"),
                arguments: [id, subject])
        }
        return try row.map(decode)
    }

    public func item(in table: StorageTable, id: String, owner: OwnerScope) async throws -> StoredItem? {
        guard let number = try await number(of: table.name) else { return nil }
        let record = TableRecord(number: number, lastUpdatedAt: 0, lastVersion: 0)
        return try await read("reading an item of '\(table.name)'") { db in
            try Self.fetch(db, record, id: id, owner: owner)
        }
    }

    public func insert(into table: StorageTable, id: String, content: JSONObject, owner: String?) async throws
        -> StoredItem
    {
        try StorageTable.validateName(table.name)
        try StoredItem.validateID(id)
        if let owner { try OwnerScope.validateSubject(owner) }
        let text = try ServerSQLLayout.itemText(content, table.name)
        let stored = try await write("inserting into '\(table.name)'") { db in
            guard var record = try Self.tableRecord(db, table.name, creating: true) else {
                throw StorageError.noSuchTable(table.name)
            }
            if let existing = try Self.fetch(db, record, id: id, owner: .all) {
                throw StorageError.alreadyExists(id: id, in: table.name, current: existing)
            }
            try self.checkFieldKinds(db, table, content)
            let stamp = try self.nextStamp(db, table.name, &record)
            try db.cachedStatement(sql: "INSERT INTO \(record.sqlName) (\(Self.columns)) VALUES (?, ?, ?, ?, ?, 0, ?)")
                .execute(arguments: [id, text, stamp.updatedAt, stamp.updatedAt, stamp.version, owner])
            return StoredItem(
                id: id, content: content, createdAt: Timestamp(millisecondsSince1970: stamp.updatedAt),
                updatedAt: Timestamp(millisecondsSince1970: stamp.updatedAt), version: stamp.version, deleted: false,
                owner: owner)
        }
        announce(table.name, stored.version, stored.updatedAt)
        return stored
    }

    public func replace(
        in table: StorageTable, id: String, expectedVersion: Int64, content: JSONObject, deleted: Bool,
        owner: OwnerScope
    ) async throws -> StoredItem {
        let text = try ServerSQLLayout.itemText(content, table.name)
        let stored = try await write("replacing an item of '\(table.name)'") { db in
            var record = try Self.existingRecord(db, table.name, id: id)
            var current = try StoredItem.checkWritePrecondition(
                Self.fetch(db, record, id: id, owner: owner), id: id, expectedVersion: expectedVersion, in: table.name)
            try self.checkFieldKinds(db, table, content)
            let stamp = try self.nextStamp(db, table.name, &record)
            try db.cachedStatement(
                sql: "UPDATE \(record.sqlName) SET item = ?, updated_at = ?, version = ?, deleted = ? WHERE id = ?"
            ).execute(arguments: [text, stamp.updatedAt, stamp.version, deleted ? 1 : 0, id])
            current.content = content
            current.updatedAt = Timestamp(millisecondsSince1970: stamp.updatedAt)
            current.version = stamp.version
            current.deleted = deleted
            return current
        }
        announce(table.name, stored.version, stored.updatedAt)
        return stored
    }

    public func delete(from table: StorageTable, id: String, expectedVersion: Int64, owner: OwnerScope) async throws {
        let stamp = try await write("deleting an item of '\(table.name)'") { db in
            var record = try Self.existingRecord(db, table.name, id: id)
            _ = try StoredItem.checkWritePrecondition(
                Self.fetch(db, record, id: id, owner: owner), id: id, expectedVersion: expectedVersion, in: table.name)
            // A delete advances the sequence too: the next write's stamps must still exceed it.
            let stamp = try self.nextStamp(db, table.name, &record)
            try db.execute(sql: "DELETE FROM \(record.sqlName) WHERE id = ?", arguments: [id])
            return stamp
        }
        announce(table.name, stamp.version, Timestamp(millisecondsSince1970: stamp.updatedAt))
    }
}
