// The LMDB part of the store benchmark: StoreLMDB against plain liblmdb on the same data.
//
// Drop this file into an executable target that depends on StoreLMDB, CLMDB and SyncCore. Call the
// functions from the main thread (or any thread outside Swift's cooperative pool): they wait for the
// store's async API with a semaphore.

import CLMDB
import Dispatch
import Foundation
import StoreLMDB
import SyncCore

/// A failure of the raw LMDB baseline or of the benchmark's setup.
struct LMDBBenchError: Error, CustomStringConvertible {
    var description: String
}

/// Applies `pages` to a new StoreLMDB store (one `write` per page, upserting the items into table
/// "bench") and to a raw LMDB environment (one transaction per page, `mdb_put` of id → JSON bytes),
/// and returns the seconds each took. The two are interleaved page by page (StoreLMDB's page, then
/// the raw one), so that a busy disk or CPU slows both alike. Both write with LMDB's default
/// durability (a sync per commit); with `syncs: false` neither syncs (`MDB_NOSYNC`), which measures
/// the CPU cost without the disk. The stores are created in `directory/ferry` and `directory/raw`,
/// which must not exist yet; they are kept so that ``benchmarkLMDBPointReads(directory:ids:)`` can
/// read them.
///
/// ```swift
/// let (ferry, raw) = try benchmarkLMDB(directory: "/tmp/bench", pages: pages)
/// print("StoreLMDB", Double(count) / ferry, "items/s; raw", Double(count) / raw, "items/s")
/// ```
func benchmarkLMDB(
    directory: String, pages: [[(id: String, json: [UInt8], item: JSONObject)]], syncs: Bool = true
) throws -> (ferrySeconds: Double, rawSeconds: Double) {
    let ferryPath = directory + "/ferry"
    let rawPath = directory + "/raw"
    for path in [ferryPath, rawPath] where FileManager.default.fileExists(atPath: path) {
        throw LMDBBenchError(description: "'\(path)' exists already: give benchmarkLMDB a fresh directory")
    }
    try FileManager.default.createDirectory(atPath: rawPath, withIntermediateDirectories: true)
    let totalBytes = pages.reduce(0) { sum, page in page.reduce(sum) { $0 + $1.id.utf8.count + $1.json.count } }
    let raw = try RawEnvironment(path: rawPath, mapSize: max(64 << 20, totalBytes * 4), syncs: syncs)
    defer { raw.close() }
    let rawPages = pages.map { page in page.map { (Array($0.id.utf8), $0.json) } }
    let itemPages = pages.map { page in page.map(\.item) }
    return try blocking {
        let store = try LMDBStore(path: ferryPath, configuration: LMDBStore.Configuration(syncsEveryCommit: syncs))
        var ferry = Duration.zero
        var plain = Duration.zero
        for (items, entries) in zip(itemPages, rawPages) {
            let start = ContinuousClock.now
            try await store.write { tx in try tx.upsert("bench", items) }
            let middle = ContinuousClock.now
            try raw.write(entries)
            plain += ContinuousClock.now - middle
            ferry += middle - start
        }
        try await store.close()
        return (ferry.seconds, plain.seconds)
    }
}

/// Point reads by id on the stores ``benchmarkLMDB(directory:pages:)`` wrote in `directory`: every id
/// read once, in one read transaction on each side. StoreLMDB returns each item parsed into a
/// `JSONObject`; the raw side only fetches the JSON bytes (`mdb_get`) and touches them, and
/// `rawParsedSeconds` also parses them with `JSONValue(parsingUTF8:)`, to show what is LMDB and what
/// is JSON.
///
/// ```swift
/// let reads = try benchmarkLMDBPointReads(directory: "/tmp/bench", ids: ids.shuffled())
/// ```
func benchmarkLMDBPointReads(
    directory: String, ids: [String]
) throws -> (ferrySeconds: Double, rawSeconds: Double, rawParsedSeconds: Double) {
    let ferrySeconds = try blocking {
        let store = try LMDBStore(path: directory + "/ferry")
        let start = ContinuousClock.now
        let found = try await store.read { reader in
            var found = 0
            for id in ids where try reader.item("bench", id: id) != nil { found += 1 }
            return found
        }
        let elapsed = ContinuousClock.now - start
        try await store.close()
        guard found == ids.count else {
            throw LMDBBenchError(description: "StoreLMDB found \(found) of \(ids.count) ids")
        }
        return elapsed.seconds
    }
    let env = try RawEnvironment(path: directory + "/raw", mapSize: 0)
    defer { env.close() }
    func rawRead(parse: Bool) throws -> Double {
        let start = ContinuousClock.now
        let txn = try env.begin(readOnly: true)
        defer { mdb_txn_abort(txn) }
        var checksum = 0
        for id in ids {
            var key = Array(id.utf8)
            var data = MDB_val()
            let rc = key.withUnsafeMutableBytes { bytes in
                var keyValue = MDB_val(mv_size: bytes.count, mv_data: bytes.baseAddress)
                return mdb_get(txn, env.dbi, &keyValue, &data)
            }
            guard rc == MDB_SUCCESS else { throw LMDBBenchError(description: "raw mdb_get missed id '\(id)'") }
            let bytes = UnsafeRawBufferPointer(start: data.mv_data, count: data.mv_size)
            checksum &+= Int(bytes.last ?? 0)
            if parse, (try? JSONValue(parsingUTF8: bytes.assumingMemoryBound(to: UInt8.self))) == nil {
                throw LMDBBenchError(description: "raw value of '\(id)' is not JSON")
            }
        }
        guard checksum != -1 else { throw LMDBBenchError(description: "unreachable") }
        return (ContinuousClock.now - start).seconds
    }
    return (ferrySeconds, try rawRead(parse: false), try rawRead(parse: true))
}

