import SyncCore

/// The byte layout of the store's keys and values. `docs/store-lmdb.md` describes it in full.
///
/// LMDB compares keys with `memcmp`, so every key is built so that byte order is the order the
/// store needs: big-endian integers, and UTF-8 text (whose byte order is code point order, the
/// order ``QueryEvaluator`` uses for strings).
enum Layout {
    /// The format this code writes, kept in the `meta` database under `version`.
    static let formatVersion: UInt32 = 1
    /// The value of `meta["format"]`: what marks an LMDB environment as a Ferry store.
    static let formatName: [UInt8] = Array("ferry-lmdb".utf8)

    /// LMDB's key limit is 511 bytes; ids and free-form strings are cut to this many bytes in keys
    /// (the whole string always lives in the value).
    static let maximumKeyTextBytes = 480

    // MARK: Integers

    static func appendUInt32(_ value: UInt32, to bytes: inout [UInt8]) {
        bytes.append(UInt8(truncatingIfNeeded: value >> 24))
        bytes.append(UInt8(truncatingIfNeeded: value >> 16))
        bytes.append(UInt8(truncatingIfNeeded: value >> 8))
        bytes.append(UInt8(truncatingIfNeeded: value))
    }

    static func appendUInt64(_ value: UInt64, to bytes: inout [UInt8]) {
        for shift in stride(from: 56, through: 0, by: -8) {
            bytes.append(UInt8(truncatingIfNeeded: value >> UInt64(shift)))
        }
    }

    static func uint32(_ bytes: some Collection<UInt8>) -> UInt32? {
        guard bytes.count == 4 else { return nil }
        return bytes.reduce(0) { $0 << 8 | UInt32($1) }
    }

    static func uint64(_ bytes: some Collection<UInt8>) -> UInt64? {
        guard bytes.count == 8 else { return nil }
        return bytes.reduce(0) { $0 << 8 | UInt64($1) }
    }

    /// A signed integer whose big-endian bytes sort in numeric order (the sign bit flipped).
    static func orderedUInt64(_ value: Int64) -> UInt64 {
        UInt64(bitPattern: value) ^ (1 << 63)
    }

    static func int64(ordered value: UInt64) -> Int64 {
        Int64(bitPattern: value ^ (1 << 63))
    }

    static func appendVarint(_ value: Int, to bytes: inout [UInt8]) {
        var rest = UInt(value)
        while rest >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: rest) | 0x80)
            rest >>= 7
        }
        bytes.append(UInt8(rest))
    }

    // MARK: Operation ids and sequence numbers

    /// An operation id or error sequence number as an 8-byte big-endian key.
    static func sequenceKey(_ value: Int64) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(8)
        appendUInt64(UInt64(bitPattern: value), to: &bytes)
        return bytes
    }

    // MARK: Free-form text in keys

    /// `tag` followed by the UTF-8 bytes of `text`, cut to fit a key. `exact` is `false` when the
    /// text was cut, in which case several strings may share the key and readers compare the whole
    /// string kept in the value.
    static func textKey(tag: UInt8, _ text: String) -> (key: [UInt8], exact: Bool) {
        var key: [UInt8] = [tag]
        let utf8 = text.utf8
        key.append(contentsOf: utf8.prefix(maximumKeyTextBytes))
        return (key, utf8.count <= maximumKeyTextBytes)
    }

    /// The key of a delta token or an operation's item: the length of `first`, `first` and
    /// `second`, cut to fit a key.
    static func pairKey(_ first: String, _ second: String) -> [UInt8] {
        var key: [UInt8] = []
        appendVarint(first.utf8.count, to: &key)
        key.append(contentsOf: first.utf8)
        key.append(contentsOf: second.utf8)
        if key.count > maximumKeyTextBytes { key.removeLast(key.count - maximumKeyTextBytes) }
        return key
    }

    /// The prefix every ``pairKey(_:_:)`` of `first` starts with.
    static func pairPrefix(_ first: String) -> [UInt8] {
        var key: [UInt8] = []
        appendVarint(first.utf8.count, to: &key)
        key.append(contentsOf: first.utf8)
        if key.count > maximumKeyTextBytes { key.removeLast(key.count - maximumKeyTextBytes) }
        return key
    }
}

