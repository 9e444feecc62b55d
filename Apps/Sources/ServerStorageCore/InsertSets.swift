public import SyncCore

/// One row of a set insert (``ServerStorage/insert(into:_:)``).
public struct StorageInsert: Sendable, Hashable {
    /// The new row's id.
    public var id: String
    /// Its fields, without system properties.
    public var content: JSONObject
    /// The subject that owns it in a per-user table; `nil` for none.
    public var owner: String?

    public init(id: String, content: JSONObject, owner: String? = nil) {
        self.id = id
        self.content = content
        self.owner = owner
    }
}

/// One insert after the other, one claim after the other, one recording after the other: the
/// behaviour every backend's set operations must match, for a backend that has none of its own.
extension ServerStorage {
    public func insert(into table: StorageTable, _ rows: [StorageInsert]) async throws
        -> [Result<StoredItem, StorageError>]
    {
        if rows.isEmpty { return [] }
        return try await transaction {
            var results: [Result<StoredItem, StorageError>] = []
            results.reserveCapacity(rows.count)
            for row in rows {
                do {
                    results.append(
                        .success(try await self.insert(into: table, id: row.id, content: row.content, owner: row.owner))
                    )
                } catch let error as StorageError where error.isOwnFailure {
                    results.append(.failure(error))
                }
            }
            return results
        }
    }

    public func claimOutcomes(scope: String, keys: [String]) async throws -> [String: RecordedOutcome] {
        var recorded: [String: RecordedOutcome] = [:]
        for key in Set(keys).sorted() {
            if let outcome = try await claimOutcome(scope: scope, key: key) { recorded[key] = outcome }
        }
        return recorded
    }

    public func recordOutcomes(_ outcomes: [RecordedOutcome]) async throws -> [RecordedOutcome] {
        var kept: [RecordedOutcome] = []
        kept.reserveCapacity(outcomes.count)
        for outcome in outcomes { kept.append(try await recordOutcome(outcome)) }
        return kept
    }
}

extension StorageError {
    /// Whether the error concerns one write alone (its row, its id, its values), not the database:
    /// in a set the write fails and the next goes on.
    package var isOwnFailure: Bool {
        switch code {
        case .conflict, .fieldKind, .invalidName, .invalidTableName, .noSuchTable, .notFound, .versionMismatch: true
        default: false
        }
    }
}

/// The checks each row of a set insert makes before it reaches the database, in the order one
/// insert alone makes them: the table's name (refused for every row alike), then each row's own
/// checks (id, owner, JSON text) through the backend's `check`.
///
/// ```swift
/// let checks = CheckedInserts(rows, into: table) { row, _ in
///     try StoredItem.validateID(row.id)
///     if let owner = row.owner { try OwnerScope.validateSubject(owner) }
///     return try ServerSQLLayout.itemText(row.content, table.name)
/// }
/// if let settled = checks.settled { return settled }   // no row reaches the database
/// ```
package struct CheckedInserts {
    /// Each row's refusal, or `nil` for a row that goes on to the database.
    package var checked: [Result<StoredItem, StorageError>?]
    /// Each row's JSON text (empty for a refused row).
    package var texts: [String]

    /// Every row's outcome when none reaches the database; `nil` when some do.
    package var settled: [Result<StoredItem, StorageError>]? {
        checked.contains { $0 == nil } ? nil : checked.map { $0! }
    }

    /// Checks `rows`: `check` validates a row (with its index) and answers its JSON text, or throws
    /// the row's `StorageError`.
    package init(
        _ rows: [StorageInsert], into table: StorageTable, check: (StorageInsert, Int) throws -> String
    ) {
        texts = Array(repeating: "", count: rows.count)
        do {
            try StorageTable.validateName(table.name)
        } catch {
            checked = rows.map { _ in .failure(error) }
            return
        }
        checked = Array(repeating: nil, count: rows.count)
        for (index, row) in rows.enumerated() {
            do {
                texts[index] = try check(row, index)
            } catch let error as StorageError {
                checked[index] = .failure(error)
            } catch {
                checked[index] = .failure(StorageError(.fieldKind, "\(error)"))
            }
        }
    }
}