/// A plain LMDB environment with its main database, for the baseline.
private final class RawEnvironment: @unchecked Sendable {
    // Used by one task at a time: the benchmark's.
    let env: OpaquePointer
    let dbi: MDB_dbi

    init(path: String, mapSize: Int, syncs: Bool = true) throws {
        var env: OpaquePointer?
        guard mdb_env_create(&env) == MDB_SUCCESS, let env else {
            throw LMDBBenchError(description: "mdb_env_create failed")
        }
        if mapSize > 0 { mdb_env_set_mapsize(env, mapSize) }
        var rc = mdb_env_open(env, path, syncs ? 0 : UInt32(MDB_NOSYNC), 0o644)
        guard rc == MDB_SUCCESS else {
            mdb_env_close(env)
            throw LMDBBenchError(description: "mdb_env_open failed: \(String(cString: mdb_strerror(rc)))")
        }
        self.env = env
        var txn: OpaquePointer?
        rc = mdb_txn_begin(env, nil, 0, &txn)
        var dbi: MDB_dbi = 0
        if rc == MDB_SUCCESS, let txn {
            rc = mdb_dbi_open(txn, nil, 0, &dbi)
            if rc == MDB_SUCCESS { rc = mdb_txn_commit(txn) } else { mdb_txn_abort(txn) }
        }
        guard rc == MDB_SUCCESS else {
            mdb_env_close(env)
            throw LMDBBenchError(description: "opening the raw database failed: \(String(cString: mdb_strerror(rc)))")
        }
        self.dbi = dbi
    }

    func begin(readOnly: Bool) throws -> OpaquePointer {
        var txn: OpaquePointer?
        let rc = mdb_txn_begin(env, nil, readOnly ? UInt32(MDB_RDONLY) : 0, &txn)
        guard rc == MDB_SUCCESS, let txn else {
            throw LMDBBenchError(description: "mdb_txn_begin failed: \(String(cString: mdb_strerror(rc)))")
        }
        return txn
    }

    /// One transaction: `mdb_put` of each key and value, then commit.
    func write(_ entries: [([UInt8], [UInt8])]) throws {
        let txn = try begin(readOnly: false)
        for (id, json) in entries {
            var key = id
            var value = json
            let rc = key.withUnsafeMutableBytes { keyBytes in
                value.withUnsafeMutableBytes { valueBytes in
                    var keyValue = MDB_val(mv_size: keyBytes.count, mv_data: keyBytes.baseAddress)
                    var dataValue = MDB_val(mv_size: valueBytes.count, mv_data: valueBytes.baseAddress)
                    return mdb_put(txn, dbi, &keyValue, &dataValue, 0)
                }
            }
            guard rc == MDB_SUCCESS else {
                mdb_txn_abort(txn)
                throw LMDBBenchError(description: "raw mdb_put failed: \(String(cString: mdb_strerror(rc)))")
            }
        }
        let rc = mdb_txn_commit(txn)
        guard rc == MDB_SUCCESS else {
            throw LMDBBenchError(description: "raw mdb_txn_commit failed: \(String(cString: mdb_strerror(rc)))")
        }
    }

    func close() {
        mdb_env_close(env)
    }
}

/// Runs async work from synchronous code by waiting on a semaphore (not from Swift's cooperative pool).
private func blocking<T: Sendable>(_ work: @escaping @Sendable () async throws -> T) throws -> T {
    let box = ResultBox<T>()
    let done = DispatchSemaphore(value: 0)
    Task.detached {
        box.set(await Result { try await work() })
        done.signal()
    }
    done.wait()
    return try box.get()
}

private final class ResultBox<T: Sendable>: @unchecked Sendable {
    // Written once by the task before it signals, read after the wait.
    private var result: Result<T, any Error>?

    func set(_ result: Result<T, any Error>) { self.result = result }

    func get() throws -> T {
        guard let result else { throw LMDBBenchError(description: "the benchmark task did not finish") }
        return try result.get()
    }
}

extension Result where Failure == any Error {
    fileprivate init(catching body: () async throws -> Success) async {
        do {
            self = .success(try await body())
        } catch {
            self = .failure(error)
        }
    }
}

extension Duration {
    fileprivate var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
