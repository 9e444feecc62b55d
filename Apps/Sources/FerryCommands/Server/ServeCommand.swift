public import ArgumentParser
import Configuration
import BlobStorageFiles
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

    @Option(
        help: ArgumentHelp(
            "A JSON file of settings, keyed like the options in camel case (default: $FERRY_CONFIG; see docs/deploy.md).",
            valueName: "file"))
    var config: String?

    @Option(parsing: .unconditional, help: "The port to listen on; 0 picks a free port (default: 8080).")
    var port: Int?

    @Option(help: "The address to listen on (default: 127.0.0.1).")
    var host: String?

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

    @Flag(
        inversion: .prefixedNo,
        help: "Accept tokens without an 'exp' claim (by default a token must expire).")
    var authAllowNoExpiry: Bool?

    @Option(
        help: ArgumentHelp(
            "The URL clients reach the server at, with the path a proxy serves it under (for Location and Link headers); default: the request's Host.",
            valueName: "url"))
    var publicURL: String?

    @Flag(
        inversion: .prefixedNo,
        help:
            "Take the public URL of links from the proxy's X-Forwarded-Host/-Proto/-Prefix or Forwarded headers (only behind a proxy that sets them; default: off)."
    )
    var trustProxy: Bool?

    @Flag(
        inversion: .prefixedNo,
        help:
            "Compress JSON answers of 1 KiB or more for clients that ask (Accept-Encoding); default: off, let a proxy do it."
    )
    var compress: Bool?

    @Option(
        help: ArgumentHelp(
            "The origins of browser apps that may call the server from their pages (CORS), comma-separated, or * for any (default: none).",
            valueName: "origins"))
    var corsOrigins: String?

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "The largest request body, in bytes (default: \(RequestLimits().maximumBodySize)).", valueName: "bytes"))
    var maxBodySize: Int?

    @Flag(
        inversion: .prefixedNo,
        help:
            "Serve attachments (files of items), their content kept in the database (default: off)."
    )
    var attachments: Bool?

    @Option(
        help: ArgumentHelp(
            "Keep attachment content as files in this directory instead of the database (implies --attachments; several instances share it only on one machine).",
            valueName: "path"))
    var attachmentsDirectory: String?

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "The largest attachment, in bytes (default: \(AttachmentLimits().maximumFileSize)).", valueName: "bytes"))
    var attachmentMaxFileSize: Int?

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "The most bytes one item's attachments take (default: \(AttachmentLimits().maximumItemSize)).",
            valueName: "bytes"))
    var attachmentMaxItemSize: Int?

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "The most bytes one user's attachments take (default: \(AttachmentLimits().maximumUserSize)).",
            valueName: "bytes"))
    var attachmentMaxUserSize: Int?

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "Seconds a connection may wait for a complete request head, also the keep-alive idle time (default: 30).",
            valueName: "seconds"))
    var idleTimeout: Double?

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp("Seconds a request body may take to arrive (default: 60).", valueName: "seconds"))
    var requestTimeout: Double?

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "Seconds a client may take none of a response before its connection closes (default: 60).",
            valueName: "seconds"))
    var writeTimeout: Double?

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "The most connections open at once (default: \(ConnectionLimits().maximumConnections)).",
            valueName: "count"))
    var maxConnections: Int?

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "The most requests in one batch, POST /tables/$batch (default: \(RequestLimits().maximumBatchRequests)).",
            valueName: "count"))
    var maxBatchRequests: Int?

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "The most change feeds open at once, 429 above it; each also holds one of --max-connections (default: \(RequestLimits().maximumChangeFeeds)).",
            valueName: "count"))
    var maxFeeds: Int?

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "The most change feeds one token subject keeps open; with an auth secret, also one anonymous address (default: \(RequestLimits().maximumChangeFeedsPerUser)).",
            valueName: "count"))
    var maxFeedsPerUser: Int?

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "With an auth secret, the most change feeds anonymous callers keep open together (default: \(RequestLimits().maximumAnonymousChangeFeeds)).",
            valueName: "count"))
    var maxAnonymousFeeds: Int?

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "The most tables inserts may create (declared ones do not count); 403 above it (default: \(RequestLimits().maximumDynamicTables)).",
            valueName: "count"))
    var maxDynamicTables: Int?

    @Flag(
        inversion: .prefixedNo,
        help:
            "Offer only the table protocol, as the servers of the family do: no batch requests, no idempotency keys (to try clients' fallback)."
    )
    var protocolOnly: Bool?

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "Seconds a stop (SIGTERM, SIGINT) waits for requests in flight before it cancels them; change feeds end at once (default: 10).",
            valueName: "seconds"))
    var shutdownTimeout: Double?

    @Option(
        help:
            "The log level: trace, debug, info, notice, warning, error or critical (default: info). Request lines are debug; client errors info, server errors error."
    )
    var logLevel: String?

    @Option(
        help:
            "The log format: text, one line per event, or json, one JSON object per line for log collectors (default: text)."
    )
    var logFormat: String?

    @Flag(
        help:
            "Check the settings and the tables file, print each setting given and where it came from, and exit (0, or 64 with the first problem)."
    )
    var check = false

    @Option(
        help: ArgumentHelp(
            "Record metrics and serve them at /metrics in the Prometheus text format: on or off. Without --metrics-port, /metrics is on the server's port, public to whoever reaches it.",
            valueName: "on|off"))
    var metrics: String?

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "Serve /metrics on this port of its own instead (the server's port then answers 404 there); 0 picks a free port.",
            valueName: "port"))
    var metricsPort: Int?

    @Option(
        help: ArgumentHelp("The address the --metrics-port listens on (default: 127.0.0.1).", valueName: "address"))
    var metricsHost: String?

    @Option(
        help: ArgumentHelp(
            "Export traces with OTLP over HTTP to this collector (as http://localhost:4318); off by default (also on with the OTEL_* variables, see docs/server.md).",
            valueName: "url"))
    var otlpEndpoint: String?

    public init() {}

    /// Starts the server, prints where it listens and serves until SIGINT or SIGTERM. A bad setting
    /// (of the options, the environment, the configuration file or the tables file) is one line
    /// naming it, and exit status 64.
    public func run() async throws {
        do {
            try await serve()
        } catch let error as ConfigurationError {
            StandardStreams.writeError("error: \(error)\n")
            throw ExitCode(64)
        }
    }

    /// The values given on the command line, by setting key (the first source of ``ServeSettings``).
    var givenValues: [String: ConfigValue] {
        var values: [String: ConfigContent] = [:]
        values["host"] = host.map { .string($0) }
        values["port"] = port.map { .int($0) }
        values["databaseURL"] = db.map { .string($0) }
        values["tables"] = tables.map { .string($0) }
        values["authSecret"] = authSecret.map { .string($0) }
        values["authAllowNoExpiry"] = authAllowNoExpiry.map { .bool($0) }
        values["publicURL"] = publicURL.map { .string($0) }
        values["trustProxy"] = trustProxy.map { .bool($0) }
        values["compress"] = compress.map { .bool($0) }
        values["corsOrigins"] = corsOrigins.map { .string($0) }
        values["maxBodySize"] = maxBodySize.map { .int($0) }
        values["idleTimeout"] = idleTimeout.map { .double($0) }
        values["attachments"] = attachments.map { .bool($0) }
        values["attachmentMaxFileSize"] = attachmentMaxFileSize.map { .int($0) }
        values["attachmentsDirectory"] = attachmentsDirectory.map { .string($0) }
        values["attachmentMaxItemSize"] = attachmentMaxItemSize.map { .int($0) }
        values["attachmentMaxUserSize"] = attachmentMaxUserSize.map { .int($0) }
        values["requestTimeout"] = requestTimeout.map { .double($0) }
        values["writeTimeout"] = writeTimeout.map { .double($0) }
        values["maxConnections"] = maxConnections.map { .int($0) }
        values["maxBatchRequests"] = maxBatchRequests.map { .int($0) }
        values["maxFeeds"] = maxFeeds.map { .int($0) }
        values["maxFeedsPerUser"] = maxFeedsPerUser.map { .int($0) }
        values["maxAnonymousFeeds"] = maxAnonymousFeeds.map { .int($0) }
        values["maxDynamicTables"] = maxDynamicTables.map { .int($0) }
        values["protocolOnly"] = protocolOnly.map { .bool($0) }
        values["shutdownTimeout"] = shutdownTimeout.map { .double($0) }
        values["logLevel"] = logLevel.map { .string($0) }
        values["logFormat"] = logFormat.map { .string($0) }
        values["metrics"] = metrics.map { .string($0) }
        values["metricsPort"] = metricsPort.map { .int($0) }
        values["metricsHost"] = metricsHost.map { .string($0) }
        values["otlpEndpoint"] = otlpEndpoint.map { .string($0) }
        return values.mapValues { ConfigValue($0, isSecret: false) }
    }

    private func serve() async throws {
        let settings = try await ServeSettings(
            flags: givenValues, environment: ProcessInfo.processInfo.environment, configFile: config)
        var (configuration, database) = try await Self.configuration(from: settings)
        if check {
            do throws(ConfigurationError) {
                try ServeTracing.validate(
                    endpoint: try settings.string("otlpEndpoint"), environment: ProcessInfo.processInfo.environment)
            } catch {
                throw Self.inSettingNames(error, settings: settings)
            }
            for (key, value, source) in try settings.described() {
                StandardStreams.write("\(key) = \(value)  (\(source))\n")
            }
            StandardStreams.write(
                "ferry serve: the settings are valid (database \(database), \(Self.declaredTables(configuration.tables.count)))\n"
            )
            return
        }
        let logger = configuration.logger
        let tracing: ServeTracing?
        do throws(ConfigurationError) {
            tracing = try ServeTracing.start(
                endpoint: try settings.string("otlpEndpoint"), environment: ProcessInfo.processInfo.environment,
                logger: logger)
        } catch {
            throw Self.inSettingNames(error, settings: settings)
        }
        configuration.tracer = tracing?.tracer
        // Every connection is a file descriptor: take what the system allows, and say so when it is
        // less than the configured connections need.
        let connections = configuration.connections.maximumConnections
        if let limit = OpenFileLimit.raise(), let line = OpenFileLimit.shortfall(limit: limit, connections: connections)
        {
            logger.warning("\(line)")
        }
        if configuration.limits.maximumChangeFeeds > connections {
            logger.warning(
                "\(settings.origin(of: "maxFeeds")) \(configuration.limits.maximumChangeFeeds) is more than \(settings.origin(of: "maxConnections")) \(connections): at most \(connections) feeds can be open"
            )
        }
        let server: ReferenceServer
        // A database this start creates goes again if the start fails (a port in use): a mistake
        // leaves no empty database behind in the directory it was made in.
        let created = database.newFiles()
        do {
            let storage = try await database.open(logger: logger, tracer: tracing?.tracer)
            if configuration.attachments != nil {
                if let directory = try settings.string("attachmentsDirectory") {
                    do {
                        configuration.blobStorage = try FileBlobStorage(
                            directory: directory, configuration: FileBlobStorage.Configuration(logger: logger))
                    } catch let error as BlobStorageError {
                        await tracing?.finish()
                        try? await storage.close()
                        StandardStreams.writeError(
                            "error: \(settings.origin(of: "attachmentsDirectory")): \(error.message)\n")
                        throw ExitCode(1)
                    }
                } else {
                    configuration.blobStorage = storage.blobStorage()
                }
            }
            server = try await ReferenceServer.start(
                configuration, storage: storage, ownsStorage: true, handlesSignals: true)
        } catch let error as StorageError {
            await tracing?.finish()
            StandardStreams.writeError("error: cannot open the database: \(error.message)\n")
            throw ExitCode(1)
        } catch let error as ServerStartError {
            await tracing?.finish()
            for file in created { try? FileManager.default.removeItem(atPath: file) }
            StandardStreams.writeError("error: \(Self.inSettingNames(error, settings: settings))\n")
            throw ExitCode(error.isBadValue ? 64 : 1)
        } catch let error as ConfigurationError {
            await tracing?.finish()
            throw Self.inSettingNames(error, settings: settings)
        }
        if let tracing { logger.info("ferry serve: sending traces to \(tracing.destination)") }
        let line =
            "ferry serve: listening on \(server.url) (database \(database), \(Self.declaredTables(configuration.tables.count)), \(Self.attachmentsNote(configuration))\(Self.metricsNote(server, configuration.metrics)))\n"
        StandardStreams.write(line)
        do {
            try await server.waitUntilStopped()
        } catch {
            await tracing?.finish()
            throw error
        }
        await tracing?.finish()
        logger.notice("ferry serve: stopped")
    }
}
