// The sync benchmark: see Tools/README.md (`bash Tools/bench-sync.sh`, `SyncBenchmark --help`).
//
// Against a `ferry serve` child process on a seeded SQLite database:
// - initial pull of N rows into a SQLiteStore (rows/s, RSS growth), beside a baseline that
//   downloads the same keyset pages through the Transport without a store; prints the ratio;
// - optionally the same pull of a bigger table, for memory (RSS growth must follow the page size);
// - a push of M queued inserts (operations/s): batched and keyed against Ferry's server, and one
//   request per operation against the same server started with --protocol-only (what every server
//   of the protocol family offers), beside the initial pull's rate of the same run;
// - with `--postgres URL`, the same pull and push against `ferry serve` on PostgreSQL;
// - with `--attachments`, uploads and downloads beside curl (AttachmentBenchmark.swift).
import ArgumentParser
import Foundation
import GRDB
import StoreSQLite
import SyncCore
import Synchronization
import Transport

@main
struct SyncBenchmarkMain: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "SyncBenchmark",
        abstract: "Pull and push against a `ferry serve` child process, beside baselines of the same run.",
        discussion: "Tools/README.md describes each part; Tools/bench-sync.sh builds and runs it.")

    @OptionGroup var options: Options

    func run() async throws {
        ServerProcess.ferryPath.withLock { $0 = options.ferry }
        try await Self.run(options)
    }

    static func run(_ options: Options) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "ferry-syncbench-" + UUID().uuidString)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        if options.attachmentBench.run {
            try await AttachmentBenchmark.run(options: options, directory: directory)
            return
        }
        print(
            "Ferry sync benchmark: rows of about 200 bytes, pages of \(options.page), server = ferry serve (SQLite file)"
        )

        if options.live > 0 {
            try await LiveBenchmark.run(options: options, directory: directory)
            return
        }
        if !options.fanOutCounts.isEmpty {
            #if canImport(Glibc)
                try await FanOutBenchmark.run(options: options, directory: directory)
                return
            #else
                throw BenchmarkError("--fan-out runs on Linux only (epoll, /proc)")
            #endif
        }
        if options.outage > 0 {
            try await OutageBenchmark.run(options: options, directory: directory)
            return
        }
        if options.compareClients {
            try await ClientComparison.run(options: options, directory: directory)
            return
        }
        var summary: [String] = []
        for backend in [ServerBackend.sqlite] + (options.postgres.map { [ServerBackend.postgres($0)] } ?? []) {
            if case .postgres = backend { print("\n== the same against ferry serve on PostgreSQL") }
            let pullRate = try await pullBenchmark(
                rows: options.rows, options: options, directory: directory, baseline: true, backend: backend)
            if let big = options.memoryRows, backend == .sqlite {
                try await pullBenchmark(rows: big, options: options, directory: directory, baseline: false)
            }
            guard options.push > 0 else { continue }
            print("\npush of \(options.push) queued inserts to ferry serve (\(backend.label))")
            let (batched, clientCPU, serverCPU) = try await pushBenchmark(
                options: options, directory: directory, protocolOnly: false, backend: backend)
            print("  batched, idempotency keys         \(pad(Int(batched))) operations/s")
            let perOperation = { (seconds: Double) in pad(Int((seconds * 1e6 / Double(options.push)).rounded())) }
            print("    CPU per operation: client \(perOperation(clientCPU)) µs, server \(perOperation(serverCPU)) µs")
            if options.batchedOnly { continue }
            let single = try await pushBenchmark(
                options: options, directory: directory, protocolOnly: true, backend: backend
            ).rate
            print("  one request each (--protocol-only) \(pad(Int(single))) operations/s")
            print("  initial pull of this run          \(pad(Int(pullRate))) rows/s")
            print(
                "  batched / one each \(format(batched / single))x; batched push / pull \(format(batched / pullRate))x"
            )
            summary.append(
                "  \(backend.label): batched push \(Int(batched))/s, pull \(Int(pullRate)) rows/s, push / pull \(format(batched / pullRate))x"
            )
        }
        if summary.count > 1 { print("\nsummary\n" + summary.joined(separator: "\n")) }
    }

    @discardableResult
    static func pullBenchmark(
        rows: Int, options: Options, directory: URL, baseline: Bool, client: HTTPClientChoice = .platform,
        backend: ServerBackend = .sqlite
    ) async throws -> Double {
        print("\nseeding \(rows) rows (\(backend.label))…")
        let server: ServerProcess
        var schema: PostgresSchema?
        switch backend {
        case .sqlite:
            let database = directory.appendingPathComponent("server-\(rows).sqlite").path
            try await Seeder.seed(database: database, rows: rows, directory: directory)
            server = try ServerProcess.start(database: database, directory: directory, page: options.page)
        case .postgres(let url):
            schema = PostgresSchema.fresh(in: url)
            server = try ServerProcess.start(
                database: nil, directory: directory, page: options.page, extraArguments: ["--db", schema!.url])
            try await Seeder.seed(server: server.url, rows: rows)
        }
        defer {
            server.stop()
            schema?.drop()
        }
        let remote = client.remote(server.url)

        var baselineSeconds: Double?
        if baseline {
            // Download only: the same keyset pages the engine asks for, through the Transport.
            let table = remote.onlineTable("bench")
            var cursor: (Timestamp, String)?
            var received = 0
            baselineSeconds = try await Clock.measure {
                while true {
                    var query = TableQuery(top: options.page, includeDeleted: true)
                    query.orderBy = [.field("updatedAt"), .field("id")]
                    if let (time, id) = cursor {
                        let stamp = QueryExpression.literal(.dateTimeOffset(time))
                        // The engine's keyset filter, word for word.
                        query.filter = .binary(
                            .and, .binary(.greaterThanOrEqual, .field("updatedAt"), stamp),
                            .binary(
                                .or, .binary(.greaterThan, .field("updatedAt"), stamp),
                                .binary(
                                    .and, .binary(.equal, .field("updatedAt"), stamp),
                                    .binary(.greaterThan, .field("id"), .literal(.string(id))))))
                    }
                    let page = try await table.query(query)
                    received += page.items.count
                    guard let last = page.items.last, let time = last.updatedAt, let id = last.id else { break }
                    cursor = (time, id)
                    if page.items.count < options.page { break }
                }
            }
            // The rows, plus the soft-deleted row the seeding left (pulls include deleted rows).
            guard received == rows + 1 else {
                throw BenchmarkError("the baseline received \(received) of \(rows + 1) rows")
            }
        }

        let storePath = directory.appendingPathComponent("client-\(rows)-\(client.rawValue)-\(backend.label).sqlite")
            .path
        let store = try SQLiteStore(path: storePath)
        let context = SyncContext(store: store, remote: remote)
        let before = Memory.residentBytes()
        let sampler = Memory.Sampler()
        let seconds = try await Clock.measure {
            let result = try await context.pull("bench", queryID: "all", options: PullOptions(pageSize: options.page))
            guard result.items.received == rows + 1 else {
                throw BenchmarkError("the pull received \(result.items.received) of \(rows + 1) rows")
            }
        }
        let peak = sampler.stop()
        let stored = try await store.read { try $0.count("bench") }
        try await store.close()
        guard stored == rows else { throw BenchmarkError("the store holds \(stored) of \(rows) rows") }

        let rate = Double(rows) / seconds
        print("initial pull of \(rows) rows into StoreSQLite")
        print("  client (pull into the store)  \(pad(Int(rate))) rows/s  (\(format(seconds)) s)")
        if let baselineSeconds {
            print(
                "  baseline (download only)      \(pad(Int(Double(rows) / baselineSeconds))) rows/s  (\(format(baselineSeconds)) s)"
            )
            print("  client cost                   \(format(seconds / baselineSeconds))x the baseline's time")
        }
        print("  RSS: \(mb(before)) MB before, peak \(mb(peak)) MB during the pull, growth \(mb(peak - before)) MB")
        if baseline, options.pullBehindQueue > 0 {
            try await pullBehindQueue(rows: rows, freshRate: rate, remote: remote, options: options, path: storePath)
        }
        return rate
    }

    /// The same pull into a store holding `options.pullBehindQueue` queued inserts of other items
    /// (not pushed first): a pull must not cost more per page for a longer queue.
    static func pullBehindQueue(
        rows: Int, freshRate: Double, remote: HTTPRemote, options: Options, path: String
    ) async throws {
        let store = try SQLiteStore(path: path + "-queued")
        let context = SyncContext(store: store, remote: remote)
        let queued = options.pullBehindQueue
        try await context.write { writes in
            try writes.insert(contentsOf: (0..<queued).map { Workload.item(rows + $0) }, into: "bench")
        }
        let seconds = try await Clock.measure {
            let result = try await context.pull(
                "bench", queryID: "all", options: PullOptions(pageSize: options.page, pushesFirst: false))
            guard result.items.received == rows + 1 else {
                throw BenchmarkError("the pull received \(result.items.received) of \(rows + 1) rows")
            }
        }
        try await store.close()
        let rate = Double(rows) / seconds
        print("  the same pull behind \(queued) queued inserts \(pad(Int(rate))) rows/s (\(format(rate / freshRate))x)")
    }

    /// Pushes `options.push` queued inserts to a fresh server; answers operations/s, and the CPU time
    /// this process spent pushing.
    static func pushBenchmark(
        options: Options, directory: URL, protocolOnly: Bool, client: HTTPClientChoice = .platform,
        backend: ServerBackend = .sqlite
    ) async throws -> (rate: Double, cpu: Double, serverCPU: Double) {
        let name = (protocolOnly ? "protocol-only-" : "batched-") + client.rawValue + "-" + backend.label
        let server: ServerProcess
        var schema: PostgresSchema?
        switch backend {
        case .sqlite:
            let database = directory.appendingPathComponent("server-push-\(name).sqlite").path
            try await Seeder.seed(database: database, rows: 0, directory: directory)
            server = try ServerProcess.start(
                database: database, directory: directory, page: options.page,
                extraArguments: protocolOnly ? ["--protocol-only"] : [])
        case .postgres(let url):
            schema = PostgresSchema.fresh(in: url)
            server = try ServerProcess.start(
                database: nil, directory: directory, page: options.page,
                extraArguments: ["--db", schema!.url] + (protocolOnly ? ["--protocol-only"] : []))
        }
        defer {
            server.stop()
            schema?.drop()
        }
        let remote = client.remote(server.url)
        let store = try SQLiteStore(path: directory.appendingPathComponent("client-push-\(name).sqlite").path)
        let context = SyncContext(store: store, remote: remote)
        let items = (0..<options.push).map(Workload.item)
        try await context.write { writes in try writes.insert(contentsOf: items, into: "bench") }
        let cpu = CPUTime.now()
        let serverCPU = CPUTime.of(server.process.processIdentifier)
        let seconds = try await Clock.measure {
            let result = try await context.push()
            guard result.pushed == options.push else {
                throw BenchmarkError("pushed \(result.pushed) of \(options.push)")
            }
        }
        let spent = CPUTime.now() - cpu
        let serverSpent = CPUTime.of(server.process.processIdentifier) - serverCPU
        try await store.close()
        let onServer = try await remote.onlineTable("bench").query(
            TableQuery(top: 1, includeTotalCount: true))
        guard onServer.totalCount == options.push else {
            throw BenchmarkError("the server holds \(onServer.totalCount ?? -1) of \(options.push) items")
        }
        return (Double(options.push) / seconds, spent, serverSpent)
    }

    static func pad(_ value: Int) -> String {
        let text = String(value)
        return String(repeating: " ", count: max(0, 9 - text.count)) + text
    }
    static func format(_ value: Double) -> String { String(format: "%.2f", value) }
    static func mb(_ bytes: Int) -> String { String(format: "%.1f", Double(bytes) / 1_048_576) }
}

