import Crypto
import Foundation
import ServerStorageCore
import SyncCore

/// What an upload resource stands for, carried in its URL (`/tables/$uploads/{ticket}`): who
/// uploads which content to which attachment. The server keeps no state for an upload but its
/// bytes: the ticket says the rest, and its HMAC makes it unforgeable, so another user cannot
/// continue, inspect or cancel someone's upload by changing the URL.
///
/// The same attachment, content and user always give the same ticket, so a client that lost the
/// `Location` of its upload (a killed process) gets it back by sending its `PUT` again, and
/// continues from the server's offset.
struct UploadTicket: Sendable, Hashable {
    /// The uploading user's subject, `nil` on a table without users.
    var owner: String?
    var table: String
    var item: String
    var name: String
    /// The declared SHA-256, lower-case hex.
    var sha256: String
    /// The declared size in bytes.
    var length: Int64
    var contentType: String
    /// Whether the table has no users: its uploads count against the quota of the tables without
    /// users together, not the uploader's.
    var shared = false

    /// The key that signs tickets: derived from the auth secret, so that every instance of one
    /// deployment accepts the others' tickets. Without a secret there are no users to tell apart
    /// and the key is a constant: the ticket then only guards against typing mistakes.
    static func key(authSecret: String?) -> SymmetricKey {
        SymmetricKey(data: SHA256.hash(data: Data(("ferry-upload-ticket\u{0}" + (authSecret ?? "")).utf8)))
    }

    private var payload: JSONValue {
        var object: JSONObject = [
            "t": .string(table), "i": .string(item), "n": .string(name), "h": .string(sha256), "l": .int(length),
            "c": .string(contentType),
        ]
        if let owner { object["o"] = .string(owner) }
        if shared { object["s"] = .bool(true) }
        return .object(object)
    }

    /// `payload.signature`, both base64url without padding.
    func token(key: SymmetricKey) -> String {
        let payload = Array(payload.serialized().utf8)
        let signature = HMAC<SHA256>.authenticationCode(for: payload, using: key)
        return Self.base64URL(payload) + "." + Self.base64URL(Array(signature))
    }

    /// The id of the upload's bytes in the blob storage: the prefix of its quota's scope
    /// (``quotaPrefix(_:key:)``), then the signature in hex; 82 characters.
    func uploadID(key: SymmetricKey) -> String {
        Self.quotaPrefix(shared ? .all : .owner(owner ?? ""), key: key)
            + HMAC<SHA256>.authenticationCode(for: Array(payload.serialized().utf8), using: key)
            .map { String(format: "%02x", $0) }.joined()
    }

    /// What the ids of the uploads counted against one quota begin with: `u`, 16 hex digits keyed
    /// on the scope (an uploader's subject, `""` for anonymous callers; or `.all`, the tables
    /// without users together), and `-`. The blob storage counts unfinished uploads by it
    /// (``BlobStorage/unfinishedUploads(idPrefix:)``).
    static func quotaPrefix(_ scope: OwnerScope, key: SymmetricKey) -> String {
        let name =
            switch scope {
            case .all: "shared"
            case .owner(let subject): "uploader\u{0}" + subject
            }
        let tag = HMAC<SHA256>.authenticationCode(for: Array(name.utf8), using: key)
        return "u" + tag.prefix(8).map { String(format: "%02x", $0) }.joined() + "-"
    }

    init(
        owner: String?, table: String, item: String, name: String, sha256: String, length: Int64, contentType: String,
        shared: Bool = false
    ) {
        self.shared = shared
        self.owner = owner
        self.table = table
        self.item = item
        self.name = name
        self.sha256 = sha256
        self.length = length
        self.contentType = contentType
    }

    /// The ticket a token stands for, or `nil` when it is malformed or not signed with `key`.
    init?(token: String, key: SymmetricKey) {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, let payload = Self.bytes(base64URL: parts[0]),
            let signature = Self.bytes(base64URL: parts[1]),
            HMAC<SHA256>.isValidAuthenticationCode(signature, authenticating: payload, using: key),
            case .object(let object)? = try? JSONValue(parsingUTF8: payload),
            case .string(let table)? = object["t"], case .string(let item)? = object["i"],
            case .string(let name)? = object["n"], case .string(let sha256)? = object["h"],
            case .int(let length)? = object["l"], case .string(let contentType)? = object["c"]
        else { return nil }
        var owner: String?
        if case .string(let subject)? = object["o"] { owner = subject }
        self.init(
            owner: owner, table: table, item: item, name: name, sha256: sha256, length: length,
            contentType: contentType, shared: object["s"] == .bool(true))
    }

    static func base64URL(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    static func bytes(base64URL text: some StringProtocol) -> [UInt8]? {
        // Bounded, so that a forged token costs little to refuse, yet above the longest ticket the
        // server writes (an owner of 1,024 bytes and names escaped in JSON); 4,096 refused tickets
        // the server had just handed out, and their uploads could be neither continued nor cancelled.
        guard text.utf8.count <= 16_384 else { return nil }
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.utf8.count % 4) % 4)
        return Data(base64Encoded: base64).map(Array.init)
    }
}
