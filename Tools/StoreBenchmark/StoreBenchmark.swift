// The local-store benchmark: see Tools/README.md.
//
//     swift run -c release StoreBenchmark [--items 100000] [--page 1000] [--query-rows 1000000]
//     swift run -c release StoreBenchmark --help
//
// Each figure is printed beside a raw baseline measured in the same run on the same rows and
// transaction sizes, with the ratio, so a noisy machine moves both sides.
import ArgumentParser
import Foundation
import GRDBSQLite
import StoreSQLite
import SyncCore

@main
struct StoreBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "StoreBenchmark",
        abstract: "The local stores against raw SQLite and LMDB baselines measured in the same run.",
        discussion: "Tools/README.md describes each part.")

    @OptionGroup var options: Options

    /// The other process of `otherProcessLatency` (not for people): the store it writes into.
    @Option(name: .customLong("write-child"), help: .private)
    var childStorePath: String?
    /// How many rows the writing child writes.
    @Option(name: .customLong("write-count"), help: .private)
    var childWriteCount = 1_000

    func run() async throws {
        if let childStorePath {
            try await Self.writeChild(path: childStorePath, count: childWriteCount)
            return
        }
        try await Self.run(options)
    }

    static func run(_ options: Options) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "ferry-bench-" + UUID().uuidString)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }

        let rows = Workload.rows(count: options.items, seed: 1)
        let pages = stride(from: 0, to: rows.count, by: options.page).map {
            Array(rows[$0..<min($0 + options.page, rows.count)])
        }
        let averageBytes = rows.reduce(0) { $0 + $1.json.count } / max(1, rows.count)
        print(
            "Ferry store benchmark: \(rows.count) items of \(averageBytes) bytes on average, pages of \(options.page)")
        print("")

        if options.runs(.apply) {
            // Alternate the two sides, fresh files each time, and keep each side's median run, so
            // a burst of load elsewhere on the machine does not decide the ratio.
            var ferryRuns: [Double] = []
            var rawRuns: [Double] = []
            var store: SQLiteStore?
            var rawPath = ""
            for run in 0..<options.repeats {
                rawPath = directory.appendingPathComponent("raw-\(run).sqlite").path
                rawRuns.append(try RawSQLite.apply(path: rawPath, pages: pages))
                try await store?.close()
                let opened = try SQLiteStore(path: directory.appendingPathComponent("ferry-\(run).sqlite").path)
                _ = try await opened.read { try $0.count("bench") }  // opens the pool before timing
                ferryRuns.append(
                    try await Clock.measure {
                        for page in pages {
                            let items = page.map(\.item)
                            try await opened.write { tx in try tx.upsert("bench", items) }
                        }
                    })
                store = opened
            }
            guard let store else { return }
            report(
                "apply (one transaction per page; median of \(options.repeats) runs each)", unit: "items/s",
                count: rows.count, ferry: median(ferryRuns), baseline: median(rawRuns), baselineName: "raw SQLite C API"
            )

            // Point reads by id, in random order.
            var random = SplitMix(seed: 2)
            let ids = (0..<options.reads).map { _ in rows[Int(random.next() % UInt64(rows.count))].id }
            let rawReads = try RawSQLite.pointReads(path: rawPath, ids: ids)
            let oneRead = try await Clock.measure {
                try await store.read { reader in
                    for id in ids where try reader.item("bench", id: id) == nil {
                        throw BenchmarkError("missing \(id)")
                    }
                }
            }
            report(
                "point reads by id, in one read", unit: "reads/s", count: ids.count, ferry: oneRead, baseline: rawReads,
                baselineName: "raw SQLite C API")
            let sample = Array(ids.prefix(options.reads / 10))
            let separate = try await Clock.measure {
                for id in sample where try await store.item("bench", id: id) == nil {
                    throw BenchmarkError("missing \(id)")
                }
            }
            let rawSample = try RawSQLite.pointReads(path: rawPath, ids: sample)
            report(
                "point reads by id, one store.item each", unit: "reads/s", count: sample.count, ferry: separate,
                baseline: rawSample, baselineName: "raw SQLite C API")
            try await store.close()
        }

        if options.runs(.writes) {
            try await writes(rows: rows, options: options, directory: directory)
        }

        if options.runs(.errors) {
            try await errorLookups(count: options.errors, directory: directory)
        }

        if options.runs(.drain) {
            try await drains(count: options.drain, directory: directory)
        }

        if options.runs(.lmdb) {
            // StoreLMDB against plain mdb_put of the same rows, page by page, durable commits.
            let lmdbPages = pages.map { page in page.map { (id: $0.id, json: $0.json, item: $0.item) } }
            // Fresh environments each run; each side's median run, as for SQLite above.
            var ferryRuns: [Double] = []
            var rawRuns: [Double] = []
            var lmdbDirectory = ""
            for run in 0..<options.repeats {
                lmdbDirectory = directory.appendingPathComponent("lmdb-\(run)").path
                let path = lmdbDirectory
                let (ferry, raw) = try await onThread {
                    try benchmarkLMDB(directory: path, pages: lmdbPages, syncs: options.syncs)
                }
                ferryRuns.append(ferry)
                rawRuns.append(raw)
            }
            report(
                "apply into StoreLMDB (one transaction per page, interleaved with the baseline page by page; "
                    + "median of \(options.repeats) runs each)", unit: "items/s",
                count: rows.count, ferry: median(ferryRuns), baseline: median(rawRuns),
                baselineName: "raw LMDB mdb_put",
                storeName: "StoreLMDB", runRatios: zip(rawRuns, ferryRuns).map { $0 / $1 })
            let ids = Self.randomIDs(rows, count: options.reads, seed: 4)
            let lastDirectory = lmdbDirectory
            let reads = try await onThread { try benchmarkLMDBPointReads(directory: lastDirectory, ids: ids) }
            report(
                "StoreLMDB point reads by id, in one read", unit: "reads/s", count: ids.count,
                ferry: reads.ferrySeconds,
                baseline: reads.rawParsedSeconds, baselineName: "mdb_get + parse", storeName: "StoreLMDB")
        }

        if options.runs(.query) {
            try await queryPage(options: options, directory: directory)
        }
    }

    /// A 100-row page from `queryRows` rows, filtered and ordered on a declared index.
    static func queryPage(options: Options, directory: URL) async throws {
        let path = directory.appendingPathComponent("query.sqlite").path
        let store = try SQLiteStore(path: path)
        let definition = TableDefinition(
            name: "scores", schema: TableSchema(fields: ["score": .integer], allowsUndeclaredFields: true),
            indexes: [["score"]])
        try await store.write { tx in try tx.define(definition) }
        print("loading \(options.queryRows) rows for the query page…")
        var random = SplitMix(seed: 3)
        let loading = try await Clock.measure {
            var next = 0
            while next < options.queryRows {
                let count = min(10_000, options.queryRows - next)
                let items: [JSONObject] = (next..<next + count).map { index in
                    [
                        "id": .string(String(format: "row-%08d", index)),
                        "score": .int(Int64(random.next() % 1_000_000)),
                        "title": .string("row number \(index)"),
                    ]
                }
                try await store.write { tx in try tx.upsert("scores", items) }
                next += count
            }
        }
        print("  loaded in \(format(loading)) s (\(Int(Double(options.queryRows) / loading)) items/s)")
        var durations: [Double] = []
        for _ in 0..<options.queries {
            let low = Int64(random.next() % 990_000)
            let query = TableQuery(filter: QueryExpression.field("score").ge(low))
                .orderBy("score").top(100)
            let seconds = try await Clock.measure {
                let page = try await store.query("scores", query)
                guard page.items.count == 100 else { throw BenchmarkError("page of \(page.items.count) rows") }
            }
            durations.append(seconds)
        }
        durations.sort()
        let median = durations[durations.count / 2] * 1_000
        let p90 = durations[durations.count * 9 / 10] * 1_000
        print(
            "100-row page on an indexed field from \(options.queryRows) rows (\(options.queries) queries): "
                + "median \(format(median)) ms, p90 \(format(p90)) ms (target: median under 1 ms)")
        try await store.close()
    }

    /// `count` ids of `rows` in a fixed random order.
    nonisolated static func randomIDs(_ rows: [Row], count: Int, seed: UInt64) -> [String] {
        var random = SplitMix(seed: seed)
        var ids: [String] = []
        ids.reserveCapacity(count)
        for _ in 0..<count { ids.append(rows[Int(random.next() % UInt64(rows.count))].id) }
        return ids
    }

    /// Runs blocking work on its own thread (the LMDB part waits on semaphores), off Swift's pool.
    static func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try body() }) }.start()
        }
    }

    static func appFields(_ item: JSONObject) -> JSONObject {
        item.filter { !["updatedAt", "createdAt", "version", "deleted"].contains($0.key) }
    }

    static func report(
        _ title: String, unit: String, count: Int, ferry: Double, baseline: Double, baselineName: String,
        storeName: String = "StoreSQLite", runRatios: [Double] = []
    ) {
        let ferryRate = Double(count) / ferry
        let baselineRate = Double(count) / baseline
        print(title)
        print("  \(storeName.padding(toLength: 17, withPad: " ", startingAt: 0)) \(pad(Int(ferryRate))) \(unit)")
        print("  \(baselineName.padding(toLength: 17, withPad: " ", startingAt: 0)) \(pad(Int(baselineRate))) \(unit)")
        if runRatios.count > 1, let low = runRatios.min(), let high = runRatios.max() {
            // Both sides of a run share its conditions: the median of the runs' ratios is the figure.
            print(
                "  ratio             \(format(median(runRatios))) of the baseline (median of the runs' ratios, "
                    + "\(format(low))–\(format(high)))")
        } else {
            print("  ratio             \(format(ferryRate / baselineRate)) of the baseline")
        }
        print("")
    }

    static func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }

    static func pad(_ value: Int) -> String {
        let text = String(value)
        return String(repeating: " ", count: max(0, 10 - text.count)) + text
    }

    static func format(_ value: Double) -> String { String(format: "%.3f", value) }
}

