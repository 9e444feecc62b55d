import GRDB
import Logging
public import ServerStorageCore
import SyncCore
import Synchronization

extension SQLiteServerStorage {
    // MARK: - Recorded outcomes

    public func recordedOutcome(scope: String, key: String) async throws -> RecordedOutcome? {
        try await read("reading a recorded outcome") { db in try Self.fetchOutcome(db, scope: scope, key: key) }
    }

    /// A transaction holds the writer (in this process through `writeGate`, across processes
    /// through `BEGIN IMMEDIATE`), so no other claim of the key can come between this read and
    /// the transaction's end: the read is the claim.
    public func claimOutcome(scope: String, key: String) async throws -> RecordedOutcome? {
        try await recordedOutcome(scope: scope, key: key)
    }

    @discardableResult
    public func recordOutcome(_ outcome: RecordedOutcome) async throws -> RecordedOutcome {
        try RecordedOutcome.validateKey(outcome.key)
        return try await write("recording an outcome") { db in
            try db.cachedStatement(
                sql: """
                    INSERT INTO ferry_outcomes (scope, key, fingerprint, status, headers, body, recorded_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (scope, key) DO NOTHING
                    """
            ).execute(
                arguments: [
                    outcome.scope, outcome.key, outcome.fingerprint, outcome.status, outcome.headersText, outcome.body,
                    outcome.recordedAt,
                ])
            if db.changesCount > 0 { return outcome }
            return try Self.fetchOutcome(db, scope: outcome.scope, key: outcome.key) ?? outcome
        }
    }

    @discardableResult
    public func forgetOutcomes(recordedBefore milliseconds: Int64) async throws -> Int {
        try await write("forgetting recorded outcomes") { db in
            try db.execute(sql: "DELETE FROM ferry_outcomes WHERE recorded_at < ?", arguments: [milliseconds])
            return db.changesCount
        }
    }

    static func fetchOutcome(_ db: Database, scope: String, key: String) throws -> RecordedOutcome? {
        guard
            let row = try Row.fetchOne(
                db.cachedStatement(
                    sql: """
                        SELECT fingerprint, status, headers, body, recorded_at FROM ferry_outcomes
                        WHERE scope = ? AND key = ?
                        """),
                arguments: [scope, key])
        else { return nil }
        return outcome(row, scope: scope, key: key)
    }

    /// A row of `ferry_outcomes` (its `fingerprint`, `status`, `headers`, `body` and `recorded_at`).
    static func outcome(_ row: Row, scope: String, key: String) -> RecordedOutcome {
        RecordedOutcome(
            scope: scope, key: key, fingerprint: row["fingerprint"], status: row["status"],
            headers: RecordedOutcome.headers(fromText: row["headers"]), body: row["body"],
            recordedAt: row["recorded_at"])
    }

    // MARK: - Running statements

    func ensureOpen() throws {
        if closed.withLock({ $0 }) { throw StorageError(.closed, "the storage \(location) is closed") }
    }

    func read<T: Sendable>(_ action: String, _ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        try ensureOpen()
        let spans = SQLiteStatementSpans.current(configuration.tracer)
        do {
            // In a transaction, reads see its writes: they run on its connection.
            if currentTransaction != nil { return try onTransactionConnection(spans, body) }
            let traced: @Sendable (Database) throws -> T = { db in
                try SQLiteStatementSpans.around(spans, db) { try body(db) }
            }
            if readsShareTheWriter {
                try await enterWriter()
                defer { writeGate.leave() }
                return try await database.read(traced)
            }
            return try await database.read(traced)
        } catch {
            throw Self.mapped(error, action, location)
        }
    }

    func write<T: Sendable>(_ action: String, _ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        try ensureOpen()
        let spans = SQLiteStatementSpans.current(configuration.tracer)
        do {
            if currentTransaction != nil {
                // One savepoint of the transaction: a failing write leaves nothing behind.
                return try onTransactionConnection(spans) { db in
                    try db.cachedStatement(sql: "SAVEPOINT ferry_write").execute()
                    let result: T
                    do {
                        result = try body(db)
                    } catch {
                        try? db.cachedStatement(sql: "ROLLBACK TO SAVEPOINT ferry_write").execute()
                        try? db.cachedStatement(sql: "RELEASE SAVEPOINT ferry_write").execute()
                        throw error
                    }
                    try db.cachedStatement(sql: "RELEASE SAVEPOINT ferry_write").execute()
                    return result
                }
            }
            try await enterWriter()
            defer { writeGate.leave() }
            // GRDB's `write`, with the statements traced up to the commit included.
            return try await database.writeWithoutTransaction { db in
                try SQLiteStatementSpans.around(spans, db) {
                    var result: T?
                    try db.inTransaction {
                        result = try body(db)
                        return .commit
                    }
                    return result!
                }
            }
        } catch {
            throw Self.mapped(error, action, location)
        }
    }

    /// Waits for the writer's turn, at most ``Configuration/busyTimeout``, and reports the wait.
    private func enterWriter() async throws {
        let wait = Duration.milliseconds(Int64(configuration.busyTimeout * 1000))
        let start = ContinuousClock.now
        do {
            try await writeGate.enter(within: wait) {
                StorageError(.busy, "the database stayed busy with other writes for \(wait)")
            }
        } catch {
            observers.report(.writer, since: start, error is CancellationError ? .cancelled : .timedOut)
            throw error
        }
        observers.report(.writer, since: start, .acquired)
    }

