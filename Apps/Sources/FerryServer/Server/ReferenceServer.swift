import Foundation
import HTTPTypes
import Hummingbird
public import Logging
import NIOCore
public import ServerStorage
import ServerStorageSQLite
import ServiceLifecycle
import Synchronization
import UnixSignals

/// Ferry's reference server: the table protocol (2.0.0 and 3.0.0) over HTTP, on Hummingbird 2.
///
/// Start it in-process (tests, the CLI's `demo`) on any free port, use it, shut it down:
///
/// ```swift
/// var configuration = ServerConfiguration(port: 0)
/// configuration.tables = [TableSettings(name: "todo", softDelete: true)]
/// let server = try await ReferenceServer.start(configuration, database: .memory)
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

    let group: ServiceGroup
    let running: Task<Void, any Error>
    let ownsStorage: Bool
    let logger: Logger

    /// `http://host:port`.
    public var url: String {
        let shown = host.contains(":") ? "[\(host)]" : host
        return "http://\(shown):\(port)"
    }

    private init(
        host: String, port: Int, storage: any ServerStorage, group: ServiceGroup, running: Task<Void, any Error>,
        ownsStorage: Bool, logger: Logger
    ) {
        self.host = host
        self.port = port
        self.storage = storage
        self.group = group
        self.running = running
        self.ownsStorage = ownsStorage
        self.logger = logger
    }

    /// Opens `database`, starts the server on it and returns once it listens; the storage closes
    /// when the server stops.
    public static func start(
        _ configuration: ServerConfiguration, database: ServerDatabase, handlesSignals: Bool = false
    ) async throws -> ReferenceServer {
        let storage = try database.open(logger: configuration.logger)
        do {
            return try await start(configuration, storage: storage, ownsStorage: true, handlesSignals: handlesSignals)
        } catch {
            try? await storage.close()
            throw error
        }
    }

    /// Starts the server on `storage` and returns once it listens.
    ///
    /// - Parameters:
    ///   - ownsStorage: Whether shutting the server down closes `storage`.
    ///   - handlesSignals: Whether SIGINT and SIGTERM shut the server down (for a process that is the server).
    /// - Throws: ``ConfigurationError`` for an invalid configuration, a ``StorageError`` when the
    ///   declared tables cannot be prepared, or the bind error when the address is taken.
    public static func start(
        _ configuration: ServerConfiguration, storage: any ServerStorage, ownsStorage: Bool = false,
        handlesSignals: Bool = false
    ) async throws -> ReferenceServer {
        try configuration.validate()
        try await storage.prepare(
            configuration.tables.map { StorageTable(name: $0.name, schema: $0.schema) })
        let service = TableService(configuration: configuration, storage: storage)
        let responder = TableResponder(
            service: service, limits: configuration.limits,
            publicOrigin: configuration.publicURL.flatMap { PublicOrigin(publicURL: $0) }, logger: configuration.logger)
        let bound = BindSignal()
        let application = Application(
            responder: responder,
            server: .guardedHTTP1(configuration.connections, logger: configuration.logger),
            configuration: ApplicationConfiguration(address: .hostname(configuration.host, port: configuration.port)),
            onServerRunning: { channel in bound.listening(channel.localAddress?.port ?? 0) },
            logger: configuration.logger)
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [application], gracefulShutdownSignals: handlesSignals ? [.sigterm, .sigint] : [],
                logger: configuration.logger))
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
            throw ServerStartError.describing(error, host: configuration.host, port: configuration.port)
        }
        return ReferenceServer(
            host: configuration.host, port: port, storage: storage, group: group, running: running,
            ownsStorage: ownsStorage, logger: configuration.logger)
    }

    /// Stops accepting connections, lets in-flight requests finish, then closes the storage if the
    /// server owns it.
    public func shutdown() async throws {
        await group.triggerGracefulShutdown()
        try await waitUntilStopped()
    }

    /// Waits until the server stops (after ``shutdown()``, or a signal when it handles them).
    public func waitUntilStopped() async throws {
        let result = await running.result
        if ownsStorage { try await storage.close() }
        if case .failure(let error) = result, !(error is CancellationError) { throw error }
    }
}

/// Where `ferry serve --db` keeps the tables.
public enum ServerDatabase: Sendable, Hashable, CustomStringConvertible {
    /// A SQLite database file (created when absent).
    case sqlite(path: String)
    /// An in-memory SQLite database, gone when the server stops.
    case memory

    /// Parses `sqlite:PATH`, a bare path, or `memory`.
    ///
    /// ```swift
    /// try ServerDatabase(parsing: "sqlite:/var/lib/ferry.sqlite")   // .sqlite(path: "/var/lib/ferry.sqlite")
    /// try ServerDatabase(parsing: "memory")                         // .memory
    /// ```
    public init(parsing text: String) throws(ConfigurationError) {
        if text == "memory" || text == "sqlite::memory:" || text == ":memory:" {
            self = .memory
        } else if text.hasPrefix("sqlite:") {
            let path = String(text.dropFirst("sqlite:".count))
            guard !path.isEmpty else {
                throw ConfigurationError("--db sqlite: needs a path, as in sqlite:ferry.sqlite")
            }
            self = .sqlite(path: path)
        } else if text.contains(":") && !text.hasPrefix("/") && !text.hasPrefix(".") {
            throw ConfigurationError("unknown database '\(text)': use sqlite:PATH or memory")
        } else if text.isEmpty {
            throw ConfigurationError("the database is empty: use sqlite:PATH or memory")
        } else {
            self = .sqlite(path: text)
        }
    }

