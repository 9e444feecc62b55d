// Outages (`--outage N`): `ferry serve` killed (SIGKILL and SIGTERM in turn) and restarted on the same
// port and database N times under a device that syncs automatically (change feed). Measures, per
// round: how long until the device's status says the server is unreachable, how many requests the
// device makes a second while the server is down, and how long a change made right after the restart
// takes to reach the device's observed query (the issue's bound: 3 s at p99).
import Foundation
import Logging
import StoreSQLite
import Synchronization
import SyncCore
import Transport

enum OutageBenchmark {
    static func run(options: Options, directory: URL) async throws {
        print("\noutages: ferry serve killed and restarted \(options.outage) times under a device with automatic sync")
        let database = directory.appendingPathComponent("server-outage.sqlite").path
        try await Seeder.seed(database: database, rows: 0, directory: directory)
        var server = try ServerProcess.start(database: database, directory: directory, page: options.page)
        let port = server.url.port ?? 0
        let attempts = Attempts()
        var logger = Logger(label: "outage.device") { _ in attempts }
        logger.logLevel = .warning
        let device = SyncContext(
            store: try SQLiteStore(path: directory.appendingPathComponent("outage-device.sqlite").path),
            remote: HTTPRemote(HTTPRemote.Configuration(serverURL: server.url, retry: .init(maximumAttempts: 1))),
            logger: logger)
        await device.startAutomaticSync(
            [SyncSubscription(table: "outage")],
            configuration: AutomaticSyncConfiguration(pushDelay: .milliseconds(1), pollInterval: .seconds(3_600)))
        let arrivals = Arrivals()
        let observation = device.table("outage").observe(
            TableQuery().orderBy("id", descending: true).top(1), interval: .zero)
        let watcher = Task {
            for try await items in observation { if let id = items.first?.id { arrivals.saw(id) } }
        }
        defer { watcher.cancel() }
        for _ in 0..<1_000 where !device.status.snapshot.isCaughtUp { try await Task.sleep(for: .milliseconds(10)) }

        var unreachableAfter: [Double] = []
        var rates: [Double] = []
        var arrivalsAfterRestart: [Double] = []
        var random = SystemRandomNumberGenerator()
        for round in 0..<options.outage {
            let signal = round % 2 == 0 ? SIGKILL : SIGTERM
            let killed = ContinuousClock.now
            server.kill(signal)
            while !(device.status.snapshot.reachability.isUnreachable) {
                guard ContinuousClock.now - killed < .seconds(30) else {
                    throw BenchmarkError("round \(round): the status never said the server was unreachable")
                }
                try await Task.sleep(for: .milliseconds(5))
            }
            unreachableAfter.append(milliseconds(ContinuousClock.now - killed))
            // Down for 2 to 6 s: count the device's attempts meanwhile.
            let before = attempts.count
            let outage = Duration.milliseconds(Int.random(in: 2_000...6_000, using: &random))
            try await Task.sleep(until: killed + outage)
            let down = ContinuousClock.now - killed
            rates.append(Double(attempts.count - before) / (milliseconds(down) / 1000))
            server = try ServerProcess.start(
                database: database, directory: directory, page: options.page, extraArguments: ["--port", "\(port)"])
            // A change made as soon as the server is back, by another client.
            let id = "r" + String(String(1_000 + round).dropFirst())
            let writer = HTTPRemote(HTTPRemote.Configuration(serverURL: server.url, retry: .init(maximumAttempts: 1)))
            _ = try await writer.onlineTable("outage").insert(["id": .string(id)])
            let written = ContinuousClock.now
            guard try await arrivals.wait(for: id, timeout: .seconds(30)) else {
                throw BenchmarkError("round \(round): the change after the restart never reached the device")
            }
            arrivalsAfterRestart.append(milliseconds(ContinuousClock.now - written))
        }
        await device.stopAutomaticSync()
        server.stop()
        print("  status says unreachable after   \(summary(unreachableAfter)) (from the kill)")
        print(
            "  requests while the server is down  at most \(String(format: "%.1f", rates.max() ?? 0))/s, median \(String(format: "%.1f", median(rates)))/s"
        )
        print(
            "  first change after the restart \(summary(arrivalsAfterRestart)) (from the write to the device's query)")
    }

    static func milliseconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15
    }

    static func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        return sorted.isEmpty ? 0 : sorted[sorted.count / 2]
    }

    static func summary(_ samples: [Double]) -> String {
        let sorted = samples.sorted()
        func percentile(_ p: Double) -> Double { sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))] }
        return String(
            format: "p50 %.0f ms, p99 %.0f ms, max %.0f ms over %d rounds", percentile(0.5), percentile(0.99),
            sorted.last ?? 0, sorted.count)
    }
}

/// Counts the device's failed attempts (one warning each: a push, a pull, or opening the feed).
final class Attempts: LogHandler, @unchecked Sendable {
    private let counter = Mutex(0)
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .warning

    var count: Int { counter.withLock { $0 } }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        if event.level >= .warning { counter.withLock { $0 += 1 } }
    }
}

extension ServerReachability {
    var isUnreachable: Bool {
        if case .unreachable = self { return true }
        return false
    }
}
