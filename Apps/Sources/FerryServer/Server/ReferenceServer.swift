import Foundation
import Hummingbird
import Logging
import NIOCore
public import Prometheus
public import ServerStorageCore
import ServiceLifecycle
import Synchronization
import UnixSignals

/// Ferry's reference server: the table protocol (2.0.0 and 3.0.0) over HTTP, on Hummingbird 2.
///
/// Start it in-process (tests, the CLI's `demo`) on any free port, on a storage you opened, use it,
/// shut it down:
///
/// ```swift
/// var configuration = ServerConfiguration(port: 0, logger: Logger(label: "app.server"))
/// configuration.tables = [TableSettings(name: "todo", softDelete: true)]
/// let storage = try SQLiteServerStorage(location: .memory)   // any ServerStorage
/// let server = try await ReferenceServer.start(configuration, storage: storage, ownsStorage: true)
/// print(server.url)             // "http://127.0.0.1:49152"
/// // … talk to server.url + "/tables/todo" …
/// try await server.shutdown()
/// ```
///
/// `ferry serve` runs the same server with ``start(_:storage:ownsStorage:handlesSignals:)`` and
/// `handlesSignals: true`, then ``waitUntilStopped()``: SIGINT and SIGTERM shut it down gracefully
/// (in-flight requests finish, then the storage closes).
public final class ReferenceServer: Sendable {
    /// The server's version, sent as `x-zumo-server-version: ferry-<version>`.
    public static let version = "0.1.0"

    /// The address the server listens on.
    public let host: String
    /// The port the server listens on (the one the system picked when configured with `0`).
    public let port: Int
    /// The storage the server uses.
    public let storage: any ServerStorage
    /// The Prometheus registry the server records its metrics into (`nil` when metrics are off or
    /// go to another backend): the one configured, or a new one of the server's own. `GET /metrics`
    /// renders it; a test or an embedding app may read it directly.
    public let metricsRegistry: PrometheusCollectorRegistry?
    /// The port of the metrics listener, when `/metrics` has one of its own
    /// (``MetricsSettings/Endpoint/separate(host:port:)``; the one the system picked for `0`).
    public let metricsPort: Int?

    let group: ServiceGroup
    let running: Task<Void, any Error>
    let ownsStorage: Bool
    let stopping: StopDeadline
    let logger: Logger
    /// The change feeds' fan-out: its subscription to the storage ends when the server stops.
    let feedHub: FeedHub

    /// How long cancelled work has to end after the grace period.
    static let cancellationAllowance: Duration = .seconds(3)

    /// `http://host:port`.
    public var url: String {
        let shown = host.contains(":") ? "[\(host)]" : host
        return "http://\(shown):\(port)"
    }

    private init(
        host: String, port: Int, storage: any ServerStorage, group: ServiceGroup, running: Task<Void, any Error>,
        ownsStorage: Bool, stopping: StopDeadline, logger: Logger, metricsRegistry: PrometheusCollectorRegistry?,
        metricsPort: Int?, feedHub: FeedHub
    ) {
        self.metricsRegistry = metricsRegistry
        self.metricsPort = metricsPort
        self.feedHub = feedHub
        self.stopping = stopping
        self.host = host
        self.port = port
        self.storage = storage
        self.group = group
        self.running = running
        self.ownsStorage = ownsStorage
        self.logger = logger
    }

    /// Starts the server on `storage` and returns once it listens.
    ///
    /// The server does not choose a database: the caller opens one (`ferry serve --db` opens SQLite)
    /// and hands it over.
    ///
    /// - Parameters:
    ///   - configuration: The address, tables, authentication, limits and logger.
    ///   - storage: An opened storage (any backend); the server prepares the declared tables in it.
    ///   - ownsStorage: Whether the server closes `storage` when it stops, or when it fails to start.
    ///   - handlesSignals: Whether SIGINT and SIGTERM shut the server down (for a process that is the server).
    /// - Throws: ``ConfigurationError`` for an invalid configuration, a `StorageError` when the
    ///   declared tables cannot be prepared, or the bind error when the address is taken.
    public static func start(
        _ configuration: ServerConfiguration, storage: any ServerStorage, ownsStorage: Bool = false,
        handlesSignals: Bool = false
    ) async throws -> ReferenceServer {
        do {
            return try await listen(
                configuration, storage: storage, ownsStorage: ownsStorage, handlesSignals: handlesSignals)
        } catch {
            if ownsStorage { try? await storage.close() }
            throw error
        }
    }

