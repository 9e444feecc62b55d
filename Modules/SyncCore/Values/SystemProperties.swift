/// The names of the system properties every synced item may carry.
public enum SystemProperty: String, Sendable, Hashable, CaseIterable {
    /// The item's id: a string, see ``ItemID``.
    case id
    /// When the server created the item: ``Timestamp`` text, `yyyy-MM-ddTHH:mm:ss.SSSZ`.
    case createdAt
    /// When the server last changed the item: ``Timestamp`` text.
    case updatedAt
    /// The server's opaque concurrency token.
    case version
    /// `true` once the item is soft-deleted on the server.
    case deleted

    /// Whether `name` is a system property, ignoring case as the servers do.
    public static func isSystemProperty(_ name: String) -> Bool {
        SystemProperty.allCases.contains { $0.rawValue.caseInsensitiveEquals(name) }
    }
}

extension Dictionary where Key == String, Value == JSONValue {
    /// The item's `id`, when it is a string.
    public var id: String? {
        get { self["id"]?.stringValue }
        set { self["id"] = newValue.map(JSONValue.string) }
    }

    /// The item's `version`, when it is a string.
    public var version: String? { self["version"]?.stringValue }

    /// The item's `updatedAt`, when it is a valid date-time.
    public var updatedAt: Timestamp? { self["updatedAt"]?.stringValue.flatMap { Timestamp(iso8601: $0) } }

    /// The item's `createdAt`, when it is a valid date-time.
    public var createdAt: Timestamp? { self["createdAt"]?.stringValue.flatMap { Timestamp(iso8601: $0) } }

    /// `true` when the item is marked `deleted`.
    public var isDeleted: Bool { self["deleted"]?.boolValue ?? false }
}

extension String {
    func caseInsensitiveEquals(_ other: String) -> Bool {
        guard utf8.count == other.utf8.count else { return false }
        return zip(utf8, other.utf8).allSatisfy { lowerASCII($0) == lowerASCII($1) }
    }
}

@inline(__always)
func lowerASCII(_ byte: UInt8) -> UInt8 {
    byte >= 0x41 && byte <= 0x5A ? byte + 0x20 : byte
}
