import FerryServer
import Foundation
import Logging
import OTel
import ServerStorageCore
import ServiceLifecycle
import Tracing

/// `ferry serve`'s tracing: spans exported with OTLP over HTTP (swift-otel), off unless configured.
///
/// On with `--otlp-endpoint URL`, `OTEL_TRACES_EXPORTER=otlp`, or an OTLP endpoint in the
/// environment (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`); off whatever
/// else says so with `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`. The other standard
/// `OTEL_*` variables (service name, resource attributes, headers, sampler, batch delays,
/// `http/protobuf` or `http/json`) apply, and take precedence over the flag, as swift-otel reads them
/// last. Only the tracing backend is made (`OTel.makeTracingBackend`): logging and metrics stay
/// with the process's own systems, and no process-wide system is bootstrapped: the tracer goes to
/// the server and the storage through their configurations.
///
/// Its exporter runs beside the server, and ``finish()`` flushes the spans still buffered once the
/// server has stopped.
struct ServeTracing {
    /// The tracer for the server's and the storage's configurations.
    let tracer: any Tracer
    /// Where spans go, for the start-up line: the flag's URL or `OTEL_*`.
    let destination: String
    private let group: ServiceGroup
    private let running: Task<Void, any Error>

    /// How long ``finish()`` waits for the last spans to be sent.
    static let flushLimit: Duration = .seconds(10)

    /// The path OTLP/HTTP receivers take traces at.
    static let tracesPath = "/v1/traces"

    /// Whether the flag or the environment turns tracing on.
    static func isEnabled(endpoint: String?, environment: [String: String]) -> Bool {
        func value(_ name: String) -> String? {
            environment[name].map { $0.trimmingCharacters(in: .whitespaces).lowercased() }.flatMap {
                $0.isEmpty ? nil : $0
            }
        }
        if value("OTEL_SDK_DISABLED") == "true" { return false }
        let exporters = value("OTEL_TRACES_EXPORTER")?.split(separator: ",").map {
            $0.trimmingCharacters(in: .whitespaces)
        }
        if exporters == ["none"] { return false }
        return endpoint != nil || exporters?.contains("otlp") == true
            || value("OTEL_EXPORTER_OTLP_ENDPOINT") != nil || value("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != nil
    }

    /// The traces URL of `--otlp-endpoint`: the collector's base URL (as `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// takes it) gets `/v1/traces`; a URL that already ends so is kept.
    static func tracesURL(_ endpoint: String) throws(ConfigurationError) -> String {
        guard let url = URL(string: endpoint), let scheme = url.scheme?.lowercased(),
            scheme == "http" || scheme == "https",
            url.host?.isEmpty == false
        else {
            throw ConfigurationError(
                "the OTLP endpoint '\(endpoint)' is not an http:// or https:// URL (an OTLP/HTTP collector, as http://localhost:4318)"
            )
        }
        var text = endpoint
        if text.hasSuffix(tracesPath) { return text }
        while text.hasSuffix("/") { text.removeLast() }
        return text + tracesPath
    }

    /// Where the spans go, as swift-otel resolves it: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as it is,
    /// else `OTEL_EXPORTER_OTLP_ENDPOINT` with `/v1/traces`, else the flag's URL, else
    /// `http://localhost:4318/v1/traces`.
    static func destination(endpoint: String?, environment: [String: String]) -> String {
        if let url = environment["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"], !url.isEmpty { return url }
        if let base = environment["OTEL_EXPORTER_OTLP_ENDPOINT"], !base.isEmpty {
            return (base.hasSuffix("/") ? String(base.dropLast()) : base) + tracesPath
        }
        if let endpoint, let url = try? tracesURL(endpoint) { return url }
        return "http://localhost:4318" + tracesPath
    }

    /// Starts the exporter when tracing is on; `nil` when it is off.
    ///
    /// - Throws: ``ConfigurationError`` for a bad endpoint, the gRPC protocol (this build exports
    ///   over HTTP only), or a setting swift-otel refuses (a certificate file that is not there …).
    /// Checks the tracing settings without starting anything (what `ferry serve --check` does).
    static func validate(endpoint: String?, environment: [String: String]) throws(ConfigurationError) {
        guard isEnabled(endpoint: endpoint, environment: environment) else { return }
        for name in ["OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"]
        where environment[name]?.trimmingCharacters(in: .whitespaces).lowercased() == "grpc" {
            throw ConfigurationError(
                "\(name)=grpc is not supported: ferry exports traces over HTTP (http/protobuf, the default, or http/json)"
            )
        }
        if let endpoint { _ = try tracesURL(endpoint) }
        for name in ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] {
            guard let value = environment[name], !value.trimmingCharacters(in: .whitespaces).isEmpty else { continue }
            do {
                _ = try tracesURL(value)
            } catch {
                throw ConfigurationError(
                    "\(name) '\(value)' is not an http:// or https:// URL (an OTLP/HTTP collector, as http://localhost:4318)"
                )
            }
        }
    }

    static func start(endpoint: String?, environment: [String: String], logger: Logger) throws(ConfigurationError)
        -> ServeTracing?
    {
        guard isEnabled(endpoint: endpoint, environment: environment) else { return nil }
        try validate(endpoint: endpoint, environment: environment)
        var configuration = OTel.Configuration.default
        configuration.serviceName = "ferry"
        configuration.diagnosticLogger = .custom(logger)
        configuration.logs.enabled = false
        configuration.metrics.enabled = false
        configuration.traces.enabled = true
        configuration.traces.exporter = .otlp
        if let endpoint { configuration.traces.otlpExporter.endpoint = try tracesURL(endpoint) }
        let destination = Self.destination(endpoint: endpoint, environment: environment)
        let backend: (tracer: any Tracer, service: any Service)
        do {
            let made = try OTel.makeTracingBackend(configuration: configuration)
            backend = (made.factory, made.service)
        } catch {
            throw ConfigurationError("cannot set up tracing: \(error)")
        }
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [.init(service: backend.service)], gracefulShutdownSignals: [], logger: logger))
        let running = Task { try await group.run() }
        return ServeTracing(tracer: backend.tracer, destination: destination, group: group, running: running)
    }

    /// Sends the spans still buffered and stops the exporter; at most ``flushLimit``, after which
    /// what is left is dropped (a collector that does not answer must not hold the shutdown).
    func finish() async {
        await group.triggerGracefulShutdown()
        let running = running
        let limit = Self.flushLimit
        let finished: Bool? = try? await BoundedWait.run(within: limit, timeout: { FlushTimedOut() }) {
            _ = await running.result
            return true
        }
        if finished == nil { running.cancel() }
    }

    private struct FlushTimedOut: Error {}
}
