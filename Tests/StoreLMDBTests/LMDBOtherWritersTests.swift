import Foundation
import StoreConformance
import StoreLMDB
import SyncCore
import Testing

/// Another process's commits reach this process's observers through the probe of LMDB's newest
/// transaction id, less this process's own commits.
@Suite("LMDB: commits of other processes", .timeLimit(.minutes(2)))
struct LMDBOtherWritersTests {
    /// A write transaction that changes nothing does not advance LMDB's transaction id. Counted as
    /// one of this process's commits anyway, it cancelled out another process's commit made in the
    /// same interval, and the observers never heard of it (`ferry watch` on LMDB missed another
    /// process's insert on a loaded machine). Only transactions that wrote count now.
    @Test func anotherProcessesCommitIsSeenAmongWritesThatChangeNothing() async throws {
        let writer = try #require(CrashAtomicity.writerURL(), "StoreCrashWriter was not built beside the tests")
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/store"
        let store = try LMDBStore(path: path)
        let wakes = store.commits.subscribe(tables: ["crash"])
        // Writes that change nothing, as fast as they go, all through the other process's commits.
        let noOps = Task {
            while !Task.isCancelled { _ = try? await store.write { _ in 0 } }
        }
        let child = Process()
        child.executableURL = writer
        child.arguments = ["lmdb:" + path]
        let output = Pipe()
        child.standardOutput = output
        child.standardError = FileHandle.nullDevice
        try child.run()
        // Its first commit, then SIGKILL: a few commits of another process at most.
        let committed = await Task.detached {
            var text = ""
            let handle = output.fileHandleForReading
            while !text.contains("committed 1\n") {
                let data = handle.availableData
                if data.isEmpty { break }
                text += String(decoding: data, as: UTF8.self)
            }
            return text.contains("committed 1\n")
        }.value
        kill(child.processIdentifier, SIGKILL)
        child.waitUntilExit()
        #expect(committed, "the writer committed nothing")
        try await Task.sleep(for: .milliseconds(300))
        noOps.cancel()
        _ = await noOps.value

        let woke = await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                for await _ in wakes { return true }
                return false
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(20))
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
        #expect(woke, "the other process's commit was never announced")
        try await store.close()
    }
}
