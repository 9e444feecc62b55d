import Foundation
import StoreSQLite
import SyncCore
import SyncTesting
import Testing

/// The "In an app" example of README.md, kept compiling and true. `ModelServer` stands in for
/// `HTTPRemote` (the Apps package's end-to-end tests run the real thing over HTTP).
@Test func theReadmeExampleWorks() async throws {
    let server = ModelServer()
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("readme-\(UUID().uuidString).ferry").path
    defer { try? FileManager.default.removeItem(atPath: path) }

    let remote = server.remote()
    let context = SyncContext(store: try SQLiteStore(path: path), remote: remote, conflictHandler: .clientWins)
    let todos = context.table("todo")
    let milk = try await todos.insert(["title": "Milk", "done": false])  // works offline
    try await context.push()  // when the network is back
    try await todos.pull(TableQuery().filter(QueryExpression.field("done").eq(false)), queryID: "open")

    #expect(server.row("todo", id: milk.id!)?["title"] == "Milk")
    #expect(try await todos.query().items.map(\.id) == [milk.id])
}

/// The automatic-sync lines of README.md, kept compiling and true.
@Test func theReadmeLiveSyncExampleWorks() async throws {
    let server = ModelServer()
    let context = SyncContext(store: try SQLiteStore.inMemory(), remote: server.remote(), conflictHandler: .clientWins)
    let todos = context.table("todo")
    await context.startAutomaticSync([SyncSubscription(table: "todo")])  // push after writes, pull on changes
    try await todos.insert(["id": "milk", "title": "Milk", "done": false])
    for try await open in todos.observe(TableQuery().filter(.field("done").eq(false))) {
        if open.map(\.id) == ["milk"] { break }
    }
    for _ in 0..<1_000 where server.row("todo", id: "milk") == nil || !context.status.snapshot.isCaughtUp {
        try await Task.sleep(for: .milliseconds(10))
    }
    #expect(server.row("todo", id: "milk") != nil, "pushed without a push")
    #expect(context.status.snapshot.summary == "everything synced")
    await context.stopAutomaticSync()
}
