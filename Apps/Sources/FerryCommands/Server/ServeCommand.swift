public import ArgumentParser
import FerryServer
import FerryConsole
import Foundation
import Logging
import ServerStorageCore

/// `ferry serve`: runs the reference server until SIGINT or SIGTERM.
///
/// ```
/// ferry serve --port 8080 --db sqlite:ferry.sqlite --tables tables.json --auth-secret "$SECRET"
/// ferry serve --port 0 --db memory          # any free port; the line printed says which
/// ```
public struct ServeCommand: AsyncParsableCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the reference server (table protocol 2.0.0 and 3.0.0).",
        discussion: """
            Prints one line saying where it listens, then serves until SIGINT or SIGTERM, when it lets \
            in-flight requests finish and closes the database. Tables declared in --tables exist from the \
            start; with "dynamicTables" (the default) a write to any other table creates it.
            """
    )

    @Option(help: "The port to listen on; 0 picks a free port.")
    var port: Int = 8080

    @Option(help: "The address to listen on.")
    var host: String = "127.0.0.1"

    @Option(
        help: ArgumentHelp(
            "Where the tables live: sqlite:PATH, memory, or postgres://user:password@host:port/db for several instances (default: $FERRY_DATABASE_URL, else sqlite:ferry.sqlite).",
            valueName: "database"))
    var db: String?

    @Option(help: ArgumentHelp("A JSON file declaring the tables (see docs/server.md).", valueName: "file"))
    var tables: String?

    @Option(
        help: ArgumentHelp(
            "The HS256 secret client tokens are signed with, at least 16 bytes (default: $FERRY_AUTH_SECRET; `ferry token` makes development tokens).",
            valueName: "secret"))
    var authSecret: String?

    @Flag(help: "Accept tokens without an 'exp' claim (by default a token must expire).")
    var authAllowNoExpiry = false

    @Option(
        help: ArgumentHelp(
            "The URL clients reach the server at (for Location and Link headers); default: the request's Host.",
            valueName: "url"))
    var publicURL: String?

    @Flag(
        help:
            "Take the public URL of links from the proxy's Forwarded or X-Forwarded-Host/-Proto headers (only behind a proxy that sets them)."
    )
    var trustProxy = false

    @Option(help: ArgumentHelp("The largest request body, in bytes.", valueName: "bytes"))
    var maxBodySize: Int = RequestLimits().maximumBodySize

    @Option(
        help: ArgumentHelp(
            "Seconds a connection may wait for a complete request head (also the keep-alive idle time).",
            valueName: "seconds"))
    var idleTimeout: Double = 30

    @Option(help: ArgumentHelp("Seconds a request body may take to arrive.", valueName: "seconds"))
    var requestTimeout: Double = 60

    @Option(help: ArgumentHelp("The most connections open at once.", valueName: "count"))
    var maxConnections: Int = ConnectionLimits().maximumConnections

    @Option(
        help: ArgumentHelp(
            "The most change feeds open at once (429 above it); each also holds one of --max-connections.",
            valueName: "count"))
    var maxFeeds: Int = RequestLimits().maximumChangeFeeds

    @Option(
        help: ArgumentHelp(
            "The most change feeds one token subject keeps open (with --auth-secret, also one anonymous address).",
            valueName: "count"))
    var maxFeedsPerUser: Int = RequestLimits().maximumChangeFeedsPerUser

    @Option(
        help: ArgumentHelp(
            "With --auth-secret, the most change feeds anonymous callers keep open together.", valueName: "count"))
    var maxAnonymousFeeds: Int = RequestLimits().maximumAnonymousChangeFeeds

    @Option(help: ArgumentHelp("The most requests in one batch (POST /tables/$batch).", valueName: "count"))
    var maxBatchRequests: Int = RequestLimits().maximumBatchRequests

    @Flag(
        help:
            "Offer only the table protocol, as the servers of the family do: no batch requests, no idempotency keys (to try clients' fallback)."
    )
    var protocolOnly = false

    @Option(
        help:
            "The log level: trace, debug, info, notice, warning, error or critical. Request lines are debug; client errors info, server errors error."
    )
    var logLevel: String = "info"

    @Option(help: "The log format: text (one line per event) or json (one JSON object per line, for log collectors).")
    var logFormat: String = "text"

    public init() {}

    public func validate() throws {
        guard ["text", "json"].contains(logFormat.lowercased()) else {
            throw ValidationError("unknown log format '\(logFormat)' (text or json)")
        }
    }

    /// Starts the server, prints where it listens and serves until SIGINT or SIGTERM. A bad setting
    /// (of the options or the tables file) is one line naming it, and exit status 64.
    public func run() async throws {
        do {
            try await serve()
        } catch let error as ConfigurationError {
            StandardStreams.writeError("error: \(Self.inFlagNames(error))\n")
            throw ExitCode(64)
        }
    }

    private func serve() async throws {
        guard let level = Logger.Level(rawValue: logLevel.lowercased()) else {
            throw ValidationError("unknown log level '\(logLevel)'")
        }
        // validate() took only text or json.
        var logger =
            logFormat.lowercased() == "json"
            ? Logger(label: "ferry.server") { JSONLogHandler(label: $0) } : Logger(label: "ferry.server")
        logger.logLevel = level
        var configuration = ServerConfiguration(host: host, port: port, logger: logger)
        // Tables created by a first write soft-delete, so that incremental pulls see deletions
        // (a tables file's "defaults" may say otherwise).
        configuration.dynamicTableDefaults.softDelete = true
        if let tables { try TablesFile.load(tables, into: &configuration) }
        configuration.authSecret = authSecret ?? ProcessInfo.processInfo.environment["FERRY_AUTH_SECRET"]
        configuration.allowsTokensWithoutExpiry = authAllowNoExpiry
        configuration.publicURL = publicURL
        configuration.trustsForwardedHeaders = trustProxy
        configuration.limits.maximumBodySize = maxBodySize
        configuration.limits.maximumBatchBodySize = max(configuration.limits.maximumBatchBodySize, maxBodySize)
        configuration.limits.maximumBatchRequests = maxBatchRequests
        configuration.limits.maximumChangeFeeds = maxFeeds
        configuration.limits.maximumChangeFeedsPerUser = maxFeedsPerUser
        configuration.limits.maximumAnonymousChangeFeeds = maxAnonymousFeeds
        configuration.offersPushExtensions = !protocolOnly
        for (name, seconds) in [("--idle-timeout", idleTimeout), ("--request-timeout", requestTimeout)]
        where !(seconds.isFinite && seconds >= 0.01 && seconds <= 86_400) {
            throw ValidationError("\(name) must be between 0.01 and 86400 seconds")
        }
        configuration.connections = ConnectionLimits(
            idleTimeout: .milliseconds(Int64(idleTimeout * 1000)),
            requestTimeout: .milliseconds(Int64(requestTimeout * 1000)), maximumConnections: maxConnections)
        try configuration.validate()
        // Every connection is a file descriptor: take what the system allows, and say so when it is
        // less than the configured connections need.
        if let limit = OpenFileLimit.raise(),
            let line = OpenFileLimit.shortfall(limit: limit, connections: maxConnections)
        {
            logger.warning("\(line)")
        }
        if maxFeeds > maxConnections {
            logger.warning(
                "--max-feeds \(maxFeeds) is more than --max-connections \(maxConnections): at most \(maxConnections) feeds can be open"
            )
        }
        let environment = ProcessInfo.processInfo.environment[ServerDatabase.environmentVariable]
        let server: ReferenceServer
        let database: ServerDatabase
        do {
            database = try ServerDatabase(
                parsing: db ?? environment.flatMap { $0.isEmpty ? nil : $0 } ?? "sqlite:ferry.sqlite")
            let storage = try await database.open(logger: logger)
            server = try await ReferenceServer.start(
                configuration, storage: storage, ownsStorage: true, handlesSignals: true)
        } catch let error as StorageError {
            StandardStreams.writeError("error: cannot open the database: \(error.message)\n")
            throw ExitCode(1)
        } catch let error as ServerStartError {
            StandardStreams.writeError("error: \(error.message)\n")
            throw ExitCode(1)
        }
        let line =
            "ferry serve: listening on \(server.url) (database \(database), \(configuration.tables.count) declared tables)\n"
        StandardStreams.write(line)
        try await server.waitUntilStopped()
        logger.notice("ferry serve: stopped")
    }

    /// The library names its settings (`maximumConnections must be at least 1`); the command line
    /// says the flag the user typed (`--max-connections must be at least 1`).
    static func inFlagNames(_ error: ConfigurationError) -> ConfigurationError {
        let flags = [
            "maximumConnections": "--max-connections", "maximumBatchRequests": "--max-batch-requests",
            "maximumChangeFeeds": "--max-feeds", "maximumChangeFeedsPerUser": "--max-feeds-per-user",
            "maximumAnonymousChangeFeeds": "--max-anonymous-feeds",
            "maximumBodySize": "--max-body-size", "the auth secret": "--auth-secret (or $FERRY_AUTH_SECRET)",
            "the public URL": "--public-url",
        ]
        var message = error.message
        for (name, flag) in flags where message.hasPrefix(name + " ") {
            message = flag + message.dropFirst(name.count)
        }
        return ConfigurationError(message)
    }
}
