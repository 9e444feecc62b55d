import Logging
import PostgresNIO
import ServerStorageCore
import SyncCore
import Synchronization

/// Group commit for inserts: concurrent inserts into one table, on one instance, share one
/// statement and one commit.
///
/// Every write of a table holds the table's sequence-row lock from its stamp to its commit, so a
/// table takes about one commit at a time whatever the number of writers; sixteen connections
/// queueing on that row lock only add lock-manager traffic. Instead, at most one insert statement
/// per table runs at a time in an instance, and the inserts that arrive meanwhile wait in memory
/// and go together in the next statement: it reserves `k` stamps with one update of the sequence
/// row (`version` `last + 1 … last + k`, `updatedAt` `base … base + k - 1` with `base = max(now, last
/// updatedAt + 1)`) for the `k` ids not taken yet, inserts them (`ON CONFLICT DO NOTHING`), notifies once, and commits
/// once. Each insert still gets exactly its own outcome: its stamps, or `conflict` with the row
/// that holds its id. Stamps stay unique and commit-ordered (a batch becomes visible at once).
final class InsertBatches: Sendable {
    /// One insert waiting for its batch.
    struct Pending: Sendable {
        var id: String
        var text: String
        var owner: String?
        var content: JSONObject
        var continuation: CheckedContinuation<StoredItem, any Error>
        var queuedAt: ContinuousClock.Instant
    }

    /// What a batch statement needs to know about its table.
    struct Target: Sendable {
        var name: String
        var sqlName: String
    }

    private struct Queue {
        var running = false
        var pending: [Pending] = []
    }

    /// The most inserts in one statement.
    static let maximumBatch = 200

    private let queues = Mutex<(tables: [String: Queue], closed: StorageError?)>(([:], nil))
    /// The longest an insert waits for its turn (its batch to start) before it fails with
    /// `busy`: the time a request may wait for a connection.
    let maximumWait: Duration
    /// Told how each insert's wait for its batch ended, and since when it waited.
    let report: @Sendable (ContinuousClock.Instant, StorageWait.Outcome) -> Void

    init(
        maximumWait: Duration,
        report: @escaping @Sendable (ContinuousClock.Instant, StorageWait.Outcome) -> Void = { _, _ in }
    ) {
        self.maximumWait = maximumWait
        self.report = report
    }

    /// Queues an insert; the first insert of an idle table starts draining its queue.
    func insert(
        _ target: Target, id: String, text: String, owner: String?, content: JSONObject,
        run: @escaping @Sendable (Target, [Pending]) async -> StorageError?
    ) async throws -> StoredItem {
        try await withCheckedThrowingContinuation { continuation in
            let pending = Pending(
                id: id, text: text, owner: owner, content: content, continuation: continuation, queuedAt: .now)
            let leads: Bool? = queues.withLock { queues in
                if queues.closed != nil { return nil }
                queues.tables[target.name, default: Queue()].pending.append(pending)
                if queues.tables[target.name]?.running == true { return false }
                queues.tables[target.name]?.running = true
                return true
            }
            switch leads {
            case nil: continuation.resume(throwing: StorageError(.closed, "the storage is closed"))
            case true?: Task { await self.drain(target, run) }
            case false?: break
            }
        }
    }

    /// Fails every insert still waiting, and every later one, with `error` (the storage closed).
    func close(_ error: StorageError) {
        let waiting = queues.withLock { queues in
            queues.closed = error
            defer { for name in queues.tables.keys { queues.tables[name]?.pending = [] } }
            return queues.tables.values.flatMap(\.pending)
        }
        for pending in waiting { pending.continuation.resume(throwing: error) }
    }

    /// Runs batches until the table's queue is empty. A batch never holds one id twice: a repeat
    /// waits for the next batch, so each insert's outcome is its own. When a batch fails because the
    /// database is busy or unreachable, the inserts waiting behind it fail the same way at once
    /// (503, retry later) instead of each waiting its own turn for a connection.
    private func drain(_ target: Target, _ run: @Sendable (Target, [Pending]) async -> StorageError?) async {
        while true {
            let now = ContinuousClock.now
            let maximumWait = maximumWait
            let (batch, late): ([Pending], [Pending]) = queues.withLock { queues in
                guard var queue = queues.tables[target.name], !queue.pending.isEmpty else {
                    queues.tables[target.name]?.running = false
                    return ([], [])
                }
                var ids = Set<String>()
                var batch: [Pending] = []
                var late: [Pending] = []
                var rest: [Pending] = []
                for pending in queue.pending {
                    if now - pending.queuedAt > maximumWait {
                        late.append(pending)
                    } else if batch.count < Self.maximumBatch, ids.insert(pending.id).inserted {
                        batch.append(pending)
                    } else {
                        rest.append(pending)
                    }
                }
                queue.pending = rest
                queues.tables[target.name] = queue
                return (batch, late)
            }
            for pending in batch { report(pending.queuedAt, .acquired) }
            for pending in late {
                report(pending.queuedAt, .timedOut)
                pending.continuation.resume(
                    throwing: StorageError(
                        .busy, "the insert into '\(target.name)' waited longer than \(maximumWait) for its turn"))
            }
            if batch.isEmpty && late.isEmpty { return }
            if batch.isEmpty { continue }
            if let failure = await run(target, batch), failure.code == .busy || failure.code == .unavailable {
                let waiting = queues.withLock { queues in
                    defer { queues.tables[target.name]?.pending = [] }
                    return queues.tables[target.name]?.pending ?? []
                }
                for pending in waiting { pending.continuation.resume(throwing: failure) }
            }
        }
    }
}