    // MARK: - Transactions

    /// Runs `body` on the writer connection, which the current transaction holds alone, and waits
    /// for it on the calling thread: a statement or two, without a hop through the task scheduler
    /// for each write of a batch of thousands.
    private func onTransactionConnection<T>(_ spans: SQLiteStatementSpans?, _ body: (Database) throws -> T) throws -> T
    {
        try database.writeWithoutTransaction { db in try SQLiteStatementSpans.around(spans, db) { try body(db) } }
    }

    /// The transaction the current task runs in, on this storage.
    var currentTransaction: SQLiteTransaction? {
        guard let transaction = SQLiteTransaction.current, transaction.storage == ObjectIdentifier(self) else {
            return nil
        }
        return transaction
    }

    /// Runs `body`'s writes in one transaction, each in its own savepoint (a write that fails
    /// leaves nothing behind and the next goes on), and commits once at the end: many writes cost
    /// one durable commit instead of one each. Reads in `body` see its writes; other writers wait
    /// (at most ``Configuration/busyTimeout`` for their turn) until it ends; announcements go out
    /// after the commit. When `body` throws or the commit fails, nothing of it is kept and the error
    /// is thrown (`body`'s as it is). Inside another transaction it is a savepoint.
    public func transaction<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
        if let current = currentTransaction { return try await savepoint(current, body) }
        try ensureOpen()
        try await enterWriter()
        defer { writeGate.leave() }
        let transaction = SQLiteTransaction(storage: ObjectIdentifier(self))
        let spans = SQLiteStatementSpans.current(configuration.tracer)
        do {
            try await database.writeWithoutTransaction { db in
                try SQLiteStatementSpans.around(spans, db) { try db.beginTransaction(.immediate) }
            }
        } catch {
            throw Self.mapped(error, "starting a transaction on", location)
        }
        let result: T
        do {
            result = try await SQLiteTransaction.$current.withValue(transaction) { try await body() }
        } catch {
            await rollBack(spans)
            throw error
        }
        do {
            try await database.writeWithoutTransaction { db in
                try SQLiteStatementSpans.around(spans, db) { try db.commit() }
            }
        } catch {
            await rollBack(spans)
            throw Self.mapped(error, "committing a transaction on", location)
        }
        for change in transaction.takeChanges() { announcements.publish(change) }
        return result
    }

    /// A transaction inside another: a savepoint that rolls back alone, with the announcements
    /// it held.
    private func savepoint<T: Sendable>(_ transaction: SQLiteTransaction, _ body: () async throws -> T)
        async throws -> T
    {
        let (name, mark) = transaction.openSavepoint()
        defer { transaction.closeSavepoint() }
        let spans = SQLiteStatementSpans.current(configuration.tracer)
        do {
            try onTransactionConnection(spans) { db in try db.cachedStatement(sql: "SAVEPOINT \(name)").execute() }
        } catch {
            throw Self.mapped(error, "starting a savepoint on", location)
        }
        let result: T
        do {
            result = try await body()
        } catch {
            _ = try? onTransactionConnection(spans) { db in
                try db.cachedStatement(sql: "ROLLBACK TO SAVEPOINT \(name)").execute()
                try db.cachedStatement(sql: "RELEASE SAVEPOINT \(name)").execute()
            }
            transaction.dropChanges(after: mark)
            forgetCaches()
            throw error
        }
        do {
            try onTransactionConnection(spans) { db in
                try db.cachedStatement(sql: "RELEASE SAVEPOINT \(name)").execute()
            }
        } catch {
            throw Self.mapped(error, "releasing a savepoint on", location)
        }
        return result
    }

    /// Rolls the transaction back and forgets what it taught the storage.
    private func rollBack(_ spans: SQLiteStatementSpans?) async {
        _ = try? await database.writeWithoutTransaction { db in
            try SQLiteStatementSpans.around(spans, db) { if db.isInsideTransaction { try db.rollback() } }
        }
        forgetCaches()
    }
}

/// The open transaction of a task on a ``SQLiteServerStorage`` (``SQLiteServerStorage/transaction(_:)``).
final class SQLiteTransaction: Sendable {
    @TaskLocal static var current: SQLiteTransaction?

    /// The storage whose transaction it is.
    let storage: ObjectIdentifier
    private let state = Mutex<(changes: [StorageChange], depth: Int)>(([], 0))

    init(storage: ObjectIdentifier) { self.storage = storage }

    /// Holds an announcement back until the commit.
    func hold(_ change: StorageChange) {
        state.withLock { $0.changes.append(change) }
    }

    /// A new savepoint's name, and where its announcements start. Named by its depth: a savepoint
    /// opened after another one closed takes the same name (and the same cached statements).
    func openSavepoint() -> (name: String, mark: Int) {
        state.withLock { state in
            defer { state.depth += 1 }
            return ("ferry_s\(state.depth)", state.changes.count)
        }
    }

    /// The innermost savepoint ended.
    func closeSavepoint() {
        state.withLock { $0.depth -= 1 }
    }

    /// Drops the announcements of a savepoint that rolled back: its versions will be written again.
    func dropChanges(after mark: Int) {
        state.withLock { state in
            if state.changes.count > mark { state.changes.removeLast(state.changes.count - mark) }
        }
    }

    func takeChanges() -> [StorageChange] {
        state.withLock { state in
            defer { state.changes = [] }
            return state.changes
        }
    }
}
