import Logging
import PostgresNIO
import QuerySQL
public import ServerStorageCore

extension PostgreSQLServerStorage {
    public func recordedOutcome(scope: String, key: String) async throws -> RecordedOutcome? {
        let logger = logger
        return try await withConnection("reading a recorded outcome") { connection in
            try await Self.fetchOutcome(connection, scope: scope, key: key, logger)
        }
    }

    @discardableResult
    public func recordOutcome(_ outcome: RecordedOutcome) async throws -> RecordedOutcome {
        try RecordedOutcome.validateKey(outcome.key)
        let logger = logger
        let insert: SQLFragment = """
            INSERT INTO ferry_outcomes (scope, key, fingerprint, status, headers, body, recorded_at)
            VALUES (\(bind: outcome.scope), \(bind: outcome.key), \(bind: outcome.fingerprint), \(bind: outcome.status),
                \(bind: outcome.headersText), \(bind: outcome.body.map(SQLValue.text) ?? .null), \(bind: outcome.recordedAt))
            ON CONFLICT (scope, key) DO NOTHING RETURNING 1
            """
        return try await withConnection("recording an outcome") { connection in
            if try await !Self.rows(connection, insert, logger).isEmpty { return outcome }
            // Another request recorded this key first (a separate statement: it sees that commit).
            return try await Self.fetchOutcome(connection, scope: outcome.scope, key: outcome.key, logger) ?? outcome
        }
    }

    @discardableResult
    public func forgetOutcomes(recordedBefore milliseconds: Int64) async throws -> Int {
        let logger = logger
        let delete: SQLFragment = "DELETE FROM ferry_outcomes WHERE recorded_at < \(bind: milliseconds) RETURNING 1"
        return try await withConnection("forgetting recorded outcomes") { connection in
            try await Self.rows(connection, delete, logger).count
        }
    }

    static func fetchOutcome(
        _ connection: PostgresConnection, scope: String, key: String, _ logger: Logger
    ) async throws -> RecordedOutcome? {
        let select: SQLFragment = """
            SELECT fingerprint, status, headers, body, recorded_at FROM ferry_outcomes
            WHERE scope = \(bind: scope) AND key = \(bind: key)
            """
        guard let row = try await rows(connection, select, logger).first else { return nil }
        let (fingerprint, status, headers, body, recordedAt) = try row.decode(
            (String, Int64, String, String?, Int64).self)
        return RecordedOutcome(
            scope: scope, key: key, fingerprint: fingerprint, status: Int(status),
            headers: RecordedOutcome.headers(fromText: headers), body: body, recordedAt: recordedAt)
    }
}