    private static func listen(
        _ configuration: ServerConfiguration, storage: any ServerStorage, ownsStorage: Bool, handlesSignals: Bool
    ) async throws -> ReferenceServer {
        try configuration.validate()
        try await storage.prepare(
            configuration.tables.map { StorageTable(name: $0.name, schema: $0.schema) })
        let metrics = ServerMetrics.make(
            configuration.metrics, declaredTables: configuration.tables.map(\.name),
            waitResources: storage.waitResources)
        if let metrics { storage.observe(metrics.storage) }
        let service = TableService(configuration: configuration, storage: storage, metrics: metrics)
        var responder = TableResponder(
            service: service, limits: configuration.limits,
            publicOrigin: configuration.publicURL.flatMap { PublicOrigin(baseURL: $0) }, logger: configuration.logger)
        responder.trustsForwardedHeaders = configuration.trustsForwardedHeaders
        responder.metrics = metrics
        responder.servesMetrics = metrics?.registry != nil && configuration.metrics.endpoint == .serverPort
        let bound = BindSignal()
        // Hummingbird's own info lines ("Server started and listening on …") would double the
        // host's start-up line; its notices and above still show.
        var frameworkLogger = configuration.logger
        if frameworkLogger.logLevel == .info { frameworkLogger.logLevel = .notice }
        let application = Application(
            responder: CrossOriginResponder(responder, origins: configuration.corsOrigins),
            server: .guardedHTTP1(
                configuration.connections, logger: configuration.logger, metrics: metrics,
                compresses: configuration.compressesAnswers),
            configuration: ApplicationConfiguration(address: .hostname(configuration.host, port: configuration.port)),
            onServerRunning: { channel in bound.listening(channel.localAddress?.port ?? 0) },
            logger: frameworkLogger)
        // A metrics port of its own listens first: when it is taken, nothing else has started.
        let metricsListener = MetricsListener(configuration, metrics: metrics, logger: frameworkLogger)
        var metricsPort: Int?
        if let metricsListener {
            do {
                metricsPort = try await metricsListener.start()
            } catch {
                throw ServerStartError.describing(
                    error, host: metricsListener.host, port: metricsListener.port, what: "the metrics",
                    flag: "--metrics-port")
            }
        }
        let stopping = StopDeadline(configuration.shutdownGracePeriod + Self.cancellationAllowance)
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [
            .init(service: application),
            .init(service: StopWatch(deadline: stopping), successTerminationBehavior: .ignore),
        ]
        if let attachments = configuration.attachments, let blobs = configuration.blobStorage {
            services.append(
                .init(
                    service: AttachmentSweeper(
                        blobs: blobs, limits: attachments, logger: configuration.logger,
                        index: service.attachmentIndex, gate: service.contentGate),
                    successTerminationBehavior: .ignore))
        }
        if let metricsListener {
            // First in the list, so stopped last (a group stops its services in reverse order):
            // scrapes still answer while requests drain.
            services.insert(
                .init(service: MetricsListener.Stopper(listener: metricsListener), successTerminationBehavior: .ignore),
                at: 0)
        }
        var groupConfiguration = ServiceGroupConfiguration(
            services: services,
            gracefulShutdownSignals: handlesSignals ? [.sigterm, .sigint] : [], logger: configuration.logger)
        // Requests and feeds still running when the grace period ends are cancelled.
        groupConfiguration.maximumGracefulShutdownDuration = configuration.shutdownGracePeriod
        let group = ServiceGroup(configuration: groupConfiguration)
        let running = Task {
            do {
                try await group.run()
                bound.failed(ServerStartError(message: "the server stopped before it listened"))
            } catch {
                bound.failed(error)
                throw error
            }
        }
        let port: Int
        do {
            port = try await bound.wait()
        } catch {
            await group.triggerGracefulShutdown()
            _ = try? await running.value
            await metricsListener?.stop()
            throw ServerStartError.describing(error, host: configuration.host, port: configuration.port)
        }
        return ReferenceServer(
            host: configuration.host, port: port, storage: storage, group: group, running: running,
            ownsStorage: ownsStorage, stopping: stopping, logger: configuration.logger,
            metricsRegistry: metrics?.registry, metricsPort: metricsPort, feedHub: service.feedHub)
    }

    /// Stops accepting connections, lets in-flight requests and change feeds finish, then closes
    /// the storage if the server owns it. Whatever still runs after
    /// ``ServerConfiguration/shutdownGracePeriod`` is cancelled, and the call returns at most a few
    /// seconds later even if some work ignores its cancellation.
    public func shutdown() async throws {
        await group.triggerGracefulShutdown()
        try await waitUntilStopped()
    }

