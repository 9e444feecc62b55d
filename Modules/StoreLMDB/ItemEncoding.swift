import SyncCore

/// A growable byte buffer without copy-on-write checks: a batch of items is encoded into one.
///
/// Pointers from ``bytes(_:)`` stay valid until the next append (which may move the storage).
struct ByteWriter: ~Copyable {
    private(set) var base: UnsafeMutableRawPointer
    private(set) var capacity: Int
    private(set) var count = 0

    init(capacity: Int) {
        self.capacity = max(64, capacity)
        base = .allocate(byteCount: self.capacity, alignment: 8)
    }

    deinit {
        base.deallocate()
    }

    @inline(__always)
    mutating func reserve(_ extra: Int) {
        if count + extra > capacity { grow(to: count + extra) }
    }

    private mutating func grow(to needed: Int) {
        var next = capacity * 2
        while next < needed { next *= 2 }
        let bigger = UnsafeMutableRawPointer.allocate(byteCount: next, alignment: 8)
        bigger.copyMemory(from: base, byteCount: count)
        base.deallocate()
        base = bigger
        capacity = next
    }

    @inline(__always)
    mutating func append(_ byte: UInt8) {
        reserve(1)
        base.storeBytes(of: byte, toByteOffset: count, as: UInt8.self)
        count += 1
    }

    mutating func append(_ bytes: UnsafeRawBufferPointer) {
        guard let source = bytes.baseAddress, !bytes.isEmpty else { return }
        reserve(bytes.count)
        (base + count).copyMemory(from: source, byteCount: bytes.count)
        count += bytes.count
    }

    mutating func append(_ text: StaticString) {
        text.withUTF8Buffer { append(UnsafeRawBufferPointer($0)) }
    }

    /// Writes `byte` at `offset` (below ``count``).
    mutating func set(_ byte: UInt8, at offset: Int) {
        base.storeBytes(of: byte, toByteOffset: offset, as: UInt8.self)
    }

    func bytes(_ range: Range<Int>) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: base + range.lowerBound, count: range.count)
    }

    var array: [UInt8] { Array(bytes(0..<count)) }
}

/// Writes JSON text that `JSONValue(parsingUTF8:)` reads back to the same value.
///
/// It follows ``SyncCore/JSONValue/serialized()``'s escaping and number forms (integers as
/// integers, doubles as Swift's shortest round-tripping `description`) but writes object members
/// in dictionary order rather than sorted, copies unescaped text eight bytes at a time, and notes
/// on the way what JSON cannot hold: item values are written on every upsert.
enum JSONText {
    /// What a value held that its JSON text cannot carry back.
    struct Problems {
        /// A NaN or an infinity (written as `null`).
        var nonFinite = false
        /// An array or object nested deeper than the parser reads (written as `null`).
        var tooDeep = false
    }

    /// The JSON text of `value`.
    static func bytes(of value: JSONValue) -> [UInt8] {
        var writer = ByteWriter(capacity: 256)
        var problems = Problems()
        append(value, to: &writer, depth: 1, problems: &problems)
        return writer.array
    }

    /// Appends `value`; `depth` is the nesting depth it has as a container (an item is 1).
    static func append(_ value: JSONValue, to output: inout ByteWriter, depth: Int, problems: inout Problems) {
        switch value {
        case .null: output.append("null")
        case .bool(let flag): output.append(flag ? "true" : "false")
        case .int(let number): appendInteger(number, to: &output)
        case .double(let number):
            if number.isFinite {
                var text = number.description
                text.withUTF8 { output.append(UnsafeRawBufferPointer($0)) }
            } else {
                problems.nonFinite = true
                output.append("null")
            }
        case .string(let text): appendString(text, to: &output)
        case .array(let elements):
            if depth > JSONValue.maximumNestingDepth {
                problems.tooDeep = true
                output.append("null")
                return
            }
            output.append(UInt8(ascii: "["))
            var first = true
            for element in elements {
                if !first { output.append(UInt8(ascii: ",")) }
                first = false
                append(element, to: &output, depth: depth + 1, problems: &problems)
            }
            output.append(UInt8(ascii: "]"))
        case .object(let members):
            if depth > JSONValue.maximumNestingDepth {
                problems.tooDeep = true
                output.append("null")
                return
            }
            output.append(UInt8(ascii: "{"))
            var first = true
            for (key, member) in members {
                if !first { output.append(UInt8(ascii: ",")) }
                first = false
                appendString(key, to: &output)
                output.append(UInt8(ascii: ":"))
                append(member, to: &output, depth: depth + 1, problems: &problems)
            }
            output.append(UInt8(ascii: "}"))
        }
    }

