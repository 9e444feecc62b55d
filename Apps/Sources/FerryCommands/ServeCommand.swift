public import ArgumentParser
import FerryServer
import Foundation
import Logging

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

    @Option(help: "Where the tables live: sqlite:PATH or memory.")
    var db: String = "sqlite:ferry.sqlite"

    @Option(help: ArgumentHelp("A JSON file declaring the tables (see docs/server.md).", valueName: "file"))
    var tables: String?

    @Option(
        help: ArgumentHelp(
            "The HS256 secret client tokens are signed with (default: $FERRY_AUTH_SECRET).", valueName: "secret"))
    var authSecret: String?

    @Option(help: "The log level: trace, debug, info, notice, warning, error or critical.")
    var logLevel: String = "info"

    public init() {}

    /// Starts the server, prints where it listens and serves until SIGINT or SIGTERM.
    public func run() async throws {
        guard let level = Logger.Level(rawValue: logLevel.lowercased()) else {
            throw ValidationError("unknown log level '\(logLevel)'")
        }
        var logger = Logger(label: "ferry.server")
        logger.logLevel = level
        var configuration = ServerConfiguration(host: host, port: port, logger: logger)
        // Tables created by a first write soft-delete, so that incremental pulls see deletions
        // (a tables file's "defaults" may say otherwise).
        configuration.dynamicTableDefaults.softDelete = true
        if let tables { try TablesFile.load(tables, into: &configuration) }
        configuration.authSecret = authSecret ?? ProcessInfo.processInfo.environment["FERRY_AUTH_SECRET"]
        let database = try ServerDatabase(parsing: db)
        let server = try await ReferenceServer.start(configuration, database: database, handlesSignals: true)
        let line =
            "ferry serve: listening on \(server.url) (database \(database), \(configuration.tables.count) declared tables)\n"
        FileHandle.standardOutput.write(Data(line.utf8))
        try await server.waitUntilStopped()
        logger.notice("ferry serve: stopped")
    }
}
