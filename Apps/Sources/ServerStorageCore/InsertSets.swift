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