/// A little reader over bytes, for values the store wrote itself; any surprise is `corrupt`.
struct ByteReader {
    let bytes: UnsafeRawBufferPointer
    var offset = 0

    init(_ bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
    }

    var isAtEnd: Bool { offset >= bytes.count }

    mutating func byte() throws(ByteReaderError) -> UInt8 {
        guard offset < bytes.count else { throw ByteReaderError() }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func uint64() throws(ByteReaderError) -> UInt64 {
        guard bytes.count - offset >= 8 else { throw ByteReaderError() }
        var value: UInt64 = 0
        for index in offset..<(offset + 8) { value = value << 8 | UInt64(bytes[index]) }
        offset += 8
        return value
    }

    mutating func varint() throws(ByteReaderError) -> Int {
        var value: UInt = 0
        var shift: UInt = 0
        while true {
            let next = try byte()
            value |= UInt(next & 0x7F) << shift
            if next & 0x80 == 0 { break }
            shift += 7
            if shift > 56 { throw ByteReaderError() }
        }
        guard value <= UInt(Int.max) else { throw ByteReaderError() }
        return Int(value)
    }

    mutating func slice(_ count: Int) throws(ByteReaderError) -> UnsafeRawBufferPointer {
        guard count >= 0, bytes.count - offset >= count else { throw ByteReaderError() }
        defer { offset += count }
        return UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + count)])
    }

    mutating func rest() -> UnsafeRawBufferPointer {
        defer { offset = bytes.count }
        return UnsafeRawBufferPointer(rebasing: bytes[offset...])
    }

    mutating func string() throws(ByteReaderError) -> String {
        let count = try varint()
        return String(decoding: try slice(count), as: UTF8.self)
    }
}

/// A stored value ended early or held an impossible length.
struct ByteReaderError: Error {}

extension Array where Element == UInt8 {
    mutating func appendString(_ text: String) {
        Layout.appendVarint(text.utf8.count, to: &self)
        append(contentsOf: text.utf8)
    }
}

// MARK: - Items

/// What the store derives from an item on every write, kept before the JSON in the item's value so
/// that index maintenance and soft-delete checks need no JSON parsing.
struct ItemSummary: Equatable {
    /// How `updatedAt` sorts: the rank of its kind in ``QueryEvaluator``'s order.
    enum Kind: UInt8 {
        /// Absent or `null`: sorts first.
        case null = 0
        case bool = 1
        case number = 2
        /// A date-time (or a date, read as its midnight UTC), with its milliseconds.
        case timestamp = 3
        /// Text that is not a date-time or a date.
        case string = 4
        /// An array or an object.
        case other = 5
    }

    var deleted: Bool
    var kind: Kind
    /// Milliseconds since 1970 when ``kind`` is `.timestamp`, else 0.
    var milliseconds: Int64

    init(deleted: Bool, kind: Kind, milliseconds: Int64) {
        self.deleted = deleted
        self.kind = kind
        self.milliseconds = milliseconds
    }

    static let encodedSize = 10

    func append(to bytes: inout [UInt8]) {
        bytes.append(deleted ? 1 : 0)
        bytes.append(kind.rawValue)
        Layout.appendUInt64(Layout.orderedUInt64(milliseconds), to: &bytes)
    }

    static func read(_ reader: inout ByteReader) throws(ByteReaderError) -> ItemSummary {
        let flags = try reader.byte()
        guard let kind = Kind(rawValue: try reader.byte()) else { throw ByteReaderError() }
        let milliseconds = Layout.int64(ordered: try reader.uint64())
        return ItemSummary(deleted: flags & 1 != 0, kind: kind, milliseconds: milliseconds)
    }
}

/// One item as stored: its id, summary and JSON text.
struct StoredItem {
    var id: String
    var summary: ItemSummary
    var json: UnsafeRawBufferPointer
}

