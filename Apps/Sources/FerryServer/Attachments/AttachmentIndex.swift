import Crypto
import Foundation
import ServerStorageCore
import SyncCore

/// One attachment of an item, as the index holds it: where it belongs, and which content.
struct StoredAttachment: Sendable, Hashable {
    /// The app table of the item.
    var table: String
    /// The item's id.
    var item: String
    /// The attachment's name within the item.
    var name: String
    /// The SHA-256 of the content, lower-case hex.
    var sha256: String
    /// The content's size in bytes.
    var size: Int64
    /// The media type the client gave.
    var contentType: String
    /// The row's `updatedAt` and `version` (for lists, and as the attachment's change stamp).
    var updatedAt: Timestamp
    var version: Int64

    /// The JSON of the row's content.
    var content: JSONObject {
        [
            "table": .string(table), "item": .string(item), "name": .string(name), "sha256": .string(sha256),
            "size": .int(size), "contentType": .string(contentType),
        ]
    }

    init(
        table: String, item: String, name: String, sha256: String, size: Int64, contentType: String,
        updatedAt: Timestamp = Timestamp(millisecondsSince1970: 0), version: Int64 = 0
    ) {
        self.table = table
        self.item = item
        self.name = name
        self.sha256 = sha256
        self.size = size
        self.contentType = contentType
        self.updatedAt = updatedAt
        self.version = version
    }

    /// The attachment a row holds, or `nil` for a row that is not one (never written by the index).
    init?(_ row: StoredItem) {
        guard case .string(let table)? = row.content["table"], case .string(let item)? = row.content["item"],
            case .string(let name)? = row.content["name"], case .string(let sha256)? = row.content["sha256"],
            case .int(let size)? = row.content["size"], case .string(let contentType)? = row.content["contentType"]
        else { return nil }
        self.init(
            table: table, item: item, name: name, sha256: sha256, size: size, contentType: contentType,
            updatedAt: row.updatedAt, version: row.version)
    }
}

/// Which item has which attachments: rows of the system table `__attachments` in the records
/// storage (docs/attachments.md).
///
/// Being rows, attachments get what records have: commit-ordered stamps for incremental pulls,
/// the owner scope of per-user tables (a row's owner is its item's), soft delete (a removed
/// attachment is a tombstone, so devices learn of it) and purge. A row's id is the SHA-256 of
/// table, item and name, so that one attachment has one row whatever its name holds.
struct AttachmentIndex: Sendable {
    /// The system table (the `__` prefix is reserved: no app table can be named so).
    static let table = StorageTable(name: StorageTable.attachmentsTableName)
    /// How often a write is retried when another writer changed the row first.
    static let maximumAttempts = 8

    let storage: any ServerStorage

    /// The row id of an attachment.
    static func rowID(table: String, item: String, name: String) -> String {
        let digest = SHA256.hash(data: Data((table + "\u{0}" + item + "\u{0}" + name).utf8))
        return digest.map { String(format: "%02x", $0) }.joined()
    }

    /// Records `attachment` (a new one, or new content under the same name), owned as its item is.
    func put(_ attachment: StoredAttachment, owner: String?) async throws -> StoredAttachment {
        let id = Self.rowID(table: attachment.table, item: attachment.item, name: attachment.name)
        for _ in 0..<Self.maximumAttempts {
            do {
                return try Self.decoded(
                    try await storage.insert(into: Self.table, id: id, content: attachment.content, owner: owner))
            } catch let error as StorageError where error.code == .conflict {
                guard let current = error.current else { continue }
                do {
                    return try Self.decoded(
                        try await storage.replace(
                            in: Self.table, id: id, expectedVersion: current.version, content: attachment.content,
                            deleted: false, owner: .all))
                } catch let error as StorageError where error.code == .versionMismatch || error.code == .notFound {
                    continue
                }
            }
        }
        throw StorageError(.busy, "attachment '\(attachment.name)' kept changing while it was recorded")
    }

    /// The attachment named `name` of an item, if `owner` may see it.
    func attachment(table: String, item: String, name: String, owner: OwnerScope) async throws -> StoredAttachment? {
        let id = Self.rowID(table: table, item: item, name: name)
        guard let row = try await storage.item(in: Self.table, id: id, owner: owner), !row.deleted else { return nil }
        return StoredAttachment(row)
    }

    /// The row of the attachment named `name` of an item, a tombstone too, if `owner` may see it.
    func row(table: String, item: String, name: String, owner: OwnerScope) async throws -> StoredItem? {
        try await storage.item(in: Self.table, id: Self.rowID(table: table, item: item, name: name), owner: owner)
    }

