import Foundation
import StoreConformance
import StoreSQLite
import Synchronization
import SyncCore
import Testing

/// Processes (here, connections) that open one new store file at the same moment take turns
/// creating it: each opens the store. The second failed with "table ferry_meta already exists"
/// (both ran the first migration), or "the file is a SQLite database but not a Ferry store" (it
/// looked while the first was creating it): 11 of 160 `ferry insert` processes, 4 at a time.
@Suite("SQLiteStore: opening one new file at once")
struct SQLiteStoreCreationRaceTests {
    @Test func connectionsOpeningOneNewFileAtOnceAllOpenTheStore() async throws {
        let directory = try TemporaryDirectory()
        let failures = Mutex<[String]>([])
        for round in 0..<25 {
            let path = directory.path + "/race-\(round).ferry"
            DispatchQueue.concurrentPerform(iterations: 4) { _ in
                do {
                    _ = try SQLiteStore(path: path)
                } catch {
                    failures.withLock { $0.append("round \(round): \(error)") }
                }
            }
        }
        let seen = failures.withLock { $0 }
        #expect(seen.isEmpty, "\(seen.count) opens failed: \(seen.prefix(3))")
    }
}
