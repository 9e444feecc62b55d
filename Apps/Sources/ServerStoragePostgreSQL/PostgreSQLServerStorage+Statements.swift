import Logging
import PostgresNIO
import QuerySQL
import ServerStorageCore
import Synchronization

/// One connection as the storage uses it: every statement on it is bounded.
///
/// Every write runs in an explicit transaction (``PostgreSQLServerStorage/withTransaction(_:_:)``):
/// postgres-nio completes a statement at its `CommandComplete`, before the implicit commit of an
/// autocommit statement, so a write acknowledged that way could still roll back when its connection
/// died at that moment (seen: 4 acknowledged inserts missing after 25 rounds of terminated
/// connections). A `COMMIT` that completed is durable.
///
/// postgres-nio 1.33.2 writes a statement to its connection without a promise for the write, so a
/// statement written just as the connection closes (the server terminated it, or restarted) is
/// dropped and its caller waits for ever; the pool meanwhile serves other requests, so only the
/// requests behind that one hang. Every statement here therefore ends, whatever the driver does:
/// with its rows, with the driver's error, with `unavailable` as soon as the connection closes, or
/// with `unavailable` after ``limit`` (PostgreSQL's own `statement_timeout` plus a margin, for a
/// connection that went silent), when the connection is closed so that the pool replaces it.
struct PostgreSQLSession: Sendable {
    let connection: PostgresConnection
    /// The longest a statement may take from here.
    let limit: Duration
    let logger: Logger
    let watch: ConnectionWatch
    /// A span per statement, when the storage has a tracer (``PostgreSQLServerStorage/Configuration/tracer``).
    var statements: StatementTracing?
    /// The names of the statements prepared once per connection (``preparedRows(_:)``); `nil` runs
    /// them unnamed.
    var names: StatementNames?
    /// Whether the statements run inside a transaction (a failed one aborts it: no retry there).
    var inTransaction = false

    /// Runs one statement and collects its rows.
    func rows(_ fragment: SQLFragment) async throws -> [PostgresRow] {
        try await rows(PostgreSQLServerStorage.query(fragment))
    }

    /// Runs one statement and hands its rows to `next` as they arrive, until it returns `false`
    /// (the rest of the rows are then discarded as they arrive, never held): a page that needs
    /// only some of a statement's rows does not wait for, or keep, all of them.
    func reduceRows<State: Sendable>(
        _ fragment: SQLFragment, into initial: State,
        _ next: @escaping @Sendable (inout State, PostgresRow) throws -> Bool
    ) async throws -> State {
        let query = PostgreSQLServerStorage.query(fragment)
        let connection = connection
        let logger = logger
        let limit = limit
        let watch = watch
        let read: @Sendable () async throws -> State = {
            var state = initial
            for try await row in try await connection.query(query, logger: logger) {
                guard try next(&state, row) else { break }
            }
            return state
        }
        guard let statements else { return try await watch.bounded(connection, limit: limit, read) }
        return try await statements.run(query.sql) { try await watch.bounded(connection, limit: limit, read) }
    }

    /// Runs one statement and collects its rows.
    func rows(_ query: PostgresQuery, cancellable: Bool = true) async throws -> [PostgresRow] {
        let connection = connection
        let logger = logger
        guard let statements else {
            return try await watch.bounded(connection, limit: limit, cancellable: cancellable) {
                try await connection.query(query, logger: logger).collect()
            }
        }
        return try await statements.run(query.sql) {
            try await watch.bounded(connection, limit: limit, cancellable: cancellable) {
                try await connection.query(query, logger: logger).collect()
            }
        }
    }

    /// Runs a statement that returns no rows worth reading (`BEGIN`, `SAVEPOINT` …).
    func execute(_ sql: String, cancellable: Bool = true) async throws {
        _ = try await rows(PostgresQuery(unsafeSQL: sql), cancellable: cancellable)
    }
}

/// Ends the statement running on a connection as soon as the connection closes.
///
/// A connection runs one statement at a time; the watch registers one callback per connection on
/// its close (not one per statement, which would pile up on a long-lived pooled connection) and
/// settles whatever statement runs when it fires.
final class ConnectionWatch: Sendable {
    private struct Entry {
        var current: (@Sendable (any Error) -> Void)?
    }