struct Options: ParsableArguments {
    @Option(help: "Rows of the initial pull.")
    var rows = 100_000
    @Option(help: "Rows per page, 1 to 1,000 (larger values are cut to 1,000).")
    var page = 1_000
    @Option(help: "Queued inserts to push (0: no push).")
    var push = 10_000
    @Flag(help: "Push batched only, without the one-request-each run (to profile the batched push).")
    var batchedOnly = false
    @Option(help: "Queued inserts of a store the initial pull is repeated into, beside the fresh pull (0: not run).")
    var pullBehindQueue = 0
    @Option(help: "Rows of a second, bigger pull, for memory.")
    var memoryRows: Int?
    /// Writes of the live-sync latency benchmark (0: not run).
    @Option(help: "Writes of the live-sync latency benchmark (0: not run).")
    var live = 0
    /// Rounds of the outage benchmark (0: not run).
    @Option(help: "Rounds of the outage benchmark: ferry serve killed and restarted (0: not run).")
    var outage = 0
    @Option(help: "Seconds of the live benchmark's idle measurement.")
    var idleSeconds = 60
    /// A PostgreSQL URL: the pull and push also run against a server on it (each in a schema of
    /// its own), and the live benchmark across two instances.
    @Option(
        help:
            "A postgres:// URL: the pull and push also run against ferry serve on it (a fresh schema each, dropped with psql when installed); the live benchmark also runs across two instances on it."
    )
    var postgres: String?
    /// Push and pull over each HTTP client, in one run.
    @Flag(help: "Push and pull through each HTTP client, in one run.")
    var compareClients = false
    /// Numbers of change feeds of the fan-out benchmark (`1000,10000`); empty: not run.
    @Option(
        name: .customLong("fan-out"),
        help: ArgumentHelp(
            "Change-feed fan-out: numbers of feeds to measure, comma-separated (1000,10000), beside 1 feed.",
            valueName: "counts"))
    var fanOut: String?
    /// Writes measured at each count of the fan-out benchmark.
    @Option(help: "Writes measured at each count of the fan-out benchmark.")
    var fanOutWrites = 200
    /// `--fan-out`, parsed.
    var fanOutCounts: [Int] { fanOut.map { $0.split(separator: ",").compactMap { Int($0) } } ?? [] }
    /// The `ferry` executable the servers run; `nil` for the one beside this benchmark.
    @Option(help: "The ferry executable to run as the server (default: the one beside SyncBenchmark).")
    var ferry: String?
    /// The attachment benchmark's settings (`--attachments`; AttachmentBenchmark.swift).
    @OptionGroup var attachmentBench: AttachmentOptions

