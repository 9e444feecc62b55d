public import Logging
public import ServerStorageCore
public import Tracing

/// Everything the reference server needs to start, except its storage.
///
/// The caller gives the logger: a library does not choose where its logs go.
///
/// ```swift
/// var configuration = ServerConfiguration(logger: Logger(label: "app.server"))
/// configuration.port = 0                       // any free port
/// configuration.tables = [TableSettings(name: "todo", softDelete: true)]
/// configuration.authSecret = "a long random secret"
/// let server = try await ReferenceServer.start(configuration, storage: storage)
/// ```
public struct ServerConfiguration: Sendable {
    /// The address to listen on (default `127.0.0.1`).
    public var host: String
    /// The port to listen on; `0` picks a free one (see ``ReferenceServer/port``).
    public var port: Int
    /// The declared tables.
    public var tables: [TableSettings]
    /// Whether a write to an undeclared table creates it with ``dynamicTableDefaults`` (as the
    /// legacy Node backend did); when `false`, undeclared tables answer 404.
    public var allowsDynamicTables: Bool
    /// The settings of tables created by a write (their name is replaced by the table's).
    public var dynamicTableDefaults: TableSettings
    /// The HS256 secret that signs clients' tokens; `nil` accepts no tokens (and no table may then
    /// require auth or be per-user).
    public var authSecret: String?
    /// The `iss` a token must carry, when set.
    public var authIssuer: String?
    /// The `aud` a token must carry, when set.
    public var authAudience: String?
    /// Whether tokens without an `exp` claim are accepted (default `false`: a token must expire).
    public var allowsTokensWithoutExpiry: Bool
    /// The URL clients reach this server at (`https://api.example.com`), used in `Location` and 2.0
    /// `Link` headers. When `nil`, those are built from the request's `Host` header, which must then
    /// be a valid host and port (400 otherwise).
    public var publicURL: String?
    /// Whether the request's `X-Forwarded-Host` and `X-Forwarded-Proto`, or else its `Forwarded`
    /// header (RFC 7239), name the public origin of links when no ``publicURL`` is set (default
    /// `false`). Turn it on only behind a proxy that sets or clears both, or clients could point
    /// links anywhere.
    public var trustsForwardedHeaders = false
    /// Whether answers of JSON of at least 1 KiB are compressed (gzip or deflate) for clients that
    /// ask for it (`Accept-Encoding`); change feeds and attachment downloads never are. Off by
    /// default: behind a proxy, let the proxy compress (docs/deploy.md); on loopback or a fast
    /// network it costs CPU for nothing.
    public var compressesAnswers = false
    /// The origins of browser apps that may call this server from their own pages (CORS):
    /// `["https://app.example.com"]`, as a browser sends them in `Origin`, or `["*"]` for any. Empty
    /// (the default): no CORS headers, and browsers keep pages of other origins from reading the
    /// answers (see docs/server.md).
    public var corsOrigins: [String] = []
    /// Request limits.
    public var limits: RequestLimits
    /// Connection limits and timeouts.
    public var connections: ConnectionLimits
    /// Whether the server offers its push extensions: batch requests (`POST /tables/$batch`) and
    /// idempotency keys, advertised at `GET /tables/$capabilities` (default `true`). When `false`
    /// it answers those as the servers of the protocol family do (404, keys ignored): for testing
    /// clients' fallback.
    public var offersPushExtensions: Bool = true
    /// Attachments (files of items, docs/attachments.md) and their limits; `nil`, the default, does
    /// not offer them. They are offered only with the push extensions.
    public var attachments: AttachmentLimits?
    /// Where the content of attachments is kept (docs/attachments.md); `nil`, the default, answers
    /// uploads and downloads with 501 even when ``attachments`` is set.
    public var blobStorage: (any BlobStorage)?
    /// How long a graceful shutdown (``ReferenceServer/shutdown()``, SIGTERM) lets requests and
    /// change feeds finish before it cancels them (default 10 s); the server then stops within a few
    /// seconds more, whatever still runs.
    public var shutdownGracePeriod: Duration = .seconds(10)
    /// How the server records metrics and where it serves them (default: a Prometheus registry
    /// of the server's own, at `GET /metrics` on the server's port).
    public var metrics = MetricsSettings()
    /// Where the server logs requests (info) and failures.
    public var logger: Logger
    /// The tracer the server's spans go to (swift-distributed-tracing); `nil` (the default) traces
    /// nothing. The server never reads the process-wide `InstrumentationSystem`.
    ///
    /// With a tracer, every request is a `.server` span (`GET /tables/{table}` …), a child of the
    /// span its `traceparent` header names when the tracer's propagation reads one, and every
    /// storage call it makes is a child span (`storage.query` …). Give the storage the same tracer
    /// (its configuration's `tracer`) for a span per database statement below those. docs/server.md
    /// lists the spans and their attributes.
    ///
    /// ```swift
    /// let tracing = try OTel.makeTracingBackend()   // swift-otel; run tracing.service beside the server
    /// configuration.tracer = tracing.factory
    /// ```
    public var tracer: (any Tracer)?

