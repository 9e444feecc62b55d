import GRDB
import SyncCore
import Synchronization

extension SQLiteStore {
    /// The commits hub of a file store, which hears the commits of other connections too: another
    /// process (an app extension, the `ferry` command), or another `SQLiteStore` of the same file in
    /// this process.
    ///
    /// SQLite's `PRAGMA data_version` on a connection changes when any *other* connection committed
    /// since it was last read, and never for the connection's own commits. Read on the store's writer
    /// connection, it tells "someone else wrote" without reading a row: the hub reads it every
    /// ``Configuration/otherWritersCheckInterval`` while someone subscribes
    /// (`StoreCommits.init(checkingOtherWritersEvery:probe:)`). A check is a statement on the
    /// writer's queue that touches no page (SQLite reads the number from the write-ahead log's
    /// shared-memory index): observed inserts run at 0.91-0.99 of unobserved ones in
    /// `StoreBenchmark --only writes`.
    ///
    /// Why a timer and not a file signal (inotify, kqueue, Darwin notifications): the number is right
    /// whatever wrote the file, Ferry or not, and on every platform; a signal would only shorten the
    /// wait, which is one interval at most (100 ms by default: p50 50 ms, p99 100 ms measured).
    static func commitsHearingOthers(on pool: DatabasePool, _ configuration: Configuration) -> StoreCommits {
        // The first reading when the store opens: a commit between a subscription and the first
        // check is then not taken for the starting point.
        let last = Mutex(try? pool.writeWithoutTransaction { db in try Int64.fetchOne(db, sql: "PRAGMA data_version") })
        return StoreCommits(checkingOtherWritersEvery: configuration.otherWritersCheckInterval) {
            guard
                let now = try? await pool.writeWithoutTransaction({ db in
                    try Int64.fetchOne(db, sql: "PRAGMA data_version")
                })
            else { return false }
            return last.withLock { last in
                defer { last = now }
                return last != now
            }
        }
    }
}
