import FerryServer
import Foundation
import Logging
import ServerStorageCore
import ServerStoragePostgreSQL
import ServerStorageSQLite
import Tracing

/// Where `ferry serve --db` keeps the tables: the storage backends the `ferry` executable is built
/// with.
///
/// The server library takes any opened `ServerStorage` and never chooses one; the command line
/// chooses here. Each backend is a module and a case here, never a dependency of FerryServer.
enum ServerDatabase: Sendable, Hashable, CustomStringConvertible {
    /// A SQLite database file (created when absent).
    case sqlite(path: String)
    /// An in-memory SQLite database, gone when the server stops.
    case memory
    /// A PostgreSQL database, which several server instances can share.
    case postgreSQL(PostgreSQLURL)

    /// The environment variable read when `--db` is not given: it keeps a password out of `ps`.
    static let environmentVariable = "FERRY_DATABASE_URL"

    /// Parses `sqlite:PATH`, a bare path, `memory`, or `postgres://user:password@host:port/db`.
    ///
    /// ```swift
    /// try ServerDatabase(parsing: "sqlite:/var/lib/ferry.sqlite")   // .sqlite(path: "/var/lib/ferry.sqlite")
    /// try ServerDatabase(parsing: "memory")                         // .memory
    /// try ServerDatabase(parsing: "postgres://ferry@db:5432/ferry") // .postgreSQL(…)
    /// ```
    init(parsing text: String) throws(ConfigurationError) {
        if text.hasPrefix("postgres://") || text.hasPrefix("postgresql://") {
            do {
                self = .postgreSQL(try PostgreSQLURL(text))
            } catch {
                throw ConfigurationError(error.message)
            }
        } else if text == "memory" || text == "sqlite::memory:" || text == ":memory:" {
            self = .memory
        } else if text.hasPrefix("sqlite:") {
            let path = String(text.dropFirst("sqlite:".count))
            guard !path.isEmpty else {
                throw ConfigurationError("sqlite: needs a path, as in sqlite:ferry.sqlite")
            }
            self = .sqlite(path: path)
        } else if text.contains(":") && !text.hasPrefix("/") && !text.hasPrefix(".") {
            throw ConfigurationError(
                "unknown database '\(Self.withoutPassword(text))': "
                    + "use sqlite:PATH, memory or postgres://user:password@host:port/db")
        } else if text.isEmpty {
            throw ConfigurationError(
                "the database is empty: use sqlite:PATH, memory or postgres://user:password@host:port/db")
        } else {
            self = .sqlite(path: text)
        }
    }

    var description: String {
        switch self {
        case .sqlite(let path): "sqlite:\(path)"
        case .memory: "memory"
        case .postgreSQL(let url): url.description
        }
    }

    /// Opens the storage; it logs to `logger`, and traces its statements to `tracer` when given.
    /// PostgreSQL's migrations run here.
    func open(logger: Logger, tracer: (any Tracer)? = nil) async throws -> any ServerStorage {
        switch self {
        case .sqlite(let path):
            return try SQLiteServerStorage(location: .file(path), configuration: .init(logger: logger, tracer: tracer))
        case .memory:
            return try SQLiteServerStorage(location: .memory, configuration: .init(logger: logger, tracer: tracer))
        case .postgreSQL(let url):
            return try await PostgreSQLServerStorage.open(url, configuration: .init(logger: logger, tracer: tracer))
        }
    }
}

extension ServerDatabase {
    /// The files opening the database would create: a SQLite file not there yet, with its `-wal`
    /// and `-shm`; none otherwise.
    func newFiles() -> [String] {
        guard case .sqlite(let path) = self, !FileManager.default.fileExists(atPath: path) else { return [] }
        return [path, path + "-wal", path + "-shm"]
    }

    /// The database the settings name (`databaseURL`, else `sqlite:ferry.sqlite`); an error names
    /// where the bad value came from (the flag, the environment variable or the file's key).
    init(settings: ServeSettings) throws(ConfigurationError) {
        let url = try settings.string("databaseURL").flatMap { $0.isEmpty ? nil : $0 } ?? "sqlite:ferry.sqlite"
        do throws(ConfigurationError) {
            self = try ServerDatabase(parsing: url)
        } catch {
            throw ConfigurationError("\(settings.origin(of: "databaseURL")): \(error.message)")
        }
    }

    /// `text` with the password of a URL's authority left out, for messages: a mistyped scheme
    /// (`postgress://ferry:secret@db/ferry`) must not print the password.
    static func withoutPassword(_ text: String) -> String {
        guard let scheme = text.firstRange(of: "://") else { return text }
        let rest = text[scheme.upperBound...]
        let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        guard let at = authority.lastIndex(of: "@"), let colon = authority[..<at].firstIndex(of: ":") else {
            return text
        }
        return String(text[...colon]) + "…" + String(text[at...])
    }
}