struct Options: ParsableArguments {
    /// A part of the benchmark (`--only`).
    enum Part: String, ExpressibleByArgument, CaseIterable {
        case apply, writes, lmdb, query, errors, drain
    }

    @Option(help: "Items of the apply, point-read and LMDB parts.")
    var items = 100_000
    @Option(help: "Items per transaction.")
    var page = 1_000
    @Option(help: "Point reads by id.")
    var reads = 100_000
    @Option(help: "Queued operations of the drain part's short queue (its long one holds 4 times as many).")
    var drain = 25_000
    @Option(help: "Recorded errors of the error-lookup part.")
    var errors = 5_000
    @Option(help: "Rows of the query page's table.")
    var queryRows = 1_000_000
    @Option(help: "Queries of the query page.")
    var queries = 200
    @Option(name: .customLong("repeat"), help: "Runs of each side of the apply and of the LMDB writes (median kept).")
    var repeats = 3
    @Option(help: "Run one part only.")
    var only: Part?
    /// Whether the LMDB part syncs every commit (both sides); `--no-sync` measures CPU alone.
    @Flag(name: .customLong("no-sync"), help: "The LMDB part without a sync per commit on either side.")
    var noSync = false

    var syncs: Bool { !noSync }

    func validate() throws {
        for (name, value) in [
            ("items", items), ("page", page), ("reads", reads), ("query-rows", queryRows), ("queries", queries),
            ("errors", errors), ("drain", drain),
            ("repeat", repeats),
        ] where value <= 0 {
            throw ValidationError("--\(name) needs a positive number")
        }
    }