    public var description: String {
        switch self {
        case .sqlite(let path): "sqlite:\(path)"
        case .memory: "memory"
        }
    }

    /// Opens the storage.
    public func open(logger: Logger = Logger(label: "ferry.storage")) throws -> any ServerStorage {
        var configuration = SQLiteServerStorage.Configuration()
        configuration.logger = logger
        switch self {
        case .sqlite(let path): return try SQLiteServerStorage(location: .file(path), configuration: configuration)
        case .memory: return try SQLiteServerStorage(location: .memory, configuration: configuration)
        }
    }
}

/// The server could not start listening.
public struct ServerStartError: Error, Sendable, CustomStringConvertible {
    /// What happened, in one line.
    public var message: String
    public var description: String { message }

    /// One line for a failure to listen: `cannot listen on 127.0.0.1:8080: the address is already
    /// in use (another server there?)` rather than the socket call that failed.
    static func describing(_ error: any Error, host: String, port: Int) -> any Error {
        guard let failure = error as? IOError else { return error }
        let address = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        switch failure.errnoCode {
        case EADDRINUSE:
            return ServerStartError(
                message: "cannot listen on \(address): the address is already in use (another server there? try --port)"
            )
        case EACCES:
            return ServerStartError(
                message: "cannot listen on \(address): permission denied (ports below 1024 need root)")
        case EADDRNOTAVAIL:
            return ServerStartError(message: "cannot listen on \(address): no such local address (check --host)")
        default:
            return ServerStartError(
                message: "cannot listen on \(address): \(String(cString: strerror(failure.errnoCode)))")
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

/// The Hummingbird side: collects the body within the size limit, hands the request to
/// ``TableService`` and logs one line per request.
struct TableResponder: HTTPResponder {
    typealias Context = BasicRequestContext

    let service: TableService
    let limits: RequestLimits
    /// The configured public URL's origin; `nil` to use the request's validated `Host`.
    let publicOrigin: PublicOrigin?
    let logger: Logger

    func respond(to request: Request, context: Context) async throws -> Response {
        let started = ContinuousClock.now
        let path = request.uri.path
        var headers: [(name: String, value: String)] = []
        for field in request.headers { headers.append((field.name.canonicalName, field.value)) }
        let method = request.method.rawValue.uppercased()
        var answer: TableResponse
        var body: [UInt8]?
        do {
            if let length = request.headers[.contentLength].flatMap({ Int($0) }), length > limits.maximumBodySize {
                throw ProtocolError(
                    413, "bodyTooLarge", "the body is \(length) bytes; the limit is \(limits.maximumBodySize)")
            }
            let buffer = try await request.body.collect(upTo: limits.maximumBodySize)
            if buffer.readableBytes > 0 { body = Array(buffer.readableBytesView) }
            // After the body is read: answering before it and closing would reset the connection
            // with the body unread, and the client could lose the answer.
            let origin = try Self.origin(of: request, configured: publicOrigin)
            answer = await service.handle(
                TableRequest(
                    method: method, path: path, rawQuery: request.uri.query ?? "", headers: RequestHeaders(headers),
                    body: body, origin: origin))
        } catch let error as ProtocolError {
            answer = TableService.errorResponse(error)
        } catch is NIOTooManyBytesError {
            answer = TableService.errorResponse(
                ProtocolError(413, "bodyTooLarge", "the body is larger than \(limits.maximumBodySize) bytes"))
        } catch {
            answer = TableService.errorResponse(ProtocolError(400, "badRequest", "the request body could not be read"))
        }
        var fields = HTTPFields()
        for header in answer.headers {
            if let name = HTTPField.Name(header.name) { fields.append(HTTPField(name: name, value: header.value)) }
        }
        let elapsed = ContinuousClock.now - started
        let milliseconds = Double(elapsed.components.attoseconds) / 1e15 + Double(elapsed.components.seconds) * 1000
        context.logger.info(
            "\(method) \(path) \(answer.status)",
            metadata: [
                "ferry.status": "\(answer.status)", "ferry.ms": "\(String(format: "%.2f", milliseconds))",
            ])
        let status = HTTPResponse.Status(code: answer.status)
        guard let bytes = answer.body else { return Response(status: status, headers: fields) }
        return Response(status: status, headers: fields, body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    /// The origin of absolute links: the configured public URL, else `scheme://Host` when the `Host`
    /// header is a valid host and port (400 when it is not), else empty (links stay relative).
    static func origin(of request: Request, configured: PublicOrigin?) throws -> String {
        if let configured { return configured.text }
        guard let host = request.head.authority else { return "" }
        let scheme = request.headers[HTTPField.Name("X-Forwarded-Proto")!]?.lowercased() == "https" ? "https" : "http"
        guard let origin = PublicOrigin(scheme: scheme, hostHeader: host) else {
            throw ProtocolError(400, "invalidHost", "the Host header is not a valid host and port")
        }
        return origin.text
    }
}
