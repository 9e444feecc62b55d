import Foundation
import GRDB
import StoreConformance
@testable import StoreSQLite
import SyncCore
import Testing

// MARK: - Crash atomicity

@Suite("SQLiteStore crash atomicity")
struct SQLiteCrashAtomicityTests {
    @Test func killedWritersLeaveWholeTransactionsOnly() async throws {
        try await CrashAtomicity.expectWholeTransactionsOnly(store: "sqlite", seed: 0x5eed_c0de) {
            try SQLiteStore(path: $0)
        }
    }
}

// MARK: - Full disk

@Suite("SQLiteStore on a full disk")
struct SQLiteFullDiskTests {
    /// Writes pages of 100 items of about 1 KB until the store refuses one; returns the pages that
    /// committed and the error.
    static func fill(_ store: SQLiteStore) async throws -> (pages: Int, error: StoreError?) {
        let padding = String(repeating: "p", count: 1_000)
        for page in 0..<100_000 {
            let items: [JSONObject] = (0..<100).map { ["id": .string("p\(page)-\($0)"), "pad": .string(padding)] }
            do {
                try await store.write { tx in
                    try tx.upsert("fill", items)
                    _ = try tx.appendOperation(OperationDraft(table: "fill", itemID: "p\(page)-0", kind: .insert))
                }
            } catch let error as StoreError {
                return (page, error)
            }
        }
        return (100_000, nil)
    }

    @Test func aSizeCapRefusesTheWriteWholeAndKeepsTheStoreUsable() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/capped.ferry"
        let store = try SQLiteStore(path: path, configuration: .init(maximumSize: 1 << 20))
        let (pages, error) = try await Self.fill(store)
        let failure = try #require(error)
        #expect(failure.code == .full)
        #expect(!failure.description.contains("\n"))
        #expect(pages > 0)
        // Nothing of the refused page, everything of the others.
        #expect(try await store.read { try $0.count("fill") } == pages * 100)
        #expect(try await store.operationCount(table: "fill") == pages)
        #expect(try await store.item("fill", id: "p\(pages)-0") == nil)
        // Still usable: delete frees room, and a later write succeeds.
        _ = try await store.delete("fill", ids: (0..<100).map { "p0-\($0)" })
        try await store.upsert("fill", [["id": "after", "pad": "small"]])
        try await store.close()
        let reopened = try SQLiteStore(path: path)
        #expect(try await reopened.read { try $0.count("fill") } == (pages - 1) * 100 + 1)
        try await reopened.close()
    }

    @Test(
        .enabled(
            if: Tmpfs.canMount,
            "SKIPPED: cannot mount a small tmpfs here (needs root); the size-cap test covers SQLITE_FULL"))
    func aRealFullDiskGivesAClearErrorAndLosesNothing() async throws {
        let mount = try Tmpfs(megabytes: 2)
        defer { mount.unmount() }
        let path = mount.path + "/full.ferry"
        let store = try SQLiteStore(path: path)
        let (pages, error) = try await Self.fill(store)
        let failure = try #require(error)
        #expect(failure.code == .full, "\(failure)")
        #expect(pages > 0)
        #expect(try await store.read { try $0.count("fill") } == pages * 100)
        #expect(try await store.operationCount(table: "fill") == pages)
        try await store.close()
        // Reopening on the full disk reads everything that committed, nothing of the refused write.
        let reopened = try SQLiteStore(path: path, configuration: .init(verifiesIntegrityOnOpen: true))
        #expect(try await reopened.read { try $0.count("fill") } == pages * 100)
        #expect(try await reopened.item("fill", id: "p\(pages)-0") == nil)
        try await reopened.close()
    }
}

/// A small tmpfs mounted for one test, to fill a real disk.
struct Tmpfs {
    let path: String

    static let canMount: Bool = {
        guard getuid() == 0, let probe = try? Tmpfs(megabytes: 1) else { return false }
        probe.unmount()
        return true
    }()

    init(megabytes: Int) throws {
        path = NSTemporaryDirectory() + "ferry-tmpfs-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let status = try Self.run("/bin/mount", ["-t", "tmpfs", "-o", "size=\(megabytes)m", "tmpfs", path])
        if status != 0 {
            try? FileManager.default.removeItem(atPath: path)
            throw StoreError(.io, "mount failed with status \(status)")
        }
    }

    func unmount() {
        _ = try? Self.run("/bin/umount", [path])
        try? FileManager.default.removeItem(atPath: path)
    }

    static func run(_ tool: String, _ arguments: [String]) throws -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        return process.terminationStatus
    }
}
