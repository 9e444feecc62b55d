import Foundation
import StoreConformance
import StoreSQLite
import SyncCore
import SyncTesting
import Synchronization
import Testing

/// The example of the "Sharing a store between processes" article (SyncCore.docc), kept compiling
/// and run with two stores on one file standing for two processes: the App Group container is a
/// temporary directory here (`containerURL(forSecurityApplicationGroupIdentifier:)` is Apple's).
@Suite("Sharing a store: the article's example")
struct SharingExampleTests {
    @Test func anExtensionsInsertReachesTheAppsObservation() async throws {
        let server = ModelServer()
        let remote = server.remote()
        let temporary = try TemporaryDirectory()
        defer { temporary.remove() }
        let container = URL(fileURLWithPath: temporary.path)

        // The app.
        let appStore = try SQLiteStore(path: container.appendingPathComponent("todo.ferry").path)
        let app = SyncContext(store: appStore, remote: remote)
        let counts = Mutex<[Int]>([])
        let observing = Task {
            for try await open in app.table("todo").observe(TableQuery().filter(.field("done").eq(false))) {
                counts.withLock { $0.append(open.count) }
            }
        }
        for _ in 0..<500 where counts.withLock({ $0 }).isEmpty { try await Task.sleep(for: .milliseconds(10)) }

        // The share extension, as the article writes it.
        let store = try SQLiteStore(path: container.appendingPathComponent("todo.ferry").path)
        let context = SyncContext(store: store, remote: remote)
        _ = try await context.table("todo").insert(["title": "Shared from Safari", "done": false])

        for _ in 0..<500 where !counts.withLock({ $0.contains(1) }) { try await Task.sleep(for: .milliseconds(10)) }
        #expect(counts.withLock { $0 } == [0, 1])
        observing.cancel()
        // The app pushes what the extension queued.
        #expect(try await app.push().pushed == 1)
        #expect(server.rows("todo").count == 1)
        try await store.close()
        try await appStore.close()
    }
}