    mutating func validate() throws {
        for (name, value) in [
            ("rows", rows), ("page", page), ("push", push), ("memory-rows", memoryRows ?? 0),
            ("pull-behind-queue", pullBehindQueue), ("live", live),
            ("outage", outage), ("idle-seconds", idleSeconds),
        ] where value < 0 {
            throw ValidationError("--\(name) needs a number of 0 or more")
        }
        if let fanOut,
            fanOutCounts.count != fanOut.split(separator: ",").count || fanOutCounts.contains(where: { $0 < 1 })
        {
            throw ValidationError("--fan-out needs numbers of feeds of 1 or more, comma-separated (1000,10000)")
        }
        if fanOutWrites < 1 { throw ValidationError("--fan-out-writes needs a number of 1 or more") }
        if let postgres, !postgres.hasPrefix("postgres") {
            throw ValidationError("--postgres needs a postgres:// URL")
        }
        rows = max(1, rows)
        page = max(1, min(1_000, page))
        idleSeconds = max(1, idleSeconds)
    }
}

struct BenchmarkError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

enum Workload {
    static let words = ["milk", "bread", "call", "mother", "write", "report", "fix", "bike", "book", "flight"]

    /// An app item of about 200 bytes once the server adds its system properties.
    static func item(_ index: Int) -> JSONObject {
        [
            "id": .string(String(format: "row-%08d", index)),
            "title": .string((0..<4).map { words[($0 * 7 + index) % words.count] }.joined(separator: " ")),
            "done": .bool(index % 3 == 0), "priority": .int(Int64(index % 5)), "note": .string("note \(index)"),
        ]
    }
}

