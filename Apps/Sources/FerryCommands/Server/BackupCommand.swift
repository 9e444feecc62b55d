public import ArgumentParser
import Configuration
import FerryClient
import FerryConsole
import FerryServer
import Foundation
import ServerStorageCore
import ServerStorageSQLite

/// `ferry backup ferry-2026-11-29.sqlite`: a consistent copy of the server's SQLite database,
/// taken while `ferry serve` runs on it.
///
/// ```
/// ferry backup --db sqlite:/var/lib/ferry/ferry.sqlite /var/backups/ferry-$(date +%F).sqlite
/// ```
public struct BackupCommand: AsyncParsableCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "backup",
        abstract: "Copy the server's SQLite database, consistently, while the server runs.",
        discussion: """
            The copy holds every transaction committed before it began and none after, is compact, \
            and is checked (SQLite's quick_check) before the command says so; the server keeps serving \
            meanwhile. Restore by stopping the server and putting the copy in place of the database \
            (and removing its -wal and -shm files). PostgreSQL: use pg_dump (docs/deploy.md, Backups).
            """)

    @Option(
        help: ArgumentHelp(
            "The server's database: sqlite:PATH (default: $FERRY_DATABASE_URL, else the configuration file's "
                + "databaseURL, else sqlite:ferry.sqlite).",
            valueName: "database"))
    var db: String?

    @Option(
        help: ArgumentHelp(
            "The JSON settings file ferry serve reads, for its databaseURL (default: $FERRY_CONFIG).",
            valueName: "file"))
    var config: String?

    @Argument(help: ArgumentHelp("The new file to copy it to (never replaced).", valueName: "file"))
    var target: String

    @Flag(help: "Show progress on stderr even when it is not a terminal.") var progress = false

    public init() {}

    public func run() async throws {
        do {
            let database = try await self.database()
            let path: String
            switch database {
            case .sqlite(let file):
                path = file
            case .memory:
                throw ClientError(.usage, "a memory database has nothing to back up")
            case .postgreSQL:
                throw ClientError(
                    .usage, "ferry backup copies SQLite databases; \(database) is PostgreSQL",
                    hint: "use pg_dump --format=custom, see docs/deploy.md")
            }
            let started = ContinuousClock.now
            // The database and its WAL: about what the copy comes to (less what it compacts away).
            let total = [path, path + "-wal"].reduce(Int64(0)) { sum, file in
                sum + ((try? FileManager.default.attributesOfItem(atPath: file)[.size] as? NSNumber)?.int64Value ?? 0)
            }
            let report: @Sendable (Int64) -> Void = { bytes in
                let seconds = (ContinuousClock.now - started).components.seconds
                StandardStreams.writeError(
                    "copying: \(Device.bytes(bytes)) of about \(Device.bytes(total)), \(seconds) s\n")
            }
            let backup = try await SQLiteServerStorage.backUp(
                databaseAt: path, to: target, progress: progress || isatty(2) == 1 ? report : nil)
            let seconds =
                Double(backup.duration.components.attoseconds) / 1e18
                + Double(backup.duration.components.seconds)
            StandardStreams.write(
                "backed up sqlite:\(path) to \(target): \(Device.bytes(backup.bytes)), "
                    + "\(backup.tables) table\(backup.tables == 1 ? "" : "s"), checked, in "
                    + String(format: "%.1f s", seconds) + "\n")
        } catch {
            throw CommandFailure.report(Self.failure(error))
        }
    }

    /// The database `ferry serve` would open with the same flag, environment and configuration
    /// file: `--db`, then `$FERRY_DATABASE_URL`, then the file's `databaseURL`, then the default.
    private func database() async throws(ConfigurationError) -> ServerDatabase {
        var flags: [String: ConfigValue] = [:]
        flags["databaseURL"] = db.map { ConfigValue(.string($0), isSecret: false) }
        let settings = try await ServeSettings(
            flags: flags, environment: ProcessInfo.processInfo.environment, configFile: config)
        return try ServerDatabase(settings: settings)
    }

    /// The command's failure with its exit status: 5 when the database is missing, 64 for a target
    /// that exists or a folder that does not, 75 when the database stayed locked, 1 otherwise.
    static func failure(_ error: any Error) -> any Error {
        guard let error = error as? StorageError else {
            if let error = error as? ConfigurationError { return ClientError(.usage, error.message) }
            return error
        }
        switch error.code {
        case .notFound: return ClientError(.notFound, error.message, hint: "give the database with --db sqlite:PATH")
        case .conflict, .invalidName: return ClientError(.usage, error.message)
        case .busy: return ClientError(.busy, error.message, hint: "the database stayed locked; try again")
        default: return ClientError(.failed, error.message)
        }
    }
}
