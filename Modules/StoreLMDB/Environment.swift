import CLMDB
import Dispatch
import Foundation
import Logging
import Synchronization
import SyncCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#elseif canImport(Musl)
    import Musl
#endif

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
            let outcome = Result { try body(transaction) }
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
            case .success(let result):
                rc = mdb_txn_commit(handle)
                gate.leave()
                if rc == MDB_MAP_FULL {
                    try grow(place: place)
                    continue
                }
                guard rc == MDB_SUCCESS else { throw LMDBErrors.map(rc, "committing a write to", place) }
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

    // MARK: Opening

    /// Opens the environment in an existing directory. Throws after closing what it opened.
    static func open(
        directory: String, configuration: LMDBStore.Configuration, place: String, logger: Logger
    ) throws(StoreError) -> Environment {
        let dataPath = directory + "/data.mdb"
        let lockPath = directory + "/lock.mdb"
        let dataExisted = try inspect(directory: directory, dataPath: dataPath, place: place)
        let lockExisted = FileManager.default.fileExists(atPath: lockPath)
        // Leaves no trace of a failed open: remove only what this open created.
        func cleanUp() {
            if !lockExisted { try? FileManager.default.removeItem(atPath: lockPath) }
            if !dataExisted { try? FileManager.default.removeItem(atPath: dataPath) }
        }
        if lockExisted { try probeLock(lockPath, place: place) }

        var env: OpaquePointer?
        var rc = mdb_env_create(&env)
        guard rc == MDB_SUCCESS, let env else { throw LMDBErrors.map(rc, "opening", place) }
        let initialSize = rounded(max(configuration.initialMapSize, 1))
        let maximum = max(configuration.maximumMapSize, initialSize)
        do throws(StoreError) {
            rc = mdb_env_set_maxdbs(env, MDB_dbi(Databases.definitions.count + 2))
            if rc == MDB_SUCCESS { rc = mdb_env_set_mapsize(env, initialSize) }
            if rc == MDB_SUCCESS { rc = mdb_env_set_maxreaders(env, UInt32(max(1, configuration.maximumReaders))) }
            guard rc == MDB_SUCCESS else { throw LMDBErrors.map(rc, "configuring", place) }
            var flags = UInt32(MDB_NOTLS)
            if !configuration.syncsEveryCommit { flags |= UInt32(MDB_NOSYNC) }
            rc = mdb_env_open(env, directory, flags, 0o644)
            guard rc == MDB_SUCCESS else {
                if rc == ENOENT || rc == ENOTDIR {
                    throw LMDBErrors.map(rc, "opening", place, code: .io)
                }
                throw LMDBErrors.map(rc, "opening", place)
            }
            var dead: Int32 = 0
            if mdb_reader_check(env, &dead) == MDB_SUCCESS, dead > 0 {
                logger.notice(
                    "cleared stale LMDB reader slots", metadata: ["path": "\(directory)", "slots": "\(dead)"])
            }
            let version = try readFormat(env, place: place)
            if let version, version > Layout.formatVersion {
                throw StoreError(
                    .corrupt,
                    "cannot open \(place): it was written by a newer version of Ferry (format \(version); this version reads up to \(Layout.formatVersion))"
                )
            }
            let dbs = try initialize(env, isNew: version == nil, place: place)
            let mapSize = currentMapSize(env) ?? initialSize
            return Environment(
                handle: env, path: directory, dbs: dbs, mapSize: mapSize, maximumMapSize: max(maximum, mapSize),
                logger: logger)
        } catch {
            mdb_env_close(env)
            cleanUp()
            throw error
        }
    }

    /// Checks an existing directory without changing it; returns whether `data.mdb` exists.
    private static func inspect(directory: String, dataPath: String, place: String) throws(StoreError) -> Bool {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: directory)
        } catch {
            throw StoreError(.io, "cannot open \(place): its directory cannot be listed: \(error)", underlying: error)
        }
        guard names.contains("data.mdb") else {
            let others = names.filter { $0 != "lock.mdb" }
            if !others.isEmpty {
                throw StoreError(
                    .corrupt,
                    "cannot open \(place): the directory holds other files and no LMDB environment (no data.mdb); it was left untouched"
                )
            }
            return false
        }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: dataPath, isDirectory: &isDirectory), !isDirectory.boolValue else {
            throw StoreError(.corrupt, "cannot open \(place): its data.mdb is not a file")
        }
        guard let handle = FileHandle(forReadingAtPath: dataPath) else {
            throw StoreError(.readOnly, "cannot open \(place): its data.mdb cannot be read")
        }
        defer { try? handle.close() }
        let header: Data
        do {
            header = try handle.read(upToCount: 24) ?? Data()
        } catch {
            throw StoreError(.io, "cannot open \(place): reading data.mdb failed: \(error)", underlying: error)
        }
        // An empty data.mdb is a new environment (an open that stopped before its first commit).
        if header.isEmpty { return true }
        func magic(at offset: Int) -> Bool {
            guard header.count >= offset + 4 else { return false }
            let bytes = header.subdata(in: offset..<(offset + 4))
            return bytes.elementsEqual([0xDE, 0xC0, 0xEF, 0xBE])
        }
        // The meta page's magic (0xBEEFC0DE, little-endian) follows the page header: 16 bytes on
        // 64-bit platforms, 12 on 32-bit ones.
        guard magic(at: 16) || magic(at: 12) else {
            throw StoreError(
                .corrupt,
                "cannot open \(place): its data.mdb is not an LMDB environment (no LMDB header); it was left untouched")
        }
        return true
    }

    /// Fails with `busy` when another process holds LMDB's exclusive lock on `lock.mdb` (LMDB
    /// would otherwise wait for it forever).
    private static func probeLock(_ lockPath: String, place: String) throws(StoreError) {
        let descriptor = openForReading(lockPath)
        guard descriptor >= 0 else {
            if errno == EACCES || errno == EPERM {
                throw StoreError(.readOnly, "cannot open \(place): its lock.mdb cannot be read")
            }
            return
        }
        defer { close(descriptor) }
        var lock = flock()
        lock.l_type = Int16(F_WRLCK)
        lock.l_whence = Int16(SEEK_SET)
        lock.l_start = 0
        lock.l_len = 1
        guard fcntl(descriptor, F_GETLK, &lock) == 0 else { return }
        if lock.l_type == Int16(F_WRLCK) {
            let holder = lock.l_pid > 0 ? " (process \(lock.l_pid))" : ""
            throw StoreError(
                .busy, "cannot open \(place): the environment is locked by another process\(holder)")
        }
    }

    /// The store's format version, `nil` for an empty environment; throws for a foreign one.
    private static func readFormat(_ env: OpaquePointer, place: String) throws(StoreError) -> UInt32? {
        var txn: OpaquePointer?
        var rc = mdb_txn_begin(env, nil, UInt32(MDB_RDONLY), &txn)
        guard rc == MDB_SUCCESS, let txn else { throw LMDBErrors.map(rc, "opening", place) }
        defer { mdb_txn_abort(txn) }
        let foreign = StoreError(
            .corrupt, "cannot open \(place): it is an LMDB environment but not a Ferry store; it was left untouched")
        var meta: MDB_dbi = 0
        rc = mdb_dbi_open(txn, "meta", 0, &meta)
        if rc == MDB_NOTFOUND {
            var main: MDB_dbi = 0
            var stat = MDB_stat()
            guard mdb_dbi_open(txn, nil, 0, &main) == MDB_SUCCESS, mdb_stat(txn, main, &stat) == MDB_SUCCESS else {
                throw foreign
            }
            if stat.ms_entries == 0 { return nil }
            throw foreign
        }
        guard rc == MDB_SUCCESS else { throw foreign }
        func value(_ name: String) -> [UInt8]? {
            var key = Array(name.utf8)
            var data = MDB_val()
            let found = key.withUnsafeMutableBytes { bytes in
                var keyValue = MDB_val(mv_size: bytes.count, mv_data: bytes.baseAddress)
                return mdb_get(txn, meta, &keyValue, &data)
            }
            guard found == MDB_SUCCESS else { return nil }
            return Array(UnsafeRawBufferPointer(start: data.mv_data, count: data.mv_size))
        }
        guard value("format") == Layout.formatName, let version = value("version").flatMap(Layout.uint32) else {
            throw foreign
        }
        return version
    }

    /// Opens (and for a new store, creates) the named databases in one write transaction.
    private static func initialize(_ env: OpaquePointer, isNew: Bool, place: String) throws(StoreError) -> Databases {
        var txn: OpaquePointer?
        var rc = mdb_txn_begin(env, nil, 0, &txn)
        guard rc == MDB_SUCCESS, let txn else { throw LMDBErrors.map(rc, "opening", place) }
        var handles: [MDB_dbi] = []
        for (name, flags) in Databases.definitions {
            var dbi: MDB_dbi = 0
            rc = mdb_dbi_open(txn, name, UInt32(flags | MDB_CREATE), &dbi)
            guard rc == MDB_SUCCESS else {
                mdb_txn_abort(txn)
                throw LMDBErrors.map(rc, "opening", place)
            }
            handles.append(dbi)
        }
        let dbs = Databases(handles)
        if isNew {
            var version: [UInt8] = []
            Layout.appendUInt32(Layout.formatVersion, to: &version)
            let wrapper = Txn(handle: txn, dbs: dbs, place: place)
            do throws(StoreError) {
                try wrapper.put(dbs.meta, Array("format".utf8), Layout.formatName)
                try wrapper.put(dbs.meta, Array("version".utf8), version)
                try wrapper.put(dbs.meta, Array("lastOperationId".utf8), Layout.sequenceKey(0))
                try wrapper.put(dbs.meta, Array("lastErrorSeq".utf8), Layout.sequenceKey(0))
                try wrapper.put(dbs.meta, Array("nextTableKey".utf8), Layout.sequenceKey(1))
            } catch {
                mdb_txn_abort(txn)
                throw error
            }
        }
        rc = mdb_txn_commit(txn)
        guard rc == MDB_SUCCESS else { throw LMDBErrors.map(rc, "creating", place) }
        return dbs
    }
}