    /// Waits until the server stops (after ``shutdown()``, or a signal when it handles them); once
    /// it began stopping, at most the grace period and a few seconds.
    public func waitUntilStopped() async throws {
        let running = running
        // Unbounded until a shutdown begins; the group bounds the shutdown by the grace period (then
        // cancels what still runs), and `stopping` gives cancelled work a few seconds more.
        var result =
            (try? await BoundedWait.run(within: nil, outcome: stopping.outcome) { await running.result })
            ?? .success(())
        if case .failure(let error) = result, error is StopDeadline.Expired {
            logger.warning(
                "some requests ignored their cancellation; the server stopped without them",
                metadata: ["ferry.stopLimit": "\(stopping.limit)"])
            result = .success(())
        }
        feedHub.stop()
        if ownsStorage { try await storage.close() }
        if case .failure(let error) = result, !(error is CancellationError) { throw error }
    }
}

/// When a stopping server gives up waiting for its work: armed when the graceful shutdown begins.
final class StopDeadline: Sendable {
    /// The wait ended by the deadline, not by the work.
    struct Expired: Error {}

    let limit: Duration
    let outcome = BoundedWait.Outcome<Result<Void, any Error>>()
    private let armed = Mutex(false)

    init(_ limit: Duration) { self.limit = limit }

    /// The shutdown began: after ``limit`` the server's wait for its work ends.
    func arm() {
        guard
            armed.withLock({ armed in
                defer { armed = true }
                return !armed
            })
        else { return }
        let outcome = outcome
        let limit = limit
        Task {
            try? await Task.sleep(for: limit)
            outcome.settle(.success(.failure(Expired())))
        }
    }
}

/// A service of the server's group that notices the graceful shutdown begin and arms the
/// ``StopDeadline``.
struct StopWatch: Service {
    let deadline: StopDeadline

    func run() async throws {
        try? await gracefulShutdown()
        deadline.arm()
    }
}

/// The server could not start listening.
public struct ServerStartError: Error, Sendable, CustomStringConvertible {
    /// What happened, in one line.
    public var message: String
    /// Whether a setting's value is at fault (an address this machine does not have): `ferry
    /// serve` then exits 64, as for any bad value, not 1.
    public var isBadValue = false
    public var description: String { message }

    /// One line for a failure to listen: `cannot listen on 127.0.0.1:8080: the address is already
    /// in use (another server there?)` rather than the socket call that failed.
    static func describing(
        _ error: any Error, host: String, port: Int, what: String? = nil, flag: String = "--port"
    ) -> any Error {
        let address = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        let listen = "cannot listen on \(address)\(what.map { " for " + $0 } ?? "")"
        let hostFlag = flag == "--port" ? "--host" : "--metrics-host"
        if error is SocketAddressError || error is SocketAddressError.UnknownHost {
            var failure = ServerStartError(
                message: "\(listen): '\(host)' is not an address or a host name this machine knows (check \(hostFlag))")
            failure.isBadValue = true
            return failure
        }
        guard let failure = error as? IOError else { return error }
        switch failure.errnoCode {
        case EADDRINUSE:
            return ServerStartError(
                message: "\(listen): the address is already in use (another server there? try \(flag))")
        case EACCES:
            return ServerStartError(message: "\(listen): permission denied (ports below 1024 need root)")
        case EADDRNOTAVAIL:
            var failure = ServerStartError(message: "\(listen): no such local address (check \(hostFlag))")
            failure.isBadValue = true
            return failure
        default:
            return ServerStartError(message: "\(listen): \(String(cString: strerror(failure.errnoCode)))")
        }
    }
}

/// Hands the bound port (or the failure to bind) from the server's task to ``ReferenceServer/start``.
final class BindSignal: Sendable {
    private enum State {
        case waiting(CheckedContinuation<Int, any Error>?)
        case done(Result<Int, any Error>)
    }

    private let state = Mutex<State>(.waiting(nil))

    func listening(_ port: Int) { finish(.success(port)) }
    func failed(_ error: any Error) { finish(.failure(error)) }

    private func finish(_ result: Result<Int, any Error>) {
        let continuation: CheckedContinuation<Int, any Error>? = state.withLock { state in
            guard case .waiting(let waiting) = state else { return nil }
            state = .done(result)
            return waiting
        }
        continuation?.resume(with: result)
    }

    func wait() async throws -> Int {
        try await withCheckedThrowingContinuation { continuation in
            let ready: Result<Int, any Error>? = state.withLock { state in
                switch state {
                case .waiting:
                    state = .waiting(continuation)
                    return nil
                case .done(let result):
                    return result
                }
            }
            if let ready { continuation.resume(with: ready) }
        }
    }
}
