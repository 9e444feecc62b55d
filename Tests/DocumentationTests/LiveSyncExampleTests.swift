import Foundation
import StoreSQLite
import SyncCore
import SyncTesting
import Testing

/// The example of docs/live-sync.md, "The pieces", kept compiling and true: `remote` is the model
/// server's instead of `HTTPRemote`, and the store is in memory.
@Suite("Live sync: the documented example")
struct LiveSyncExampleTests {
    /// The model of the doc's SwiftUI block (a `String?` id, no `SyncModel`).
    struct Todo: Codable, Sendable, Identifiable {
        var id: String?
        var title: String
        var done = false
    }

    @Test func thePiecesRunAsDocumented() async throws {
        let server = ModelServer()
        server.seed(
            "todo", [["id": "b", "title": "Bread", "done": false], ["id": "x", "title": "Old", "done": true]])
        let context = SyncContext(
            store: try SQLiteStore.inMemory(), remote: server.remote(),
            conflictHandler: .threeWayMerge(preferring: .client))

        // 1. Sync by itself.
        await context.startAutomaticSync([SyncSubscription(table: "todo", queryID: "all")])

        // 2. Observe what the screen shows.
        let todos = context.table("todo", of: Todo.self)
        let (shown, shows) = AsyncStream.makeStream(of: [String].self)
        let watching = Task {
            for try await open in todos.observe(TypedQuery<Todo>(where: \.done == false).orderBy(\.title)) {
                shows.yield(open.map(\.title))
            }
        }
        try await todos.insert(Todo(title: "Apples"))
        var seen = shown.makeAsyncIterator()
        while let titles = await seen.next(), titles != ["Apples", "Bread"] {}

        // 3. Where sync stands. 4. Pull to refresh.
        let report = try await context.synchronize()
        watching.cancel()
        #expect(report.push.failed.isEmpty)
        // Automatic sync may still be pulling what the push announced: wait until it is caught up.
        var summary = context.status.snapshot.summary
        for await status in context.status.updates() where status.isCaughtUp {
            summary = status.summary
            break
        }
        #expect(summary == "everything synced")
        #expect(server.rows("todo").count == 3, "the local insert reached the server")
        await context.stopAutomaticSync()
    }
}