/// The value of an item key.
///
/// Most keys hold one item whose id is the key's text (`single`). Ids longer than
/// ``Layout/maximumKeyTextBytes`` UTF-8 bytes are cut in the key, so the items whose ids share the
/// cut prefix live together in one `bucket` value, sorted by id.
///
/// ```text
/// single: 0x01 | summary (10 bytes) | JSON
/// bucket: 0x02 | count (varint) | { id (varint length + UTF-8) | summary | JSON (varint length + bytes) }…
/// ```
enum ItemValue {
    static let singleTag: UInt8 = 1
    static let bucketTag: UInt8 = 2

    static func single(_ summary: ItemSummary, json: [UInt8]) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(1 + ItemSummary.encodedSize + json.count)
        bytes.append(singleTag)
        summary.append(to: &bytes)
        bytes.append(contentsOf: json)
        return bytes
    }

    /// A bucket of entries, which must be sorted by id.
    static func bucket(_ entries: [(id: String, summary: ItemSummary, json: [UInt8])]) -> [UInt8] {
        var bytes: [UInt8] = [bucketTag]
        Layout.appendVarint(entries.count, to: &bytes)
        for entry in entries {
            bytes.appendString(entry.id)
            entry.summary.append(to: &bytes)
            Layout.appendVarint(entry.json.count, to: &bytes)
            bytes.append(contentsOf: entry.json)
        }
        return bytes
    }

    /// The items of a value stored under `keyID` (the id text of the key, without the table key).
    static func decode(_ value: UnsafeRawBufferPointer, keyID: UnsafeRawBufferPointer) throws(ByteReaderError)
        -> [StoredItem]
    {
        var reader = ByteReader(value)
        switch try reader.byte() {
        case singleTag:
            let summary = try ItemSummary.read(&reader)
            return [StoredItem(id: String(decoding: keyID, as: UTF8.self), summary: summary, json: reader.rest())]
        case bucketTag:
            let count = try reader.varint()
            var items: [StoredItem] = []
            for _ in 0..<count {
                let id = try reader.string()
                let summary = try ItemSummary.read(&reader)
                let json = try reader.slice(try reader.varint())
                items.append(StoredItem(id: id, summary: summary, json: json))
            }
            return items
        default:
            throw ByteReaderError()
        }
    }

    /// The summary of a single-item value without decoding the rest, or `nil` for a bucket.
    static func singleSummary(_ value: UnsafeRawBufferPointer) throws(ByteReaderError) -> ItemSummary? {
        var reader = ByteReader(value)
        guard try reader.byte() == singleTag else { return nil }
        return try ItemSummary.read(&reader)
    }
}

/// Keys of the `items` and `updatedAt` databases.
enum ItemKeys {
    /// `tableKey (4 bytes) | id UTF-8 cut to 480 bytes`.
    static func item(table: UInt32, id: String) -> [UInt8] {
        var key: [UInt8] = []
        key.reserveCapacity(4 + min(id.utf8.count, Layout.maximumKeyTextBytes))
        Layout.appendUInt32(table, to: &key)
        key.append(contentsOf: id.utf8.prefix(Layout.maximumKeyTextBytes))
        return key
    }

    /// ``item(table:id:)`` into a reused buffer.
    static func fill(_ key: inout [UInt8], table: UInt32, id: String) {
        key.removeAll(keepingCapacity: true)
        Layout.appendUInt32(table, to: &key)
        var id = id
        id.withUTF8 { bytes in
            key.append(contentsOf: UnsafeBufferPointer(rebasing: bytes.prefix(Layout.maximumKeyTextBytes)))
        }
    }

    /// ``updated(table:summary:idText:)`` into a reused buffer.
    static func fillUpdated(
        _ key: inout [UInt8], table: UInt32, summary: ItemSummary, idText: some Collection<UInt8>
    ) {
        key.removeAll(keepingCapacity: true)
        Layout.appendUInt32(table, to: &key)
        key.append(summary.kind.rawValue)
        Layout.appendUInt64(Layout.orderedUInt64(summary.kind == .timestamp ? summary.milliseconds : 0), to: &key)
        key.append(contentsOf: idText)
    }

    /// Whether an id fits whole in its key.
    static func fits(_ id: String) -> Bool { id.utf8.count <= Layout.maximumKeyTextBytes }

    static func tablePrefix(_ table: UInt32) -> [UInt8] {
        var key: [UInt8] = []
        Layout.appendUInt32(table, to: &key)
        return key
    }

