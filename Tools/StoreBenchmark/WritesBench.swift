// Local writes and what observing them costs: see Tools/README.md.
import Foundation
import StoreSQLite
import SyncCore
import Synchronization

extension StoreBenchmark {
    /// Local writes through the engine (each item with its queued operation): single inserts, each
    /// its own transaction, and one bulk import, beside the raw C API writing the same rows.
    static func writes(rows: [Row], options: Options, directory: URL) async throws {
        let store = try SQLiteStore(path: directory.appendingPathComponent("writes.sqlite").path)
        let context = SyncContext(store: store) { _ in OfflineTable() }
        let local = rows.prefix(min(10_000, rows.count)).map { Self.appFields($0.item) }
        let table = context.table("local")
        let singles = try await Clock.measure {
            for item in local { _ = try await table.insert(item) }
        }
        let rawSingles = try RawSQLite.apply(
            path: directory.appendingPathComponent("raw-singles.sqlite").path,
            pages: rows.prefix(local.count).map { [$0] })
        report(
            "local inserts, each its own transaction (the item and its queued operation)", unit: "items/s",
            count: local.count, ferry: singles, baseline: rawSingles, baselineName: "raw SQLite C API")

        // The same inserts into another table while a query of it is observed (the 20 highest ids:
        // every insert changes its result); commits fold into at most one run per 16 ms.
        let watched = context.table("watched")
        let observation = watched.observe(TableQuery().orderBy("id", descending: true).top(20))
        let results = Task {
            var count = 0
            for try await _ in observation { count += 1 }
            return count
        }
        let observed = try await Clock.measure {
            for item in local { _ = try await watched.insert(item) }
        }
        results.cancel()
        let yielded = try await results.value
        // Unobserved again, into a third table: the baseline is the mean of the runs before and after.
        let after = context.table("after")
        let singlesAfter = try await Clock.measure {
            for item in local { _ = try await after.insert(item) }
        }
        report(
            "local inserts with one query of their table observed (\(yielded) results seen)", unit: "items/s",
            count: local.count, ferry: observed, baseline: (singles + singlesAfter) / 2,
            baselineName: "no observer")

        // Through the store directly (the app's own code, not the context), observed and not: the
        // store reports its commits, so the observation sees these too.
        let direct = try await storeWrites(local, into: "direct", on: store, observedBy: nil)
        let directObserved = try await storeWrites(
            local, into: "directWatched", on: store, observedBy: context.table("directWatched"))
        let directAfter = try await storeWrites(local, into: "directAfter", on: store, observedBy: nil)
        report(
            "store.write inserts with one query of their table observed (\(directObserved.results) results seen)",
            unit: "items/s", count: local.count, ferry: directObserved.seconds,
            baseline: (direct.seconds + directAfter.seconds) / 2, baselineName: "no observer")
        try await otherProcessLatency(directory: directory)

        let items = rows.map { Self.appFields($0.item) }
        let imported = try await Clock.measure {
            try await context.write { writes in _ = try writes.insert(contentsOf: items, into: "imported") }
        }
        guard try await context.queuedOperationCount(table: "imported") == items.count else {
            throw BenchmarkError("the import did not queue \(items.count) inserts")
        }
        let rawImport = try RawSQLite.apply(
            path: directory.appendingPathComponent("raw-import.sqlite").path, pages: [rows])
        report(
            "bulk import of \(items.count) items in one transaction (items and queued inserts)", unit: "items/s",
            count: items.count, ferry: imported, baseline: rawImport, baselineName: "raw SQLite C API")
        try await store.close()
    }

    /// Inserts `items` one transaction each through `store.write` (item and queued operation), with
    /// `observed`'s top 20 by id observed meanwhile when given; the seconds and results seen.
    static func storeWrites(
        _ items: [JSONObject], into table: String, on store: SQLiteStore, observedBy observed: SyncTable?
    ) async throws -> (seconds: Double, results: Int) {
        let results = observed.map { observed in
            let observation = observed.observe(TableQuery().orderBy("id", descending: true).top(20))
            return Task {
                var count = 0
                for try await _ in observation { count += 1 }
                return count
            }
        }
        let seconds = try await Clock.measure {
            for item in items {
                let id = item.id ?? ""
                try await store.write { tx in
                    try tx.upsert(table, [item])
                    _ = try tx.appendOperation(OperationDraft(table: table, itemID: id, kind: .insert))
                }
            }
        }
        results?.cancel()
        return (seconds, try await results?.value ?? 0)
    }

    /// How long a commit by another process takes to reach an observer of the store: this benchmark
    /// runs itself as a child (`--write-child PATH --write-count COUNT`) that writes rows stamped with the wall
    /// clock, a few milliseconds apart; each wake-up here reads the new rows and takes now minus
    /// each stamp.
    static func otherProcessLatency(directory: URL, count: Int = 1_000) async throws {
        let path = directory.appendingPathComponent("shared.sqlite").path
        let store = try SQLiteStore(path: path)
        try await store.upsert("shared", [["id": "start", "at": .double(0)]])
        let wakes = store.commits.subscribe(tables: ["shared"])
        let latencies = Task {
            var seen: Set<String> = ["start"]
            var latencies: [Double] = []
            for await _ in wakes {
                let now = Date().timeIntervalSince1970
                for item in try await store.query("shared", TableQuery()).items {
                    guard let id = item.id, !seen.contains(id), case .double(let at)? = item["at"] else { continue }
                    seen.insert(id)
                    latencies.append(now - at)
                }
                if latencies.count >= count { break }
            }
            return latencies
        }
        let child = Process()
        child.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
        child.arguments = ["--write-child", path, "--write-count", String(count)]
        try child.run()
        try await onThread { child.waitUntilExit() }
        guard child.terminationStatus == 0 else { throw BenchmarkError("the writing child failed") }
        let deadline = Task {
            try await Task.sleep(for: .seconds(10))
            latencies.cancel()
        }
        let measured = try await latencies.value.sorted()
        deadline.cancel()
        try await store.close()
        guard measured.count == count else {
            throw BenchmarkError("the observer saw \(measured.count) of \(count) writes from the other process")
        }
        func percentile(_ p: Double) -> Double { measured[min(measured.count - 1, Int(Double(measured.count) * p))] }
        print(
            String(
                format:
                    "%@\n  p50 %.1f ms, p99 %.1f ms, max %.1f ms (StoreSQLite checks every 100 ms while observed)\n",
                "a commit by another process reaching an observer (\(count) writes, 2-20 ms apart)",
                percentile(0.5) * 1000, percentile(0.99) * 1000, (measured.last ?? 0) * 1000))
    }

    /// The child of ``otherProcessLatency(directory:count:)``: `count` writes to `path`, each
    /// stamped with the wall clock just before its commit.
    static func writeChild(path: String, count: Int) async throws {
        let store = try SQLiteStore(path: path)
        var random = SystemRandomNumberGenerator()
        for index in 0..<count {
            let at = Date().timeIntervalSince1970
            try await store.upsert("shared", [["id": .string("w\(index)"), "at": .double(at)]])
            try await Task.sleep(for: .milliseconds(Int.random(in: 2...20, using: &random)))
        }
        try await store.close()
    }
}
