public import ServerStorageCore

/// Where a PostgreSQL database is: a `postgres://` (or `postgresql://`) URL, parsed without the
/// password ever reaching a log line or an error message.
///
/// ```swift
/// let url = try PostgreSQLURL("postgres://ferry:secret@db.internal:5432/ferry?sslmode=require")
/// print(url)            // postgres://ferry@db.internal:5432/ferry?sslmode=require
/// print(url.password)   // Optional("secret")
/// ```
///
/// The user, password and database may be percent-encoded. The query may set `sslmode`:
/// `disable` (the default), `prefer` or `require` (encrypted, the certificate not verified), and
/// `verify-full` (encrypted and verified against the system's trust roots and the host name); and
/// `schema`, the PostgreSQL schema Ferry's tables live in (see
/// ``PostgreSQLServerStorage/Configuration/schema``).
public struct PostgreSQLURL: Sendable, Hashable, CustomStringConvertible {
    /// How the connection uses TLS, as libpq's `sslmode` names it.
    public enum TLSMode: String, Sendable, Hashable {
        /// No TLS.
        case disable
        /// TLS when the server offers it, not verified.
        case prefer
        /// TLS or no connection, not verified.
        case require
        /// TLS or no connection, the certificate verified for the host.
        case verifyFull = "verify-full"
    }

    /// The host name or address.
    public var host: String
    /// The port (5432 unless the URL says otherwise).
    public var port: Int
    /// The role to log in as.
    public var user: String
    /// The role's password, if any. Never part of ``description``.
    public var password: String?
    /// The database's name (the user's name when the URL has no path, as libpq does).
    public var database: String
    /// How the connection uses TLS.
    public var tlsMode: TLSMode
    /// The schema named by the URL's `schema` parameter, if any.
    public var schema: String?

    /// Parses a URL such as `postgres://user:password@host:5432/database`.
    ///
    /// - Parameter text: The URL.
    /// - Throws: `StorageError` with `StorageError.Code.invalidName` and one line naming what is
    ///   wrong (never the password).
    public init(_ text: String) throws(StorageError) {
        var rest: Substring
        if text.hasPrefix("postgres://") {
            rest = text.dropFirst("postgres://".count)
        } else if text.hasPrefix("postgresql://") {
            rest = text.dropFirst("postgresql://".count)
        } else {
            throw StorageError(
                .invalidName, "a PostgreSQL URL starts with postgres://, as in postgres://user:password@host:5432/db")
        }
        var query: Substring = ""
        if let mark = rest.firstIndex(of: "?") {
            query = rest[rest.index(after: mark)...]
            rest = rest[..<mark]
        }
        var path: Substring = ""
        if let slash = rest.firstIndex(of: "/") {
            path = rest[rest.index(after: slash)...]
            rest = rest[..<slash]
        }
        var credentials: Substring?
        if let at = rest.lastIndex(of: "@") {
            credentials = rest[..<at]
            rest = rest[rest.index(after: at)...]
        }
        var hostPart = rest
        var port = 5432
        if hostPart.hasPrefix("[") {
            guard let close = hostPart.firstIndex(of: "]") else {
                throw StorageError(.invalidName, "the PostgreSQL URL's host has '[' without ']'")
            }
            let after = hostPart[hostPart.index(after: close)...]
            if after.hasPrefix(":") { port = try Self.port(after.dropFirst()) }
            hostPart = hostPart[hostPart.index(after: hostPart.startIndex)..<close]
        } else if let colon = hostPart.lastIndex(of: ":") {
            port = try Self.port(hostPart[hostPart.index(after: colon)...])
            hostPart = hostPart[..<colon]
        }
        guard !hostPart.isEmpty else {
            throw StorageError(.invalidName, "the PostgreSQL URL has no host, as in postgres://user@127.0.0.1:5432/db")
        }
        host = String(hostPart)
        self.port = port
        var user: String?
        if let credentials {
            if let colon = credentials.firstIndex(of: ":") {
                user = try Self.decoded(credentials[..<colon], "user")
                password = try Self.decoded(credentials[credentials.index(after: colon)...], "password")
            } else {
                user = try Self.decoded(credentials, "user")
            }
        }
        guard let user, !user.isEmpty else {
            throw StorageError(.invalidName, "the PostgreSQL URL names no user, as in postgres://user@host/db")
        }
        self.user = user
        let name = try Self.decoded(path, "database")
        database = name.isEmpty ? user : name
        tlsMode = .disable
        for pair in query.split(separator: "&") where !pair.isEmpty {
            let parts = pair.split(separator: "=", maxSplits: 1)
            let key = String(parts[0])
            let value = parts.count > 1 ? try Self.decoded(parts[1], key) : ""
            switch key {
            case "schema":
                if let problem = Self.problem(ofSchema: value) {
                    throw StorageError(.invalidName, "the PostgreSQL URL's schema \(problem)")
                }
                schema = value
            case "sslmode":
                switch value {
                case "disable": tlsMode = .disable
                case "allow", "prefer": tlsMode = .prefer
                case "require": tlsMode = .require
                case "verify-ca", "verify-full": tlsMode = .verifyFull
                default:
                    throw StorageError(
                        .invalidName, "unknown sslmode '\(value)': use disable, prefer, require or verify-full")
                }
            default:
                throw StorageError(
                    .invalidName, "unknown PostgreSQL URL parameter '\(key)' (sslmode and schema are read)")
            }
        }
    }

    /// Why `schema` cannot be the schema of Ferry's tables (`'Bad-Schema' is not …`), or `nil`
    /// when it can: 1 to 48 characters of `a-z 0-9 _`, not starting with a digit.
    static func problem(ofSchema schema: String) -> String? {
        let valid =
            (1...48).contains(schema.utf8.count)
            && schema.utf8.allSatisfy { (0x61...0x7A).contains($0) || (0x30...0x39).contains($0) || $0 == 0x5F }
            && !(0x30...0x39).contains(schema.utf8.first ?? 0)
        return valid ? nil : "'\(schema)' is not 1 to 48 characters of a-z 0-9 _ (not starting with a digit)"
    }

    /// The URL without its password, for logs and messages.
    public var description: String {
        let shownHost = host.contains(":") ? "[\(host)]" : host
        var parameters: [String] = []
        if tlsMode != .disable { parameters.append("sslmode=\(tlsMode.rawValue)") }
        if let schema { parameters.append("schema=\(schema)") }
        let suffix = parameters.isEmpty ? "" : "?" + parameters.joined(separator: "&")
        return "postgres://\(user)@\(shownHost):\(port)/\(database)\(suffix)"
    }

    private static func port(_ text: Substring) throws(StorageError) -> Int {
        guard let port = Int(text), (1...65_535).contains(port) else {
            throw StorageError(.invalidName, "the PostgreSQL URL's port '\(text)' is not a number from 1 to 65535")
        }
        return port
    }

    /// Percent-decodes one part of the URL.
    private static func decoded(_ text: Substring, _ what: String) throws(StorageError) -> String {
        var bytes: [UInt8] = []
        var iterator = Array(text.utf8).makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            guard let high = iterator.next().flatMap(Self.hexValue), let low = iterator.next().flatMap(Self.hexValue)
            else {
                throw StorageError(
                    .invalidName, "the PostgreSQL URL's \(what) has a '%' not followed by two hex digits")
            }
            bytes.append(high << 4 | low)
        }
        guard let decoded = String(validating: bytes, as: UTF8.self), !decoded.utf8.contains(0) else {
            throw StorageError(.invalidName, "the PostgreSQL URL's \(what) is not valid UTF-8 text")
        }
        return decoded
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
