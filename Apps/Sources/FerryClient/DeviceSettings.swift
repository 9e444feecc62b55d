public import Foundation
import StoreLMDB
import StoreMemory
import StoreSQLite
public import SyncCore
public import Transport

/// Where a device keeps its local store: `sqlite:PATH`, `lmdb:PATH` or `memory`.
///
/// ```swift
/// let location = try StoreLocation(parsing: "sqlite:phone.ferry")
/// let store = try location.open()
/// ```
public enum StoreLocation: Sendable, Hashable, CustomStringConvertible {
    case sqlite(String)
    case lmdb(String)
    case memory

    /// Reads `sqlite:PATH`, `lmdb:PATH` or `memory`; a bare path ending in `.sqlite` or `.ferry`
    /// means SQLite.
    public init(parsing text: String) throws(ClientError) {
        if text == "memory" {
            self = .memory
        } else if text.hasPrefix("sqlite:"), text.count > 7 {
            self = .sqlite(String(text.dropFirst(7)))
        } else if text.hasPrefix("lmdb:"), text.count > 5 {
            self = .lmdb(String(text.dropFirst(5)))
        } else if !text.contains(":"), text.hasSuffix(".sqlite") || text.hasSuffix(".ferry") {
            self = .sqlite(text)
        } else {
            throw ClientError(
                .usage, "'\(text)' is not a store", hint: "use sqlite:PATH, lmdb:PATH or memory")
        }
    }

    public var description: String {
        switch self {
        case .sqlite(let path): "sqlite:\(path)"
        case .lmdb(let path): "lmdb:\(path)"
        case .memory: "memory"
        }
    }

    /// Whether the store is there to open without creating it (always for `memory`).
    public var exists: Bool {
        switch self {
        case .sqlite(let path), .lmdb(let path): FileManager.default.fileExists(atPath: path)
        case .memory: true
        }
    }

    /// Fails with `notFound`, naming the path, when the store does not exist: read-only commands
    /// open stores this way, so a mistyped path is an error rather than a new empty store.
    public func requireExisting() throws(ClientError) {
        guard !exists else { return }
        throw ClientError(
            .notFound, "no store at '\(description)'",
            hint: "check --store; stores are created by their first write, such as insert or pull")
    }

    /// Whether the store holds no item and no queued operation (`false` when it cannot be read):
    /// a command that created a store and then failed removes it only then. A pull that failed
    /// after some pages keeps them (the next one resumes), and a store another process wrote to
    /// meanwhile keeps what it wrote.
    public func holdsNothing() async -> Bool {
        guard exists, let store = try? open() else { return false }
        let empty = try? await store.read { reader in
            try reader.operationCount(table: nil) == 0 && reader.tableNames().allSatisfy { try reader.count($0) == 0 }
        }
        try? await store.close()
        return empty ?? false
    }

    /// Deletes the store's files (SQLite's with its journal files, LMDB's directory, and the
    /// attachments directory beside them); a command that created a store and then failed calls it
    /// when it ``holdsNothing()``.
    public func remove() {
        let files = FileManager.default
        if let attachments = attachmentsDirectory { try? files.removeItem(at: attachments) }
        switch self {
        case .sqlite(let path):
            for suffix in ["", "-wal", "-shm", "-journal"] { try? files.removeItem(atPath: path + suffix) }
        case .lmdb(let path):
            try? files.removeItem(atPath: path)
        case .memory:
            break
        }
    }

    /// Opens (or creates) the store.
    public func open() throws -> any LocalStore {
        switch self {
        case .sqlite(let path): return try SQLiteStore(path: path)
        case .memory: return MemoryStore()
        case .lmdb(let path): return try LMDBStore(path: path)
        }
    }
}

/// How to reach the server.
public struct ServerSettings: Sendable, Hashable {
    public var url: URL
    public var protocolVersion: ProtocolVersion
    public var token: String?
    /// PEM files of authorities to trust besides the system's (a server with a private certificate).
    public var trustRoots: [String]

    public init(url: URL, protocolVersion: ProtocolVersion = .v3, token: String? = nil, trustRoots: [String] = []) {
        self.url = url
        self.protocolVersion = protocolVersion
        self.token = token
        self.trustRoots = trustRoots
    }

    /// A remote for this server, sending the token when there is one.
    public func remote(timeout: Duration = .seconds(30), retry: HTTPRemote.RetryPolicy = HTTPRemote.RetryPolicy())
        -> HTTPRemote
    {
        let token = token
        return HTTPRemote(
            HTTPRemote.Configuration(
                serverURL: url, protocolVersion: protocolVersion, timeout: timeout, retry: retry,
                additionalTrustRoots: trustRoots),
            tokenProvider: token.map { token -> HTTPRemote.TokenProvider in { @Sendable _ in token } })
    }
}

/// The conflict policy of a device, by name: `keep`, `server`, `client` or `merge`.
public enum ConflictPolicy: String, Sendable, Hashable, CaseIterable {
    case keep, server, client, merge

    var handler: any ConflictHandler {
        switch self {
        case .keep: KeepingConflictHandler()
        case .server: ServerWinsConflictHandler()
        case .client: ClientWinsConflictHandler()
        case .merge: ThreeWayMergeConflictHandler()
        }
    }
}