    public init(
        host: String = "127.0.0.1", port: Int = 8080, tables: [TableSettings] = [], allowsDynamicTables: Bool = true,
        dynamicTableDefaults: TableSettings = TableSettings(name: "*"), authSecret: String? = nil,
        authIssuer: String? = nil, authAudience: String? = nil, allowsTokensWithoutExpiry: Bool = false,
        publicURL: String? = nil, limits: RequestLimits = RequestLimits(),
        connections: ConnectionLimits = ConnectionLimits(), logger: Logger
    ) {
        self.host = host
        self.port = port
        self.tables = tables
        self.allowsDynamicTables = allowsDynamicTables
        self.dynamicTableDefaults = dynamicTableDefaults
        self.authSecret = authSecret
        self.authIssuer = authIssuer
        self.authAudience = authAudience
        self.allowsTokensWithoutExpiry = allowsTokensWithoutExpiry
        self.publicURL = publicURL
        self.limits = limits
        self.connections = connections
        self.logger = logger
    }

    /// Checks the configuration as a whole; ``ReferenceServer/start(_:storage:ownsStorage:handlesSignals:)`` calls it.
    ///
    /// - Throws: ``ConfigurationError`` naming the first problem.
    public func validate() throws(ConfigurationError) {
        guard (0...65_535).contains(port) else { throw ConfigurationError("port \(port) is not in 0...65535") }
        // Names by their lower case: a request names a table whatever its case (TableService.resolve).
        var names: [String: String] = [:]
        for table in tables {
            try table.validate()
            if let earlier = names.updateValue(table.name, forKey: table.name.lowercased()) {
                throw ConfigurationError(
                    earlier == table.name
                        ? "table '\(table.name)' is declared twice"
                        : "tables '\(earlier)' and '\(table.name)' differ only in case: requests name tables whatever their case"
                )
            }
            if (table.requiresAuth || table.perUser) && authSecret == nil {
                throw ConfigurationError(
                    "table '\(table.name)' requires authentication, but no auth secret is configured (--auth-secret)")
            }
        }
        var defaults = dynamicTableDefaults
        defaults.name = "dynamic"
        try defaults.validate()
        if allowsDynamicTables && (defaults.requiresAuth || defaults.perUser) && authSecret == nil {
            throw ConfigurationError("dynamic tables require authentication, but no auth secret is configured")
        }
        if let authSecret, authSecret.utf8.count < 16 {
            throw ConfigurationError("the auth secret must be at least 16 bytes long")
        }
        try limits.validate()
        try connections.validate()
        try attachments?.validate()
        try metrics.validate()
        guard shutdownGracePeriod >= .zero else { throw ConfigurationError("shutdownGracePeriod must not be negative") }
        for origin in corsOrigins where origin != "*" || corsOrigins.count > 1 {
            guard origin != "*", PublicOrigin(publicURL: origin) != nil, !origin.hasSuffix("/") else {
                throw ConfigurationError(
                    "the CORS origin '\(LogText.escaped(origin))' must be http:// or https:// with a host and no path"
                        + " (as a browser sends it in Origin), or * alone")
            }
            // A browser leaves the scheme's own port out of Origin: such an entry would never match.
            let lowered = origin.lowercased()
            if (lowered.hasPrefix("https://") && lowered.hasSuffix(":443"))
                || (lowered.hasPrefix("http://") && lowered.hasSuffix(":80"))
            {
                throw ConfigurationError(
                    "the CORS origin '\(origin)' names its scheme's default port, which browsers leave out of"
                        + " Origin: write '\(origin.dropLast(lowered.hasSuffix(":443") ? 4 : 3))'")
            }
        }
        if let publicURL, PublicOrigin(baseURL: publicURL) == nil {
            throw ConfigurationError(
                "the public URL '\(LogText.escaped(publicURL))' must be http:// or https:// with a host, optionally a path "
                    + "of plain segments (letters, digits, - . _ ~) where a proxy serves the server, and no query or fragment"
            )
        }
    }
}

/// A configuration the server cannot start with, described in one line.
public struct ConfigurationError: Error, Sendable, CustomStringConvertible {
    /// What is wrong, in one line.
    public var message: String

    public init(_ message: String) { self.message = message }

    public var description: String { "invalid server configuration: \(message)" }
}