    /// The attachments of an item, by name.
    func attachments(table: String, item: String, owner: OwnerScope) async throws -> [StoredAttachment] {
        try await rows(where: Self.equal(["table": table, "item": item]), owner: owner)
            .compactMap(StoredAttachment.init).sorted { $0.name < $1.name }
    }

    /// Removes an attachment (a tombstone stays for incremental pulls); `false` when there is none.
    func remove(table: String, item: String, name: String, owner: OwnerScope) async throws -> Bool {
        let id = Self.rowID(table: table, item: item, name: name)
        for _ in 0..<Self.maximumAttempts {
            guard let row = try await storage.item(in: Self.table, id: id, owner: owner), !row.deleted else {
                return false
            }
            do {
                _ = try await storage.replace(
                    in: Self.table, id: id, expectedVersion: row.version, content: row.content, deleted: true,
                    owner: owner)
                return true
            } catch let error as StorageError where error.code == .versionMismatch || error.code == .notFound {
                continue
            }
        }
        throw StorageError(.busy, "attachment '\(name)' kept changing while it was removed")
    }

    /// Removes every row of an item for good (its hard delete or purge).
    func purge(table: String, item: String) async throws {
        let filter = Self.equal(["table": table, "item": item])
        for row in try await rows(where: filter, owner: .all, includeDeleted: true) {
            do {
                try await storage.delete(from: Self.table, id: row.id, expectedVersion: row.version, owner: .all)
            } catch let error as StorageError where error.code == .notFound || error.code == .versionMismatch {
                // Removed or changed meanwhile: the next purge takes what is left.
            }
        }
    }

    /// The bytes `owner`'s attachments take (each attachment counts, even when contents repeat:
    /// the quota is what the user attached, not what the server stores); for `.all`, those of the
    /// tables without users, whose rows have no owner (the users' own do not count there).
    func bytesUsed(by owner: OwnerScope) async throws -> Int64 {
        var rows = try await rows(where: nil, owner: owner)
        if owner == .all { rows.removeAll { $0.owner != nil } }
        return rows.compactMap(StoredAttachment.init).reduce(0) { $0 + $1.size }
    }

    /// The bytes the attachments of one item take.
    func bytesUsed(table: String, item: String) async throws -> Int64 {
        try await attachments(table: table, item: item, owner: .all).reduce(0) { $0 + $1.size }
    }

    /// Whether content `sha256` is attached somewhere `owner` can read: for a per-user table the
    /// user's own attachments, else the same table's (the scope in which a client may skip an
    /// upload without learning what others stored).
    func holds(sha256: String, table: String, owner: OwnerScope) async throws -> Bool {
        var fields = ["sha256": sha256]
        if case .all = owner { fields["table"] = table }
        return try await !rows(where: Self.equal(fields), owner: owner, limit: 1).isEmpty
    }

    /// How the rows name content `sha256`: an attachment still has it, or only removed ones do (and
    /// the last was removed at that time), or none does.
    enum Reference: Equatable {
        case attached
        case removed(at: Int64)
        case none
    }

    /// How the rows name content `sha256` now (see ``Reference``).
    func reference(to sha256: String) async throws -> Reference {
        let rows = try await rows(where: Self.equal(["sha256": sha256]), owner: .all, includeDeleted: true)
        if rows.contains(where: { !$0.deleted }) { return .attached }
        guard let last = rows.map(\.updatedAt.millisecondsSince1970).max() else { return .none }
        return .removed(at: last)
    }

    // MARK: - Rows

    private static func decoded(_ row: StoredItem) throws -> StoredAttachment {
        guard let attachment = StoredAttachment(row) else {
            throw StorageError(.corrupt, "the attachment row '\(row.id)' is not an attachment")
        }
        return attachment
    }

    /// `a eq 'x' and b eq 'y' …`.
    static func equal(_ fields: [String: String]) -> QueryExpression? {
        fields.sorted { $0.key < $1.key }.map {
            QueryExpression.binary(.equal, .field($0.key), .literal(.string($0.value)))
        }.reduce(nil) { partial, next in partial.map { .binary(.and, $0, next) } ?? next }
    }

    /// Every matching row, a page at a time.
    private func rows(
        where filter: QueryExpression?, owner: OwnerScope, includeDeleted: Bool = false, limit: Int? = nil
    ) async throws -> [StoredItem] {
        var rows: [StoredItem] = []
        let page = min(limit ?? 1_000, 1_000)
        while true {
            let answer: StoragePage
            do {
                answer = try await storage.query(
                    Self.table,
                    StorageQuery(
                        filter: filter, skip: rows.count, limit: page, includeDeleted: includeDeleted, owner: owner))
            } catch let error as StorageError where error.code == .noSuchTable {
                return []
            }
            rows += answer.items
            if !answer.hasMore || answer.items.isEmpty || rows.count >= (limit ?? .max) { return rows }
        }
    }
}
