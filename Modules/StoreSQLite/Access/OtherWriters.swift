import GRDB
import SyncCore
import Synchronization

/// Hears the commits that other connections make to a store file: another process (an app
/// extension, the `ferry` command), or another `SQLiteStore` of the same file in this process.
///
/// SQLite's `PRAGMA data_version` on a connection changes when any *other* connection committed
/// since it was last read, and never for the connection's own commits. Read on the store's writer
/// connection, it tells "someone else wrote" without reading a row. While someone subscribes to the
/// store's ``LocalStore/commits``, a task reads it every ``SQLiteStore/Configuration/otherWritersCheckInterval``
/// and publishes ``StoreCommit/external`` when it changed; with no subscriber nothing runs. A check
/// is a statement on the writer's queue that touches no page (SQLite reads the number from the
/// shared-memory index of the write-ahead log): measured in `StoreBenchmark --only writes`.
///
/// Why a timer and not a file signal (inotify, kqueue, Darwin notifications): the number is right
/// whatever wrote the file, Ferry or not, signals or not, and on every platform; a signal would only
/// shorten the wait, which is at most one interval (100 ms by default).
final class OtherWriters: Sendable {
    private struct State {
        var task: Task<Void, Never>?
        var closed = false
        weak var commits: StoreCommits?
        /// The last reading: taken when the store opens, so that a commit that comes between a
        /// subscription and the first check is not taken for the starting point.
        var dataVersion: Int64?
    }

    private let database: DatabasePool
    private let interval: Duration
    private let state = Mutex(State())

    init(database: DatabasePool, interval: Duration) {
        self.database = database
        self.interval = interval
        let first = try? database.writeWithoutTransaction { db in try Int64.fetchOne(db, sql: "PRAGMA data_version") }
        state.withLock { $0.dataVersion = first ?? nil }
    }

    /// The hub to publish on (weak: the store owns it, and the hub's subscription hook owns this).
    func publish(on commits: StoreCommits) {
        state.withLock { $0.commits = commits }
    }

    /// Starts checking, unless it runs already (the hub's subscription hook).
    func watch() {
        state.withLock { state in
            guard state.task == nil, !state.closed, state.commits != nil else { return }
            state.task = Task { [weak self] in await self?.run() }
        }
    }

    /// Stops for good (the store closes).
    func close() {
        state.withLock { state in
            state.closed = true
            state.task?.cancel()
            state.task = nil
        }
    }

    private func run() async {
        while true {
            try? await Task.sleep(for: interval)
            // The decision to stop is taken under the lock `watch()` takes: a subscriber that came
            // meanwhile either finds this task running or none, never one that is about to end.
            let watching: (commits: StoreCommits, last: Int64?)? = state.withLock { state in
                guard !state.closed, !Task.isCancelled, let commits = state.commits, commits.subscriberCount > 0
                else {
                    state.task = nil
                    return nil
                }
                return (commits, state.dataVersion)
            }
            guard let watching else { return }
            guard let now = await dataVersion() else { continue }
            state.withLock { $0.dataVersion = now }
            // A change seen first after a quiet time without subscribers wakes them once for
            // nothing: harmless, and never a change missed.
            if watching.last != now { watching.commits.publish(.external) }
        }
    }

    /// The writer connection's `data_version`, or `nil` when it cannot be read now (busy, closed).
    private func dataVersion() async -> Int64? {
        try? await database.writeWithoutTransaction { db in try Int64.fetchOne(db, sql: "PRAGMA data_version") }
    }
}
