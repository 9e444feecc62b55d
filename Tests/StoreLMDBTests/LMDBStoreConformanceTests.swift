import CLMDB
import Foundation
import StoreConformance
@testable import StoreLMDB
import SyncCore
import Testing

extension PersistentStoreHooks {
    /// The LMDB store at a path (a directory holding `data.mdb` and `lock.mdb`), and how to make
    /// the environments it must refuse.
    static let lmdb = PersistentStoreHooks(
        open: { try LMDBStore(path: $0) },
        dataFiles: { [$0 + "/data.mdb"] },
        notAStoreReason: "not an LMDB environment",
        placeNotAStore: { bytes, path in
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
            try bytes.write(to: URL(fileURLWithPath: path + "/data.mdb"))
        },
        writeForeignDatabase: { path in
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
            try writePlainEnvironment(at: path)
        },
        markAsWrittenByNewerFerry: { store in
            _ = try await store.write { tx in
                let txn = (StoreCommits.storeTransaction(tx) as! LMDBTransaction).txn
                try txn.put(txn.dbs.meta, Array("version".utf8), [0, 0, 0, 99])
            }
        })

    /// A plain LMDB environment with one key in its main database, as another program writes it.
    private static func writePlainEnvironment(at path: String) throws {
        func check(_ code: Int32) throws { if code != MDB_SUCCESS { throw StoreError(.io, "LMDB error \(code)") } }
        var env: OpaquePointer?
        try check(mdb_env_create(&env))
        defer { mdb_env_close(env) }
        try check(mdb_env_open(env, path, 0, 0o644))
        var txn: OpaquePointer?
        try check(mdb_txn_begin(env, nil, 0, &txn))
        var dbi: MDB_dbi = 0
        try check(mdb_dbi_open(txn, nil, 0, &dbi))
        var key = Array("players".utf8)
        var value = Array("x".utf8)
        let put = key.withUnsafeMutableBytes { keyBytes in
            value.withUnsafeMutableBytes { valueBytes in
                var k = MDB_val(mv_size: keyBytes.count, mv_data: keyBytes.baseAddress)
                var v = MDB_val(mv_size: valueBytes.count, mv_data: valueBytes.baseAddress)
                return mdb_put(txn, dbi, &k, &v, 0)
            }
        }
        try check(put)
        try check(mdb_txn_commit(txn))
    }
}

@Suite("LMDBStore conformance")
struct LMDBStoreConformanceTests {
    @Test(arguments: StoreConformanceSuite.all)
    func conformance(_ check: StoreConformanceCheck) async throws {
        try await check.run { try StoreFixture(opening: .lmdb) }
    }
}

// MARK: - Crash atomicity

@Suite("LMDBStore crash atomicity")
struct LMDBCrashAtomicityTests {
    @Test func killedWritersLeaveWholeTransactionsOnly() async throws {
        try await CrashAtomicity.expectWholeTransactionsOnly(store: "lmdb", seed: 0x1bdb_c0de) {
            try LMDBStore(path: $0)
        }
    }
}
