import CLMDB
import Foundation
import Logging
import SyncCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#elseif canImport(Musl)
    import Musl
#endif

/// Opening: the directory and its files are checked before LMDB touches them, then the store's
/// databases are created (a new store) or checked (an existing one).
extension Environment {
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
        if lockExisted { try waitForLock(lockPath, wait: configuration.lockWait, place: place) }

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

    /// Waits up to `wait` while another process holds LMDB's exclusive lock on `lock.mdb`, then
    /// fails with `busy` (LMDB would otherwise wait for it forever). Another process's open or
    /// close holds it for a moment: failing at once made 1 in 600 reads of a store that other
    /// processes were opening exit 75.
    private static func waitForLock(_ lockPath: String, wait: Duration, place: String) throws(StoreError) {
        let descriptor = openForReading(lockPath)
        guard descriptor >= 0 else {
            if errno == EACCES || errno == EPERM {
                throw StoreError(.readOnly, "cannot open \(place): its lock.mdb cannot be read")
            }
            return
        }
        defer { close(descriptor) }
        let deadline = ContinuousClock.now + wait
        var pause = Duration.milliseconds(2)
        while true {
            var lock = flock()
            lock.l_type = Int16(F_WRLCK)
            lock.l_whence = Int16(SEEK_SET)
            lock.l_start = 0
            lock.l_len = 1
            guard fcntl(descriptor, F_GETLK, &lock) == 0, lock.l_type == Int16(F_WRLCK) else { return }
            guard ContinuousClock.now + pause <= deadline else {
                let holder = lock.l_pid > 0 ? " (process \(lock.l_pid))" : ""
                throw StoreError(
                    .busy, "cannot open \(place): the environment is locked by another process\(holder)")
            }
            // A synchronous open: the thread sleeps, as SQLite's busy timeout does.
            let (seconds, attoseconds) = pause.components
            usleep(UInt32(seconds * 1_000_000 + attoseconds / 1_000_000_000_000))
            pause = min(pause * 2, .milliseconds(50))
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
