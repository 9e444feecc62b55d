// TodoCLI: Ferry in an app, end to end against a running `ferry serve`.
// README.md's "In an app" mirrors this example: change both together.
//
//     swift run --package-path Examples/TodoCLI TodoCLI http://127.0.0.1:8080   (or FERRY_SERVER_URL)
//
// Two devices of one user share a todo list: the phone writes offline, then syncs by itself; the
// tablet gets the items; both edit the same item and the phone's conflict handler merges the edits.
import Foundation
import SyncCore

func run(server: URL) async throws {
    let day: TimeInterval = 24 * 60 * 60
    let directory = FileManager.default.temporaryDirectory.appending(path: "todo-cli-\(UUID())")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }

    let phone = try Device("phone", in: directory, server: server, conflictHandler: KeepMineButDone())
    let tablet = try Device("tablet", in: directory, server: server, conflictHandler: .serverWins)
    let todos = phone.context.table(Todo.self)  // a typed table: its name comes from the model

    // 1. The app starts syncing at launch, but the phone is offline: writes go to the local store
    // at once and wait in the queue.
    await phone.startSyncing()
    var milk = try await todos.insert(Todo(title: "Buy milk", due: .now + day))
    try await todos.insert(Todo(title: "Call the plumber", due: .now + 3 * day))
    milk.title = "Buy milk, 2 litres"
    milk = try await todos.update(milk)
    let queued = try await phone.context.queuedOperations()  // the insert and update of milk are one
    print("phone, offline: \(queued.count) operations queued")

    // 2. Observe a typed query: its result now, then again after every change (a local write, a pull).
    let watching = Task {
        for try await open in todos.observe(TypedQuery<Todo>(where: \.done == false).orderBy(\.due)) {
            print("phone shows: \(open.map(\.line))")
        }
    }
    defer { watching.cancel() }

    // 3. Online: automatic sync pushes the queue and pulls; the status says when all is synced.
    phone.network.isOnline = true
    try await phone.caughtUp()
    print("phone: \(phone.context.status.snapshot.summary)")

    await tablet.startSyncing()
    tablet.network.isOnline = true
    try await tablet.caughtUp()
    let tabletTodos = tablet.context.table(Todo.self)
    let onTablet = try await tabletTodos.query(TypedQuery<Todo>().orderBy(\.due))
    print("tablet has: \(onTablet.map(\.line))")
    try expect(onTablet.map(\.id).contains(milk.id), "the tablet does not have the phone's todo")

    // 4. A conflict: the phone renames the todo offline while the tablet marks it done.
    phone.network.isOnline = false
    milk.title = "Buy oat milk"
    try await todos.update(milk)
    guard var theirs = try await tabletTodos.item(id: milk.id) else { throw ExampleError("no milk on the tablet") }
    theirs.done = true
    try await tabletTodos.update(theirs)
    try await tablet.context.synchronize()  // the barrier: pushed and pulled when it returns

    // The phone's push meets the server's newer version; KeepMineButDone merges both edits.
    phone.network.isOnline = true
    try await phone.caughtUp()
    try await tablet.context.synchronize()
    let merged = try await todos.item(id: milk.id)
    let mergedOnTablet = try await tabletTodos.item(id: milk.id)
    print("after the conflict: phone \(merged?.line ?? "-"), tablet \(mergedOnTablet?.line ?? "-")")
    try expect(merged?.title == "Buy oat milk" && merged?.done == true, "the merge lost an edit")
    try expect(merged == mergedOnTablet, "the devices disagree after the conflict")

    // 5. An item that does not fit the model (another client left out `due`) is skipped by typed
    // reads and reported, not thrown: the observation keeps running.
    try await tablet.context.table(Todo.tableName).insert(["title": "Water the plants", "done": false])
    try await tablet.context.synchronize()
    try await phone.context.synchronize()
    _ = try await todos.query()
    for item in phone.context.undecodableItems { print("phone skipped: \(item)") }

    await phone.context.stopAutomaticSync()
    await tablet.context.stopAutomaticSync()
}

let argument = CommandLine.arguments.dropFirst().first ?? ProcessInfo.processInfo.environment["FERRY_SERVER_URL"]
guard let argument, let server = URL(string: argument), server.scheme != nil else {
    FileHandle.standardError.write(Data("usage: TodoCLI SERVER_URL (or FERRY_SERVER_URL=…)\n".utf8))
    exit(2)
}
do {
    try await run(server: server)
    print("done")
} catch {
    let line = "\(error)".split(whereSeparator: \.isNewline).joined(separator: " ")
    FileHandle.standardError.write(Data("TodoCLI: error: \(line)\n".utf8))
    exit(1)
}
