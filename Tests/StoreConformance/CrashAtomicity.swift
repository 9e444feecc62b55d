public import Foundation
public import SyncCore
public import Testing

/// The SIGKILL crash-atomicity test shared by the persistent stores.
///
/// Each round starts the `StoreCrashWriter` child (Tools/StoreCrashWriter) on the store, lets it
/// commit a random number of transactions, kills it with SIGKILL at a random moment (sometimes before
/// its first commit, sometimes in the middle of one), reopens the store in this process and checks:
/// - every transaction the child announced is there (announced means committed), and at most one more;
/// - no transaction is partial: each one's inserted items, its deletes of an older transaction's items,
///   its counter update, its queued operation and its delta token are all there or all absent;
/// - queued operations keep their order and the operation ids only grow.
///
/// ```swift
/// let report = try await CrashAtomicity.run(
///     writer: writerURL, storeArgument: "sqlite:\(path)", rounds: 20, seed: 7,
///     open: { try SQLiteStore(path: path) })
/// #expect(report.failures.isEmpty)
/// ```
public enum CrashAtomicity: Sendable {
    /// What the rounds saw.
    public struct Report: Sendable, CustomStringConvertible {
        public var rounds = 0
        /// Transactions committed over all rounds (the last one found in the store).
        public var committed = 0
        /// Rounds killed before the child announced a commit.
        public var killedBeforeFirstCommit = 0
        /// Rounds where one more transaction than announced had committed (killed between commit and
        /// announcement).
        public var committedButUnannounced = 0
        public var failures: [String] = []

        public var description: String {
            "\(rounds) rounds, \(committed) transactions committed, \(killedBeforeFirstCommit) killed before a "
                + "commit, \(committedButUnannounced) killed between commit and announcement, "
                + "\(failures.count) failures"
        }
    }

