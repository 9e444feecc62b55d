// A push's store work on a short and a long queue, on each store: see Tools/README.md.
import Foundation
import StoreLMDB
import StoreMemory
import StoreSQLite
import SyncCore

extension StoreBenchmark {
    /// Drains a queue of `count` inserts and one of `4 × count` the way a push does, in groups of
    /// 500: read the group after the last one taken, mark each operation in flight, then read the
    /// group's items' operations and delete each. The long queue's time per operation against the
    /// short one's is the figure: 1 when a push costs the same per operation whatever the queue's
    /// length. (Reading the follow-ups walked SQLite's whole queue, and the memory store moved its
    /// whole queue for each removal: both made a push quadratic.)
    static func drains(count: Int, directory: URL) async throws {
        let stores: [(String, (String) throws -> any LocalStore)] = [
            ("StoreSQLite", { try SQLiteStore(path: directory.appendingPathComponent("drain-\($0).sqlite").path) }),
            ("StoreLMDB", { try LMDBStore(path: directory.appendingPathComponent("drain-\($0).lmdb").path) }),
            ("StoreMemory", { _ in MemoryStore() }),
        ]
        for (name, open) in stores {
            let short = try await drain(try open("short"), count: count)
            let long = try await drain(try open("long"), count: 4 * count)
            report(
                "a push's store work, queue of \(4 * count) against \(count)", unit: "operations/s",
                count: 4 * count, ferry: long, baseline: short * 4, baselineName: "queue of \(count)",
                storeName: name)
        }
    }

    /// Seconds to drain a queue of `count` inserts as a push does.
    private static func drain(_ store: any LocalStore, count: Int) async throws -> Double {
        try await store.write { tx in
            for start in stride(from: 0, to: count, by: 5_000) {
                _ = try tx.appendOperations(
                    (start..<min(count, start + 5_000)).map {
                        OperationDraft(
                            table: "bench", itemID: "item-\($0)", kind: .insert, item: ["id": .string("item-\($0)")])
                    })
            }
        }
        var drained = 0
        let seconds = try await Clock.measure {
            var cursor: Int64?
            while true {
                let group = try await store.write { [cursor] tx -> [QueuedOperation] in
                    let group = try tx.operations(after: cursor, table: nil, limit: 500)
                    for var operation in group {
                        operation.state = .inFlight
                        operation.attempts += 1
                        try tx.updateOperation(operation)
                    }
                    return group
                }
                guard let last = group.last else { break }
                cursor = last.id
                drained += try await store.write { tx in
                    _ = try tx.operations(table: "bench", itemIDs: group.map(\.itemID))
                    return try group.filter { try tx.deleteOperation(id: $0.id) }.count
                }
            }
        }
        guard drained == count, try await store.operationCount() == 0 else {
            throw BenchmarkError("drained \(drained) of \(count) operations")
        }
        try await store.close()
        return seconds
    }
}
