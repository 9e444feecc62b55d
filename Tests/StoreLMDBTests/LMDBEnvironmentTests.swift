import CLMDB
import Foundation
import StoreConformance
@testable import StoreLMDB
import Synchronization
import SyncCore
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

@Suite("LMDBStore environment")
struct LMDBEnvironmentTests {
    // MARK: Map growth

    @Test func theMapGrowsWhenAWriteFillsIt() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/grow"
        let store = try LMDBStore(path: path, configuration: LMDBStore.Configuration(initialMapSize: 1 << 20))
        let initial = store.mapSize
        #expect(initial == 1 << 20)
        let runs = Counter()
        // One transaction of ~6 MB (more than five times the map), then many smaller ones.
        let big: [JSONObject] = (0..<3000).map {
            ["id": .string("big-\($0)"), "text": .string(String(repeating: "x", count: 2000))]
        }
        try await store.write { tx in
            runs.increment()
            try tx.upsert("t", big)
            _ = try tx.appendOperation(OperationDraft(table: "t", itemID: "big", kind: .insert))
        }
        #expect(runs.value > 1, "the body ran again after the map grew")
        for batch in 0..<20 {
            let items: [JSONObject] = (0..<200).map {
                ["id": .string("b\(batch)-\($0)"), "text": .string(String(repeating: "y", count: 1000))]
            }
            try await store.upsert("t", items)
        }
        #expect(store.mapSize > 8 * initial)
        #expect(try await store.read { try $0.count("t") } == 3000 + 20 * 200)
        #expect(try await store.operationCount() == 1)
        #expect(try await store.item("t", id: "big-2999")?["text"] == .string(String(repeating: "x", count: 2000)))
        try await store.close()