    /// `tableKey (4) | kind (1) | ordered milliseconds (8) | id key text`.
    static func updated(table: UInt32, summary: ItemSummary, idText: some Collection<UInt8>) -> [UInt8] {
        var key: [UInt8] = []
        key.reserveCapacity(13 + idText.count)
        Layout.appendUInt32(table, to: &key)
        key.append(summary.kind.rawValue)
        Layout.appendUInt64(Layout.orderedUInt64(summary.kind == .timestamp ? summary.milliseconds : 0), to: &key)
        key.append(contentsOf: idText)
        return key
    }

    /// The first `updatedAt` key of a kind and millisecond value.
    static func updatedPrefix(table: UInt32, kind: ItemSummary.Kind, milliseconds: Int64 = 0) -> [UInt8] {
        var key: [UInt8] = []
        Layout.appendUInt32(table, to: &key)
        key.append(kind.rawValue)
        Layout.appendUInt64(Layout.orderedUInt64(milliseconds), to: &key)
        return key
    }

    static let updatedHeaderSize = 13
}

// MARK: - Catalog

/// A table's catalog record in the `tables` database: its key, its item count and its definition.
struct TableEntry {
    var key: UInt32
    var count: Int
    var definition: TableDefinition?

    var schema: TableSchema { definition?.schema ?? .schemaless }

    /// The layout version of the table's keys and values.
    static let layout: Int64 = 1

    var json: JSONObject {
        var object: JSONObject = ["key": .int(Int64(key)), "count": .int(Int64(count)), "layout": .int(Self.layout)]
        if let definition { object["definition"] = .object(definition.json) }
        return object
    }

    init(key: UInt32, count: Int, definition: TableDefinition?) {
        self.key = key
        self.count = count
        self.definition = definition
    }

    init(json object: JSONObject, table: String) throws(StoreError) {
        guard case .int(let key)? = object["key"], let table32 = UInt32(exactly: key),
            case .int(let count)? = object["count"]
        else {
            throw StoreError(.corrupt, "the catalog record of table '\(table)' is missing its key or count")
        }
        self.key = table32
        self.count = Int(count)
        self.definition = try object["definition"]?.objectValue.map { object throws(StoreError) in
            try TableDefinition(json: object)
        }
    }
}

// MARK: - Delta tokens

/// The value of a delta-token key, a hash bucket of delta tokens: every (table, query id, token)
/// whose key is that key (one, unless long strings were cut). Not a rate limiter.
enum DeltaTokenRecords {
    static func encode(_ entries: [(table: String, queryID: String, value: String)]) -> [UInt8] {
        var bytes: [UInt8] = []
        Layout.appendVarint(entries.count, to: &bytes)
        for entry in entries {
            bytes.appendString(entry.table)
            bytes.appendString(entry.queryID)
            bytes.appendString(entry.value)
        }
        return bytes
    }

    static func decode(_ value: UnsafeRawBufferPointer) throws(ByteReaderError) -> [(
        table: String, queryID: String, value: String
    )] {
        var reader = ByteReader(value)
        let count = try reader.varint()
        var entries: [(table: String, queryID: String, value: String)] = []
        for _ in 0..<count {
            entries.append((try reader.string(), try reader.string(), try reader.string()))
        }
        guard reader.isAtEnd else { throw ByteReaderError() }
        return entries
    }
}

extension ItemSummary {
    /// The summary of an item whose `updatedAt` is `value` (not deleted), reading it as
    /// `QueryEvaluator` reads `updatedAt` without a schema.
    init(updatedAt value: JSONValue?) {
        deleted = false
        milliseconds = 0
        switch value {
        case nil, .null?: kind = .null
        case .bool?: kind = .bool
        case .int?, .double?: kind = .number
        case .string(let text)?:
            if let instant = Timestamp(iso8601: text) {
                kind = .timestamp
                milliseconds = instant.millisecondsSince1970
            } else if let date = CalendarDate(iso8601: text) {
                kind = .timestamp
                milliseconds = date.midnightUTC.millisecondsSince1970
            } else {
                kind = .string
            }
        case .array?, .object?: kind = .other
        }
    }
}