    static func appendInteger(_ number: Int64, to output: inout ByteWriter) {
        if number >= 0, number < 10 {
            output.append(UInt8(ascii: "0") + UInt8(number))
            return
        }
        var magnitude = number.magnitude
        if number < 0 { output.append(UInt8(ascii: "-")) }
        // 24 bytes hold the 20 digits of the largest magnitude.
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)
        withUnsafeMutableBytes(of: &digits) { buffer in
            var index = buffer.count
            repeat {
                index -= 1
                buffer[index] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            output.append(UnsafeRawBufferPointer(rebasing: buffer[index...]))
        }
    }

    static func appendString(_ text: String, to output: inout ByteWriter) {
        output.append(UInt8(ascii: "\""))
        var text = text
        text.withUTF8 { bytes in
            let raw = UnsafeRawBufferPointer(bytes)
            // Whole words without a quote, a backslash or a control character are copied as is.
            var clean = 0
            while clean + 8 <= raw.count, !needsEscape(raw.loadUnaligned(fromByteOffset: clean, as: UInt64.self)) {
                clean += 8
            }
            var start = 0
            for index in clean..<raw.count {
                let byte = raw[index]
                guard byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte < 0x20 else { continue }
                output.append(UnsafeRawBufferPointer(rebasing: raw[start..<index]))
                start = index + 1
                output.append(UInt8(ascii: "\\"))
                switch byte {
                case UInt8(ascii: "\""): output.append(UInt8(ascii: "\""))
                case UInt8(ascii: "\\"): output.append(UInt8(ascii: "\\"))
                case 0x0A: output.append(UInt8(ascii: "n"))
                case 0x0D: output.append(UInt8(ascii: "r"))
                case 0x09: output.append(UInt8(ascii: "t"))
                default:
                    output.append("u00")
                    output.append(hex(byte >> 4))
                    output.append(hex(byte & 0xF))
                }
            }
            output.append(UnsafeRawBufferPointer(rebasing: raw[start...]))
        }
        output.append(UInt8(ascii: "\""))
    }

    /// Whether one of the eight bytes is below 0x20, a quote or a backslash (bit tricks: a byte of
    /// `x - 0x01…` borrows only where `x` was zero).
    @inline(__always)
    private static func needsEscape(_ word: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        let control = (word &- 0x2020_2020_2020_2020) & ~word & highs
        let quote = word ^ (ones &* 0x22)
        let backslash = word ^ (ones &* 0x5C)
        let quotes = (quote &- ones) & ~quote & highs
        let backslashes = (backslash &- ones) & ~backslash & highs
        return (control | quotes | backslashes) != 0
    }

    private static func hex(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10
    }
}

/// A batch of items encoded for an upsert: each item's single-item value (tag, summary, JSON) in
/// one buffer, with its id and summary.
struct EncodedBatch: ~Copyable {
    var writer: ByteWriter
    var ranges: [Range<Int>] = []
    var ids: [String] = []
    var summaries: [ItemSummary] = []

    /// Validates and encodes `items`; throws ``SyncCore/StoreError/Code/invalidItem`` for the first
    /// bad one, before anything is written.
    init(_ items: [JSONObject], table: String) throws(StoreError) {
        writer = ByteWriter(capacity: items.count * 256)
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
        var problems = JSONText.Problems()
        var idValue: JSONValue?
        writer.append(UInt8(ascii: "{"))
        var first = true
        for (key, member) in item {
            if !first { writer.append(UInt8(ascii: ",")) }
            first = false
            JSONText.appendString(key, to: &writer)
            writer.append(UInt8(ascii: ":"))
            JSONText.append(member, to: &writer, depth: 2, problems: &problems)
            // The length first: most keys are none of these three.
            switch key.utf8.count {
            case 2 where key == "id": idValue = member
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
        if case .string(let text)? = idValue, FastID.isValidASCII(text) {
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
