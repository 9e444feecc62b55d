import CLMDB
import Dispatch
import Logging
import SyncCore
import Synchronization

/// One open LMDB environment, shared by every ``LMDBStore`` of its directory in this process.
///
/// LMDB forbids opening an environment twice in one process (closing one handle would drop the
/// other's file locks), so ``EnvironmentRegistry`` keeps one per canonical path, reference counted.
/// Each store holds one reference until it is closed and its last transaction ended, so the
/// environment closes only after that of its last store.
final class Environment: @unchecked Sendable {
    let handle: OpaquePointer
    /// The canonical path of the store's directory.
    let path: String
    let dbs: Databases
    /// Runs write transactions one at a time, each wholly on one thread (LMDB ties a write
    /// transaction to the thread that began it).
    let writer: DispatchQueue
    /// Lets the map be resized while no transaction of this process is open.
    let gate = ResizeGate()
    let maximumMapSize: Int
    /// Guarded by the registry's lock.
    var references = 1
    /// Guarded by `gate` (changed only while no transaction is open).
    private var mapSizeValue: Int

    /// The logger of the store that opened the environment.
    let logger: Logger
    /// The commits of every store of this directory in this process, and (while someone
    /// subscribes) those of other processes (``othersCommitted()``).
    let commits: StoreCommits
    /// This process's commits as the looks for others' count them, under one lock with the look
    /// itself (``othersCommitted()``).
    private let ownCommits = Mutex(OwnCommits())
    /// Set before the handle closes; looks take the same lock, so none runs on a closed handle.
    private let closedToLooks = Mutex(false)

    init(
        handle: OpaquePointer, path: String, dbs: Databases, mapSize: Int, maximumMapSize: Int, logger: Logger
    ) {
        self.logger = logger
        self.handle = handle
        self.path = path
        self.dbs = dbs
        self.mapSizeValue = mapSize
        self.maximumMapSize = maximumMapSize
        self.writer = DispatchQueue(label: "ferry.store.lmdb.writer")
        let looking = WeakEnvironment()
        self.commits = StoreCommits(checkingOtherWritersEvery: .milliseconds(100)) {
            looking.environment?.othersCommitted() ?? false
        }
        looking.environment = self
        let newest = lastTransaction() ?? 0
        ownCommits.withLock { $0.lastSeen = newest }
    }

    /// What a look for other processes' commits compares LMDB's newest transaction id with.
    private struct OwnCommits {
        /// The newest transaction id the last look saw.
        var lastSeen = 0
        /// This process's commits that wrote, finished since the last look.
        var finished = 0
        /// This process's commits under way: their transaction id may show already, and they are
        /// not counted yet.
        var underWay = 0
        /// Whether the last look gave up because a commit of this process was under way.
        var gaveUp = false
    }

    /// The id of the newest transaction a read transaction begun now sees, by any process; `nil`
    /// once the environment is closing, or when no read transaction could begin without waiting
    /// (the map is being resized; waiting here, under the look's lock, could deadlock with a
    /// writer that holds the gate and waits for that lock).
    ///
    /// It is the id of a read transaction, not `mdb_env_info`'s: that one reads the meta page,
    /// which a committing process writes a moment before it publishes the transaction to readers
    /// (in the lock file). A look that saw the meta page's id, followed by a read, read the older
    /// snapshot; the look had counted the commit as seen, and a watch never showed it (seen under
    /// load in `SharedStoreTests`, about 1 run in 10).
    private func lastTransaction() -> Int? {
        closedToLooks.withLock { closed in
            guard !closed, gate.tryEnter() else { return nil }
            defer { gate.leave() }
            var txn: OpaquePointer?
            guard mdb_txn_begin(handle, nil, UInt32(MDB_RDONLY), &txn) == MDB_SUCCESS, let txn else { return nil }
            defer { mdb_txn_abort(txn) }
            return Int(mdb_txn_id(txn))
        }
    }

