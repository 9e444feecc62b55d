import Foundation

/// A file that belongs to an item, as the device knows it: one row of Ferry's local system table
/// `__attachments`, written in the same store transactions as the item and its queued operation.
///
/// The bytes live apart, in the app's ``AttachmentFiles`` directory, named by their SHA-256; this
/// row says which item they belong to, under which name, and where they stand:
///
/// ```swift
/// for attachment in try await todos.attachments(of: id) where attachment.state == .pendingUpload {
///     print("\(attachment.name): \(attachment.size) bytes waiting for the next push")
/// }
/// ```
public struct ItemAttachment: Sendable, Hashable, CustomStringConvertible {
    /// The item's table.
    public var table: String
    /// The item's id.
    public var itemID: String
    /// The attachment's name, unique per item (``AttachmentName/validate(_:)``).
    public var name: String
    /// The SHA-256 of the content (64 lowercase hex digits).
    public var sha256: String
    /// The content's size in bytes.
    public var size: Int64
    /// The content's media type, if known.
    public var contentType: String?
    /// Where the attachment stands.
    public var state: AttachmentState
    /// A pinned file is never evicted from the cache.
    public var pinned: Bool
    /// When the file was last attached, downloaded or opened (the cache evicts the oldest first).
    public var lastUsed: Timestamp
    /// The position in the attachment queue: uploads and deletes run in this order.
    public var sequence: Int64

    public init(
        table: String, itemID: String, name: String, sha256: String, size: Int64, contentType: String? = nil,
        state: AttachmentState, pinned: Bool = false, lastUsed: Timestamp, sequence: Int64
    ) {
        self.table = table
        self.itemID = itemID
        self.name = name
        self.sha256 = sha256
        self.size = size
        self.contentType = contentType
        self.state = state
        self.pinned = pinned
        self.lastUsed = lastUsed
        self.sequence = sequence
    }

    /// Whether the content is in the files directory.
    public var isLocal: Bool { state.hasLocalFile }

    public var description: String { "\(table)/\(itemID)/\(name) (\(state), \(size) bytes)" }
}

/// Where an ``ItemAttachment`` stands on the device.
public enum AttachmentState: String, Sendable, Hashable, CaseIterable {
    /// Attached here; the next push uploads it (after its item's insert).
    case pendingUpload
    /// Attached here and uploaded: the file is local and synced (the cache may evict it).
    case uploaded
    /// Removed here; the next push deletes it on the server, then the row goes.
    case pendingDelete
    /// Known from a pull; the file is not on the device (never downloaded, or evicted).
    case remote
    /// Downloaded: the file is local and synced (the cache may evict it).
    case downloaded

    /// Whether the file is in the files directory in this state.
    public var hasLocalFile: Bool { self == .pendingUpload || self == .uploaded || self == .downloaded }
    /// Whether the file is synced and may be evicted (unless pinned).
    var isEvictable: Bool { self == .uploaded || self == .downloaded }
    /// Whether the push has work for it.
    var isQueued: Bool { self == .pendingUpload || self == .pendingDelete }
}

/// The rules for attachment names.
public enum AttachmentName: Sendable {
    /// The longest name, in UTF-8 bytes.
    public static let maximumLength = 255

    /// `name` in Unicode's composed form (NFC), as Ferry's server keeps it: "café" typed (one
    /// `é`) and "café" from a file name (`e` and a combining accent, as HFS+ wrote names) are
    /// one attachment, as Swift's `==` already takes them. Every attachment call of
    /// ``SyncTable`` normalizes the names it is given.
    ///
    /// ```swift
    /// Array(AttachmentName.normalized("cafe\u{301}.jpg").utf8) == Array("caf\u{E9}.jpg".utf8)  // true
    /// ```
    public static func normalized(_ name: String) -> String { name.precomposedStringWithCanonicalMapping }

    /// Throws ``SyncError/Code/invalidAttachmentName`` unless `name` is 1 to 255 UTF-8 bytes with no
    /// `/`, `\` or control character, and is not `.` or `..` (a name becomes a URL path segment).
    public static func validate(_ name: String) throws(SyncError) {
        func refuse(_ reason: String) -> SyncError {
            SyncError(.invalidAttachmentName, "invalid attachment name '\(name.prefix(40))': \(reason)")
        }
        guard !name.isEmpty, name.utf8.count <= maximumLength else {
            throw refuse("it must be 1 to \(maximumLength) bytes")
        }
        guard name != ".", name != ".." else { throw refuse("'.' and '..' are reserved") }
        for scalar in name.unicodeScalars {
            switch scalar.value {
            case 0x00...0x1F, 0x7F...0x9F: throw refuse("it holds a control character")
            case 0x2F, 0x5C: throw refuse("it holds '/' or '\\'")
            default: continue
            }
        }
    }
}

/// The local system table's rows: an ``ItemAttachment`` as a JSON item.
enum AttachmentRow {
    static let table = "__attachments"

    static func object(_ attachment: ItemAttachment, id: String) -> JSONObject {
        var object: JSONObject = [
            "id": .string(id), "table": .string(attachment.table), "itemID": .string(attachment.itemID),
            "name": .string(attachment.name), "sha256": .string(attachment.sha256), "size": .int(attachment.size),
            "state": .string(attachment.state.rawValue), "pinned": .bool(attachment.pinned),
            "lastUsed": .int(attachment.lastUsed.millisecondsSince1970), "sequence": .int(attachment.sequence),
        ]
        if let contentType = attachment.contentType { object["contentType"] = .string(contentType) }
        return object
    }

    /// The attachment and its row id, or `nil` for a row that is not one (ignored).
    static func attachment(_ object: JSONObject) -> (id: String, attachment: ItemAttachment)? {
        guard let id = object["id"]?.stringValue, let table = object["table"]?.stringValue,
            let itemID = object["itemID"]?.stringValue, let name = object["name"]?.stringValue,
            let sha256 = object["sha256"]?.stringValue, let size = object["size"]?.intValue,
            let state = object["state"]?.stringValue.flatMap(AttachmentState.init(rawValue:)),
            let sequence = object["sequence"]?.intValue
        else { return nil }
        let attachment = ItemAttachment(
            table: table, itemID: itemID, name: name, sha256: sha256, size: size,
            contentType: object["contentType"]?.stringValue, state: state, pinned: object["pinned"]?.boolValue ?? false,
            lastUsed: Timestamp(millisecondsSince1970: object["lastUsed"]?.intValue ?? 0), sequence: sequence)
        return (id, attachment)
    }
}

extension ItemAttachment {
    /// The `Repr-Digest` field value (RFC 9530) of content whose SHA-256 is `sha256` (lowercase
    /// hex): `sha-256=:<base64 of the 32 bytes>:`. Client and server send it with attachment bytes.
    ///
    /// ```swift
    /// // The SHA-256 of "hello":
    /// let digest = ItemAttachment.reprDigest(
    ///     sha256: "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824")
    /// // "sha-256=:LPJNul+wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ=:"
    /// ```
    public static func reprDigest(sha256: String) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(32)
        var index = sha256.startIndex
        while index < sha256.endIndex, let next = sha256.index(index, offsetBy: 2, limitedBy: sha256.endIndex) {
            bytes.append(UInt8(sha256[index..<next], radix: 16) ?? 0)
            index = next
        }
        return "sha-256=:" + Data(bytes).base64EncodedString() + ":"
    }
}
