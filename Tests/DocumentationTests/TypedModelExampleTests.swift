import Foundation
import StoreMemory
import SyncCore
import SyncTesting
import Synchronization
import Testing

/// The model of docs/sync-engine.md's "Typed models", as written there.
private struct Todo: SyncModel {
    static let tableName = "todo"
    enum Priority: String, Codable, Sendable, CaseIterable { case low, high }

    var id: UUID = .unassigned  // generated on insert: a UUIDv7
    var title: String
    var due: Date?  // "2023-11-14T22:13:20.123Z" on the wire
    var priority: Priority = .low  // "low"
    var price: Decimal?  // 19.99, a JSON number
    var attachment: Data?  // base64
}

/// The examples of docs/sync-engine.md's "Typed models", kept compiling and true.
@Suite("Typed model examples")
struct TypedModelExampleTests {
    @Test func theTypedModelExampleRuns() async throws {
        let server = ModelServer()
        let context = SyncContext(store: MemoryStore(), remote: server.remote())
        let shown = Mutex<[[Todo]]>([])
        func show(_ todos: [Todo]) { shown.withLock { $0.append(todos) } }

        let todos = context.table(Todo.self)  // or context.table("todo", of: Todo.self)
        let milk = try await todos.insert(Todo(title: "Milk", due: .now))
        try await todos.update(milk)
        for try await open in todos.observe(TypedQuery<Todo>(where: \.priority == .high)) {
            show(open)
            break
        }
        try await todos.delete(id: milk.id)

        #expect(shown.withLock { $0.map(\.count) } == [0])
        #expect(milk.id != .unassigned)
        #expect(try await todos.query().isEmpty)
    }

    @Test func theReportExampleSeesAnItemThatDoesNotFit() async throws {
        let context = SyncContext(store: MemoryStore(), remote: ModelServer().remote())
        try await context.table("todo").insert(["id": "0193f4a2-0000-7000-8000-000000000001", "priority": "low"])
        let logged = Mutex<[String]>([])
        func log(_ line: String) { logged.withLock { $0.append(line) } }

        let reports = context.undecodableItemReports()
        let strict = context.table(Todo.self, decoding: .strict)  // throws invalidItem, as before
        #expect(try await context.table(Todo.self).query().isEmpty)
        for await report in reports {
            log("\(report)")  // table 'todo': item '0193…' does not fit Todo: 'title': missing
            break
        }

        #expect(
            logged.withLock { $0 } == [
                "table 'todo': item '0193f4a2-0000-7000-8000-000000000001' does not fit Todo: 'title': missing"
            ])
        await #expect(throws: SyncError.self) { try await strict.query() }
    }
}
