public import Foundation
public import Instrumentation
public import Logging
public import SyncCore

#if canImport(FoundationNetworking)
    public import FoundationNetworking
#endif

/// A backend that speaks the table protocol (2.0.0 or 3.0.0) over HTTP: SyncCore's
/// `RemoteService` for the sync engine, and ``OnlineTable`` for direct remote access.
///
/// ```swift
/// let remote = HTTPRemote(
///     HTTPRemote.Configuration(serverURL: URL(string: "https://example.com")!, protocolVersion: .v3),
///     tokenProvider: { forceRefresh in try await auth.token(refresh: forceRefresh) })
/// let context = SyncContext(store: store, remote: remote)
/// let todos = remote.table("todo")                         // online: no local store involved
/// let page = try await todos.query(TableQuery().filter(.field("done").eq(false)))
/// ```
public struct HTTPRemote: RemoteService {
    /// Where the server is and how to talk to it.
    ///
    /// ```swift
    /// var configuration = HTTPRemote.Configuration(serverURL: URL(string: "http://127.0.0.1:8080")!)
    /// configuration.protocolVersion = .v2
    /// configuration.timeout = .seconds(10)
    /// ```
    public struct Configuration: Sendable {
        /// The server's base URL; tables live at `<serverURL>/<tablesPath>/<table>`.
        public var serverURL: URL
        /// The protocol to speak: `.v3` (Datasync 3.0.0, the default) or `.v2` (Azure Mobile Apps 2.0.0).
        public var protocolVersion: ProtocolVersion
        /// The path segment before table names: `tables`.
        public var tablesPath: String
        /// How long one request may take before it fails with a network error.
        public var timeout: Duration
        /// How safe requests (reads and queries) are retried.
        public var retry: RetryPolicy
        /// Extra headers sent with every request.
        public var additionalHeaders: [String: String]
        /// The largest answer body read, in bytes (default 128 MiB): a larger one fails with
        /// `RemoteError.Code.invalidResponse` instead of filling the device's memory.
        public var maximumResponseSize: Int
        /// PEM files of certificates to trust besides the system's, for `https://` servers whose
        /// certificate a private authority signed (a test server's, a company's). Linux only, where
        /// AsyncHTTPClient sends the requests; on Apple platforms add the authority to the system's
        /// trust settings, or pass a `URLSession` whose delegate trusts it.
        public var additionalTrustRoots: [String]
        /// The instrument that writes the caller's trace context into every request (for W3C Trace
        /// Context, a `traceparent` header naming the caller's current span), so that the server's
        /// spans join the app's trace; `nil` (the default) sends none.
        ///
        /// Any `Instrument` or `Tracer` of swift-distributed-tracing, such as swift-otel's tracer.
        /// The context is `ServiceContext.current` of the task that makes the request: run sync calls
        /// inside a span to tie them to it.
        ///
        /// ```swift
        /// configuration.instrument = tracer   // e.g. swift-otel's, from OTel.makeTracingBackend()
        /// let remote = HTTPRemote(configuration)
        /// try await tracer.withSpan("refresh") { _ in
        ///     _ = try await remote.table("todo").query(TableQuery())
        /// }
        /// // the query's request carries traceparent: 00-<trace id>-<the span's id>-01
        /// ```
        public var instrument: (any Instrument)?

        public init(
            serverURL: URL, protocolVersion: ProtocolVersion = .v3, tablesPath: String = "tables",
            timeout: Duration = .seconds(30), retry: RetryPolicy = RetryPolicy(),
            additionalHeaders: [String: String] = [:], maximumResponseSize: Int = 128 << 20,
            additionalTrustRoots: [String] = [], instrument: (any Instrument)? = nil
        ) {
            self.instrument = instrument
            self.additionalTrustRoots = additionalTrustRoots
            self.maximumResponseSize = max(1024, maximumResponseSize)
            self.serverURL = serverURL
            self.protocolVersion = protocolVersion
            self.tablesPath = tablesPath
            self.timeout = timeout
            self.retry = retry
            self.additionalHeaders = additionalHeaders
        }
    }

    /// Retries of safe requests (`GET`) after a network failure, a 429 or a 502/503/504, with
    /// exponential backoff and jitter (`Backoff`), never sooner than the server's `Retry-After`; an
    /// answer asking for a longer wait than ``maximumDelay`` is not retried here but returned, with
    /// `RemoteError.retryAfter`, for the caller to wait. Writes are never retried by the transport:
    /// the sync engine decides, because only it knows how to retry a write whose outcome is unknown.
    ///
    /// ```swift
    /// let patient = RetryPolicy(maximumAttempts: 5, initialDelay: .milliseconds(500))
    /// let never = RetryPolicy(maximumAttempts: 1)
    /// ```
    public struct RetryPolicy: Sendable, Hashable {
        /// Attempts in all, the first included (1 = no retry).
        public var maximumAttempts: Int
        /// The wait before the first retry; doubled for each later one.
        public var initialDelay: Duration
        /// The longest wait between two attempts.
        public var maximumDelay: Duration

