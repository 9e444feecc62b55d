import StoreConformance
import StoreSQLite
import SyncTesting
import Synchronization
import Testing

@testable import SyncCore

/// Collects what an observation yields, for a test to wait on.
final class Observed<Element: Sendable>: Sendable {
    private final class State: Sendable {
        let values = Mutex<[Element]>([])
    }

    private let state = State()
    private let task: Task<Void, Never>

    init(_ stream: AsyncThrowingStream<Element, any Error>) {
        let state = state
        task = Task {
            do {
                for try await value in stream { state.values.withLock { $0.append(value) } }
            } catch {
                Issue.record("the observation failed: \(error)")
            }
        }
    }

    var values: [Element] { state.values.withLock { $0 } }

    /// Waits (up to 10 s) until a yielded value satisfies `condition`; answers it.
    @discardableResult
    func wait(
        sourceLocation: SourceLocation = #_sourceLocation, until condition: (Element) -> Bool
    ) async throws -> Element? {
        for _ in 0..<1_000 {
            if let found = values.last(where: condition) { return found }
            try await Task.sleep(for: .milliseconds(10))
        }
        Issue.record(
            "no yielded value matched; last: \(String(describing: values.last))", sourceLocation: sourceLocation)
        return nil
    }

    func stop() { task.cancel() }
}

@Suite("Observing queries")
struct ObservationTests {
    @Test(arguments: StoreKind.allCases)
    func anObservedQueryFollowsLocalWritesPullsAndPushes(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let device = try Device(kind: kind, server: server)
        let todos = device.table()
        let open = Observed(todos.observe(TableQuery().filter(.field("done").eq(false)).orderBy("title")))
        #expect(try await open.wait { $0.isEmpty } != nil, "the current result comes first")

        try await todos.insert(["id": "a", "title": "Milk", "done": false])
        try await open.wait { $0.map(\.id) == ["a"] }
        // One commit of many items is one new result.
        let before = open.values.count
        try await device.context.write { writes in
            for index in 0..<100 {
                try writes.insert(["id": .string("bulk-\(index)"), "title": "Bulk", "done": false], into: "todo")
            }
        }
        try await open.wait { $0.count == 101 }
        #expect(open.values.count == before + 1)
        // An update that takes an item out of the query, and a delete.
        try await todos.update(["id": "a", "title": "Milk", "done": true])
        try await todos.delete(id: "bulk-0")
        try await open.wait { $0.count == 99 && !$0.contains { $0.id == "a" } }

        // A pulled item shows, and a push that stores the server's version shows its version.
        server.seed("todo", [["id": "from-server", "title": "Remote", "done": false]])
        try await todos.pull(TableQuery(), queryID: "all")
        try await open.wait { $0.contains { $0.id == "from-server" } }
        try await device.context.push()
        try await open.wait { items in items.allSatisfy { $0.version != nil } }
        open.stop()
    }

    @Test func aModelTableIsObservedAsModels() async throws {
        struct Todo: Codable, Sendable, Equatable {
            var id: String?
            var title: String
        }
        let device = try Device(kind: .memory, server: ModelServer())
        let todos = device.context.table("todo", of: Todo.self)
        let all = Observed(todos.observe(TableQuery().orderBy("title")))
        try await all.wait { $0.isEmpty }
        _ = try await todos.insert(Todo(id: "b", title: "Bread"))
        _ = try await todos.insert(Todo(id: "a", title: "Apples"))
        try await all.wait { $0.map(\.title) == ["Apples", "Bread"] }
        all.stop()
    }