        // Reopened with the same tiny setting, it keeps its size and its data.
        let reopened = try LMDBStore(path: path, configuration: LMDBStore.Configuration(initialMapSize: 1 << 20))
        #expect(reopened.mapSize >= store.mapSize / 2)
        #expect(try await reopened.read { try $0.count("t") } == 7000)
        try await reopened.close()
    }

    @Test func aMapAtItsMaximumFailsWithFullAndKeepsTheStore() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try LMDBStore(
            path: directory.path + "/capped",
            configuration: LMDBStore.Configuration(initialMapSize: 1 << 20, maximumMapSize: 2 << 20))
        try await store.upsert("t", [["id": "kept"]])
        let items: [JSONObject] = (0..<2000).map {
            ["id": .string("i\($0)"), "text": .string(String(repeating: "x", count: 2000))]
        }
        let error = await #expect(throws: StoreError.self) { try await store.upsert("t", items) }
        #expect(error?.code == .full)
        #expect(error?.message.contains("maximum") == true)
        #expect(try await store.read { try $0.count("t") } == 1)
        try await store.upsert("t", [["id": "after"]])
        #expect(try await store.item("t", id: "after") != nil)
        try await store.close()
    }

    @Test func readersRunBesideAWriterThatGrowsTheMap() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try LMDBStore(
            path: directory.path + "/busy", configuration: LMDBStore.Configuration(initialMapSize: 1 << 20))
        try await store.upsert("pair", [["id": "a", "n": 0], ["id": "b", "n": 0]])
        let rounds = 60
        let writerDone = Counter()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                defer { writerDone.increment() }
                for n in 1...rounds {
                    try await store.write { tx in
                        try tx.upsert("pair", [["id": "a", "n": .int(Int64(n))]])
                        let filler: [JSONObject] = (0..<40).map {
                            ["id": .string("f\(n)-\($0)"), "text": .string(String(repeating: "z", count: 1500))]
                        }
                        try tx.upsert("filler", filler)
                        try tx.upsert("pair", [["id": "b", "n": .int(Int64(n))]])
                    }
                }
            }
            for _ in 0..<4 {
                group.addTask {
                    var last: Int64 = 0
                    var reads = 0
                    while writerDone.value == 0 {
                        let (a, b, fillers) = try await store.read { reader in
                            (
                                try reader.item("pair", id: "a")?["n"]?.intValue ?? -1,
                                try reader.item("pair", id: "b")?["n"]?.intValue ?? -2,
                                try reader.count("filler")
                            )
                        }
                        #expect(a == b, "a reader saw a half-applied transaction")
                        #expect(fillers == Int(a) * 40)
                        #expect(a >= last, "a reader went back in time")
                        last = a
                        reads += 1
                    }
                    #expect(reads > 0)
                }
            }
            try await group.waitForAll()
        }
        #expect(store.mapSize > 1 << 20)
        #expect(try await store.read { try $0.count("filler") } == rounds * 40)
        try await store.close()
    }

    // MARK: One environment per path

    @Test func openingTheSamePathTwiceSharesOneEnvironment() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/shared"
        let first = try LMDBStore(path: path)
        // The same directory through another spelling and through a symbolic link.
        let second = try LMDBStore(path: directory.path + "/./shared/")
        try FileManager.default.createSymbolicLink(atPath: directory.path + "/link", withDestinationPath: path)
        let third = try LMDBStore(path: directory.path + "/link")
        #expect(first.environment === second.environment)
        #expect(first.environment === third.environment)
        #expect(first.environment.references == 3)

        try await first.upsert("t", [["id": "1"]])
        #expect(try await second.item("t", id: "1") != nil)
        try await second.upsert("t", [["id": "2"]])
        try await first.close()
        await #expect(throws: StoreError.self) { try await first.item("t", id: "1") }
        // The others keep working on the shared environment.
        #expect(try await second.read { try $0.count("t") } == 2)
        try await third.upsert("t", [["id": "3"]])
        #expect(try await second.read { try $0.count("t") } == 3)
        try await second.close()
        try await third.close()

        // Once every store closed, the environment is closed and a new open starts afresh.
        let again = try LMDBStore(path: path)
        #expect(again.environment !== first.environment)
        #expect(again.environment.references == 1)
        #expect(try await again.read { try $0.count("t") } == 3)
        try await again.close()
    }

    @Test func closingDuringAWriteLetsItFinishThenClosesTheEnvironment() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/closing"
        let store = try LMDBStore(path: path)
        let entered = Counter()
        let proceed = DispatchSemaphore(value: 0)
        let writing = Task {
            try await store.write { tx in
                try tx.upsert("t", [["id": "during"]])
                entered.increment()
                // Blocks the writer queue's thread (not a cooperative one) until the test says.
                proceed.wait()
            }
        }
        while entered.value == 0 { try await Task.sleep(for: .milliseconds(5)) }
        try await store.close()
        await #expect(throws: StoreError.self) { try await store.item("t", id: "during") }
        #expect(EnvironmentRegistry.isOpen(path), "the running write keeps the environment open")
        proceed.signal()
        try await writing.value
        #expect(!EnvironmentRegistry.isOpen(path))
        let reopened = try LMDBStore(path: path)
        #expect(try await reopened.item("t", id: "during") != nil)
        try await reopened.close()
    }

    @Test func writersFromTwoStoresOfOnePathTakeTurns() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/turns"
        let stores = [try LMDBStore(path: path), try LMDBStore(path: path)]
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, store) in stores.enumerated() {
                group.addTask {
                    for n in 0..<50 {
                        try await store.write { tx in
                            let count = try tx.count("t")
                            try tx.upsert("t", [["id": .string("s\(index)-\(n)"), "seen": .int(Int64(count))]])
                            _ = try tx.appendOperation(
                                OperationDraft(table: "t", itemID: "s\(index)-\(n)", kind: .insert))
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        let operations = try await stores[0].read { try $0.operations(after: nil, table: nil, limit: nil) }
        #expect(operations.map(\.id) == Array(1...100))
        let seen = try await stores[1].query("t").items.compactMap { $0["seen"]?.intValue }
        #expect(Set(seen) == Set(0..<100))
        for store in stores { try await store.close() }
    }

    // MARK: Bad locations

    @Test func aMissingParentDirectoryIsReported() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/missing/store"
        let error = #expect(throws: StoreError.self) { try LMDBStore(path: path) }
        #expect(error?.code == .io)
        #expect(error?.message.contains("does not exist") == true)
        #expect(error?.message.contains(path) == true)
        #expect(try directory.contents().isEmpty)
    }

    @Test func aFileIsNotAStoreAndIsLeftUntouched() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/file.ferry"
        let contents = Data("not a store\n".utf8)
        try contents.write(to: URL(fileURLWithPath: path))
        let error = #expect(throws: StoreError.self) { try LMDBStore(path: path) }
        #expect(error?.code == .io)
        #expect(error?.message.contains("is a file") == true)
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == contents)
        #expect(try directory.contents() == ["file.ferry"])
    }

    @Test func aRefusedEnvironmentIsClosedAgain() async throws {
        // The shared suite checks the refusal itself; here, that the registry lets go of it.
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/foreign"
        try await PersistentStoreHooks.lmdb.writeForeignDatabase(path)
        let error = #expect(throws: StoreError.self) { try LMDBStore(path: path) }
        #expect(error?.code == .corrupt)
        #expect(EnvironmentRegistry.isOpen(path) == false)
    }

    @Test func aDirectoryOfOtherFilesIsRefusedUntouched() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try Data("notes".utf8).write(to: URL(fileURLWithPath: directory.path + "/notes.txt"))
        let error = #expect(throws: StoreError.self) { try LMDBStore(path: directory.path) }
        #expect(error?.code == .corrupt)
        #expect(error?.message.contains("no LMDB environment") == true)
        #expect(try directory.contents() == ["notes.txt"])
    }

    #if os(Linux)
        @Test func anEnvironmentLockedByAnotherProcessIsWaitedForThenReportedAsBusy() async throws {
            let directory = try TemporaryDirectory()
            defer { directory.remove() }
            let path = directory.path + "/locked"
            let store = try LMDBStore(path: path)
            try await store.upsert("t", [["id": "1"]])
            try await store.close()
            // An open-file-description lock conflicts with LMDB's record locks even within one
            // process, so it stands in for another process holding LMDB's exclusive lock.
            let descriptor = open(path + "/lock.mdb", O_RDWR)
            #expect(descriptor >= 0)
            defer { close(descriptor) }
            var lock = flock()
            lock.l_type = Int16(F_WRLCK)
            lock.l_whence = Int16(SEEK_SET)
            lock.l_start = 0
            lock.l_len = 1
            let ofdSetLock: Int32 = 37  // F_OFD_SETLK
            #expect(fcntl(descriptor, ofdSetLock, &lock) == 0)
            let waited = ContinuousClock.now
            let error = #expect(throws: StoreError.self) {
                try LMDBStore(path: path, configuration: .init(lockWait: .milliseconds(300)))
            }
            #expect(error?.code == .busy)
            #expect(error?.message.contains("locked by another process") == true)
            #expect(ContinuousClock.now - waited >= .milliseconds(200), "the open did not wait for the lock")
            // Held for a moment, as another process's open or close holds it: the open waits it out.
            let release = Thread {
                Thread.sleep(forTimeInterval: 0.2)
                var unlock = flock()
                unlock.l_type = Int16(F_UNLCK)
                unlock.l_whence = Int16(SEEK_SET)
                unlock.l_start = 0
                unlock.l_len = 1
                _ = fcntl(descriptor, ofdSetLock, &unlock)
            }
            release.start()
            let reopened = try LMDBStore(path: path)
            #expect(try await reopened.item("t", id: "1") != nil)
            try await reopened.close()
        }
    #endif

    #if os(Linux)
        /// A process that dies inside a read transaction leaves its reader slot taken while other
        /// processes keep the environment open; opening the store clears it (`mdb_reader_check`).
        /// The other processes are this test binary, run again as
        /// ``holdTheEnvironmentForAnotherTest()``: one only keeps the environment open, the other
        /// begins a read and is killed with SIGKILL.
        @Test func staleReaderSlotsAreClearedAtOpen() async throws {
            let directory = try TemporaryDirectory()
            defer { directory.remove() }
            let path = directory.path + "/readers"
            let store = try LMDBStore(path: path)
            try await store.upsert("t", [["id": "1"]])
            try await store.close()

            let holder = try await ReaderHelper.start(path: path, reads: false, ready: directory.path + "/holder")
            defer {
                kill(holder.processIdentifier, SIGKILL)
                holder.waitUntilExit()
            }
            let reader = try await ReaderHelper.start(path: path, reads: true, ready: directory.path + "/reader")
            kill(reader.processIdentifier, SIGKILL)
            reader.waitUntilExit()
            #expect(reader.terminationReason == .uncaughtSignal)

            let stale = try ReaderHelper.readerPIDs(path)
            #expect(stale.contains(reader.processIdentifier), "the dead reader's slot: \(stale)")
            let reopened = try LMDBStore(path: path)
            #expect(!ReaderSlots.pids(reopened.environment.handle).contains(reader.processIdentifier))
            #expect(try await reopened.item("t", id: "1") != nil)
            try await reopened.close()
        }

        /// Not a test on its own: ``staleReaderSlotsAreClearedAtOpen()`` runs it in child processes.
        @Test(.enabled(if: ProcessInfo.processInfo.environment[ReaderHelper.pathVariable] != nil))
        func holdTheEnvironmentForAnotherTest() throws {
            let environment = ProcessInfo.processInfo.environment
            let path = try #require(environment[ReaderHelper.pathVariable])
            let ready = try #require(environment[ReaderHelper.readyVariable])
            var env: OpaquePointer?
            #expect(mdb_env_create(&env) == MDB_SUCCESS)
            #expect(mdb_env_set_maxdbs(env, 16) == MDB_SUCCESS)
            #expect(mdb_env_open(env, path, UInt32(MDB_NOTLS), 0o644) == MDB_SUCCESS)
            if environment[ReaderHelper.readsVariable] == "1" {
                var txn: OpaquePointer?
                #expect(mdb_txn_begin(env, nil, UInt32(MDB_RDONLY), &txn) == MDB_SUCCESS)
            }
            #expect(FileManager.default.createFile(atPath: ready, contents: Data()))
            sleep(60)
        }
    #endif
}

