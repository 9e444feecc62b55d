import Logging
import PostgresNIO
import QuerySQL
public import ServerStorageCore

extension PostgreSQLServerStorage {
    public func recordedOutcome(scope: String, key: String) async throws -> RecordedOutcome? {
        return try await withConnection("reading a recorded outcome") { connection in
            try await Self.fetchOutcome(connection, scope: scope, key: key)
        }
    }

    /// In a transaction, inserts a placeholder row for the key (status 0, never committed as
    /// such): PostgreSQL makes a second inserter of the same key wait for this transaction's end,
    /// then either find the recorded outcome or, after a rollback, take the key itself.
    public func claimOutcome(scope: String, key: String) async throws -> RecordedOutcome? {
        guard currentTransaction != nil else { return try await recordedOutcome(scope: scope, key: key) }
        try RecordedOutcome.validateKey(key)
        let claim: SQLFragment = """
            INSERT INTO ferry_outcomes (scope, key, fingerprint, status, headers, body, recorded_at)
            VALUES (\(bind: scope), \(bind: key), '', 0, '{}', NULL, \(bind: configuration.now()))
            ON CONFLICT (scope, key) DO NOTHING RETURNING 1
            """
        return try await withConnection("claiming an idempotency key") { connection in
            if try await !connection.rows(claim).isEmpty { return nil }
            // The key's transaction has ended (this statement waited for it): its outcome is
            // committed, and a new statement sees it.
            return try await Self.fetchOutcome(connection, scope: scope, key: key)
        }
    }

    @discardableResult
    public func recordOutcome(_ outcome: RecordedOutcome) async throws -> RecordedOutcome {
        try RecordedOutcome.validateKey(outcome.key)
        // Fills this transaction's own claim (status 0), or records a new key; an outcome another
        // request recorded first stays.
        let insert: SQLFragment = """
            INSERT INTO ferry_outcomes (scope, key, fingerprint, status, headers, body, recorded_at)
            VALUES (\(bind: outcome.scope), \(bind: outcome.key), \(bind: outcome.fingerprint), \(bind: outcome.status),
                \(bind: outcome.headersText), \(bind: outcome.body.map(SQLValue.text) ?? .null), \(bind: outcome.recordedAt))
            ON CONFLICT (scope, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, status = EXCLUDED.status,
                headers = EXCLUDED.headers, body = EXCLUDED.body, recorded_at = EXCLUDED.recorded_at
            WHERE ferry_outcomes.status = 0
            RETURNING 1
            """
        return try await withTransaction("recording an outcome") { connection in
            if try await !connection.rows(insert).isEmpty { return outcome }
            // Another request recorded this key first (a separate statement: it sees that commit).
            return try await Self.fetchOutcome(connection, scope: outcome.scope, key: outcome.key) ?? outcome
        }
    }

    @discardableResult
    public func forgetOutcomes(recordedBefore milliseconds: Int64) async throws -> Int {
        let delete: SQLFragment = "DELETE FROM ferry_outcomes WHERE recorded_at < \(bind: milliseconds) RETURNING 1"
        return try await withConnection("forgetting recorded outcomes") { connection in
            try await connection.rows(delete).count
        }
    }

    static func fetchOutcome(
        _ connection: PostgreSQLSession, scope: String, key: String
    ) async throws -> RecordedOutcome? {
        let select: SQLFragment = """
            SELECT fingerprint, status, headers, body, recorded_at FROM ferry_outcomes
            WHERE scope = \(bind: scope) AND key = \(bind: key)
            """
        guard let row = try await connection.rows(select).first else { return nil }
        let (fingerprint, status, headers, body, recordedAt) = try row.decode(
            (String, Int64, String, String?, Int64).self)
        return RecordedOutcome(
            scope: scope, key: key, fingerprint: fingerprint, status: Int(status),
            headers: RecordedOutcome.headers(fromText: headers), body: body, recordedAt: recordedAt)
    }
}
