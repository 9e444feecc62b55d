import FerryServer
import InMemoryTracing
import Logging
import ServerStorageCore
import ServerStorageSQLite
import SyncCore
import Testing
import Tracing

/// The server's spans, on swift-distributed-tracing's in-memory tracer: a span per request with
/// the storage calls and the SQLite statements below it, and a parent taken from the request's
/// headers. (The OTLP export of a real `ferry serve` is tested in FerryCommandsTests.)
@Suite("Server: tracing", .timeLimit(.minutes(5)))
struct TracingTests {
    /// A server on an in-memory SQLite storage, both tracing to `tracer`.
    struct Traced {
        let tracer = InMemoryTracer()
        let server: ReferenceServer

        init() async throws {
            var configuration = ServerConfiguration(host: "127.0.0.1", port: 0, logger: .quietTest)
            configuration.tracer = tracer
            let storage = try SQLiteServerStorage(location: .memory, configuration: .init(tracer: tracer))
            server = try await ReferenceServer.start(configuration, storage: storage, ownsStorage: true)
        }

        func send(_ method: String, _ target: String, headers: [(String, String)] = [], json: JSONValue? = nil)
            async throws -> Int
        {
            var fields = [("ZUMO-API-VERSION", "3.0.0")] + headers
            if json != nil { fields.append(("Content-Type", "application/json")) }
            return try await LoopbackHTTP.send(
                port: server.port, method: method, target: target, headers: fields, body: json?.serializedUTF8()
            ).status
        }

        /// The finished spans, after the server stopped (every request's span has ended then).
        func stop() async throws -> [FinishedInMemorySpan] {
            try await server.shutdown()
            return tracer.finishedSpans
        }
    }

    static func text(_ span: FinishedInMemorySpan, _ key: String) -> String? {
        guard case .string(let value)? = span.attributes.get(key) else { return nil }
        return value
    }

    static func integer(_ span: FinishedInMemorySpan, _ key: String) -> Int64? {
        switch span.attributes.get(key) {
        case .int64(let value)?: value
        case .int32(let value)?: Int64(value)
        default: nil
        }
    }

    static func children(of span: FinishedInMemorySpan, in spans: [FinishedInMemorySpan]) -> [FinishedInMemorySpan] {
        spans.filter { $0.parentSpanID == span.spanID }
    }

