/// `scheme://host[:port]` for the absolute links the server sends (`Location`, the 2.0 `Link`),
/// built only from a validated host: the configured public URL, or the request's `Host` header when
/// it is a well-formed host and port. Nothing else of a request reaches those headers. A proxy that
/// serves Ferry under a path (`https://example.com/sync/` → the server's `/`) adds that path, the
/// *prefix*, to every link: from the public URL's path, or a trusted `X-Forwarded-Prefix`.
///
/// ```swift
/// PublicOrigin(publicURL: "https://api.example.com/")?.text        // "https://api.example.com"
/// PublicOrigin(baseURL: "https://example.com/sync/")?.text         // "https://example.com/sync"
/// PublicOrigin(scheme: "http", hostHeader: "a\"b<c>")              // nil: answered with 400
/// ```
struct PublicOrigin: Sendable, Hashable {
    /// The origin and the prefix (when there is one), without a trailing slash.
    let text: String

    /// An origin as a browser sends it: `http` or `https`, a valid host, an optional port, no
    /// user, path, query or fragment (a lone trailing `/` is allowed).
    init?(publicURL: String) {
        guard let (origin, path) = Self.split(publicURL), path.isEmpty || path == "/" else { return nil }
        self = origin
    }

    /// The configured public URL: an origin as ``init(publicURL:)`` takes, and optionally the
    /// path under which a proxy serves the server (see ``isValidPrefix(_:)``); no query or fragment.
    init?(baseURL: String) {
        guard let (origin, path) = Self.split(baseURL) else { return nil }
        let prefix = path.hasSuffix("/") ? String(path.dropLast()) : path
        guard prefix.isEmpty || Self.isValidPrefix(prefix) else { return nil }
        text = origin.text + prefix
    }

    /// This origin under `prefix` (`/sync`), when it is a valid prefix (else unchanged).
    func adding(prefix: String) -> PublicOrigin {
        guard Self.isValidPrefix(prefix) else { return self }
        return PublicOrigin(text: text + prefix)
    }

    private init(text: String) { self.text = text }

    /// The path under which a proxy serves the server: `/` and segments of letters, digits, `-`,
    /// `.`, `_` and `~` (no `.` or `..` segment, no escapes), no trailing `/`, at most 200 bytes.
    static func isValidPrefix(_ text: String) -> Bool {
        guard text.utf8.count <= 200, text.hasPrefix("/") else { return false }
        let segments = text.dropFirst().split(separator: "/", omittingEmptySubsequences: false)
        return segments.allSatisfy { segment in
            !segment.isEmpty && segment != "." && segment != ".."
                && segment.utf8.allSatisfy { byte in
                    isLetterOrDigit(byte) || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".")
                        || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "~")
                }
        }
    }

    /// The origin of `url` and the rest (its path, or `""`); `nil` when it is not http or https
    /// with a valid host, or has a query or a fragment.
    private static func split(_ url: String) -> (PublicOrigin, String)? {
        let lowered = url.lowercased()
        let scheme: String
        if lowered.hasPrefix("https://") {
            scheme = "https"
        } else if lowered.hasPrefix("http://") {
            scheme = "http"
        } else {
            return nil
        }
        let rest = url.dropFirst(scheme.count + 3)
        guard !rest.contains("?"), !rest.contains("#") else { return nil }
        let slash = rest.firstIndex(of: "/") ?? rest.endIndex
        guard let origin = PublicOrigin(scheme: scheme, hostHeader: String(rest[..<slash])) else { return nil }
        return (origin, String(rest[slash...]))
    }

    /// A request's `Host` header (`host`, `host:port`, `[v6]:port`) under `scheme`; `nil` when it is
    /// not a valid host and port.
    init?(scheme: String, hostHeader: String) {
        guard Self.isValidHostAndPort(hostHeader) else { return nil }
        text = "\(scheme)://\(hostHeader)"
    }

    /// RFC 3986 `host [ ":" port ]`, with a registered name limited to letters, digits, `-`, `.`,
    /// `_` and `~` (no percent-escapes or sub-delimiters), and a port of at most 65535.
    static func isValidHostAndPort(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard !bytes.isEmpty, bytes.count <= 262 else { return false }
        var hostEnd = bytes.count
        var portStart: Int?
        if bytes[0] == UInt8(ascii: "[") {
            guard let close = bytes.firstIndex(of: UInt8(ascii: "]")), close > 1 else { return false }
            let literal = bytes[1..<close]
            let allowed = literal.allSatisfy { byte in
                isHexDigit(byte) || byte == UInt8(ascii: ":") || byte == UInt8(ascii: ".")
            }
            guard allowed, literal.contains(UInt8(ascii: ":")) else { return false }
            hostEnd = close + 1
            if hostEnd < bytes.count {
                guard bytes[hostEnd] == UInt8(ascii: ":") else { return false }
                portStart = hostEnd + 1
            }
        } else {
            if let colon = bytes.firstIndex(of: UInt8(ascii: ":")) {
                hostEnd = colon
                portStart = colon + 1
            }
            let name = bytes[..<hostEnd]
            guard !name.isEmpty, name.count <= 253 else { return false }
            let allowed = name.allSatisfy { byte in
                isLetterOrDigit(byte) || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".")
                    || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "~")
            }
            guard allowed else { return false }
        }
        if let portStart {
            let port = bytes[portStart...]
            guard (1...5).contains(port.count), port.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return false }
            let value = port.reduce(0) { $0 * 10 + Int($1 - 0x30) }
            guard value <= 65_535 else { return false }
        }
        return true
    }

    private static func isHexDigit(_ byte: UInt8) -> Bool {
        (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x46) || (byte >= 0x61 && byte <= 0x66)
    }

    private static func isLetterOrDigit(_ byte: UInt8) -> Bool {
        (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
    }
}
