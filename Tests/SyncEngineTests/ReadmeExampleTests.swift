import Foundation
import StoreConformance
import StoreSQLite
import SyncCore
import SyncTesting
import Testing
import Transport

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
    let pushed = try await context.push()  // throws only when it stops: offline, 401, cancelled
    for refused in pushed.failed { print(refused.message) }  // the server said no: kept, in the errors table
    try await todos.pull(TableQuery().filter(QueryExpression.field("done").eq(false)), queryID: "open")

    #expect(server.row("todo", id: milk.id!)?["title"] == "Milk")
    #expect(try await todos.query().items.map(\.id) == [milk.id])
    #expect(pushed.pushed == 1 && pushed.failed.isEmpty)
}

/// What the README says of a write the server refuses: `push()` returns, the write is in `failed`
/// and in the errors table, with the server's reason.
@Test func theReadmeExampleSaysWhatARefusedWriteDoes() async throws {
    let server = ModelServer()
    server.inject(.status(501, "Not Implemented"), on: .insert)
    let context = SyncContext(store: try SQLiteStore.inMemory(), remote: server.remote(), conflictHandler: .clientWins)
    let todos = context.table("todo")
    let milk = try await todos.insert(["title": "Milk", "done": false])
    let pushed = try await context.push()
    #expect(pushed.failed.map(\.itemID) == [milk.id!])
    #expect(pushed.failed.first?.message.contains("Not Implemented") == true, "\(pushed.failed)")
    #expect(try await context.operationErrors().map(\.itemID) == [milk.id!])
    #expect(try await todos.queuedOperationCount() == 1, "kept")
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

/// The attachment lines of README.md, kept compiling and true (`ModelAttachmentServer` stands in
/// for `HTTPRemote`'s attachment routes).
@Test func theReadmeAttachmentExampleWorks() async throws {
    let server = ModelServer()
    let remote = ModelAttachmentServer(items: server)
    let temporary = try TemporaryDirectory()
    defer { temporary.remove() }
    let filesDirectory = URL(fileURLWithPath: temporary.path).appending(path: "files")
    let pictureURL = URL(fileURLWithPath: temporary.path).appending(path: "harbour.jpg")
    try Data(repeating: 7, count: 20_000).write(to: pictureURL)
    let context = SyncContext(store: try SQLiteStore.inMemory(), remote: server.remote())
    let photos = context.table("photo")
    let item = try await photos.insert(["caption": "Harbour"])

    await context.useAttachments(
        AttachmentConfiguration(files: try DiskAttachmentFiles(directory: filesDirectory), remote: remote))
    try await photos.attach(file: pictureURL, to: item.id!, name: "full.jpg", contentType: "image/jpeg")
    try await context.push()  // the insert, then the upload
    let url = try await photos.openAttachment(of: item.id!, name: "full.jpg")  // downloads on demand

    #expect(remote.stored("photo", item.id!, "full.jpg")?.bytes == Data(repeating: 7, count: 20_000))
    #expect(try Data(contentsOf: url) == Data(repeating: 7, count: 20_000))
}

/// The typed model of README.md (condensed from Examples/TodoCLI), kept compiling and true.
private struct ReadmeTodo: SyncModel, Equatable {
    static let tableName = "todo"
    var id: UUID = .unassigned  // the insert generates one (a UUIDv7)
    var title: String
    var due: Date  // "2026-11-27T09:00:00.000Z" on the wire
    var done = false
}

/// The typed-model lines of README.md: an offline insert, automatic sync once online, a typed
/// observation by key paths, "everything synced", and the `Date` on the wire as the other clients
/// write it.
@Test func theReadmeTypedModelExampleWorks() async throws {
    typealias Todo = ReadmeTodo
    let server = ModelServer()
    let network = ManualConnectivity(online: false)
    let day: TimeInterval = 86_400
    let context = SyncContext(store: try SQLiteStore.inMemory(), remote: server.remote(), conflictHandler: .clientWins)
    let todos = context.table(Todo.self)  // a typed table: its name comes from the model
    let milk = try await todos.insert(Todo(title: "Buy milk", due: .now + day))  // works offline
    try await todos.insert(Todo(title: "Call the plumber", due: .now + 3 * day, done: true))
    await context.startAutomaticSync([SyncSubscription(table: Todo.tableName)], connectivity: network)
    let (shown, shows) = AsyncStream.makeStream(of: [String].self)
    let watching = Task {  // an observation runs until cancelled: give it a task of its own
        for try await open in todos.observe(TypedQuery<Todo>(where: \.done == false).orderBy(\.due)) {
            shows.yield(open.map(\.title))
        }
    }
    var seen = shown.makeAsyncIterator()
    #expect(await seen.next() == ["Buy milk"], "the open todos, offline")
    network.isOnline = true
    for await status in context.status.updates() where status.isCaughtUp { break }  // "everything synced"
    watching.cancel()

    #expect(milk.id != .unassigned)
    let row = try #require(server.row("todo", id: milk.id.uuidString.lowercased()))
    #expect(row["title"] == "Buy milk")
    let due = try #require(row["due"]?.stringValue)
    #expect(due.hasSuffix("Z") && due.count == "2026-11-27T09:00:00.000Z".count, "the wire form of a Date: \(due)")
    #expect(context.undecodableItems.isEmpty)
    await context.stopAutomaticSync()
}
