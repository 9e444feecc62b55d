import FerryServer
import Foundation
import ServerTestSupport
import StoreLMDB
import StoreSQLite
import SyncCore
import Synchronization
import Testing
import Transport

/// Issue 29: several processes on one store file. Each `ferry` below is a process of its own.
@Suite("Processes sharing one store", .timeLimit(.minutes(5)))
struct SharedStoreTests {
    /// What a running process has written to its standard output so far, read on a thread of its
    /// own.
    final class Output: Sendable {
        private let text = Mutex("")

        init(_ handle: FileHandle) {
            Thread.detachNewThread { [self] in
                while true {
                    let chunk = handle.availableData
                    if chunk.isEmpty { return }
                    text.withLock { $0 += String(decoding: chunk, as: UTF8.self) }
                }
            }
        }

        var value: String { text.withLock { $0 } }
    }

    @Test(arguments: ["sqlite", "lmdb"])
    func watchShowsWhatAnotherProcessWritesToTheSameStore(_ kind: String) async throws {
        let ferry = try #require(FerryBinaryTests.ferryURL(), "the ferry executable was not built beside the tests")
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = "\(kind):\(directory)/shared.ferry"
        // The store exists before the watch opens it (as an app's would).
        let first = try await FerryBinaryTests.run(["insert", "todo", #"{"id":"a","title":"first"}"#, "--store", store])
        #expect(first.status == 0, "\(first.errors)")

        let watch = Process()
        watch.executableURL = ferry
        watch.arguments = ["watch", "todo", "--store", store, "--seconds", "60", "--json"]
        let pipe = Pipe()
        watch.standardOutput = pipe
        watch.standardError = FileHandle.nullDevice
        try watch.run()
        defer { watch.terminate() }
        let output = Output(pipe.fileHandleForReading)
        try await eventually("the watch's first view") { output.value.contains(#""first""#) }

        // Another process inserts, then deletes: the watch, which wrote nothing, shows both.
        let inserted = try await FerryBinaryTests.run([
            "insert", "todo", #"{"id":"b","title":"from another process"}"#, "--store", store,
        ])
        #expect(inserted.status == 0, "\(inserted.errors)")
        try await eventually("the other process's insert") { output.value.contains("from another process") }
        let deleted = try await FerryBinaryTests.run(["delete", "todo", "a", "--store", store])
        #expect(deleted.status == 0, "\(deleted.errors)")
        try await eventually("the other process's delete") {
            output.value.split(separator: "\n").last.map { !$0.contains(#""first""#) && $0.contains("another") }
                ?? false
        }
    }

    /// The test process inserts one item per transaction while `ferry import` processes write
    /// whole files into the same table of the same store, one of them killed with SIGKILL midway:
    /// every acknowledged write is there with exactly one queued operation, the killed import left
    /// all of its items or none, and operation ids stay unique and increasing.
    @Test(arguments: ["sqlite", "lmdb"])
    func processesWritingAtOnceKeepTheQueueWholeEvenWhenOneIsKilled(_ kind: String) async throws {
        let ferry = try #require(FerryBinaryTests.ferryURL(), "the ferry executable was not built beside the tests")
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = "\(directory)/shared.ferry"
        // The import to kill is much larger (about 23 MB): it is still reading, checking or writing
        // when the kill comes, 300 ms after its start on a clock of its own thread (the test's
        // tasks may wait seconds for a thread of their pool on a loaded machine).
        let sizes = ["kept": 3_000, "killed": 100_000]
        var files: [String] = []
        for name in ["kept", "killed"] {
            let file = "\(directory)/\(name).jsonl"
            try (0..<sizes[name]!).map {
                #"{"id":"\#(name)-\#($0)","n":\#($0),"text":"\#(String(repeating: "x", count: 200))"}"#
            }
            .joined(separator: "\n").write(toFile: file, atomically: true, encoding: .utf8)
            files.append(file)
        }
        let store: any LocalStore = kind == "lmdb" ? try LMDBStore(path: path) : try SQLiteStore(path: path)
        // Local writes only: the remote is never called.
        let context = SyncContext(
            store: store, remote: HTTPRemote(HTTPRemote.Configuration(serverURL: URL(string: "http://127.0.0.1:9")!)))
        let things = context.table("things")
        _ = try await things.insert(["id": "local-start"])

        func importing(_ file: String) throws -> (Process, Output) {
            let process = Process()
            process.executableURL = ferry
            process.arguments = ["import", "things", file, "--store", "\(kind):" + path]
            process.standardOutput = FileHandle.nullDevice
            let errors = Pipe()
            process.standardError = errors
            try process.run()
            return (process, Output(errors.fileHandleForReading))
        }
        let (kept, keptErrors) = try importing(files[0])
        let (killed, killedErrors) = try importing(files[1])
        let killedPID = killed.processIdentifier
        Thread.detachNewThread {
            usleep(300_000)
            kill(killedPID, SIGKILL)
        }
        // The test's own writes, one transaction each, while both imports run.
        var acknowledged = ["local-start"]
        for index in 0..<200 {
            _ = try await things.insert(["id": .string("local-\(index)")])
            acknowledged.append("local-\(index)")
        }
        try await offThePool {
            kept.waitUntilExit()
            killed.waitUntilExit()
        }
        #expect(kept.terminationStatus == 0, "the import that was not killed failed: \(keptErrors.value)")
        #expect(
            killed.terminationReason == .uncaughtSignal,
            "the import ended before it was killed: status \(killed.terminationStatus), \(killedErrors.value)")

        let (ids, operations) = try await store.read { reader in
            (
                try reader.query("things", TableQuery(top: 100_000)).items.compactMap(\.id),
                try reader.operations(after: nil, table: "things", limit: nil)
            )
        }
        let present = Set(ids)
        #expect(Set(acknowledged).isSubset(of: present), "an acknowledged local insert is missing")
        #expect((0..<sizes["kept"]!).allSatisfy { present.contains("kept-\($0)") }, "the finished import is not whole")
        let killedCount = ids.filter { $0.hasPrefix("killed-") }.count
        #expect(killedCount == 0 || killedCount == sizes["killed"]!, "the killed import left \(killedCount) items")
        #expect(operations.count == ids.count, "\(operations.count) operations for \(ids.count) items")
        #expect(Set(operations.map(\.itemID)) == present, "items and queued operations differ")
        let operationIDs = operations.map(\.id)
        #expect(operationIDs == operationIDs.sorted() && Set(operationIDs).count == operationIDs.count)
        try await store.close()
    }

    /// Two `ferry push` processes on one store at once: one pushes, the other is told that another
    /// process is pushing (or finds the queue empty), and no operation reaches the server twice.
    @Test func twoPushesOfOneStoreAtOnceSendEachOperationOnce() async throws {
        let server = try await startServer()
        defer { Task { try? await server.shutdown() } }
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = "sqlite:\(directory)/shared.ferry"
        let lines = "\(directory)/items.jsonl"
        let count = 2_000
        try (0..<count).map { #"{"id":"p\#($0)","n":\#($0)}"# }.joined(separator: "\n")
            .write(toFile: lines, atomically: true, encoding: .utf8)
        let imported = try await FerryBinaryTests.run(["import", "things", lines, "--store", store])
        #expect(imported.status == 0, "\(imported.errors)")
        // Batches of one operation each: a push long enough for the other to start beside it.
        async let first = FerryBinaryTests.run(["push", "--store", store, "--server", server.url])
        async let second = FerryBinaryTests.run(["push", "--store", store, "--server", server.url])
        let outcomes = try await [first, second]
        #expect(outcomes.contains { $0.status == 0 }, "\(outcomes.map(\.errors))")
        for outcome in outcomes where outcome.status != 0 {
            #expect(outcome.errors.contains("another process is pushing this store"), "\(outcome.errors)")
            #expect(outcome.status == 75, "a busy store is a temporary failure (EX_TEMPFAIL)")
        }
        let remote = HTTPRemote(HTTPRemote.Configuration(serverURL: URL(string: server.url)!))
        let total = try await remote.onlineTable("things").query(TableQuery().top(0).includingTotalCount()).totalCount
        #expect(total == count)
        let status = try await FerryBinaryTests.run(["status", "--store", store, "--server", server.url])
        #expect(status.output.contains("everything synced"), "\(status.output)")
    }

    /// A store another process holds locked past the wait: exit 75 (try again), with the reason,
    /// and nothing written.
    @Test func aStoreLockedByAnotherProcessIsATemporaryFailure() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = "\(directory)/locked.ferry"
        let created = try await FerryBinaryTests.run(["insert", "todo", #"{"id":"a"}"#, "--store", "sqlite:\(path)"])
        #expect(created.status == 0, "\(created.errors)")
        let store = try SQLiteStore(path: path)
        let held = Mutex<(entered: Bool, released: Bool)>((false, false))
        let holder = Task.detached {
            try await store.write { tx in
                try tx.setDeltaToken(table: "todo", queryID: "holding", value: "1")
                held.withLock { $0.entered = true }
                while !held.withLock({ $0.released }) { Thread.sleep(forTimeInterval: 0.01) }
            }
        }
        while !held.withLock({ $0.entered }) { try await Task.sleep(for: .milliseconds(10)) }
        let refused = try await FerryBinaryTests.run(["insert", "todo", #"{"id":"b"}"#, "--store", "sqlite:\(path)"])
        held.withLock { $0.released = true }
        try await holder.value
        #expect(refused.status == 75, "\(refused.errors)")
        #expect(refused.errors.contains("locked by another connection or process"), "\(refused.errors)")
        #expect(refused.errors.contains("run the command again"), "\(refused.errors)")
        #expect(try await store.read { try $0.item("todo", id: "b") } == nil)
        try await store.close()
        let again = try await FerryBinaryTests.run(["insert", "todo", #"{"id":"b"}"#, "--store", "sqlite:\(path)"])
        #expect(again.status == 0, "\(again.errors)")
    }
}
