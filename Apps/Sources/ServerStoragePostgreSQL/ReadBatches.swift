import PostgresNIO
import ServerStorageCore
import Synchronization
import Tracing

/// Reads by id, coalesced per table and owner scope: concurrent reads of one table share one
/// statement (`id = ANY($1)`) once enough of them run.
///
/// A read by id costs PostgreSQL, postgres-nio and the storage's bounded waits about the same
/// whatever number of rows it returns, and on a small machine that fixed cost is most of a read
/// (it halved PostgreSQL's reads against SQLite's). So, per table and owner scope, at most
/// ``maximumRunning`` statements run at once; a read that arrives while they all run waits in
/// memory, and when one of them ends, the reads waiting go together in the next statement (at
/// most ``maximumBatch`` ids). An idle table's read goes at once, alone: coalescing never makes a
/// lone read wait.
///
/// A waiting read's statement starts after the read arrived, so it sees every commit made before
/// the read was asked for, as a read of its own would. A failed statement fails every read it
/// carried with its error. Reads inside a transaction never come here: they run on the
/// transaction's connection, and see its writes.
final class ReadBatches: Sendable {
    /// Which reads may share a statement.
    struct Key: Hashable, Sendable {
        /// The table's SQL name.
        var table: String
        var owner: OwnerScope
    }

    /// How a read goes: by the caller, at once, or done by a shared statement.
    private enum Turn: Sendable {
        case runAlone
        case done(StoredItem?)
    }

    private struct Waiting {
        var id: String
        var continuation: UnsafeContinuation<Turn, any Error>
        /// The trace context of the read's request: a shared statement is a span of its oldest
        /// read's request, not of the request whose read ended before it.
        var context: ServiceContext?
    }

    private struct Queue {
        var running = 0
        var waiting: [Waiting] = []
    }

    /// The most ids in one statement.
    static let maximumBatch = 128

    /// The most statements of one key at once (the reads past them wait for the next shared one).
    let maximumRunning: Int

    private let state = Mutex<(queues: [Key: Queue], closed: StorageError?)>(([:], nil))

    init(maximumRunning: Int) {
        self.maximumRunning = max(1, maximumRunning)
    }

    /// Reads `id`: by `alone` at once when fewer than ``maximumRunning`` statements of `key` run,
    /// else with the reads that wait beside it, by `together` (the items it finds of the ids it is
    /// given, in any order).
    func read(
        _ key: Key, id: String, alone: () async throws -> StoredItem?,
        together: @escaping @Sendable (Key, [String]) async throws -> [StoredItem]
    ) async throws -> StoredItem? {
        let context = ServiceContext.current
        let turn = try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Turn, any Error>) in
            let verdict: Result<Bool, StorageError> = state.withLock { state in
                if let closed = state.closed { return .failure(closed) }
                var queue = state.queues.removeValue(forKey: key) ?? Queue()
                defer { state.queues[key] = queue }
                if queue.running < maximumRunning {
                    queue.running += 1
                    return .success(true)
                }
                queue.waiting.append(Waiting(id: id, continuation: continuation, context: context))
                return .success(false)
            }
            switch verdict {
            case .failure(let error): continuation.resume(throwing: error)
            case .success(true): continuation.resume(returning: .runAlone)
            case .success(false): break
            }
        }
        guard case .runAlone = turn else {
            if case .done(let item) = turn { return item }
            return nil
        }
        defer { statementEnded(key, together) }
        return try await alone()
    }

    /// Fails every read still waiting, and every later one, with `error` (the storage closed).
    func close(_ error: StorageError) {
        let waiting = state.withLock { state in
            state.closed = error
            defer { for key in state.queues.keys { state.queues[key]?.waiting = [] } }
            return state.queues.values.flatMap(\.waiting)
        }
        for read in waiting { read.continuation.resume(throwing: error) }
    }

    /// One statement of `key` ended: the reads waiting go together now, in a task of their own
    /// (the read that ended answers its caller meanwhile), or the place is given back.
    private func statementEnded(
        _ key: Key, _ together: @escaping @Sendable (Key, [String]) async throws -> [StoredItem]
    ) {
        guard let first = nextBatch(key) else { return }
        Task {
            var batch: [Waiting]? = first
            while let reads = batch {
                do {
                    var found: [String: StoredItem] = [:]
                    found.reserveCapacity(reads.count)
                    let items = try await ServiceContext.$current.withValue(reads[0].context) {
                        try await together(key, Array(Set(reads.map(\.id))))
                    }
                    for item in items { found[item.id] = item }
                    for read in reads { read.continuation.resume(returning: .done(found[read.id])) }
                } catch {
                    for read in reads { read.continuation.resume(throwing: error) }
                }
                batch = nextBatch(key)
            }
        }
    }

    /// The reads of `key` that go in the next statement, or `nil` (and the statement's place given
    /// back) when none waits.
    private func nextBatch(_ key: Key) -> [Waiting]? {
        state.withLock { state in
            guard var queue = state.queues[key] else { return nil }
            guard !queue.waiting.isEmpty else {
                queue.running -= 1
                if queue.running == 0 {
                    state.queues[key] = nil
                } else {
                    state.queues[key] = queue
                }
                return nil
            }
            let count = min(Self.maximumBatch, queue.waiting.count)
            let batch = Array(queue.waiting.prefix(count))
            queue.waiting.removeFirst(count)
            state.queues[key] = queue
            return batch
        }
    }
}