    /// Where the writer binary was built: beside the test bundle (`.build/<triple>/debug`), or
    /// `$FERRY_CRASH_WRITER`.
    public static func writerURL(named name: String = "StoreCrashWriter") -> URL? {
        if let explicit = ProcessInfo.processInfo.environment["FERRY_CRASH_WRITER"], !explicit.isEmpty {
            return URL(fileURLWithPath: explicit)
        }
        var candidates: [URL] = []
        let executable = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        var directory = executable.deletingLastPathComponent()
        for _ in 0..<4 {
            candidates.append(directory.appendingPathComponent(name))
            directory = directory.deletingLastPathComponent()
        }
        candidates.append(Bundle.main.bundleURL.deletingLastPathComponent().appendingPathComponent(name))
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0.path) }
    }

    /// The crash-atomicity test of one persistent store: 30 kill-and-check rounds on a store in a
    /// new temporary directory, opened by `open` in this process and as `<kind>:<path>` by the writer.
    ///
    /// ```swift
    /// try await CrashAtomicity.expectWholeTransactionsOnly(store: "sqlite", seed: 7) { try SQLiteStore(path: $0) }
    /// ```
    public static func expectWholeTransactionsOnly(
        store kind: String, seed: UInt64, sourceLocation: SourceLocation = #_sourceLocation,
        open: @escaping @Sendable (_ path: String) throws -> any LocalStore
    ) async throws {
        let writer = try #require(writerURL(), "StoreCrashWriter was not built beside the tests")
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/crash-store"
        let report = try await run(
            writer: writer, storeArgument: "\(kind):\(path)", rounds: 30, seed: seed, open: { try open(path) })
        print("crash atomicity (\(kind)): \(report)")
        #expect(report.failures.isEmpty, "\(report.failures)", sourceLocation: sourceLocation)
        #expect(report.rounds == 30, sourceLocation: sourceLocation)
        #expect(
            report.committed > 30, "the writer must commit transactions between kills", sourceLocation: sourceLocation)
    }

    /// Runs `rounds` kill-and-check rounds against one store path (the store grows over the rounds).
    public static func run(
        writer: URL, storeArgument: String, rounds: Int, seed: UInt64,
        open: @Sendable () throws -> any LocalStore
    ) async throws -> Report {
        var random = SeededRandom(seed: seed)
        var report = Report()
        var previousOperationIDs: [Int64] = []
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-crash-" + UUID().uuidString)
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }

        for round in 1...rounds {
            let output = scratch.appendingPathComponent("round-\(round).out")
            _ = FileManager.default.createFile(atPath: output.path, contents: nil)
            // Kill after a random number of announced commits (0 = at a random instant, maybe before
            // the store is even open), then a random extra delay so the kill lands mid-transaction.
            let target = round % 5 == 1 ? 0 : Int.random(in: 1...40, using: &random)
            let extraMicroseconds = UInt32.random(in: 0...3_000, using: &random)
            let initialSleep = target == 0 ? UInt32.random(in: 0...8_000, using: &random) : 0
            let committed = report.committed
            // The child's round blocks (polls, sleeps, waits for its exit): on a thread of its own,
            // never one of the cooperative pool's two, which the other suites' servers need.
            let exitMessage = try await Self.offThePool {
                try Self.killRound(
                    writer: writer, storeArgument: storeArgument, output: output,
                    until: target == 0 ? 0 : committed + target, initialSleep: initialSleep,
                    extraMicroseconds: extraMicroseconds)
            }
            if let exitMessage {
                report.failures.append("round \(round): the writer exited by itself: \(exitMessage)")
                break
            }
            // Transactions committed before this round count as announced.
            let announcedCount = max(announced(in: output), report.committed)

            let store = try open()
            let state = try await store.read { reader in try StoreState(reader) }
            try await store.close()
            report.rounds += 1
            report.committed = state.last
            let problems = state.problems(announced: announcedCount, previousOperationIDs: previousOperationIDs)
            report.failures += problems.map { "round \(round): \($0)" }
            if state.last == announcedCount + 1 { report.committedButUnannounced += 1 }
            if !roundHadCommits(output) { report.killedBeforeFirstCommit += 1 }
            previousOperationIDs = state.operationIDs
            if !problems.isEmpty { break }
        }
        return report
    }

    /// Starts the writer, waits until it announced `until` commits (or `initialSleep` µs when
    /// `until` is 0 after the start), then `extraMicroseconds` more, and kills it. Returns what it
    /// said on standard error when it exited by itself, `nil` when the kill ended it.
    static func killRound(
        writer: URL, storeArgument: String, output: URL, until target: Int, initialSleep: UInt32,
        extraMicroseconds: UInt32
    ) throws -> String? {
        let handle = try FileHandle(forWritingTo: output)
        let errors = Pipe()
        let child = Process()
        child.executableURL = writer
        child.arguments = [storeArgument]
        child.standardOutput = handle
        child.standardError = errors
        try child.run()
        let deadline = Date().addingTimeInterval(30)
        if target == 0 {
            usleep(initialSleep)
        } else {
            while child.isRunning, announced(in: output) < target, Date() < deadline { usleep(500) }
        }
        usleep(extraMicroseconds)
        let exitedByItself = !child.isRunning
        kill(child.processIdentifier, SIGKILL)
        child.waitUntilExit()
        try handle.close()
        guard exitedByItself else { return nil }
        return String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    }

    /// Runs blocking work on a thread of its own, without holding a thread of the cooperative pool.
    static func offThePool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
        }
    }

    /// The last `committed N` line the child finished writing.
    static func announced(in output: URL) -> Int {
        guard let data = try? Data(contentsOf: output) else { return 0 }
        let text = String(decoding: data, as: UTF8.self)
        guard let end = text.lastIndex(of: "\n") else { return 0 }
        let complete = text[..<end]
        let lastLine = complete.split(separator: "\n").last ?? ""
        return Int(lastLine.dropFirst("committed ".count)) ?? 0
    }

    static func roundHadCommits(_ output: URL) -> Bool {
        ((try? Data(contentsOf: output))?.isEmpty ?? true) == false
    }

    /// What the store holds after a kill.
    struct StoreState: Sendable {
        var last: Int
        var counter: Int?
        /// tx -> the `k`s present and the `of` they carry.
        var transactions: [Int: (ks: Set<Int>, of: Set<Int>)]
        var strayItems: [String]
        var operationIDs: [Int64]
        var operationItemIDs: [String]

        init(_ reader: any StoreReader) throws {
            last = Int(try reader.deltaToken(table: "crash", queryID: "last") ?? "0") ?? -1
            counter = nil
            transactions = [:]
            strayItems = []
            if try reader.definition(of: "crash") != nil || (try reader.tableNames()).contains("crash") {
                for item in try reader.query("crash", TableQuery()).items {
                    if item.id == "counter" {
                        if case .int(let value)? = item["value"] { counter = Int(value) }
                        continue
                    }
                    guard case .int(let tx)? = item["tx"], case .int(let k)? = item["k"],
                        case .int(let of)? = item["of"]
                    else {
                        strayItems.append(item.id ?? "?")
                        continue
                    }
                    transactions[Int(tx), default: ([], [])].ks.insert(Int(k))
                    transactions[Int(tx), default: ([], [])].of.insert(Int(of))
                }
            }
            let operations = try reader.operations(after: nil, table: "crash", limit: nil)
            operationIDs = operations.map(\.id)
            operationItemIDs = operations.map(\.itemID)
        }

        func problems(announced: Int, previousOperationIDs: [Int64]) -> [String] {
            var problems: [String] = []
            if last < 0 { return ["the delta token is not a number"] }
            if last < announced { problems.append("announced \(announced) commits but the store has \(last)") }
            if last > announced + 1 { problems.append("the store has \(last) commits, announced only \(announced)") }
            if last > 0 && counter != last {
                problems.append("counter is \(counter.map(String.init) ?? "absent"), token \(last)")
            }
            if !strayItems.isEmpty { problems.append("items without tx: \(strayItems.prefix(5))") }
            let present = Set(transactions.keys)
            let expected = Set(last > 0 ? Array(1...last) : [])
            if present != expected {
                let missing = expected.subtracting(present).sorted().prefix(5)
                let extra = present.subtracting(expected).sorted().prefix(5)
                problems.append("transactions missing \(Array(missing)), extra \(Array(extra))")
            }
            for (tx, entry) in transactions.sorted(by: { $0.key < $1.key }) where expected.contains(tx) {
                guard entry.of.count == 1, let of = entry.of.first, of >= 1 else {
                    problems.append("transaction \(tx): inconsistent sizes \(entry.of.sorted())")
                    continue
                }
                let all = Set(1...of)
                let wanted = tx <= last - 5 ? all.filter { $0 % 2 == 1 } : all
                if entry.ks != wanted {
                    problems.append("transaction \(tx): items \(entry.ks.sorted()), expected \(wanted.sorted())")
                }
            }
            if operationItemIDs != (last > 0 ? (1...last).map { "t\($0)-1" } : []) {
                problems.append("queued operations \(operationItemIDs.count) do not match transactions 1...\(last)")
            }
            if operationIDs != operationIDs.sorted() || Set(operationIDs).count != operationIDs.count {
                problems.append("operation ids are not strictly increasing")
            }
            if let first = operationIDs.first, first <= 0 { problems.append("operation id \(first) is not positive") }
            if !operationIDs.starts(with: previousOperationIDs) {
                problems.append("operations committed in an earlier round changed or vanished")
            }
            return problems
        }
    }
}
