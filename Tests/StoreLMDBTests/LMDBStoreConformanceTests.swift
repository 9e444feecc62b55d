import Foundation
import StoreConformance
@testable import StoreLMDB
import SyncCore
import Testing

@Suite("LMDBStore conformance")
struct LMDBStoreConformanceTests {
    @Test(arguments: StoreConformance.checks(for: [.persistent, .concurrentReaders]))
    func conformance(_ check: StoreConformanceCheck) async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/store.ferry"
        try await check.run {
            StoreFixture(store: try LMDBStore(path: path), reopen: { try LMDBStore(path: path) })
        }
    }

    @Test func skipsNothing() {
        // No check needs `.declaredIndexes`, the one capability the store does not declare.
        #expect(StoreConformance.skipped(for: [.persistent, .concurrentReaders]).isEmpty)
    }
}

/// A new directory under the system's temporary directory.
struct TemporaryDirectory {
    let path: String

    init() throws {
        path = NSTemporaryDirectory() + "ferry-lmdb-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    func contents() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: path).sorted()
    }

    func remove() {
        try? FileManager.default.removeItem(atPath: path)
    }
}

// MARK: - Crash atomicity

@Suite("LMDBStore crash atomicity")
struct LMDBCrashAtomicityTests {
    @Test func killedWritersLeaveWholeTransactionsOnly() async throws {
        let writer = try #require(CrashAtomicity.writerURL(), "StoreCrashWriter was not built beside the tests")
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/crash-store"
        let report = try await CrashAtomicity.run(
            writer: writer, storeArgument: "lmdb:\(path)", rounds: 30, seed: 0x1bdb_c0de,
            open: { try LMDBStore(path: path) })
        print("crash atomicity (LMDBStore): \(report)")
        #expect(report.failures.isEmpty, "\(report.failures)")
        #expect(report.rounds == 30)
        #expect(report.committed > 30, "the writer must commit transactions between kills")
    }
}