/// `open(2)` for reading (a free function: inside ``Environment``, `open` names its own method).
private func openForReading(_ path: String) -> Int32 {
    open(path, O_RDONLY)
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

/// Transactions enter shared; resizing the map waits until none is open and keeps new ones out.
final class ResizeGate: @unchecked Sendable {
    // All state is guarded by `condition`.
    private let condition = NSCondition()
    private var open = 0
    private var resizing = false

    func enter() {
        condition.lock()
        while resizing { condition.wait() }
        open += 1
        condition.unlock()
    }

    func leave() {
        condition.lock()
        open -= 1
        if open == 0 { condition.broadcast() }
        condition.unlock()
    }

    func shared<T>(_ body: () -> T) -> T {
        enter()
        defer { leave() }
        return body()
    }

    func exclusive<T>(_ body: () throws(StoreError) -> T) throws(StoreError) -> T {
        condition.lock()
        while resizing { condition.wait() }
        resizing = true
        while open > 0 { condition.wait() }
        condition.unlock()
        defer {
            condition.lock()
            resizing = false
            condition.broadcast()
            condition.unlock()
        }
        return try body()
    }
}

/// The process-wide table of open environments, by canonical directory path.
enum EnvironmentRegistry {
    private static let environments = Mutex<[String: Environment]>([:])

    /// The environment of `path`: the open one, or a newly opened one. The caller owns one reference.
    static func open(
        path: String, configuration: LMDBStore.Configuration, place: String, logger: Logger
    ) throws(StoreError) -> Environment {
        try environments.withLock { (open: inout [String: Environment]) throws(StoreError) -> Environment in
            let (directory, created) = try StoreDirectory.prepare(path, place: place)
            if let environment = open[directory] {
                environment.references += 1
                return environment
            }
            do throws(StoreError) {
                let environment = try Environment.open(
                    directory: directory, configuration: configuration, place: place, logger: logger)
                open[directory] = environment
                logger.debug("opened an LMDB environment", metadata: ["path": "\(directory)"])
                return environment
            } catch {
                if created { try? FileManager.default.removeItem(atPath: directory) }
                throw error
            }
        }
    }

    /// Drops a reference; the last one closes the environment.
    static func release(_ environment: Environment) {
        environments.withLock { open in
            environment.references -= 1
            guard environment.references == 0 else { return }
            open[environment.path] = nil
            mdb_env_close(environment.handle)
            environment.logger.debug("closed an LMDB environment", metadata: ["path": "\(environment.path)"])
        }
    }

    /// Whether the environment of the directory `path` is open in this process (for tests).
    static func isOpen(_ path: String) -> Bool {
        guard let resolved = realpath(path, nil) else { return false }
        defer { free(resolved) }
        let canonical = String(cString: resolved)
        return environments.withLock { $0[canonical] != nil }
    }
}

/// Where a store's directory is, made ready to open.
enum StoreDirectory {
    /// The canonical path of the store's directory, created when absent (its parent must exist),
    /// and whether this call created it.
    static func prepare(_ path: String, place: String) throws(StoreError) -> (String, Bool) {
        guard !path.isEmpty else { throw StoreError(.io, "cannot open \(place): the path is empty") }
        let absolute =
            path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        let standardized = (absolute as NSString).standardizingPath
        var isDirectory: ObjCBool = false
        var created = false
        if FileManager.default.fileExists(atPath: standardized, isDirectory: &isDirectory) {
            guard isDirectory.boolValue else {
                throw StoreError(
                    .io,
                    "cannot open \(place): the path is a file, not a store directory (an LMDB store is a directory); it was left untouched"
                )
            }
        } else {
            let parent = (standardized as NSString).deletingLastPathComponent
            var parentIsDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: parent, isDirectory: &parentIsDirectory) else {
                throw StoreError(.io, "cannot open \(place): the directory '\(parent)' does not exist")
            }
            guard parentIsDirectory.boolValue else {
                throw StoreError(.io, "cannot open \(place): '\(parent)' is not a directory")
            }
            if mkdir(standardized, 0o755) != 0 {
                let code = errno
                if code != EEXIST {
                    let storeCode: StoreError.Code = code == EACCES || code == EPERM || code == EROFS ? .readOnly : .io
                    throw LMDBErrors.map(code, "creating the directory of", place, code: storeCode)
                }
            } else {
                created = true
            }
        }
        guard let resolved = realpath(standardized, nil) else {
            throw LMDBErrors.map(errno, "resolving the path of", place, code: .io)
        }
        defer { free(resolved) }
        return (String(cString: resolved), created)
    }
}
