// Looking up one operation's recorded errors among many: see Tools/README.md.
import Foundation
import StoreSQLite
import SyncCore

extension StoreBenchmark {
    /// A push that completes or fails an operation looks up that operation's recorded errors. With
    /// `count` errors recorded in one table, each lookup by `operationErrors(table:operationID:)`
    /// (SQLite reads the operation id from each record's text) beside the store's previous way,
    /// reading the table's errors and keeping the operation's (the protocol's default), in the same
    /// run on the same store.
    static func errorLookups(count: Int, directory: URL) async throws {
        let store = try SQLiteStore(path: directory.appendingPathComponent("errors.sqlite").path)
        try await store.write { tx in
            for index in 0..<count {
                try tx.saveOperationError(
                    OperationErrorRecord(
                        id: "e\(index)", operationID: Int64(index), table: "bench", itemID: "i\(index)",
                        kind: .update, statusCode: 412, message: "the server's item changed",
                        clientItem: ["id": .string("i\(index)"), "title": "mine"],
                        serverItem: ["id": .string("i\(index)"), "title": "theirs", "version": "v2"]))
            }
        }
        let lookups = min(count, 500)
        let targets = (0..<lookups).map { Int64($0 * count / lookups) }
        var found = 0
        let direct = try await Clock.measure {
            for id in targets {
                found += try await store.read { try $0.operationErrors(table: "bench", operationID: id) }.count
            }
        }
        let scanned = try await Clock.measure {
            for id in targets {
                found += try await store.read { reader in
                    try reader.operationErrors(table: "bench").filter { $0.operationID == id }
                }.count
            }
        }
        guard found == 2 * lookups else { throw BenchmarkError("found \(found) errors, not \(2 * lookups)") }
        report(
            "one operation's errors among \(count) of its table", unit: "lookups/s", count: lookups, ferry: direct,
            baseline: scanned, baselineName: "every error read")
        try await store.close()
    }
}
