public import CoreMetrics
public import Prometheus

/// How the server records its metrics (requests, latency, connections, change feeds, batches,
/// idempotent replays, storage waits and errors), and where it serves them.
///
/// The server never touches the process-wide `MetricsSystem`: it records through the factory
/// chosen here, so that two servers in one process (tests, an app that embeds one) keep apart. By
/// default each server records into a Prometheus registry of its own
/// (``ReferenceServer/metricsRegistry``) and serves it at `GET /metrics` on its own port, in the
/// Prometheus text format. That port is public wherever the server is: give `/metrics` a listener
/// of its own (``Endpoint/separate(host:port:)``, on `127.0.0.1` or a private network) when the
/// server faces the internet.
///
/// ```swift
/// var configuration = ServerConfiguration(port: 8080, logger: logger)
/// configuration.metrics.endpoint = .separate(host: "127.0.0.1", port: 9464)   // scrape there
///
/// let registry = PrometheusCollectorRegistry()          // or bring a registry of your own
/// configuration.metrics.backend = .prometheus(registry)
///
/// configuration.metrics.backend = .factory(myStatsDFactory)   // or any swift-metrics backend
/// configuration.metrics = .off                                 // or nothing at all
/// ```
public struct MetricsSettings: Sendable {
    /// Where the metrics go.
    public enum Backend: Sendable {
        /// Nothing is recorded and nothing is served.
        case off
        /// Into a Prometheus registry, served at `GET /metrics`: the one given, or (`nil`, the
        /// default) a new one for each server started.
        case prometheus(PrometheusCollectorRegistry?)
        /// Through any swift-metrics backend (StatsD, OpenTelemetry, …); the server serves no
        /// `/metrics` (the backend exports).
        case factory(any MetricsFactory)
    }

    /// Where `GET /metrics` is served (with the ``Backend/prometheus(_:)`` backend).
    public enum Endpoint: Sendable, Hashable {
        /// On the server's own address and port, beside the tables: reachable by whoever reaches
        /// the server.
        case serverPort
        /// On a listener of its own (`127.0.0.1` keeps it on the machine; port `0` picks a free
        /// one, see ``ReferenceServer/metricsPort``); the server's own port then answers 404 there.
        case separate(host: String, port: Int)
    }

    /// Where the metrics go (default: a Prometheus registry for each server).
    public var backend: Backend
    /// Where `GET /metrics` is served (default: on the server's port).
    public var endpoint: Endpoint
    /// The most tables not declared in the configuration (created by writes) that get a `table`
    /// label of their own (default 64), the first ones written to; requests to the others are
    /// labelled `table="_other"`. Declared tables always have their own. So clients that make up
    /// table names cannot make the metrics grow without bound.
    public var maximumDynamicTableLabels: Int

    public init(
        backend: Backend = .prometheus(nil), endpoint: Endpoint = .serverPort, maximumDynamicTableLabels: Int = 64
    ) {
        self.backend = backend
        self.endpoint = endpoint
        self.maximumDynamicTableLabels = maximumDynamicTableLabels
    }

    /// No metrics, no `/metrics`.
    public static var off: MetricsSettings { MetricsSettings(backend: .off) }

    /// Whether anything is recorded.
    public var isOn: Bool {
        if case .off = backend { return false }
        return true
    }

    func validate() throws(ConfigurationError) {
        guard maximumDynamicTableLabels >= 0 else {
            throw ConfigurationError("maximumDynamicTableLabels must be 0 or more")
        }
        guard case .separate(let host, let port) = endpoint else { return }
        guard case .prometheus = backend else {
            throw ConfigurationError("the metrics port serves Prometheus metrics, and the backend is not Prometheus")
        }
        guard (0...65_535).contains(port) else {
            throw ConfigurationError("the metrics port \(port) is not in 0...65535")
        }
        guard !host.isEmpty else { throw ConfigurationError("the metrics host is empty") }
    }
}