/// Bounds on what one request may ask for; exceeding them gives a 4xx with a JSON body.
public struct RequestLimits: Sendable, Hashable {
    /// The largest request body, in bytes (413 above it).
    public var maximumBodySize: Int
    /// The longest query string, in bytes (414 above it).
    public var maximumQueryLength: Int
    /// The deepest nesting of a `$filter` (400 above it).
    public var maximumFilterDepth: Int
    /// The most requests in one batch (`POST /tables/$batch`; 413 above it).
    public var maximumBatchRequests: Int
    /// The largest batch body, in bytes (413 above it); each request in it is still bounded by
    /// ``maximumBodySize``.
    public var maximumBatchBodySize: Int
    /// The longest one batch runs (default 30 s): the requests it had no time for are answered
    /// 503 with `Retry-After`, not applied.
    public var maximumBatchDuration: Duration
    /// The longest one transaction of a batch holds the writer (default 100 ms): then it commits and
    /// the rest of the batch waits its turn behind other writers. Shorter lets single writes in
    /// sooner and costs more commits; at least one write runs in each.
    public var batchWriteSlice: Duration
    /// The most bytes of read answers one batch returns (default 32 MiB): a read that would pass it
    /// is answered 413 instead. Writes always get their answer.
    public var maximumBatchAnswerSize: Int
    /// The most bytes of stored items one query page returns (default 8 MiB): the page ends before
    /// the item that would pass it, with a next-page link, so that a page of large items costs the
    /// server and the client a bounded amount of memory. A page always holds at least one item.
    public var maximumPageBytes: Int
    /// How long the outcome of a write sent with an `Idempotency-Key` is kept: a retry within it
    /// gets the recorded answer; a retry after it is applied as a new request.
    public var idempotencyRetention: Duration
    /// The most change feeds (`GET /tables/$changes`) open at once (default 10,000; 429 above it).
    /// Each holds a connection, so keep ``ConnectionLimits/maximumConnections`` above it, and the
    /// process's open-file limit above both (docs/deploy.md).
    public var maximumChangeFeeds: Int
    /// The most change feeds one token subject keeps open at once (default 16; 429 above it); on a
    /// server that takes tokens, also the most one anonymous address keeps open.
    public var maximumChangeFeedsPerUser: Int
    /// On a server that takes tokens, the most change feeds anonymous callers keep open together
    /// (default 64), so that they cannot take every place from users with tokens. A server without
    /// tokens, where every caller is anonymous, bounds only the total.
    public var maximumAnonymousChangeFeeds: Int
    /// How far before a resumed feed's position it looks for writes to hint (default 60 s): the
    /// longest a write may take from its stamp to its commit plus the most the clocks of several
    /// instances may differ. More costs resumed clients a pull of a table that changed shortly
    /// before they went away; less risks a hint that never comes.
    public var changeFeedResumeMargin: Duration
    /// How often an open change feed sends a comment line when nothing changes, so that proxies
    /// do not close it as idle.
    public var changeFeedHeartbeat: Duration
    /// The most tables writes may create (default 1,000; declared tables do not count): the first
    /// insert into one more is refused with 403 `tooManyTables`. Each table costs the database a
    /// table and its indexes, and every connection parses them all when it opens: 10,000 tables
    /// took a server 4.4 s to start and 290 MB of memory. On several instances sharing a
    /// database the bound may be passed by a few tables created at once.
    public var maximumDynamicTables: Int
    /// The most bytes of request bodies handled at once (default 32 MiB, two of the largest
    /// batches; at least ``maximumBatchBodySize``), counted by each body's `Content-Length` (a
    /// body without one counts as large as it may be) before it is read. A request that finds no
    /// room waits its turn, at most ``bodyRoomWait``, then is answered 503 `busy` with
    /// `Retry-After`, nothing applied. Handling a body takes many times its size (four 15 MB
    /// batches sent together took a server to 1.09 GB); writes go one after the other anyway, so
    /// waiting costs them little. Uploads of attachment content stream and are not counted.
    ///
    /// An answer of more than 64 KiB holds room too, from when it is made until the client has
    /// read it (but for 32 KiB): a client that reads nothing otherwise keeps its answer in memory
    /// until the write timeout. A request holds its body's room until then, and takes what its
    /// answer needs beyond it: a read (a page, an item, each read of a batch) that finds no room
    /// is answered 503 `busy` with `Retry-After` at once; a write's answer, applied already, goes
    /// out regardless. Answers of 64 KiB or less hold none.
    public var maximumBodyBytesAtOnce: Int
    /// How long a request waits for room under ``maximumBodyBytesAtOnce`` (default 10 s).
    public var bodyRoomWait: Duration