    private let entries = Mutex<[ObjectIdentifier: Entry]>([:])

    static func closedError() -> StorageError {
        StorageError(.unavailable, "the database connection closed (PostgreSQL restarted or ended it)")
    }

    func bounded<T: Sendable>(
        _ connection: PostgresConnection, limit: Duration, cancellable: Bool = true,
        _ operation: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let key = ObjectIdentifier(connection)
        let outcome = BoundedWait.Outcome<T>()
        let isNew: Bool = entries.withLock { entries in
            let isNew = entries[key] == nil
            entries[key] = Entry(current: { error in outcome.settle(.failure(error)) })
            return isNew
        }
        if isNew {
            connection.closeFuture.whenComplete { [weak self] _ in self?.closed(key) }
        }
        if connection.isClosed { outcome.settle(.failure(Self.closedError())) }
        defer { entries.withLock { $0[key]?.current = nil } }
        return try await BoundedWait.run(
            within: limit, outcome: outcome,
            timeout: {
                Task { try? await connection.close() }  // the pool replaces it
                return StorageError(
                    .unavailable, "the database did not answer within \(limit); the connection was closed")
            }, cancellable: cancellable, operation)
    }

    private func closed(_ key: ObjectIdentifier) {
        let current = entries.withLock { $0.removeValue(forKey: key)?.current }
        current?(Self.closedError())
    }
}

/// The open transaction of the current task on one storage: its connection, its savepoints, and
/// what to do once it commits or rolls back.
final class PostgreSQLTransaction: Sendable {
    @TaskLocal static var current: PostgreSQLTransaction?

    let storage: ObjectIdentifier
    let session: PostgreSQLSession
    private let state = Mutex<(next: Int, afterCommit: [@Sendable () -> Void])>((0, []))

    init(storage: ObjectIdentifier, session: PostgreSQLSession) {
        self.storage = storage
        self.session = session
    }

    /// Runs `body` in a savepoint: what it wrote is rolled back alone when it throws, and the
    /// transaction goes on (a failed statement would otherwise abort the whole transaction).
    func savepoint<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        let (number, mark) = state.withLock { state in
            defer { state.next += 1 }
            return (state.next, state.afterCommit.count)
        }
        let name = "ferry_s\(number)"
        try await session.execute("SAVEPOINT \(name)")
        let result: T
        do {
            result = try await body()
        } catch {
            // What the savepoint wrote is gone: caches must not learn it at the commit.
            state.withLock { $0.afterCommit.removeSubrange(mark...) }
            try await session.execute("ROLLBACK TO SAVEPOINT \(name)", cancellable: false)
            try await session.execute("RELEASE SAVEPOINT \(name)", cancellable: false)
            throw error
        }
        try await session.execute("RELEASE SAVEPOINT \(name)")
        return result
    }

    /// Runs `work` once the transaction commits (caches learn only what is durable).
    func afterCommit(_ work: @escaping @Sendable () -> Void) {
        state.withLock { $0.afterCommit.append(work) }
    }

    func finish(committed: Bool) {
        let work = state.withLock { state in
            defer { state.afterCommit = [] }
            return committed ? state.afterCommit : []
        }
        for item in work { item() }
    }
}

extension PostgreSQLServerStorage {
    /// The transaction the current task runs in on this storage.
    var currentTransaction: PostgreSQLTransaction? {
        guard let transaction = PostgreSQLTransaction.current, transaction.storage == ObjectIdentifier(self) else {
            return nil
        }
        return transaction
    }

    /// How long one statement may take before the storage gives up on it: PostgreSQL's
    /// `statement_timeout` (which answers first when the server is alive) plus a margin.
    var statementLimit: Duration { configuration.statementTimeout + .seconds(5) }

    func session(_ connection: PostgresConnection, limit: Duration? = nil) -> PostgreSQLSession {
        PostgreSQLSession(
            connection: connection, limit: limit ?? statementLimit, logger: logger, watch: watch,
            statements: configuration.tracer.map { StatementTracing(tracer: $0, system: "postgresql") },
            names: statementNames)
    }