    @Test func aRequestIsAServerSpanWithItsStorageCallAndStatementsBelow() async throws {
        let traced = try await Traced()
        let status = try await traced.send(
            "POST", "/tables/todo", json: ["id": "a", "title": "milk-secret-value"])
        let spans = try await traced.stop()
        #expect(status == 201)

        let request = try #require(spans.first { $0.kind == .server }, "\(spans.map(\.operationName))")
        #expect(request.operationName == "POST /tables/{table}")
        #expect(request.parentSpanID == nil)
        #expect(Self.text(request, "http.request.method") == "POST")
        #expect(Self.text(request, "http.route") == "/tables/{table}")
        #expect(Self.text(request, "url.path") == "/tables/todo")
        #expect(Self.text(request, "ferry.table") == "todo")
        #expect(Self.integer(request, "http.response.status_code") == 201)
        #expect(request.status == nil)

        let calls = Self.children(of: request, in: spans)
        let insert = try #require(calls.first { $0.operationName == "storage.insert" }, "\(calls.map(\.operationName))")
        #expect(Self.text(insert, "ferry.table") == "todo")
        #expect(insert.traceID == request.traceID)
        #expect(calls.allSatisfy { $0.operationName.hasPrefix("storage.") })

        let statements = Self.children(of: insert, in: spans)
        #expect(!statements.isEmpty)
        for statement in statements {
            #expect(statement.kind == .client)
            #expect(Self.text(statement, "db.system.name") == "sqlite")
            #expect(Self.text(statement, "db.system") == "sqlite")
            #expect(Self.text(statement, "db.operation.name") == statement.operationName)
        }
        let texts = statements.compactMap { Self.text($0, "db.query.text") }
        #expect(texts.count == statements.count)
        let row = try #require(texts.first { $0.hasPrefix("INSERT INTO ferry_items_") }, "\(texts)")
        #expect(row.contains("?"))
        // The SQL and never the values bound to it.
        #expect(
            !spans.contains { span in
                var leaks = false
                span.attributes.forEach { _, value in if "\(value)".contains("milk-secret") { leaks = true } }
                return leaks
            })
        // The commit is the write's last statement: its durable part is in the trace too.
        #expect(statements.contains { $0.operationName == "COMMIT" }, "\(statements.map(\.operationName))")
    }

    @Test func theRequestHeadersContextIsTheServerSpansParent() async throws {
        let traced = try await Traced()
        let status = try await traced.send(
            "GET", "/tables/todo/nothing",
            headers: [
                (InMemoryTracer.traceIDKey, "trace-of-the-client"), (InMemoryTracer.spanIDKey, "span-of-the-client"),
            ])
        let spans = try await traced.stop()
        #expect(status == 404)  // no such item: a client's error, not the server's

        let request = try #require(spans.first { $0.kind == .server })
        #expect(request.operationName == "GET /tables/{table}/{id}")
        #expect(request.traceID == "trace-of-the-client")
        #expect(request.parentSpanID == "span-of-the-client")
        #expect(Self.integer(request, "http.response.status_code") == 404)
        #expect(request.status == nil)
        #expect(spans.allSatisfy { $0.traceID == "trace-of-the-client" })
        #expect(traced.tracer.performedContextExtractions.count == 1)
    }

    @Test func aBatchIsOneTransactionSpanWithItsWritesAndItsCommit() async throws {
        let traced = try await Traced()
        let status = try await traced.send(
            "POST", "/tables/$batch",
            json: [
                "requests": [
                    ["id": "1", "method": "POST", "url": "todo", "body": ["id": "b1"]],
                    ["id": "2", "method": "POST", "url": "todo", "body": ["id": "b1"]],
                ]
            ])
        let spans = try await traced.stop()
        #expect(status == 200)

        let request = try #require(spans.first { $0.kind == .server })
        #expect(request.operationName == "POST /tables/$batch")
        #expect(Self.text(request, "ferry.table") == nil)
        // The batch is one transaction, a child of the request, with its BEGIN and COMMIT; its
        // inserts are one set below it (one span for the set, with its statements), and their
        // outcomes are recorded in the same transaction.
        let transaction = try #require(
            spans.first { $0.operationName == "storage.transaction" && $0.parentSpanID == request.spanID },
            "\(spans.map(\.operationName))")
        let statements = Self.children(of: transaction, in: spans).map(\.operationName)
        #expect(statements.contains("BEGIN") && statements.contains("COMMIT"), "\(statements)")
        func isBelow(_ span: FinishedInMemorySpan, _ ancestor: FinishedInMemorySpan) -> Bool {
            guard let parent = spans.first(where: { $0.spanID == span.parentSpanID }) else { return false }
            return parent.spanID == ancestor.spanID || isBelow(parent, ancestor)
        }
        let sets = spans.filter { $0.operationName == "storage.insertSet" }
        #expect(sets.count == 1)
        let set = try #require(sets.first)
        #expect(isBelow(set, transaction))
        #expect(Self.children(of: set, in: spans).contains { $0.operationName == "INSERT" })
        #expect(spans.contains { $0.operationName == "storage.recordOutcomes" && isBelow($0, transaction) })
        #expect(Self.integer(set, "ferry.storage.rows") == 2)
        // The second insert's conflict is its answer (409), not a fault of the server.
        #expect(Self.integer(set, "ferry.storage.conflicts") == 1)
        #expect(set.status == nil)
        #expect(set.errors.isEmpty)
    }

    @Test func aQueryCountsItsRowsAndAServerErrorMarksTheSpans() async throws {
        let traced = try await Traced()
        #expect(try await traced.send("POST", "/tables/todo", json: ["id": "q1"]) == 201)
        #expect(try await traced.send("POST", "/tables/todo", json: ["id": "q2"]) == 201)
        #expect(try await traced.send("GET", "/tables/todo?$top=1") == 200)
        // The storage closed under the server: 503, the server's fault, not the client's.
        try await traced.server.storage.close()
        #expect(try await traced.send("GET", "/tables/todo/q1") == 503)
        let spans = try await traced.stop()

        let failed = try #require(spans.first { $0.operationName == "GET /tables/{table}/{id}" })
        #expect(Self.integer(failed, "http.response.status_code") == 503)
        #expect(failed.status?.code == .error)
        let call = try #require(Self.children(of: failed, in: spans).first { $0.status?.code == .error })
        #expect(Self.text(call, "ferry.storage.outcome") == "closed")
        #expect(!call.errors.isEmpty)

        let query = try #require(spans.first { $0.operationName == "storage.query" })
        #expect(Self.integer(query, "ferry.storage.rows") == 1)
        #expect(Self.text(query, "ferry.table") == "todo")
        let select = try #require(Self.children(of: query, in: spans).first { $0.operationName == "SELECT" })
        #expect(Self.text(select, "db.query.text")?.contains("LIMIT") == true)
    }

    @Test func statementsOutsideASpanAndAServerWithoutATracerMakeNoSpans() async throws {
        let tracer = InMemoryTracer()
        let storage = try SQLiteServerStorage(location: .memory, configuration: .init(tracer: tracer))
        _ = try await storage.insert(into: StorageTable(name: "todo"), id: "1", content: [:], owner: nil)
        #expect(tracer.finishedSpans.isEmpty)
        try await tracer.withSpan("work") { _ in
            _ = try await storage.item(in: StorageTable(name: "todo"), id: "1", owner: .all)
        }
        #expect(tracer.finishedSpans.map(\.operationName).contains("SELECT"))
        tracer.clearAll()

        // A server without a tracer: its storage's statements are made outside any span.
        let configuration = ServerConfiguration(host: "127.0.0.1", port: 0, logger: .quietTest)
        let server = try await ReferenceServer.start(configuration, storage: storage, ownsStorage: true)
        let status = try await LoopbackHTTP.send(
            port: server.port, method: "GET", target: "/tables/todo/1", headers: [("ZUMO-API-VERSION", "3.0.0")],
            body: nil
        ).status
        try await server.shutdown()
        #expect(status == 200)
        #expect(tracer.finishedSpans.isEmpty)
    }
}