    public init(
        maximumBodySize: Int = 1 << 20, maximumQueryLength: Int = 16_384, maximumFilterDepth: Int = 100,
        maximumBatchRequests: Int = 1_000, maximumBatchBodySize: Int = 16 << 20,
        maximumBatchDuration: Duration = .seconds(30), maximumBatchAnswerSize: Int = 32 << 20,
        idempotencyRetention: Duration = .seconds(24 * 3600), maximumChangeFeeds: Int = 10_000,
        maximumChangeFeedsPerUser: Int = 16, maximumAnonymousChangeFeeds: Int = 64,
        changeFeedHeartbeat: Duration = .seconds(15), changeFeedResumeMargin: Duration = .seconds(60),
        batchWriteSlice: Duration = .milliseconds(100), maximumPageBytes: Int = 8 << 20,
        maximumDynamicTables: Int = 1_000, maximumBodyBytesAtOnce: Int = 32 << 20,
        bodyRoomWait: Duration = .seconds(10)
    ) {
        self.maximumDynamicTables = maximumDynamicTables
        self.maximumBodyBytesAtOnce = maximumBodyBytesAtOnce
        self.bodyRoomWait = bodyRoomWait
        self.maximumPageBytes = maximumPageBytes
        self.batchWriteSlice = batchWriteSlice
        self.maximumAnonymousChangeFeeds = maximumAnonymousChangeFeeds
        self.changeFeedResumeMargin = changeFeedResumeMargin
        self.maximumBodySize = maximumBodySize
        self.maximumQueryLength = maximumQueryLength
        self.maximumFilterDepth = maximumFilterDepth
        self.maximumBatchRequests = maximumBatchRequests
        self.maximumBatchBodySize = maximumBatchBodySize
        self.maximumBatchDuration = maximumBatchDuration
        self.maximumBatchAnswerSize = maximumBatchAnswerSize
        self.idempotencyRetention = idempotencyRetention
        self.maximumChangeFeeds = maximumChangeFeeds
        self.maximumChangeFeedsPerUser = maximumChangeFeedsPerUser
        self.changeFeedHeartbeat = changeFeedHeartbeat
    }

    func validate() throws(ConfigurationError) {
        guard maximumBodySize >= 1024 else { throw ConfigurationError("maximumBodySize must be at least 1024 bytes") }
        guard maximumQueryLength >= 256 else { throw ConfigurationError("maximumQueryLength must be at least 256") }
        guard maximumFilterDepth >= 4 else { throw ConfigurationError("maximumFilterDepth must be at least 4") }
        guard maximumBatchRequests >= 1 else { throw ConfigurationError("maximumBatchRequests must be at least 1") }
        guard maximumBatchBodySize >= maximumBodySize else {
            throw ConfigurationError("maximumBatchBodySize must be at least maximumBodySize")
        }
        guard maximumBatchDuration >= .milliseconds(100) else {
            throw ConfigurationError("maximumBatchDuration must be at least 100 ms")
        }
        guard batchWriteSlice >= .zero, batchWriteSlice <= maximumBatchDuration else {
            throw ConfigurationError("batchWriteSlice must be between 0 and maximumBatchDuration")
        }
        guard maximumBatchAnswerSize >= 1 << 20 else {
            throw ConfigurationError("maximumBatchAnswerSize must be at least 1 MiB")
        }
        guard maximumPageBytes >= 1024 else { throw ConfigurationError("maximumPageBytes must be at least 1024 bytes") }
        guard idempotencyRetention >= .seconds(60) else {
            throw ConfigurationError("idempotencyRetention must be at least 60 seconds")
        }
        guard changeFeedResumeMargin >= .zero else {
            throw ConfigurationError("changeFeedResumeMargin must not be negative")
        }
        for (name, value) in [
            ("maximumChangeFeeds", maximumChangeFeeds), ("maximumChangeFeedsPerUser", maximumChangeFeedsPerUser),
            ("maximumAnonymousChangeFeeds", maximumAnonymousChangeFeeds),
        ] where value < 0 {
            throw ConfigurationError("\(name) must be 0 (no feed) or more")
        }
        guard changeFeedHeartbeat >= .milliseconds(10) else {
            throw ConfigurationError("changeFeedHeartbeat must be at least 10 ms")
        }
        guard maximumBodyBytesAtOnce >= maximumBatchBodySize else {
            throw ConfigurationError("maximumBodyBytesAtOnce must be at least maximumBatchBodySize")
        }
        guard bodyRoomWait >= .zero else { throw ConfigurationError("bodyRoomWait must not be negative") }
        guard maximumDynamicTables >= 0 else {
            throw ConfigurationError("maximumDynamicTables must be 0 (no new table) or more")
        }
    }
}