    func runs(_ part: Part) -> Bool { only == nil || only == part }
}

struct BenchmarkError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// A row of the pull-like stream: the item, and the same item serialized for the raw baseline.
struct Row: Sendable {
    var id: String
    var item: JSONObject
    var json: [UInt8]
    var updatedAt: Int64
    var version: String
}

enum Workload {
    /// Items of about 200 bytes shaped like a pull page of a todo table.
    static func rows(count: Int, seed: UInt64) -> [Row] {
        var random = SplitMix(seed: seed)
        let words = [
            "milk", "bread", "call", "mother", "write", "report", "fix", "bike", "book", "flight", "pay", "rent",
        ]
        let start: Int64 = 1_790_000_000_000
        return (0..<count).map { index in
            let id = String(
                format: "%08x-%04x-7%03x-8%03x-%012llx", index, random.next() % 0xFFFF, random.next() % 0xFFF,
                random.next() % 0xFFF, random.next() % 0xFFFF_FFFF_FFFF)
            let title = (0..<5).map { _ in words[Int(random.next() % UInt64(words.count))] }.joined(separator: " ")
            let updatedAt = start + Int64(index / 3)
            let version = String(format: "%016llx", random.next())
            let item: JSONObject = [
                "id": .string(id), "title": .string(title), "done": .bool(random.next() % 2 == 0),
                "priority": .int(Int64(random.next() % 5)),
                "updatedAt": .string(Timestamp(millisecondsSince1970: updatedAt).iso8601),
                "version": .string(version), "deleted": .bool(false),
                "note": .string("note \(index)"),
            ]
            return Row(
                id: id, item: item, json: Array(JSONValue.object(item).serialized().utf8), updatedAt: updatedAt,
                version: version)
        }
    }
}