extension PostgreSQLServerStorage {
    /// Inserts a batch in one statement and resumes each insert with its own outcome; returns the
    /// failure of the statement itself, if it failed.
    func runInsertBatch(_ target: InsertBatches.Target, _ batch: [InsertBatches.Pending]) async -> StorageError? {
        var binds = PostgresBindings(capacity: 6)
        binds.append(batch.map(\.id))
        binds.append(batch.map(\.text))
        // Owners are never empty (validated), so "" stands for none.
        binds.append(batch.map { $0.owner ?? "" })
        binds.append(configuration.now())
        binds.append(target.name)
        binds.append(channel)
        // Stamps are reserved for the ids not taken yet only, so that an insert that conflicts
        // leaves no gap in the table's versions (as it leaves none alone on SQLite, or in a batch).
        // An id another instance inserts between this statement's snapshot and its insert still
        // conflicts correctly; its reserved version is then skipped.
        let sql = """
            WITH input AS (
                SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS input(id, item, owner, n)
            ), fresh AS (
                SELECT input.id, input.item, input.owner, row_number() OVER (ORDER BY input.n) AS n FROM input
                WHERE NOT EXISTS (SELECT 1 FROM \(target.sqlName) AS existing WHERE existing.id = input.id)
            ), counted AS (
                SELECT count(*)::bigint AS k FROM fresh
            ), stamp AS (
                UPDATE ferry_tables
                SET last_updated_at = GREATEST($4::bigint, last_updated_at + 1) + (SELECT k FROM counted) - 1,
                    last_version = last_version + (SELECT k FROM counted)
                WHERE name = $5::text AND (SELECT k FROM counted) > 0
                RETURNING last_updated_at, last_version
            ), inserted AS (
                INSERT INTO \(target.sqlName) (id, item, created_at, updated_at, version, deleted, owner)
                SELECT fresh.id, fresh.item::jsonb, stamp.last_updated_at - counted.k + fresh.n,
                    stamp.last_updated_at - counted.k + fresh.n, stamp.last_version - counted.k + fresh.n, FALSE,
                    NULLIF(fresh.owner, '')
                FROM fresh, stamp, counted ORDER BY fresh.n
                ON CONFLICT (id) DO NOTHING
                RETURNING id, updated_at, version
            ), notified AS (
                SELECT pg_notify($6::text, last_version || ' ' || last_updated_at || ' ' || $5::text) FROM stamp
            )
            SELECT id, updated_at, version, (SELECT count(*) FROM notified) FROM inserted
            """
        let query = PostgresQuery(unsafeSQL: sql, binds: binds)
        let action = "inserting into '\(target.name)'"
        do {
            let stamps = try await withTransaction(action) { connection in
                var stamps: [String: (Int64, Int64)] = [:]
                for row in try await connection.rows(query) {
                    let (id, updatedAt, version) = try row.decode((String, Int64, Int64).self)
                    stamps[id] = (updatedAt, version)
                }
                return stamps.mapValues { [$0.0, $0.1] }
            }
            var conflicts: [InsertBatches.Pending] = []
            for pending in batch {
                guard let stamp = stamps[pending.id] else {
                    conflicts.append(pending)
                    continue
                }
                let at = Timestamp(millisecondsSince1970: stamp[0])
                pending.continuation.resume(
                    returning: StoredItem(
                        id: pending.id, content: pending.content, createdAt: at, updatedAt: at, version: stamp[1],
                        deleted: false, owner: pending.owner))
            }
            for pending in conflicts {
                do {
                    let existing = try await withConnection(action) { connection in
                        try await Self.fetch(connection, target.sqlName, id: pending.id, owner: .all)
                    }
                    pending.continuation.resume(
                        throwing: StorageError.alreadyExists(id: pending.id, in: target.name, current: existing))
                } catch {
                    pending.continuation.resume(throwing: error)
                }
            }
            return nil
        } catch {
            for pending in batch { pending.continuation.resume(throwing: error) }
            return error as? StorageError
        }
    }
}
