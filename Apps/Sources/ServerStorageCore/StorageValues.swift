public import SyncCore

/// What a storage needs to know about a table: its name and the schema that types its fields.
public struct StorageTable: Sendable, Hashable {
    /// The table's name: 1 to 128 characters of `A-Z a-z 0-9 _ -`, not starting with `__`.
    public var name: String
    /// The declared fields and whether others are allowed; queries use it for typing.
    public var schema: TableSchema

    public init(name: String, schema: TableSchema = .schemaless) {
        self.name = name
        self.schema = schema
    }
}

/// Whose rows an operation sees.
///
/// Owners compare exactly, byte for byte. Every storage holds any owner that
/// ``validateSubject(_:)`` accepts, and refuses any other with ``StorageError/Code/invalidName``
/// instead of storing or comparing a changed form (SQLite's text binding and PostgreSQL's `text`
/// both cut or refuse U+0000).
public enum OwnerScope: Sendable, Hashable {
    /// Every row, whoever owns it.
    case all
    /// Only the rows owned by this subject.
    case owner(String)

    /// The longest owner, in UTF-8 bytes.
    public static let maximumSubjectLength = 1024

    /// Checks that every storage can hold `subject` exactly: 1 to 1,024 UTF-8 bytes, no U+0000.
    ///
    /// ```swift
    /// try OwnerScope.validateSubject("alice")              // fine
    /// try OwnerScope.validateSubject("alice\u{0}mallory")  // throws: it contains U+0000
    /// ```
    public static func validateSubject(_ subject: String) throws(StorageError) {
        let length = subject.utf8.count
        guard length > 0 else { throw StorageError(.invalidName, "the subject is empty") }
        guard length <= maximumSubjectLength else {
            throw StorageError(
                .invalidName, "the subject is \(length) bytes long; the limit is \(maximumSubjectLength)")
        }
        guard !subject.utf8.contains(0) else {
            throw StorageError(.invalidName, "the subject contains U+0000, which no storage can hold exactly")
        }
    }
}

/// One stored row: the item's own fields plus the system properties the storage keeps.
public struct StoredItem: Sendable, Hashable {
    /// The item's id.
    public var id: String
    /// The item's fields, without system properties.
    public var content: JSONObject
    /// When the row was inserted.
    public var createdAt: Timestamp
    /// When the row was last written: unique per table, increasing in commit order.
    public var updatedAt: Timestamp
    /// The table's write-sequence number at the row's last write: unique per table, increasing in
    /// commit order. Its wire form is ``versionTag``.
    public var version: Int64
    /// Whether the row is soft-deleted.
    public var deleted: Bool
    /// The subject that owns the row in a per-user table.
    public var owner: String?

    public init(
        id: String, content: JSONObject, createdAt: Timestamp, updatedAt: Timestamp, version: Int64, deleted: Bool,
        owner: String? = nil
    ) {
        self.id = id
        self.content = content
        self.createdAt = createdAt
        self.updatedAt = updatedAt
        self.version = version
        self.deleted = deleted
        self.owner = owner
    }

    /// The opaque version string of the protocol: see ``ItemVersion``.
    public var versionTag: String { ItemVersion.tag(version) }

    /// The item as queries see it: its fields plus `id`, `createdAt`, `updatedAt`, `version` (the
    /// tag) and `deleted`.
    public var queryable: JSONObject {
        var item = content
        item["id"] = .string(id)
        item["createdAt"] = .string(createdAt.iso8601)
        item["updatedAt"] = .string(updatedAt.iso8601)
        item["version"] = .string(versionTag)
        item["deleted"] = .bool(deleted)
        return item
    }
}