    /// Commits to other tables wake nobody observing this one; a burst while an observer is busy
    /// folds into one signal.
    @Test func signalsReachOnlyTheirTablesAndFold() async throws {
        final class Counter: Sendable {
            let value = Mutex(0)
            var count: Int { value.withLock { $0 } }
        }
        let hub = StoreCommits()
        let todo = hub.subscribe(tables: ["todo"])
        hub.publish(StoreCommit(tables: ["notes"], queue: true))
        for _ in 0..<5 { hub.publish(StoreCommit(tables: ["todo"])) }
        hub.publish(StoreCommit(tables: ["notes"]))
        // Read only now: the five signals wait as one, and "notes" never counted.
        let woken = Counter()
        let reader = Task {
            for await _ in todo { woken.value.withLock { $0 += 1 } }
        }
        for _ in 0..<500 where woken.count == 0 { try await Task.sleep(for: .milliseconds(10)) }
        try await Task.sleep(for: .milliseconds(100))
        #expect(woken.count == 1)
        hub.publish(StoreCommit(tables: ["todo", "notes"]))
        for _ in 0..<500 where woken.count == 1 { try await Task.sleep(for: .milliseconds(10)) }
        #expect(woken.count == 2)
        // A queue subscriber hears queue changes, and only those.
        let queue = hub.subscribe(tables: [], queue: true)
        hub.publish(StoreCommit(tables: [], queue: true))
        var queueIterator = queue.makeAsyncIterator()
        #expect(await queueIterator.next() != nil)
        #expect(hub.subscriberCount == 2)
        reader.cancel()
    }

    /// A consumer that stops reading ends its observation: nothing keeps running for it.
    @Test func anObservationEndsWithItsConsumer() async throws {
        let device = try Device(kind: .memory, server: ModelServer())
        let todos = device.table()
        var iterator = todos.observe().makeAsyncIterator()
        #expect(try await iterator.next() == [])
        #expect(device.context.store.commits.subscriberCount == 1)
        iterator = todos.observe().makeAsyncIterator()  // the first one is dropped
        _ = try await iterator.next()
        for _ in 0..<200 where device.context.store.commits.subscriberCount > 1 {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(device.context.store.commits.subscriberCount == 1)
    }

    /// Issue 29: the store reports its commits, so an observation sees every write, whoever made it:
    /// the context, the app through `context.store`, and (a file) another store on the same file.
    @Test(arguments: StoreKind.allCases)
    func anObservationSeesWritesMadeBehindTheContextsBack(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        let todos = Observed(device.table().observe(TableQuery()))
        try await todos.wait { $0.isEmpty }
        try await device.context.store.upsert("todo", [["id": "direct", "title": "through the store"]])
        try await todos.wait { $0.map(\.id) == ["direct"] }
        _ = try await device.store.write { tx in try tx.delete("todo", ids: ["direct"]) }
        try await todos.wait { $0.isEmpty }
        if kind == .sqliteFile, let directory = device.storage.directory {
            let another = try SQLiteStore(path: directory.path + "/store.ferry")
            try await another.upsert("todo", [["id": "elsewhere", "title": "another connection"]])
            try await todos.wait { $0.map(\.id) == ["elsewhere"] }
            try await another.close()
        }
        todos.stop()
    }

    /// A hub that checks for other writers does so only while someone subscribes, and publishes
    /// what its probe finds to every subscriber.
    @Test func theCheckForOtherWritersRunsOnlyWhileSomeoneSubscribes() async throws {
        let probes = Mutex(0)
        let hub = StoreCommits(checkingOtherWritersEvery: .milliseconds(10)) {
            probes.withLock { $0 += 1 }
            return true
        }
        try await Task.sleep(for: .milliseconds(50))
        #expect(probes.withLock { $0 } == 0 && !hub.isCheckingOtherWriters, "it checked without subscribers")
        let todo = Observed(
            AsyncThrowingStream { continuation in
                let task = Task {
                    for await _ in hub.subscribe(tables: ["todo"]) { continuation.yield(1) }
                }
                continuation.onTermination = { _ in task.cancel() }
            })
        try await todo.wait { _ in true }
        todo.stop()
        for _ in 0..<500 where hub.isCheckingOtherWriters { try await Task.sleep(for: .milliseconds(10)) }
        #expect(!hub.isCheckingOtherWriters, "the check went on without subscribers")
        let afterwards = probes.withLock { $0 }
        try await Task.sleep(for: .milliseconds(50))
        #expect(probes.withLock { $0 } == afterwards)
        // A new subscriber starts it again; a stopped hub never does.
        var again = hub.subscribe(tables: nil).makeAsyncIterator()
        #expect(await again.next() != nil)
        hub.stopChecking()
        #expect(!hub.isCheckingOtherWriters)
    }
}