    /// Ends the looks for other processes' commits, before the handle closes.
    func stopLooking() {
        commits.stopChecking()
        closedToLooks.withLock { $0 = true }
    }

    /// Whether another process committed since the last look: more new transactions than this
    /// process's own. The look and the accounting of this process's commits take one lock, so a
    /// commit of this process is either counted or under way while the look reads LMDB's newest
    /// id. Before, a commit that showed in LMDB before it was counted made the next look take
    /// another process's commit for it, and a watch missed that change.
    ///
    /// A commit under way leaves the reading to the next look (the same last reading, so nothing
    /// is lost); when the look before gave up too, the answer is `true` (perhaps for nothing), so
    /// that a process that commits at every look still hears others every other look. Answering
    /// `true` at once woke every subscriber for nothing whenever a look met a commit (the
    /// conformance suite's "nothing else" check saw it under load).
    func othersCommitted() -> Bool {
        ownCommits.withLock { own in
            if own.underWay > 0 {
                own.gaveUp.toggle()
                return !own.gaveUp
            }
            own.gaveUp = false
            // No reading now (a resize): the next look compares with the same last reading, so a
            // commit is heard one look later, never lost (and nobody is woken for nothing).
            guard let newest = lastTransaction() else { return false }
            defer { (own.lastSeen, own.finished) = (newest, 0) }
            return newest - own.lastSeen > own.finished
        }
    }

    var mapSize: Int {
        gate.shared { mapSizeValue }
    }

    // MARK: Transactions

    /// Runs `work` in a read-only transaction (`MDB_NOTLS`: any thread may run it).
    func read<T>(place: String, _ work: (Txn) throws -> T) throws -> T {
        while true {
            gate.enter()
            var txn: OpaquePointer?
            var rc = mdb_txn_begin(handle, nil, UInt32(MDB_RDONLY), &txn)
            if rc == MDB_READERS_FULL {
                // Slots of processes that died since the environment opened can be reclaimed.
                var dead: Int32 = 0
                if mdb_reader_check(handle, &dead) == MDB_SUCCESS, dead > 0 {
                    rc = mdb_txn_begin(handle, nil, UInt32(MDB_RDONLY), &txn)
                }
            }
            if rc == MDB_MAP_RESIZED {
                gate.leave()
                try adoptResize(place: place)
                continue
            }
            defer { gate.leave() }
            guard rc == MDB_SUCCESS, let txn else { throw LMDBErrors.map(rc, "reading", place) }
            defer { mdb_txn_abort(txn) }
            return try work(Txn(handle: txn, dbs: dbs, place: place))
        }
    }

