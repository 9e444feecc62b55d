import FerryServer
import Logging
import ServerStorageCore
import ServerStorageSQLite

/// Where `ferry serve --db` keeps the tables: the storage backends the `ferry` executable is built
/// with.
///
/// The server library takes any opened `ServerStorage` and never chooses one; the command line
/// chooses here. Another backend (PostgreSQL) is a module and a case here, never a dependency of
/// FerryServer.
enum ServerDatabase: Sendable, Hashable, CustomStringConvertible {
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
    init(parsing text: String) throws(ConfigurationError) {
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

    var description: String {
        switch self {
        case .sqlite(let path): "sqlite:\(path)"
        case .memory: "memory"
        }
    }

    /// Opens the storage; it logs to `logger`.
    func open(logger: Logger) throws -> any ServerStorage {
        var configuration = SQLiteServerStorage.Configuration()
        configuration.logger = logger
        switch self {
        case .sqlite(let path): return try SQLiteServerStorage(location: .file(path), configuration: configuration)
        case .memory: return try SQLiteServerStorage(location: .memory, configuration: configuration)
        }
    }
}
