import FerryServer
import Foundation
import Logging
import OTel
import ServerTestSupport
import ServiceLifecycle
import SyncCore
import Testing
import Tracing
import Transport

@testable import FerryCommands

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// `ferry serve`'s traces, exported with swift-otel's OTLP/HTTP exporter to a receiver in the test
/// (``OTLPReceiver``): the request span with the storage call and the statement below it, a parent
/// taken from `traceparent` (one written by Ferry's Transport inside a span of the test's own
/// swift-otel tracer, one written by hand), and the spans still buffered sent when the server stops.
@Suite("ferry serve: tracing", .timeLimit(.minutes(10)))
struct ServeTracingTests {
    /// A running `ferry serve --db memory` with `arguments` and `environment` added, and its URL.
    static func serve(_ arguments: [String], environment: [String: String]) async throws -> (Process, String) {
        let executable = try #require(ServeCommandTests.executable, "the ferry executable is not built")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = ["serve", "--port", "0", "--db", "memory", "--log-level", "warning"] + arguments
        process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("OTEL_") }
            .merging(environment) { $1 }
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let line = try await ServeCommandTests.firstLine(of: output.fileHandleForReading, from: process)
        let url = try #require(line.split(separator: " ").first { $0.hasPrefix("http://") }.map(String.init), "\(line)")
        return (process, url)
    }

    /// Stops the server with SIGTERM and expects a clean exit (its exporter flushed first).
    static func stop(_ process: Process) async throws {
        kill(process.processIdentifier, SIGTERM)
        try await offThePool { process.waitUntilExit() }
        #expect(process.terminationReason == .exit)
        #expect(process.terminationStatus == 0)
    }

    /// A GET with the given headers, through URLSession.
    static func get(_ url: String, headers: [String: String]) async throws -> Int {
        var request = URLRequest(url: URL(string: url)!)
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        let (_, response) = try await URLSession.shared.data(for: request)
        return (response as? HTTPURLResponse)?.statusCode ?? 0
    }

    @Test func theServersSpansReachAnOTLPReceiverWithTheirParents() async throws {
        let receiver = try await OTLPReceiver.start()
        // The test's side: swift-otel's tracer, not bootstrapped, sending to the same receiver.
        var configuration = OTel.Configuration.default
        configuration.serviceName = "ferry-test-client"
        configuration.logs.enabled = false
        configuration.metrics.enabled = false
        configuration.traces.otlpExporter.endpoint = receiver.url + "/v1/traces"
        var quiet = Logger(label: "otel.test")
        quiet.logLevel = .critical
        configuration.diagnosticLogger = .custom(quiet)
        let client = try OTel.makeTracingBackend(configuration: configuration)
        let clientGroup = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [.init(service: client.service)], gracefulShutdownSignals: [], logger: quiet))
        let clientRunning = Task { try await clientGroup.run() }

        let (process, url) = try await Self.serve(["--otlp-endpoint", receiver.url], environment: [:])
        let remote = HTTPRemote(HTTPRemote.Configuration(serverURL: URL(string: url)!, instrument: client.factory))
        try await client.factory.withSpan("client sync") { _ in
            _ = try await remote.table("todo").insert(["id": "a", "title": "bound-value-not-traced"])
        }
        // A traceparent written by hand (the W3C example): the server's span joins that trace.
        let status = try await Self.get(
            url + "/tables/todo/a",
            headers: [
                "ZUMO-API-VERSION": "3.0.0", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ])
        #expect(status == 200)
        // The server's spans wait in its batch (5 s by default): stopping sends them.
        try await Self.stop(process)
        await clientGroup.triggerGracefulShutdown()
        _ = await clientRunning.result

        let spans = await receiver.spans { spans in
            spans.contains { $0.name == "client sync" } && spans.contains { $0.name == "GET /tables/{table}/{id}" }
                && spans.contains { $0.attributes["db.system.name"] == "sqlite" }
        }
        await receiver.stop()

        let clientSpan = try #require(spans.first { $0.name == "client sync" }, "\(spans)")
        #expect(clientSpan.service == "ferry-test-client")
        let post = try #require(spans.first { $0.name == "POST /tables/{table}" }, "\(spans)")
        #expect(post.service == "ferry")
        #expect(post.kind == 2)  // server
        #expect(post.traceID == clientSpan.traceID)
        #expect(post.parentSpanID == clientSpan.spanID)
        #expect(post.attributes["http.route"] == "/tables/{table}")
        #expect(post.attributes["http.request.method"] == "POST")
        #expect(post.attributes["ferry.table"] == "todo")
        #expect(post.attributes["http.response.status_code"] == "201")

        let insert = try #require(
            spans.first { $0.parentSpanID == post.spanID && $0.name == "storage.insert" }, "\(spans)")
        #expect(insert.traceID == clientSpan.traceID)
        #expect(insert.attributes["ferry.table"] == "todo")
        let statements = spans.filter { $0.parentSpanID == insert.spanID }
        let row = try #require(
            statements.first { $0.attributes["db.query.text"]?.hasPrefix("INSERT INTO ferry_items_") == true },
            "\(statements.map(\.attributes))")
        #expect(row.kind == 3)  // client
        #expect(row.name == "INSERT")
        #expect(row.attributes["db.system.name"] == "sqlite")
        #expect(row.attributes["db.operation.name"] == "INSERT")
        #expect(!spans.contains { $0.attributes.values.contains { $0.contains("bound-value-not-traced") } })

        let get = try #require(spans.first { $0.name == "GET /tables/{table}/{id}" })
        #expect(get.traceID == "0af7651916cd43dd8448eb211c80319c")
        #expect(get.parentSpanID == "b7ad6b7169203331")
        #expect(get.attributes["http.response.status_code"] == "200")
        #expect(spans.contains { $0.parentSpanID == get.spanID && $0.name == "storage.item" })
    }

    @Test func theStandardEnvironmentTurnsTracingOnAndNamesTheService() async throws {
        let receiver = try await OTLPReceiver.start()
        let (process, url) = try await Self.serve(
            [], environment: ["OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_SERVICE_NAME": "ferry-eu-1"])
        #expect(try await Self.get(url + "/health", headers: [:]) == 200)
        try await Self.stop(process)
        let spans = await receiver.spans { $0.contains { $0.name == "GET /health" } }
        await receiver.stop()
        let health = try #require(spans.first { $0.name == "GET /health" }, "\(spans)")
        #expect(health.service == "ferry-eu-1")
        #expect(health.parentSpanID.isEmpty)
        #expect(health.traceID.count == 32 && health.spanID.count == 16)
    }

    @Test func tracingIsOffUnlessConfigured() throws {
        #expect(!ServeTracing.isEnabled(endpoint: nil, environment: [:]))
        #expect(!ServeTracing.isEnabled(endpoint: nil, environment: ["OTEL_SERVICE_NAME": "ferry"]))
        #expect(ServeTracing.isEnabled(endpoint: "http://127.0.0.1:4318", environment: [:]))
        #expect(ServeTracing.isEnabled(endpoint: nil, environment: ["OTEL_TRACES_EXPORTER": "otlp"]))
        #expect(ServeTracing.isEnabled(endpoint: nil, environment: ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"]))
        #expect(ServeTracing.isEnabled(endpoint: nil, environment: ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c"]))
        #expect(!ServeTracing.isEnabled(endpoint: "http://c:4318", environment: ["OTEL_SDK_DISABLED": "TRUE"]))
        #expect(
            !ServeTracing.isEnabled(
                endpoint: nil, environment: ["OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"])
        )
        #expect(try ServeTracing.start(endpoint: nil, environment: [:], logger: Logger(label: "test")) == nil)

        #expect(try ServeTracing.tracesURL("http://collector:4318") == "http://collector:4318/v1/traces")
        #expect(try ServeTracing.tracesURL("https://collector/otlp/") == "https://collector/otlp/v1/traces")
        #expect(try ServeTracing.tracesURL("http://collector:4318/v1/traces") == "http://collector:4318/v1/traces")
        #expect(throws: ConfigurationError.self) { try ServeTracing.tracesURL("collector:4318") }
        #expect(
            ServeTracing.destination(endpoint: nil, environment: ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"])
                == "http://c:4318/v1/traces")
        #expect(ServeTracing.destination(endpoint: nil, environment: [:]) == "http://localhost:4318/v1/traces")
    }

    @Test func aBadTracingSettingIsOneLineAndExitStatus64() async throws {
        // swift-otel would stop the process on the gRPC protocol, which this build does not export.
        let environment = ProcessInfo.processInfo.environment.merging(["OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"]) { $1 }
        for (arguments, variables, expected) in [
            (["--otlp-endpoint", "localhost:4318"], [:], "--otlp-endpoint 'localhost:4318' is not an http"),
            (
                ["--otlp-endpoint", "http://127.0.0.1:4318"], environment,
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported"
            ),
        ] {
            let (status, text) = try await ServeCommandTests.serveUntilExit(
                ["--port", "0", "--db", "memory"] + arguments, environment: variables.isEmpty ? nil : variables)
            #expect(status == 64, "\(text)")
            #expect(text.hasPrefix("error: invalid server configuration: \(expected)"), "\(text)")
            #expect(text.split(separator: "\n").count == 1, "\(text)")
        }
    }
}