    /// Runs `body` in a write transaction on the writer queue and returns its result.
    func write<R: Sendable>(place: String, _ body: @Sendable (any StoreTransaction) throws -> R) async throws -> R {
        try await withoutActuallyEscaping(body) { escapable in
            let job = WriteJob(body: escapable)
            return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<R, any Error>) in
                writer.async {
                    continuation.resume(with: self.run(job, place: place))
                }
            }
        }
    }

    /// Takes the body out of the job (so that nothing holds it once the write is done) and runs it.
    private func run<R>(_ job: WriteJob<R>, place: String) -> Result<R, any Error> {
        guard let body = job.take() else {
            return .failure(StoreError(.closed, "a write to \(place) ran twice"))
        }
        return Result { try runWrite(place: place, body) }
    }

    /// The write loop: begin, run the body, commit. When the map is full the transaction is
    /// aborted, the map grows and the whole body runs again.
    private func runWrite<R>(place: String, _ body: (any StoreTransaction) throws -> R) throws -> R {
        while true {
            gate.enter()
            var handle: OpaquePointer?
            var rc = mdb_txn_begin(self.handle, nil, 0, &handle)
            if rc == MDB_MAP_RESIZED {
                gate.leave()
                try adoptResize(place: place)
                continue
            }
            guard rc == MDB_SUCCESS, let handle else {
                gate.leave()
                throw LMDBErrors.map(rc, "starting a write transaction on", place)
            }
            let txn = Txn(handle: handle, dbs: dbs, place: place)
            let transaction = LMDBTransaction(txn: txn)
            let outcome = Result { try StoreCommits.tracking(transaction, body) }
            transaction.isFinished = true
            if txn.hitMapFull {
                mdb_txn_abort(handle)
                gate.leave()
                try grow(place: place)
                continue
            }
            switch outcome {
            case .failure(let error):
                mdb_txn_abort(handle)
                gate.leave()
                throw error
            case .success(let (result, commit)):
                ownCommits.withLock { $0.underWay += 1 }
                rc = mdb_txn_commit(handle)
                // Only a transaction that wrote advances LMDB's transaction id: one that changed
                // nothing, counted, would cancel out another process's commit.
                let wrote = rc == MDB_SUCCESS && txn.wrote
                ownCommits.withLock { own in
                    own.underWay -= 1
                    if wrote { own.finished += 1 }
                }
                gate.leave()
                if rc == MDB_MAP_FULL {
                    try grow(place: place)
                    continue
                }
                guard rc == MDB_SUCCESS else { throw LMDBErrors.map(rc, "committing a write to", place) }
                commits.publish(commit)
                return result
            }
        }
    }

    // MARK: Map size

    /// Doubles the map (up to the maximum) while no transaction is open. Called on the writer
    /// queue with no transaction of its own.
    private func grow(place: String) throws(StoreError) {
        try gate.exclusive { () throws(StoreError) in
            let current = mapSizeValue
            guard current < maximumMapSize else {
                throw StoreError(
                    .full,
                    "writing to \(place) failed: the map is full at its maximum size of \(current) bytes (LMDBStore.Configuration.maximumMapSize)"
                )
            }
            let (doubled, overflow) = current.multipliedReportingOverflow(by: 2)
            let next = overflow ? maximumMapSize : min(maximumMapSize, Self.rounded(doubled))
            let rc = mdb_env_set_mapsize(handle, next)
            guard rc == MDB_SUCCESS else { throw LMDBErrors.map(rc, "growing the map of", place) }
            mapSizeValue = Self.currentMapSize(handle) ?? next
            logger.debug(
                "grew the LMDB map", metadata: ["path": "\(path)", "from": "\(current)", "to": "\(mapSizeValue)"])
        }
    }

    /// Adopts a map size another process set (`MDB_MAP_RESIZED`).
    private func adoptResize(place: String) throws(StoreError) {
        try gate.exclusive { () throws(StoreError) in
            let rc = mdb_env_set_mapsize(handle, 0)
            guard rc == MDB_SUCCESS else { throw LMDBErrors.map(rc, "adopting the new map size of", place) }
            mapSizeValue = Self.currentMapSize(handle) ?? mapSizeValue
        }
    }

    static func currentMapSize(_ handle: OpaquePointer) -> Int? {
        var info = MDB_envinfo()
        guard mdb_env_info(handle, &info) == MDB_SUCCESS else { return nil }
        return info.me_mapsize
    }

    /// Map sizes are kept to multiples of 1 MiB (a multiple of every OS page size).
    static func rounded(_ size: Int) -> Int {
        let unit = 1 << 20
        let (sum, overflow) = size.addingReportingOverflow(unit - 1)
        return overflow ? Int.max & ~(unit - 1) : max(unit, sum / unit * unit)
    }
}

/// Holds a write body until the writer queue takes it.
final class WriteJob<R>: @unchecked Sendable {
    // Set once before the job is queued, taken once by the writer queue.
    private var body: (@Sendable (any StoreTransaction) throws -> R)?

    init(body: @escaping @Sendable (any StoreTransaction) throws -> R) {
        self.body = body
    }

    func take() -> (@Sendable (any StoreTransaction) throws -> R)? {
        defer { body = nil }
        return body
    }
}

/// The environment a commits hub's check looks at, without keeping it open.
private final class WeakEnvironment: @unchecked Sendable {
    /// Set once, right after the environment is made.
    weak var environment: Environment?
}