/// The wire form of a row version: the base64 text of its sequence number as 8 big-endian bytes
/// (`1` is `"AAAAAAAAAAE="`), the shape of the SQL Server `rowversion` the legacy servers sent.
///
/// ```swift
/// ItemVersion.tag(1)                    // "AAAAAAAAAAE="
/// ItemVersion.number("AAAAAAAAAAE=")    // 1
/// ItemVersion.number("dGVzdA==")        // nil: not a version this server issued
/// ```
public enum ItemVersion: Sendable {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    /// The tag of a sequence number.
    public static func tag(_ number: Int64) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(9)
        for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: number >> shift)) }
        bytes.append(0)
        var output: [UInt8] = []
        output.reserveCapacity(12)
        for index in stride(from: 0, to: 9, by: 3) {
            let chunk = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
            output.append(alphabet[Int(chunk >> 18 & 63)])
            output.append(alphabet[Int(chunk >> 12 & 63)])
            output.append(alphabet[Int(chunk >> 6 & 63)])
            output.append(alphabet[Int(chunk & 63)])
        }
        // 8 bytes are 11 significant characters and one '=' of padding.
        output[11] = UInt8(ascii: "=")
        return String(decoding: output, as: UTF8.self)
    }

    /// The sequence number a tag stands for, or `nil` when `tag` is not one this server issues.
    public static func number(_ tag: String) -> Int64? {
        let characters = Array(tag.utf8)
        guard characters.count == 12, characters[11] == UInt8(ascii: "=") else { return nil }
        var value: UInt64 = 0
        for (index, character) in characters[0..<11].enumerated() {
            guard let digit = alphabet.firstIndex(of: character) else { return nil }
            if index < 10 {
                value = value << 6 | UInt64(digit)
            } else {
                // The 11th character holds the last 4 bits; its 2 low bits must be zero.
                guard digit & 3 == 0 else { return nil }
                value = value << 4 | UInt64(digit >> 2)
            }
        }
        return Int64(bitPattern: value)
    }
}

/// The JSON kind of a field of a dynamic table, fixed by its first non-null value.
public enum FieldKind: String, Sendable, Hashable, CaseIterable {
    case boolean
    /// An integer or a floating-point number.
    case number
    case string
    case array
    case object

    /// The kind of a value; `nil` for `null`.
    public init?(of value: JSONValue) {
        switch value {
        case .null: return nil
        case .bool: self = .boolean
        case .int, .double: self = .number
        case .string: self = .string
        case .array: self = .array
        case .object: self = .object
        }
    }
}

/// A query as a storage runs it: the filter and order of a `TableQuery` plus paging, soft-delete
/// and owner scoping decided by the server.
public struct StorageQuery: Sendable, Hashable {
    /// The filter; `nil` matches every row.
    public var filter: QueryExpression?
    /// The sort keys; the storage always appends `id` ascending as the final tie-breaker.
    public var orderBy: [SortKey]
    /// How many matching rows to skip.
    public var skip: Int
    /// The most rows to return; `nil` for all.
    public var limit: Int?
    /// Whether soft-deleted rows are included.
    public var includeDeleted: Bool
    /// Whether to count every matching row (before skip and limit).
    public var includeTotalCount: Bool
    /// Whose rows the query sees.
    public var owner: OwnerScope
    /// The most bytes of stored item text one page holds; `nil` for no bound. The page ends before
    /// the row that would pass it, with ``StoragePage/hasMore`` set; a page always holds at least
    /// one row, however large. A storage applies it while it reads, so a page of large items is
    /// never read whole.
    public var maximumBytes: Int?

    public init(
        filter: QueryExpression? = nil, orderBy: [SortKey] = [], skip: Int = 0, limit: Int? = nil,
        includeDeleted: Bool = false, includeTotalCount: Bool = false, owner: OwnerScope = .all,
        maximumBytes: Int? = nil
    ) {
        self.maximumBytes = maximumBytes
        self.filter = filter
        self.orderBy = orderBy
        self.skip = skip
        self.limit = limit
        self.includeDeleted = includeDeleted
        self.includeTotalCount = includeTotalCount
        self.owner = owner
    }
}

/// One page of a query's rows.
public struct StoragePage: Sendable, Hashable {
    /// The rows, in order.
    public var items: [StoredItem]
    /// Every matching row's count, when the query asked for it.
    public var totalCount: Int?
    /// Whether more matching rows follow this page.
    public var hasMore: Bool
    /// How the storage ran the query, for logs and tests: see ``QueryPlan``.
    public var plan: QueryPlan

    public init(items: [StoredItem], totalCount: Int? = nil, hasMore: Bool, plan: QueryPlan) {
        self.items = items
        self.totalCount = totalCount
        self.hasMore = hasMore
        self.plan = plan
    }
}

/// How much of a query the database ran.
public enum QueryPlan: String, Sendable, Hashable {
    /// Filter, order and paging all ran in the database.
    case database
    /// Part of the filter or the order ran in `QueryEvaluator` over the rows the database selected.
    case evaluator
}
