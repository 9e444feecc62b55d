@_spi(StoreSupport) import SyncCore

/// A batch of items encoded for an upsert: each item's single-item value (tag, summary, JSON) in
/// one buffer, with its id and summary.
struct EncodedBatch: ~Copyable {
    var writer: JSONTextBuffer
    var ranges: [Range<Int>] = []
    var ids: [String] = []
    var summaries: [ItemSummary] = []

    /// Validates and encodes `items`; throws `StoreError.Code.invalidItem` for the first
    /// bad one, before anything is written.
    init(_ items: [JSONObject], table: String) throws(StoreError) {
        writer = JSONTextBuffer(capacity: items.count * 256)
        ranges.reserveCapacity(items.count)
        ids.reserveCapacity(items.count)
        summaries.reserveCapacity(items.count)
        for item in items {
            try add(item, table: table)
        }
    }

    /// Writes the item's JSON once and, on the way, takes `id`, `updatedAt` and `deleted`.
    private mutating func add(_ item: JSONObject, table: String) throws(StoreError) {
        let start = writer.count
        writer.append(ItemValue.singleTag)
        for _ in 0..<ItemSummary.encodedSize { writer.append(0) }
        var summary = ItemSummary(deleted: false, kind: .null, milliseconds: 0)
        var problems = JSONTextProblems()
        var idText: String?
        writer.append(UInt8(ascii: "{"))
        var first = true
        for (key, member) in item {
            if !first { writer.append(UInt8(ascii: ",")) }
            first = false
            writer.appendJSONString(key)
            writer.append(UInt8(ascii: ":"))
            writer.appendJSON(member, sortingKeys: false, depth: 2, problems: &problems)
            // The length first: most keys are none of these three.
            switch key.utf8.count {
            case 2 where key == "id":
                if case .string(let text) = member { idText = text }
            case 9 where key == "updatedAt":
                let deleted = summary.deleted
                summary = ItemSummary(updatedAt: member)
                summary.deleted = deleted
            case 7 where key == "deleted":
                if case .bool(true) = member { summary.deleted = true }
            default: break
            }
        }
        writer.append(UInt8(ascii: "}"))
        let id: String
        if let text = idText, ItemID.isValid(text) {
            id = text
        } else {
            id = try StoreValidation.validatedID(of: item, table: table)
        }
        if problems.nonFinite {
            throw StoreError(
                .invalidItem, "item '\(id)' of table '\(table)' holds a number JSON cannot represent (NaN or infinity)")
        }
        if problems.tooDeep {
            throw StoreError(
                .invalidItem,
                "item '\(id)' of table '\(table)' nests arrays and objects deeper than \(JSONValue.maximumNestingDepth) levels"
            )
        }
        writer.set(summary.deleted ? 1 : 0, at: start + 1)
        writer.set(summary.kind.rawValue, at: start + 2)
        var milliseconds = Layout.orderedUInt64(summary.milliseconds)
        for offset in stride(from: start + 10, through: start + 3, by: -1) {
            writer.set(UInt8(truncatingIfNeeded: milliseconds), at: offset)
            milliseconds >>= 8
        }
        ranges.append(start..<writer.count)
        ids.append(id)
        summaries.append(summary)
    }

    var count: Int { ids.count }

    /// The single-item value of item `index`.
    func value(_ index: Int) -> UnsafeRawBufferPointer { writer.bytes(ranges[index]) }

    /// The JSON text of item `index`.
    func json(_ index: Int) -> UnsafeRawBufferPointer {
        writer.bytes((ranges[index].lowerBound + 1 + ItemSummary.encodedSize)..<ranges[index].upperBound)
    }
}