/// SplitMix64, so every run uses the same rows.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

enum Clock {
    static func measure(_ body: () async throws -> Void) async rethrows -> Double {
        let start = DispatchTime.now().uptimeNanoseconds
        try await body()
        return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
    }

    static func measure(_ body: () throws -> Void) rethrows -> Double {
        let start = DispatchTime.now().uptimeNanoseconds
        try body()
        return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
    }
}

/// The baseline: SQLite's C API with prepared statements, the same journal mode, columns, indexes
/// and transaction sizes as StoreSQLite, and the rows already serialized.
enum RawSQLite {
    static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    static func open(_ path: String) throws -> OpaquePointer {
        var db: OpaquePointer?
        guard sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nil) == SQLITE_OK, let db else {
            throw BenchmarkError("cannot open \(path)")
        }
        try exec(db, "PRAGMA journal_mode = WAL")
        return db
    }

    static func exec(_ db: OpaquePointer, _ sql: String) throws {
        guard sqlite3_exec(db, sql, nil, nil, nil) == SQLITE_OK else {
            throw BenchmarkError("\(sql): \(String(cString: sqlite3_errmsg(db)))")
        }
    }

    static func prepare(_ db: OpaquePointer, _ sql: String) throws -> OpaquePointer {
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(db, sql, -1, &statement, nil) == SQLITE_OK, let statement else {
            throw BenchmarkError("\(sql): \(String(cString: sqlite3_errmsg(db)))")
        }
        return statement
    }

    static func apply(path: String, pages: [[Row]]) throws -> Double {
        let db = try open(path)
        defer { sqlite3_close_v2(db) }
        try exec(
            db,
            """
            CREATE TABLE items (id TEXT PRIMARY KEY NOT NULL, updatedAt INTEGER, deleted INTEGER NOT NULL,
                version TEXT, item TEXT NOT NULL);
            CREATE INDEX items_updatedAt ON items (updatedAt, id)
            """)
        let insert = try prepare(
            db, "INSERT OR REPLACE INTO items (id, updatedAt, deleted, version, item) VALUES (?, ?, ?, ?, ?)")
        defer { sqlite3_finalize(insert) }
        return try Clock.measure {
            for page in pages {
                try exec(db, "BEGIN IMMEDIATE")
                for row in page {
                    sqlite3_bind_text(insert, 1, row.id, -1, transient)
                    sqlite3_bind_int64(insert, 2, row.updatedAt)
                    sqlite3_bind_int(insert, 3, 0)
                    sqlite3_bind_text(insert, 4, row.version, -1, transient)
                    _ = row.json.withUnsafeBufferPointer { bytes in
                        sqlite3_bind_text(insert, 5, bytes.baseAddress, Int32(bytes.count), transient)
                    }
                    guard sqlite3_step(insert) == SQLITE_DONE else {
                        throw BenchmarkError("insert: \(String(cString: sqlite3_errmsg(db)))")
                    }
                    sqlite3_reset(insert)
                }
                try exec(db, "COMMIT")
            }
        }
    }

    static func pointReads(path: String, ids: [String]) throws -> Double {
        let db = try open(path)
        defer { sqlite3_close_v2(db) }
        let select = try prepare(db, "SELECT item FROM items WHERE id = ?")
        defer { sqlite3_finalize(select) }
        return try Clock.measure {
            for id in ids {
                sqlite3_bind_text(select, 1, id, -1, transient)
                guard sqlite3_step(select) == SQLITE_ROW, sqlite3_column_bytes(select, 0) > 0 else {
                    throw BenchmarkError("missing \(id)")
                }
                sqlite3_reset(select)
            }
        }
    }
}

/// A remote that is never reached: the benchmark measures local writes only.
struct OfflineTable: RemoteTable {
    func insert(_ item: JSONObject) async throws(RemoteError) -> JSONObject { throw Self.offline }
    func update(_ item: JSONObject, ifVersion version: String?) async throws(RemoteError) -> JSONObject {
        throw Self.offline
    }
    func delete(id: String, ifVersion version: String?) async throws(RemoteError) { throw Self.offline }
    func item(id: String) async throws(RemoteError) -> JSONObject? { throw Self.offline }
    func query(_ query: TableQuery) async throws(RemoteError) -> RemotePage { throw Self.offline }
    static let offline = RemoteError(.network, "offline", wasNotSent: true)
}