#if os(Linux)
    enum ReaderHelper {
        static let pathVariable = "FERRY_LMDB_TEST_READER_PATH"
        static let readyVariable = "FERRY_LMDB_TEST_READER_READY"
        static let readsVariable = "FERRY_LMDB_TEST_READER_READS"

        /// Runs this test binary as ``LMDBEnvironmentTests/holdTheEnvironmentForAnotherTest()`` and
        /// waits until it has the environment open (and, with `reads`, a read transaction begun).
        static func start(path: String, reads: Bool, ready: String) async throws -> Process {
            let helper = Process()
            helper.executableURL = URL(fileURLWithPath: ProcessInfo.processInfo.arguments[0])
            helper.arguments = ["--testing-library", "swift-testing", "--filter", "holdTheEnvironmentForAnotherTest"]
            helper.environment = ProcessInfo.processInfo.environment.merging([
                pathVariable: path, readyVariable: ready, readsVariable: reads ? "1" : "0",
            ]) { $1 }
            helper.standardOutput = FileHandle.nullDevice
            helper.standardError = FileHandle.nullDevice
            try helper.run()
            var waited = 0
            while !FileManager.default.fileExists(atPath: ready), helper.isRunning, waited < 600 {
                try await Task.sleep(for: .milliseconds(50))
                waited += 1
            }
            guard FileManager.default.fileExists(atPath: ready) else {
                kill(helper.processIdentifier, SIGKILL)
                throw Abort()
            }
            return helper
        }

        /// The pids in an environment's reader table, read through a plain handle (no store open).
        static func readerPIDs(_ path: String) throws -> [pid_t] {
            var env: OpaquePointer?
            guard mdb_env_create(&env) == MDB_SUCCESS, let env else { throw Abort() }
            defer { mdb_env_close(env) }
            mdb_env_set_maxdbs(env, 16)
            guard mdb_env_open(env, path, UInt32(MDB_NOTLS), 0o644) == MDB_SUCCESS else { throw Abort() }
            return ReaderSlots.pids(env)
        }
    }

#endif

/// Counts in a `@Sendable` body.
final class Counter: Sendable {
    private let count = Mutex(0)
    func increment() { count.withLock { $0 += 1 } }
    var value: Int { count.withLock { $0 } }
}

/// Reads LMDB's reader table.
enum ReaderSlots {
    static func pids(_ env: OpaquePointer) -> [pid_t] {
        let box = PidBox()
        let context = Unmanaged.passUnretained(box).toOpaque()
        _ = mdb_reader_list(
            env,
            { message, context in
                guard let message, let context else { return 0 }
                let text = String(cString: message).trimmingCharacters(in: .whitespaces)
                if let first = text.split(separator: " ").first, let pid = pid_t(first) {
                    Unmanaged<PidBox>.fromOpaque(context).takeUnretainedValue().pids.append(pid)
                }
                return 0
            }, context)
        return box.pids
    }
}

final class PidBox {
    var pids: [pid_t] = []
}
