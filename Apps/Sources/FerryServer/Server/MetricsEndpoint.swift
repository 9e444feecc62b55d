import HTTPTypes
import Logging
import Hummingbird
import NIOCore
import ServiceLifecycle
import Synchronization

/// `GET /metrics` in the Prometheus text format: on the server's own port (``TableResponder``
/// asks ``answer(method:metrics:)``), or as the whole of a listener of its own
/// (``MetricsSettings/Endpoint/separate(host:port:)``), which answers 404 to every other path.
///
/// Hummingbird's `MetricsMiddleware` is not used: it records through the process-wide
/// `MetricsSystem`, and the server has no router whose route templates it could label with.
struct MetricsResponder: HTTPResponder {
    typealias Context = FerryRequestContext

    let metrics: ServerMetrics

    func respond(to request: Request, context: Context) async throws -> Response {
        let method = request.method.rawValue.uppercased()
        guard TableRoute(path: request.uri.path) == .metrics else {
            return Self.plain(.notFound, "not found; the metrics are at /metrics\n")
        }
        return Self.answer(method: method, metrics: metrics)
    }

    /// The answer to `method` on `/metrics`: the registry's text for GET, 405 for anything else.
    static func answer(method: String, metrics: ServerMetrics) -> Response {
        guard method == "GET" else {
            var response = plain(.methodNotAllowed, "the metrics are read with GET\n")
            response.headers[.allow] = "GET"
            return response
        }
        var fields = HTTPFields()
        fields[.contentType] = ServerMetrics.expositionType
        fields[.cacheControl] = "no-cache"
        return Response(
            status: .ok, headers: fields, body: ResponseBody(byteBuffer: ByteBuffer(bytes: metrics.exposition() ?? [])))
    }

    static func plain(_ status: HTTPResponse.Status, _ text: String) -> Response {
        var fields = HTTPFields()
        fields[.contentType] = "text/plain; charset=utf-8"
        return Response(status: status, headers: fields, body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
    }
}

/// The listener of `/metrics` when it has an address of its own: a small HTTP/1 server in a
/// service group of its own, which listens before the server does (a taken port fails the start
/// before anything else runs) and stops when the server's group stops (``Stopper``).
final class MetricsListener: Sendable {
    let host: String
    let port: Int
    private let bound: BindSignal
    private let group: ServiceGroup
    private let running = Mutex<Task<Void, Never>?>(nil)

    /// Scrapers are few: a handful of connections, and short timeouts.
    static let limits = ConnectionLimits(
        idleTimeout: .seconds(30), requestTimeout: .seconds(10), writeTimeout: .seconds(30), maximumConnections: 16)

    /// The listener `configuration` asks for, or `nil` when `/metrics` is on the server's port (or off).
    init?(_ configuration: ServerConfiguration, metrics: ServerMetrics?, logger: Logger) {
        guard let metrics, metrics.registry != nil, case .separate(let host, let port) = configuration.metrics.endpoint
        else { return nil }
        self.host = host
        self.port = port
        let bound = BindSignal()
        self.bound = bound
        let application = Application(
            responder: MetricsResponder(metrics: metrics),
            server: .guardedHTTP1(Self.limits, logger: configuration.logger),
            configuration: ApplicationConfiguration(address: .hostname(host, port: port)),
            onServerRunning: { channel in bound.listening(channel.localAddress?.port ?? 0) },
            logger: logger)
        group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [.init(service: application)], gracefulShutdownSignals: [], logger: configuration.logger))
    }

    /// Starts listening; returns the bound port, or throws the failure to bind.
    func start() async throws -> Int {
        let (group, bound) = (group, bound)
        running.withLock { running in
            running = Task {
                do {
                    try await group.run()
                    bound.failed(ServerStartError(message: "the metrics listener stopped before it listened"))
                } catch {
                    bound.failed(error)
                }
            }
        }
        do {
            return try await bound.wait()
        } catch {
            await stop()
            throw error
        }
    }

    /// Stops listening, and waits until it has (idempotent).
    func stop() async {
        await group.triggerGracefulShutdown()
        await running.withLock { $0 }?.value
    }

    /// A service of the server's group that stops the listener when the server's group stops.
    struct Stopper: Service {
        let listener: MetricsListener

        func run() async throws {
            try? await gracefulShutdown()
            await listener.stop()
        }
    }
}
