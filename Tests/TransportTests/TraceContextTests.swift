#if canImport(Glibc)
    import Foundation
    import InMemoryTracing
    import Synchronization
    import SyncCore
    import Testing
    import Tracing
    @testable import Transport

    #if canImport(FoundationNetworking)
        import FoundationNetworking
    #endif

    /// `HTTPRemote.Configuration.instrument`: a request made inside a span carries the span's
    /// context, through AsyncHTTPClient and through a `URLSession` alike. (The W3C `traceparent` of
    /// swift-otel's tracer, and a server span joining it, are checked end to end in the Apps
    /// package's tracing tests.)
    @Suite("Transport: trace context in requests", .timeLimit(.minutes(2)))
    struct TraceContextTests {
        /// A server that records each request's head and answers an empty page.
        static func server() throws -> ScriptedServer {
            try ScriptedServer { _, connection, server in
                while let request = connection.readRequest() {
                    server.record(request.head)
                    let body = #"{"items":[]}"#
                    connection.write(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
                    )
                }
            }
        }

        /// The header lines of a recorded head, names lowercased.
        static func fields(_ head: String) -> [String: String] {
            var fields: [String: String] = [:]
            for line in head.split(separator: "\r\n").dropFirst() {
                let parts = line.split(separator: ":", maxSplits: 1)
                guard parts.count == 2 else { continue }
                fields[parts[0].lowercased()] = parts[1].trimmingCharacters(in: .whitespaces)
            }
            return fields
        }

        @Test(arguments: [false, true])
        func aRequestInsideASpanCarriesItsContext(throughURLSession: Bool) async throws {
            let server = try Self.server()
            defer { server.stop() }
            let tracer = InMemoryTracer()
            let configuration = HTTPRemote.Configuration(serverURL: server.url, instrument: tracer)
            let remote =
                throughURLSession
                ? HTTPRemote(configuration, session: URLSession(configuration: .ephemeral)) : HTTPRemote(configuration)
            let table = remote.table("todo")
            let (traceID, spanID) = try await tracer.withSpan("refresh") { span in
                _ = try await table.query(TableQuery())
                let context = try #require(span.context.inMemorySpanContext)
                return (context.traceID, context.spanID)
            }
            // Outside any span: no context to send.
            _ = try await table.query(TableQuery())

            let heads = server.requests.withLock { $0 }
            try #require(heads.count == 2)
            let inside = Self.fields(heads[0])
            #expect(inside[InMemoryTracer.traceIDKey] == traceID)
            #expect(inside[InMemoryTracer.spanIDKey] == spanID)
            #expect(Self.fields(heads[1])[InMemoryTracer.traceIDKey] == nil)
            #expect(tracer.performedContextInjections.count == 1)
        }

        @Test func withoutAnInstrumentNoContextIsSent() async throws {
            let server = try Self.server()
            defer { server.stop() }
            let tracer = InMemoryTracer()
            let table = HTTPRemote(HTTPRemote.Configuration(serverURL: server.url)).table("todo")
            try await tracer.withSpan("refresh") { _ in _ = try await table.query(TableQuery()) }
            let heads = server.requests.withLock { $0 }
            try #require(heads.count == 1)
            #expect(Self.fields(heads[0])[InMemoryTracer.traceIDKey] == nil)
            #expect(Self.fields(heads[0])["traceparent"] == nil)
        }
    }
#endif
