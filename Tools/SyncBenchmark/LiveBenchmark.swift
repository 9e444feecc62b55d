// Live sync (`--live N`): two devices with automatic sync through `ferry serve`; device A inserts,
// and the time until device B's observed query shows the item is measured, N times (p50, p99). With
// `--postgres URL`, the same across two `ferry serve` instances on that PostgreSQL database (A on
// one, B on the other). Then the idle cost: one device with automatic sync and nothing to do, for
// `--idle-seconds` (60), counting the requests that reach the server, against a server with the
// change feed and against one without (`--protocol-only`: the device polls every 10 s).
import Foundation
import StoreSQLite
import Synchronization
import SyncCore
import Transport

enum LiveBenchmark {
    static func run(options: Options, directory: URL) async throws {
        print("\nlive sync: device A inserts, device B's observed query shows it (both automatic, change feed)")
        let database = directory.appendingPathComponent("server-live.sqlite").path
        try await Seeder.seed(database: database, rows: 0, directory: directory)
        let server = try ServerProcess.start(database: database, directory: directory, page: options.page)
        let local = try await latency(
            a: server.url, b: server.url, writes: options.live, directory: directory, name: "sqlite")
        server.stop()
        print("  one ferry serve (SQLite)        \(local)")
        if let postgres = options.postgres {
            let first = try ServerProcess.start(
                database: nil, directory: directory, page: options.page, extraArguments: ["--db", postgres])
            defer { first.stop() }
            let second = try ServerProcess.start(
                database: nil, directory: directory, page: options.page, extraArguments: ["--db", postgres])
            defer { second.stop() }
            let across = try await latency(
                a: first.url, b: second.url, writes: options.live, directory: directory, name: "postgres")
            print("  two ferry serve on PostgreSQL   \(across)   (A on one instance, B on the other)")
        }

        print("\nidle cost: one device with automatic sync and nothing to do, \(options.idleSeconds) s")
        let withFeed = try await idleRequests(options: options, directory: directory, protocolOnly: false)
        print(
            "  with the change feed             \(withFeed.idle) requests while idle (\(withFeed.startup) to start: capabilities, feed, first pulls)"
        )
        let polling = try await idleRequests(options: options, directory: directory, protocolOnly: true)
        print(
            "  without it (--protocol-only)     \(polling.idle) requests while idle (a pull every 10 s; \(polling.startup) to start)"
        )
    }

    /// The latency of `writes` inserts on A showing in B's observed query: "p50 12.3 ms, p99 45.6 ms".
    static func latency(a: URL, b: URL, writes: Int, directory: URL, name: String) async throws -> String {
        let table = "live_" + UUID().uuidString.prefix(8).lowercased()
        let configuration = AutomaticSyncConfiguration(pushDelay: .milliseconds(1), pollInterval: .seconds(3_600))
        let subscription = SyncSubscription(table: table)
        let deviceA = try context(directory, "a-\(name)", a)
        let deviceB = try context(directory, "b-\(name)", b)
        await deviceA.startAutomaticSync([subscription], configuration: configuration)
        await deviceB.startAutomaticSync([subscription], configuration: configuration)
        defer {
            Task {
                await deviceA.stopAutomaticSync()
                await deviceB.stopAutomaticSync()
            }
        }
        // B sees the newest item (ids sort in insert order). The observation runs its query on
        // every change (no 16 ms frame between runs), so that the figure is the sync's own.
        let arrivals = Arrivals()
        let observation = deviceB.table(table).observe(
            TableQuery().orderBy("id", descending: true).top(1), interval: .zero)
        let watcher = Task {
            for try await items in observation {
                if let id = items.first?.id { arrivals.saw(id) }
            }
        }
        defer { watcher.cancel() }
        // Both feeds open before the first write.
        for _ in 0..<500 where !(deviceA.status.snapshot.isCaughtUp && deviceB.status.snapshot.isCaughtUp) {
            try await Task.sleep(for: .milliseconds(10))
        }
        var samples: [Double] = []
        for index in 0..<writes {
            let id = "w" + String(String(1_000_000 + index).dropFirst())
            let start = ContinuousClock.now
            try await deviceA.table(table).insert(["id": .string(id), "n": .int(Int64(index))])
            guard try await arrivals.wait(for: id, timeout: .seconds(10)) else {
                throw BenchmarkError("write \(index) never reached device B")
            }
            let elapsed = ContinuousClock.now - start
            samples.append(Double(elapsed.components.attoseconds) / 1e15 + Double(elapsed.components.seconds) * 1000)
        }
        samples.sort()
        func percentile(_ p: Double) -> Double { samples[min(samples.count - 1, Int(Double(samples.count) * p))] }
        return String(format: "p50 %.1f ms, p99 %.1f ms over %d writes", percentile(0.5), percentile(0.99), writes)
    }

    static func context(_ directory: URL, _ name: String, _ url: URL) throws -> SyncContext {
        SyncContext(
            store: try SQLiteStore(path: directory.appendingPathComponent("live-\(name).sqlite").path),
            remote: HTTPRemote(HTTPRemote.Configuration(serverURL: url, retry: .init(maximumAttempts: 1))))
    }

    /// The requests that reach the server while one device syncs automatically with nothing to do:
    /// to start (until it is caught up), then during `--idle-seconds`.
    static func idleRequests(options: Options, directory: URL, protocolOnly: Bool) async throws -> (
        startup: Int, idle: Int
    ) {
        let database = directory.appendingPathComponent("server-idle-\(protocolOnly).sqlite").path
        try await Seeder.seed(database: database, rows: 0, directory: directory)
        let server = try ServerProcess.start(
            database: database, directory: directory, page: options.page,
            extraArguments: protocolOnly ? ["--protocol-only"] : [], countsRequests: true)
        defer { server.stop() }
        let device = try context(directory, "idle-\(protocolOnly)", server.url)
        await device.startAutomaticSync(
            [SyncSubscription(table: "idle")],
            configuration: AutomaticSyncConfiguration(pollInterval: .seconds(10)))
        for _ in 0..<500 where !device.status.snapshot.isCaughtUp { try await Task.sleep(for: .milliseconds(10)) }
        try await Task.sleep(for: .milliseconds(500))  // the pulls the feed's first event asks for
        let startup = server.requestCount
        try await Task.sleep(for: .seconds(options.idleSeconds))
        await device.stopAutomaticSync()
        return (startup, server.requestCount - startup)
    }
}

/// When each id was first seen by the observer.
final class Arrivals: Sendable {
    private let seen = Mutex<Set<String>>([])

    func saw(_ id: String) { _ = seen.withLock { $0.insert(id) } }

    /// Waits until `id` was seen; `false` after `timeout`.
    func wait(for id: String, timeout: Duration) async throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if seen.withLock({ $0.contains(id) }) { return true }
            try await Task.sleep(for: .microseconds(200))
        }
        return false
    }
}