    /// Runs `body` on a connection, bounded and with every failure mapped to a `StorageError`:
    /// in the current transaction (in a savepoint of it), or else on a pooled connection, waiting
    /// at most ``Configuration/connectionWait`` for one.
    func withConnection<T: Sendable>(
        _ action: String, _ body: @escaping @Sendable (PostgreSQLSession) async throws -> T
    ) async throws -> T {
        try ensureOpen()
        do {
            if let transaction = currentTransaction {
                return try await transaction.savepoint { try await body(transaction.session) }
            }
            return try await leased(body)
        } catch {
            throw mapped(error, action)
        }
    }

    /// Runs `body` in one transaction: a transaction of its own, or a savepoint of the current one.
    func withTransaction<T: Sendable>(
        _ action: String, _ body: @escaping @Sendable (PostgreSQLSession) async throws -> T
    ) async throws -> T {
        if currentTransaction != nil { return try await withConnection(action, body) }
        do {
            return try await transaction { [self] in
                try await body(currentTransaction!.session)
            }
        } catch {
            throw mapped(error, action)
        }
    }

    /// Runs `body` in one transaction on one connection: its writes (each in a savepoint) commit
    /// together, or none does; inside another transaction it is a savepoint. Announcements go out
    /// with the commit (PostgreSQL delivers a transaction's notifications when it commits).
    public func transaction<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
        if let current = currentTransaction { return try await current.savepoint(body) }
        try ensureOpen()
        let owner = ObjectIdentifier(self)
        do {
            return try await leased { [self] session in
                try await session.execute("BEGIN")
                var inner = session
                inner.inTransaction = true
                let transaction = PostgreSQLTransaction(storage: owner, session: inner)
                let result: T
                let written: Int64?
                do {
                    result = try await PostgreSQLTransaction.$current.withValue(transaction) { try await body() }
                    written = try await Self.writingTransactionID(session)
                } catch {
                    transaction.finish(committed: false)
                    do {
                        try await session.execute("ROLLBACK", cancellable: false)
                    } catch {
                        // A connection that cannot roll back must not go back to the pool.
                        try? await session.connection.close()
                    }
                    throw error
                }
                do {
                    try await session.execute("COMMIT", cancellable: false)
                } catch {
                    // The COMMIT's answer did not come (the connection closed or went silent), or
                    // it failed: the transaction may have committed all the same. Answered as a
                    // failure, a write that was applied was retried as a new one (seen: 33 of
                    // 1,146 such 503s were for rows then stored).
                    guard let written, try await committed(written, answering: error) else {
                        transaction.finish(committed: false)
                        throw error
                    }
                }
                transaction.finish(committed: true)
                return result
            }
        } catch let error as PSQLError {
            throw mapped(error, "running a transaction on")
        }
    }

    /// The id of the current transaction when it wrote (`nil` for one that only read): what
    /// ``committed(_:answering:)`` asks about when its `COMMIT` goes unanswered.
    static func writingTransactionID(_ session: PostgreSQLSession) async throws -> Int64? {
        let rows = try await session.rows(PostgresQuery(unsafeSQL: "SELECT txid_current_if_assigned()"))
        return try rows.first?.decode(Int64?.self) ?? nil
    }

    /// Whether transaction `id`, whose `COMMIT` failed with `failure`, committed: PostgreSQL keeps
    /// every recent transaction's outcome (`txid_status`, PostgreSQL 10 and later), asked on another
    /// connection. `false` when it aborted or is too old to know. While the server still runs it
    /// (it has not noticed the lost connection yet), or cannot be asked, it is asked again for up
    /// to 2 s (and a wait for a connection); then the error says the outcome is unknown.
    func committed(_ id: Int64, answering failure: any Error) async throws -> Bool {
        // Asked again until the deadline: right after its connections were cut, the pool's next
        // lease can fail too (20 of 1,145 such writes were "unknown" at the first failure, and
        // every one of them had rolled back).
        let deadline = ContinuousClock.now + .seconds(2)
        while ContinuousClock.now < deadline {
            let status: String?
            do {
                status = try await leased { session in
                    try await session.rows(PostgresQuery(unsafeSQL: "SELECT txid_status(\(id))")).first?.decode(
                        String?.self) ?? nil
                }
            } catch {
                try? await Task.sleep(for: .milliseconds(100))
                continue
            }
            switch status {
            case "committed":
                logger.info("a COMMIT went unanswered, and the transaction had committed: the write stands")
                return true
            case "in progress":
                try? await Task.sleep(for: .milliseconds(100))
            default:
                return false
            }
        }
        let cause = Self.mapped(failure, "committing a transaction", location)
        throw StorageError(
            .unavailable,
            "\(cause.message); whether the write was applied is unknown (the database could not tell): "
                + "read it before writing it again")
    }

    /// Who won the race between a lease and its deadline.
    private final class Lease: Sendable {
        private enum State { case waiting, leased, timedOut }
        private let state = Mutex(State.waiting)

        /// Records the lease unless the deadline passed first.
        func lease() -> Bool { settle(.leased) }
        /// Records the deadline unless the lease came first.
        func timeOut() -> Bool { settle(.timedOut) }

        private func settle(_ outcome: State) -> Bool {
            state.withLock { state in
                guard case .waiting = state else { return false }
                state = outcome
                return true
            }
        }
    }

    /// The pool's lease with a bound on the wait: whichever of "leased" and "timed out" happens first
    /// wins, so a statement never starts after its request was answered 503, and the caller never
    /// waits for the pool longer than ``Configuration/connectionWait``.
    private func leased<T: Sendable>(_ body: @escaping @Sendable (PostgreSQLSession) async throws -> T)
        async throws -> T
    {
        let race = Lease()
        let client = client
        let wait = configuration.connectionWait
        let connections = configuration.maximumConnections
        let observers = observers
        let poolUse = poolUse
        let start = ContinuousClock.now
        return try await BoundedWait.run(
            within: wait,
            timeout: {
                guard race.timeOut() else { return nil }
                if poolUse.cannotConnect(since: start, maximum: connections) {
                    // Not exhaustion: the pool had room and leased nothing the whole wait, so it
                    // cannot open a connection (PostgreSQL down or unreachable).
                    return StorageError(
                        .unavailable,
                        "no database connection could be opened within \(wait) (is PostgreSQL running and reachable?)"
                    )
                }
                observers.report(.connection, since: start, .timedOut)
                return StorageError(
                    .busy, "no database connection became free within \(wait) (all \(connections) in use)")
            }
        ) { [self] in
            try await client.withConnection { connection in
                guard race.lease() else { throw CancellationError() }
                observers.report(.connection, since: start, .acquired)
                poolUse.leased()
                defer { poolUse.returned() }
                return try await body(session(connection))
            }
        }
    }

    /// The pool's connections in use and the last lease (postgres-nio's pool does not fail a wait
    /// when it cannot connect: it retries, and the wait times out as if every connection were busy).
    final class PoolUse: Sendable {
        private let state = Mutex<(inUse: Int, lastLease: ContinuousClock.Instant?)>((0, nil))

        func leased() { state.withLock { $0 = ($0.inUse + 1, .now) } }
        func returned() { state.withLock { $0.inUse -= 1 } }

        /// Whether a wait that began at `start` timed out with a connection's place free and no
        /// lease since it began: the pool could not open a connection.
        func cannotConnect(since start: ContinuousClock.Instant, maximum: Int) -> Bool {
            state.withLock { state in
                state.inUse < maximum && (state.lastLease.map { $0 < start } ?? true)
            }
        }
    }

    /// A fragment as a postgres-nio query: the PostgreSQL text and its bound parameters.
    static func query(_ fragment: SQLFragment) -> PostgresQuery {
        var binds = PostgresBindings(capacity: fragment.arguments.count)
        for value in fragment.arguments {
            switch value {
            case .null: binds.appendNull()
            case .integer(let number): binds.append(number)
            case .real(let number): binds.append(number)
            case .text(let text): binds.append(text)
            }
        }
        return PostgresQuery(unsafeSQL: fragment.sql(for: .postgreSQL), binds: binds)
    }
}
