import GRDB
public import ServerStorageCore
@_spi(StoreSupport) import SyncCore

/// Set writes: many inserts, claims or recordings in one call on the writer connection, each with
/// the outcome it would have alone.
extension SQLiteServerStorage {
    public func insert(into table: StorageTable, _ rows: [StorageInsert]) async throws
        -> [Result<StoredItem, StorageError>]
    {
        if rows.isEmpty { return [] }
        // What each insert checks before it reaches the database, in the same order.
        let checks = CheckedInserts(rows, into: table) { row, _ in
            try StoredItem.validateID(row.id)
            if let owner = row.owner { try OwnerScope.validateSubject(owner) }
            return try ServerSQLLayout.itemText(row.content, table.name)
        }
        if let settled = checks.settled { return settled }
        let prepared = checks.checked
        let itemTexts = checks.texts
        let written: (results: [Result<StoredItem, StorageError>], last: (Int64, Int64)?)
        do {
            written = try await write("inserting into '\(table.name)'") { db in
                try self.insertRows(db, table, rows, texts: itemTexts, checked: prepared)
            }
        } catch {
            // The kinds read meanwhile may hold fields the rolled-back rows fixed.
            forgetCaches()
            throw error
        }
        if let (version, updatedAt) = written.last {
            announce(table.name, version, Timestamp(millisecondsSince1970: updatedAt))
        }
        return written.results
    }

    /// The rows not `checked` yet, each as ``insert(into:id:content:owner:)`` writes it (an id taken,
    /// then the field kinds), with one update of the table's sequence for all; the last stamp taken.
    private func insertRows(
        _ db: Database, _ table: StorageTable, _ rows: [StorageInsert], texts: [String],
        checked: [Result<StoredItem, StorageError>?]
    ) throws -> (results: [Result<StoredItem, StorageError>], last: (Int64, Int64)?) {
        guard var record = try Self.tableRecord(db, table.name, creating: true) else {
            throw StorageError.noSuchTable(table.name)
        }
        let insert = try db.cachedStatement(
            sql: """
                INSERT INTO \(record.sqlName) (\(Self.columns)) VALUES (?, ?, ?, ?, ?, 0, ?)
                ON CONFLICT (id) DO NOTHING
                """)
        let now = configuration.now()
        var results = checked
        var inserted = 0
        for (index, row) in rows.enumerated() where results[index] == nil {
            // A row whose field kinds are known needs no look-up first: the insert finds a taken id
            // (a new id is the rule, and a read per row cost 7% of a batched push). A row that would
            // fix a new kind looks first: a refused row must not fix one.
            let kindsKnown = fieldKindsAreKnown(table, row.content)
            if !kindsKnown {
                if let existing = try Self.fetch(db, record, id: row.id, owner: .all) {
                    results[index] = .failure(.alreadyExists(id: row.id, in: table.name, current: existing))
                    continue
                }
                do {
                    try checkFieldKinds(db, table, row.content)
                } catch let error as StorageError where error.code == .fieldKind {
                    results[index] = .failure(error)
                    continue
                }
            }
            let before = record
            record.lastUpdatedAt = max(now, record.lastUpdatedAt + 1)
            record.lastVersion += 1
            try insert.execute(
                arguments: [
                    row.id, texts[index], record.lastUpdatedAt, record.lastUpdatedAt, record.lastVersion, row.owner,
                ])
            if kindsKnown && db.changesCount == 0 {
                record = before
                let existing = try Self.fetch(db, record, id: row.id, owner: .all)
                results[index] = .failure(.alreadyExists(id: row.id, in: table.name, current: existing))
                continue
            }
            let stamp = Timestamp(millisecondsSince1970: record.lastUpdatedAt)
            results[index] = .success(
                StoredItem(
                    id: row.id, content: row.content, createdAt: stamp, updatedAt: stamp, version: record.lastVersion,
                    deleted: false, owner: row.owner))
            inserted += 1
        }
        guard inserted > 0 else { return (results.map { $0! }, nil) }
        try db.cachedStatement(sql: "UPDATE ferry_tables SET last_updated_at = ?, last_version = ? WHERE name = ?")
            .execute(arguments: [record.lastUpdatedAt, record.lastVersion, table.name])
        return (results.map { $0! }, (record.lastVersion, record.lastUpdatedAt))
    }

    /// A transaction holds the writer, so reading the keys claims them (``claimOutcome(scope:key:)``).
    public func claimOutcomes(scope: String, keys: [String]) async throws -> [String: RecordedOutcome] {
        if keys.isEmpty { return [:] }
        // One statement for all the keys (a JSON array of them), not one per key: a batch of 500
        // keyed inserts spent 4% of the server's time reading its keys one by one.
        let list = JSONValue.array(Set(keys).sorted().map { .string($0) }).serialized()
        return try await read("reading recorded outcomes") { db in
            var recorded: [String: RecordedOutcome] = [:]
            let rows = try Row.fetchCursor(
                db.cachedStatement(
                    sql: """
                        SELECT key, fingerprint, status, headers, body, recorded_at FROM ferry_outcomes
                        WHERE scope = ? AND key IN (SELECT value FROM json_each(?))
                        """),
                arguments: [scope, list])
            while let row = try rows.next() {
                let outcome = Self.outcome(row, scope: scope, key: row["key"])
                recorded[outcome.key] = outcome
            }
            return recorded
        }
    }

    public func recordOutcomes(_ outcomes: [RecordedOutcome]) async throws -> [RecordedOutcome] {
        if outcomes.isEmpty { return [] }
        for outcome in outcomes { try RecordedOutcome.validateKey(outcome.key) }
        return try await write("recording outcomes") { db in
            let insert = try db.cachedStatement(
                sql: """
                    INSERT INTO ferry_outcomes (scope, key, fingerprint, status, headers, body, recorded_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (scope, key) DO NOTHING
                    """)
            return try outcomes.map { outcome in
                try insert.execute(
                    arguments: [
                        outcome.scope, outcome.key, outcome.fingerprint, outcome.status, outcome.headersText,
                        outcome.body, outcome.recordedAt,
                    ])
                if db.changesCount > 0 { return outcome }
                return try Self.fetchOutcome(db, scope: outcome.scope, key: outcome.key) ?? outcome
            }
        }
    }
}