        public init(
            maximumAttempts: Int = 3, initialDelay: Duration = .milliseconds(200), maximumDelay: Duration = .seconds(5)
        ) {
            self.maximumAttempts = max(1, maximumAttempts)
            self.initialDelay = initialDelay
            self.maximumDelay = maximumDelay
        }

        /// The wait before attempt `attempt` (2 = the first retry), with up to 25% jitter, and at
        /// least what the server asked for.
        func delay(beforeAttempt attempt: Int, retryAfter: Duration? = nil) -> Duration {
            Backoff(initial: initialDelay, maximum: maximumDelay, jitter: 0.25)
                .delay(after: attempt - 1, retryAfter: retryAfter)
        }
    }

    /// Gives the token for the auth header, or `nil` to send none. `forceRefresh` is `true` when
    /// the server has just refused the last token with 401: the request is then sent once more with
    /// the new token.
    public typealias TokenProvider = @Sendable (_ forceRefresh: Bool) async throws -> String?

    let client: HTTPClient
    let capabilityCache = CapabilityCache()

    /// A remote for `configuration`, authenticated by `tokenProvider` when given, logging retries
    /// and token refreshes to `logger` (by default the caller's task-local `Logger.current`).
    ///
    /// Requests go through `session` when one is given. Without one, they go through an ephemeral
    /// `URLSession` on Apple platforms, and through AsyncHTTPClient on Linux (unless a proxy is set
    /// in the environment), because FoundationNetworking's `URLSession` keeps a CPU core busy while
    /// it waits for an answer (docs/transport.md).
    public init(
        _ configuration: Configuration, tokenProvider: TokenProvider? = nil, session: URLSession? = nil,
        logger: Logger = Logger.current
    ) {
        client = HTTPClient(
            configuration: configuration, tokenProvider: tokenProvider,
            session: session ?? URLSession(configuration: .ephemeral, delegate: RedirectRefusal(), delegateQueue: nil),
            connections: session == nil ? Self.platformConnections(configuration) : nil,
            logger: logger)
    }

    /// The connections requests go through without a `URLSession` of the app's: AsyncHTTPClient
    /// on Linux; none elsewhere.
    static func platformConnections(_ configuration: Configuration) -> (any HTTPConnections)? {
        #if canImport(AsyncHTTPClient)
            return AsyncHTTPConnections(trustRoots: configuration.additionalTrustRoots)
        #else
            return nil
        #endif
    }

    /// The configuration this remote was made with.
    public var configuration: Configuration { client.configuration }

    /// The table called `name`, for direct remote access or for the sync engine.
    public func table(_ name: String) -> any RemoteTable { onlineTable(name) }

    /// The table called `name` with the online API (what the legacy SDK calls `MSTable`).
    ///
    /// ```swift
    /// let movie = try await remote.onlineTable("movies").item(id: "id-001")
    /// ```
    public func onlineTable(_ name: String) -> OnlineTable { OnlineTable(name: name, client: client) }

    /// The names of the server's tables, when it lists them: `GET <server>/tables` is an extension
    /// of Ferry's server; the servers of the protocol family answer 404, which is `notFound` here.
    ///
    /// ```swift
    /// let names = try await remote.tableNames()   // ["movies", "todo"]
    /// ```
    public func tableNames() async throws(RemoteError) -> [String] {
        let url = try client.tablesURL()
        let response = try await client.send("GET", url)
        if OnlineTable.isNoEndpoint(response) {
            throw RemoteError(
                .noEndpoint, status: 404,
                "there is no table endpoint at \(client.displayURL(table: "")) (it answered "
                    + "\(response.isHTML ? "a web page" : "that it has no such resource")); "
                    + "the server URL is not the base URL of a table-protocol server")
        }
        if response.status == 404 {
            throw RemoteError(
                .notFound, status: 404,
                "the server does not list its tables (Ferry's server does; with others, name the table)")
        }
        guard response.status == 200 else {
            throw response.failure("listing the tables")
        }
        guard case .object(let body)? = try? JSONValue(parsingUTF8: Array(response.body)),
            case .array(let names)? = body["tables"]
        else {
            throw RemoteError(.invalidResponse, status: 200, "the server's list of tables is not {\"tables\": [...]}")
        }
        return names.compactMap(\.stringValue)
    }
}

extension Duration {
    var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