/// Writes the rows straight into a reference-server database (the layout of ServerStorageSQLite),
/// in a few big transactions: seeding through HTTP would take longer than the benchmark.
enum Seeder {
    static func seed(database: String, rows: Int, directory: URL) async throws {
        // Let the server create its layout and the table, then stop it.
        let server = try ServerProcess.start(database: database, directory: directory, page: 1_000)
        let remote = HTTPRemote(HTTPRemote.Configuration(serverURL: server.url))
        _ = try await remote.onlineTable("bench").insert([
            "id": "seed", "title": "seed", "done": false, "priority": 0, "note": "seed",
        ])
        try await remote.onlineTable("bench").delete(id: "seed", ifVersion: nil)
        server.stop()
        guard rows > 0 else { return }
        let queue = try DatabaseQueue(path: database)
        try await queue.write { db in
            let table = try String.fetchOne(
                db, sql: "SELECT 'ferry_items_' || number FROM ferry_tables WHERE name = 'bench'")!
            let base = try Int64.fetchOne(db, sql: "SELECT last_updated_at FROM ferry_tables WHERE name = 'bench'")!
            var version = try Int64.fetchOne(db, sql: "SELECT last_version FROM ferry_tables WHERE name = 'bench'")!
            let insert = try db.makeStatement(
                sql:
                    "INSERT INTO \(table) (id, item, created_at, updated_at, version, deleted, owner) VALUES (?, ?, ?, ?, ?, 0, NULL)"
            )
            for index in 0..<rows {
                version += 1
                var content = Workload.item(index)
                let id = content.removeValue(forKey: "id")!.stringValue!
                let stamp = base + 1 + Int64(index)
                try insert.execute(arguments: [id, JSONValue.object(content).serialized(), stamp, stamp, version])
            }
            try db.execute(
                sql: "UPDATE ferry_tables SET last_updated_at = ?, last_version = ? WHERE name = 'bench'",
                arguments: [base + 1 + Int64(rows), version])
        }
        try queue.close()
    }
}

