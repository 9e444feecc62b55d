import InMemoryTracing
import ServerStorageCore
import ServerStoragePostgreSQL
import ServerTestSupport
import SyncCore
import Testing
import Tracing

/// The statement spans of the PostgreSQL storage (`Configuration.tracer`), on
/// swift-distributed-tracing's in-memory tracer.
@Suite(
    "PostgreSQLServerStorage: tracing", .enabled(if: TestPostgreSQL.isAvailable, TestPostgreSQL.skipReason),
    .timeLimit(.minutes(5)))
struct PostgreSQLTracingTests {
    static func text(_ span: FinishedInMemorySpan, _ key: String) -> String? {
        guard case .string(let value)? = span.attributes.get(key) else { return nil }
        return value
    }

    @Test func eachStatementIsASpanWithItsSQLAndNotItsValues() async throws {
        let schema = await TestPostgreSQL.freshSchema()
        let tracer = InMemoryTracer()
        let url = try #require(TestPostgreSQL.url)
        do {
            let storage = try await PostgreSQLServerStorage.open(
                url, configuration: .init(maximumConnections: 2, schema: schema, tracer: tracer))
            // The migrations at opening run outside any span: no spans.
            #expect(tracer.finishedSpans.isEmpty)
            let todo = StorageTable(name: "todo")
            let traced = TracedServerStorage(storage, tracer: tracer)
            try await tracer.withSpan("request") { _ in
                _ = try await traced.insert(into: todo, id: "a", content: ["secret": "pg-bound-value"], owner: nil)
                _ = try await traced.query(todo, StorageQuery(limit: 10))
            }
            try await storage.close()

            let spans = tracer.finishedSpans
            let request = try #require(spans.first { $0.operationName == "request" })
            let insert = try #require(spans.first { $0.operationName == "storage.insert" })
            #expect(insert.parentSpanID == request.spanID)
            let statements = spans.filter { $0.parentSpanID == insert.spanID }
            #expect(statements.contains { $0.operationName == "BEGIN" }, "\(statements.map(\.operationName))")
            #expect(statements.contains { $0.operationName == "COMMIT" })
            for statement in statements {
                #expect(statement.kind == .client)
                #expect(Self.text(statement, "db.system.name") == "postgresql")
                #expect(Self.text(statement, "db.query.text") != nil)
            }
            let texts = statements.compactMap { Self.text($0, "db.query.text") }
            #expect(texts.contains { $0.contains("$1") }, "\(texts)")
            #expect(!texts.contains { $0.contains("pg-bound-value") })
            let query = try #require(spans.first { $0.operationName == "storage.query" })
            #expect(spans.contains { $0.parentSpanID == query.spanID && $0.operationName == "SELECT" })
        } catch {
            await TestPostgreSQL.drop(schema: schema)
            throw error
        }
        await TestPostgreSQL.drop(schema: schema)
    }
}
