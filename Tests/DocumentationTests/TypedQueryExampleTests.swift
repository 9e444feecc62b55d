import Foundation
import StoreMemory
import SyncCore
import SyncTesting
import Synchronization
import Testing

/// The model of docs/sync-engine.md's "Typed queries", as written there.
private struct Todo: SyncModel {
    static let tableName = "todo"
    enum Priority: String, Codable, Sendable, CaseIterable { case low, high }

    var id: UUID = .unassigned
    var title: String
    var due: Date?
    var priority: Priority = .low
    var done = false
}

/// The examples of docs/sync-engine.md's "Typed queries" and of the typed query API's doc comments, kept
/// compiling and true.
@Suite("Typed query examples")
struct TypedQueryExampleTests {
    @Test func theTypedQueryExampleRuns() async throws {
        let server = ModelServer()
        let context = SyncContext(store: MemoryStore(), remote: server.remote())
        let shown = Mutex<[[Todo]]>([])
        func show(_ todos: [Todo]) { shown.withLock { $0.append(todos) } }
        let todos = context.table(Todo.self)
        try await todos.insert(Todo(title: "Buy milk", due: .now.addingTimeInterval(3_600)))
        try await todos.insert(Todo(title: "Taxes", due: .now.addingTimeInterval(-3_600), priority: .high))
        try await todos.insert(Todo(title: "Call", done: true))

        let open = try await todos.query(where: \.done == false, orderBy: \.title)
        let soon = TypedQuery<Todo>()
            .filter(\.due != nil && \.due < Date.now.addingTimeInterval(86_400))
            .filter(.startsWith(\.title, "Buy") || \.priority == .high)
            .orderBy(\.due, descending: true)
            .top(20)
        for try await due in todos.observe(soon) {
            show(due)
            break
        }
        try await todos.pull(TypedQuery(where: \.done == false), queryID: "open")

        #expect(open.map(\.title) == ["Buy milk", "Taxes"])
        #expect(shown.withLock { $0.map { $0.map(\.title) } } == [["Buy milk", "Taxes"]])
    }

    @Test func theDocCommentExamplesBuildWhatTheySay() throws {
        let query = TypedQuery<Todo>()
            .filter(\.done == false)
            .orderBy(\.due, descending: true)
            .top(20)
        let same = TableQuery()
            .filter(QueryExpression.field("done").eq(false))
            .orderBy(.cast(.field("due"), .dateTimeOffset), descending: true)
            .top(20)
        #expect(try query.tableQuery() == same)
        // A pull sends the bare field, which every server of the protocol sorts by.
        #expect(
            try query.serverQuery()
                == TableQuery().filter(.field("done").eq(false)).orderBy("due", descending: true).top(20))
        #expect(try TypedQuery<Todo>().orderBy(\.due).serverQuery() == TableQuery().orderBy("due"))

        let openOrLater: QueryPredicate<Todo> = \.done == false && (\.due == nil || \.due > Date.now)
        let milk: QueryPredicate<Todo> = .contains(\.title, "milk") && !(\.title == "Oat milk")
        let urgent: QueryPredicate<Todo> = \.priority == .high
        #expect(try (\Todo.done == false).expression().odata(protocolVersion: .v3) == "(done eq false)")
        #expect(
            try milk.expression().odata(protocolVersion: .v3)
                == "(contains(title,'milk') and not (title eq 'Oat milk'))")
        #expect(try urgent.expression().odata(protocolVersion: .v3) == "(priority eq 'high')")
        _ = try openOrLater.expression()
        #expect(try TypedQuery<Todo>().select(\.id, \.title, \.done).tableQuery().select == ["id", "title", "done"])
    }
}