/// `ferry serve` as a child process, so the client's memory is measured alone.
final class ServerProcess: @unchecked Sendable {
    /// The `ferry` executable (`--ferry`); `nil` for the one beside this benchmark.
    static let ferryPath = Mutex<String?>(nil)

    let process: Process
    let url: URL
    /// Requests the server logged (with `countsRequests`).
    private let requests = Mutex(0)

    private init(process: Process, url: URL) {
        self.process = process
        self.url = url
    }

    /// The requests that reached the server so far (started with `countsRequests`).
    var requestCount: Int { requests.withLock { $0 } }

    /// Starts `ferry serve` on the SQLite file `database` (or on the `--db` of `extraArguments`).
    /// With `countsRequests` it logs every request, and ``requestCount`` counts them.
    static func start(
        database: String?, directory: URL, page: Int, extraArguments: [String] = [], countsRequests: Bool = false
    ) throws -> ServerProcess {
        let tables = directory.appendingPathComponent("tables.json")
        try Data(#"{"defaults": {"softDelete": true, "pageSize": \#(page), "maxTop": 1000}}"#.utf8).write(to: tables)
        let ferry =
            ferryPath.withLock { $0 }.map { URL(fileURLWithPath: $0) }
            ?? URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent(
                "ferry")
        guard FileManager.default.isExecutableFile(atPath: ferry.path) else {
            throw BenchmarkError(
                "no ferry executable at \(ferry.path): build it (swift build --package-path Apps -c release --product ferry) and pass --ferry"
            )
        }
        let process = Process()
        process.executableURL = ferry
        process.arguments =
            ["serve", "--port", "0"] + (database.map { ["--db", "sqlite:" + $0] } ?? []) + [
                "--tables", tables.path, "--log-level", countsRequests ? "info" : "error",
            ] + extraArguments
        let output = Pipe()
        process.standardOutput = output
        let log = Pipe()
        if countsRequests { process.standardError = log }
        try process.run()
        // "ferry serve: listening on http://127.0.0.1:PORT (…)"
        var line = Data()
        while !line.contains(UInt8(ascii: "\n")) {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { throw BenchmarkError("ferry serve exited before it listened") }
            line.append(chunk)
        }
        let text = String(decoding: line, as: UTF8.self)
        guard let range = text.range(of: "http://"), let end = text[range.lowerBound...].firstIndex(of: " "),
            let url = URL(string: String(text[range.lowerBound..<end]))
        else { throw BenchmarkError("unexpected first line from ferry serve: \(text)") }
        let server = ServerProcess(process: process, url: url)
        if countsRequests {
            // One log line per request: "… [FerryServer] GET /tables/idle 200".
            Thread {
                var pending = Data()
                while true {
                    let chunk = log.fileHandleForReading.availableData
                    if chunk.isEmpty { return }
                    pending.append(chunk)
                    while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                        let line = String(decoding: pending[..<newline], as: UTF8.self)
                        pending.removeSubrange(...newline)
                        if line.contains("[FerryServer] ") { server.requests.withLock { $0 += 1 } }
                    }
                }
            }.start()
        }
        return server
    }

    func stop() {
        guard process.isRunning else { return }
        process.terminate()
        process.waitUntilExit()
    }

    /// Sends `signal` (SIGKILL, SIGTERM) and waits until the process ended.
    func kill(_ signal: Int32) {
        guard process.isRunning else { return }
        Foundation.kill(process.processIdentifier, signal)
        process.waitUntilExit()
    }
}
