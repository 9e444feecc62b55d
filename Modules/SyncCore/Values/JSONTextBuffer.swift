// Store plumbing, not public API: the stores and the server's storage reach these through
// `@_spi(StoreSupport) import SyncCore`.

/// What a value held that its JSON text cannot carry back.
@_spi(StoreSupport)
public struct JSONTextProblems: Sendable, Hashable {
    /// A NaN or an infinity, written as `null`.
    public var nonFinite = false
    /// An array or object nested deeper than ``JSONValue/maximumNestingDepth`` (the parser would
    /// refuse to read it back), written as `null`.
    public var tooDeep = false

    public init() {}

    /// Whether the text reads back to the value written.
    public var isEmpty: Bool { !nonFinite && !tooDeep }
}

/// A growable byte buffer that JSON text is written into, reused from one item to the next.
///
/// Stores write thousands of items per transaction; writing each into one reused buffer saves an
/// allocation and a copy per item over ``JSONValue/serialized()``, and notes on the way what JSON
/// cannot hold. The text is what ``JSONValue/serialized()`` writes (the same escaping and number
/// forms) and reads back with ``JSONValue/init(parsingUTF8:)``.
///
/// ```swift
/// @_spi(StoreSupport) import SyncCore
///
/// var buffer = JSONTextBuffer()
/// for item in items {
///     buffer.removeAll()
///     let problems = buffer.appendJSON(.object(item))
///     guard problems.isEmpty else { throw … }
///     buffer.withBytes { bytes in save(bytes) }   // valid until the next append
/// }
/// ```
///
/// Object members are written with sorted keys unless `sortingKeys` is `false`, which writes them in
/// dictionary order (cheaper; the text still parses back to an equal value).
@_spi(StoreSupport)
public struct JSONTextBuffer: ~Copyable {
    @usableFromInline var base: UnsafeMutableRawPointer
    @usableFromInline var capacity: Int
    @usableFromInline var written = 0

    /// The number of bytes written.
    public var count: Int { written }

    /// An empty buffer with room for `capacity` bytes before it grows.
    public init(capacity: Int = 256) {
        self.capacity = max(64, capacity)
        base = .allocate(byteCount: self.capacity, alignment: 8)
    }

    deinit {
        base.deallocate()
    }

    /// Forgets the bytes written, keeping the storage.
    public mutating func removeAll() { written = 0 }

    @inlinable @inline(__always)
    mutating func reserve(_ extra: Int) {
        if written + extra > capacity { grow(to: written + extra) }
    }

    @usableFromInline
    mutating func grow(to needed: Int) {
        var next = capacity * 2
        while next < needed { next *= 2 }
        let bigger = UnsafeMutableRawPointer.allocate(byteCount: next, alignment: 8)
        bigger.copyMemory(from: base, byteCount: written)
        base.deallocate()
        base = bigger
        capacity = next
    }

    /// Appends one byte.
    @inlinable @inline(__always)
    public mutating func append(_ byte: UInt8) {
        reserve(1)
        base.storeBytes(of: byte, toByteOffset: written, as: UInt8.self)
        written += 1
    }

    /// Appends bytes.
    @inlinable
    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        guard let source = bytes.baseAddress, !bytes.isEmpty else { return }
        reserve(bytes.count)
        (base + written).copyMemory(from: source, byteCount: bytes.count)
        written += bytes.count
    }

    /// Appends the UTF-8 bytes of a literal.
    public mutating func append(_ text: StaticString) {
        text.withUTF8Buffer { append(UnsafeRawBufferPointer($0)) }
    }

    /// Overwrites the byte at `offset` (below ``count``).
    public mutating func set(_ byte: UInt8, at offset: Int) {
        precondition(offset >= 0 && offset < count, "offset \(offset) outside the \(count) bytes written")
        base.storeBytes(of: byte, toByteOffset: offset, as: UInt8.self)
    }

    /// The bytes in `range`; valid until the next append, which may move the storage.
    public func bytes(_ range: Range<Int>) -> UnsafeRawBufferPointer {
        precondition(range.lowerBound >= 0 && range.upperBound <= count, "range outside the bytes written")
        return UnsafeRawBufferPointer(start: base + range.lowerBound, count: range.count)
    }

    /// Calls `body` with every byte written.
    public func withBytes<R, E: Error>(_ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R {
        try body(UnsafeRawBufferPointer(start: base, count: count))
    }

    /// A copy of every byte written.
    public var array: [UInt8] { Array(UnsafeRawBufferPointer(start: base, count: count)) }

    /// Whether the bytes written hold the six bytes `\u0000`: always when a string held U+0000, and
    /// also when one held a backslash followed by `u0000` (a conservative check).
    public var containsEscapedNUL: Bool {
        let bytes = UnsafeRawBufferPointer(start: base, count: count)
        var index = 0
        let end = count - 6
        while index <= end {
            if bytes[index] == 0x5C, bytes[index + 1] == 0x75, bytes[index + 2] == 0x30, bytes[index + 3] == 0x30,
                bytes[index + 4] == 0x30, bytes[index + 5] == 0x30
            {
                return true
            }
            index += 1
        }
        return false
    }

    // MARK: JSON

    /// Appends the JSON text of `value` and returns what it could not carry.
    ///
    /// - Parameters:
    ///   - sortingKeys: write object members in key order (the canonical form of
    ///     ``JSONValue/serialized()``) rather than in dictionary order.
    ///   - depth: the nesting depth `value` has as a container (a whole item is 1, its members 2).
    @discardableResult
    public mutating func appendJSON(_ value: JSONValue, sortingKeys: Bool = true, depth: Int = 1) -> JSONTextProblems {
        var problems = JSONTextProblems()
        appendJSON(value, sortingKeys: sortingKeys, depth: depth, problems: &problems)
        return problems
    }

    /// Appends the JSON text of `value`, noting in `problems` what it could not carry.
    public mutating func appendJSON(
        _ value: JSONValue, sortingKeys: Bool = true, depth: Int = 1, problems: inout JSONTextProblems
    ) {
        switch value {
        case .null: append("null")
        case .bool(let flag): append(flag ? "true" : "false")
        case .int(let number): appendInteger(number)
        case .double(let number):
            if number.isFinite {
                // Swift's description is the shortest text that parses back to the same bits, and it
                // always carries a '.' or an exponent, so the value stays a double when read again.
                var text = number.description
                text.withUTF8 { append(UnsafeRawBufferPointer($0)) }
            } else {
                problems.nonFinite = true
                append("null")
            }
        case .string(let text): appendJSONString(text)
        case .array(let elements):
            guard depth <= JSONValue.maximumNestingDepth else { return appendTooDeep(&problems) }
            append(UInt8(ascii: "["))
            var first = true
            for element in elements {
                if !first { append(UInt8(ascii: ",")) }
                first = false
                appendJSON(element, sortingKeys: sortingKeys, depth: depth + 1, problems: &problems)
            }
            append(UInt8(ascii: "]"))
        case .object(let members):
            guard depth <= JSONValue.maximumNestingDepth else { return appendTooDeep(&problems) }
            append(UInt8(ascii: "{"))
            var first = true
            if sortingKeys, members.count > 1 {
                // Sorted pairs, not sorted keys then lookups: the lookups cost more than the sort.
                for (key, member) in members.sorted(by: { $0.key < $1.key }) {
                    if !first { append(UInt8(ascii: ",")) }
                    first = false
                    appendMember(key, member, sortingKeys: true, depth: depth, problems: &problems)
                }
            } else {
                for (key, member) in members {
                    if !first { append(UInt8(ascii: ",")) }
                    first = false
                    appendMember(key, member, sortingKeys: sortingKeys, depth: depth, problems: &problems)
                }
            }
            append(UInt8(ascii: "}"))
        }
    }

    /// Stops at the parser's depth rather than recursing on: a value nested 100,000 deep must not
    /// exhaust the stack.
    private mutating func appendTooDeep(_ problems: inout JSONTextProblems) {
        problems.tooDeep = true
        append("null")
    }

    private mutating func appendMember(
        _ key: String, _ member: JSONValue, sortingKeys: Bool, depth: Int, problems: inout JSONTextProblems
    ) {
        appendJSONString(key)
        append(UInt8(ascii: ":"))
        appendJSON(member, sortingKeys: sortingKeys, depth: depth + 1, problems: &problems)
    }

    /// Appends an integer in decimal.
    public mutating func appendInteger(_ number: Int64) {
        if number >= 0, number < 10 {
            append(UInt8(ascii: "0") + UInt8(number))
            return
        }
        var magnitude = number.magnitude
        if number < 0 { append(UInt8(ascii: "-")) }
        // 24 bytes hold the 20 digits of the largest magnitude.
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)
        withUnsafeMutableBytes(of: &digits) { buffer in
            var index = buffer.count
            repeat {
                index -= 1
                buffer[index] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            append(UnsafeRawBufferPointer(rebasing: buffer[index...]))
        }
    }

    /// Appends `text` as a JSON string: quoted, with `"`, `\` and control characters escaped.
    public mutating func appendJSONString(_ text: String) {
        // Most strings need no escape: copied in one pass that checks as it goes.
        if text.utf8.withContiguousStorageIfAvailable({ appendQuotedIfClean(UnsafeRawBufferPointer($0)) }) == true {
            return
        }
        append(UInt8(ascii: "\""))
        if text.utf8.withContiguousStorageIfAvailable({ appendEscaped($0) }) == nil {
            let copy = Array(text.utf8)
            copy.withUnsafeBufferPointer { appendEscaped($0) }
        }
        append(UInt8(ascii: "\""))
    }

    /// Appends `"bytes"` when no byte needs an escape and returns `true`; otherwise appends
    /// nothing and returns `false`. Checks and copies eight bytes at a time, the last few bytes as
    /// one word too, with no call to `memmove` (the strings of an item are short).
    @inline(__always)
    private mutating func appendQuotedIfClean(_ bytes: UnsafeRawBufferPointer) -> Bool {
        let count = bytes.count
        // Room for a whole word past the last byte: the closing quote and later text overwrite it.
        reserve(count + 10)
        let target = base + written
        target.storeBytes(of: UInt8(ascii: "\""), as: UInt8.self)
        if let source = bytes.baseAddress {
            if count >= 8 {
                var index = 0
                while index + 8 <= count {
                    let word = source.loadUnaligned(fromByteOffset: index, as: UInt64.self)
                    if Self.needsEscape(word) { return false }
                    target.storeBytes(of: word, toByteOffset: index + 1, as: UInt64.self)
                    index += 8
                }
                if index < count {
                    // The last eight bytes, overlapping some already copied.
                    let word = source.loadUnaligned(fromByteOffset: count - 8, as: UInt64.self)
                    if Self.needsEscape(word) { return false }
                    target.storeBytes(of: word, toByteOffset: count - 7, as: UInt64.self)
                }
            } else if count > 0 {
                // Up to seven bytes gathered into one word, padded with spaces (which need no escape).
                var word: UInt64 = 0x2020_2020_2020_2020
                var offset = 0
                if count & 4 != 0 {
                    let part = UInt64(UInt32(littleEndian: source.loadUnaligned(as: UInt32.self)))
                    word = (word & ~0xFFFF_FFFF) | part
                    offset = 4
                }
                if count & 2 != 0 {
                    let part = UInt64(
                        UInt16(littleEndian: source.loadUnaligned(fromByteOffset: offset, as: UInt16.self)))
                    word = (word & ~(0xFFFF << (offset * 8))) | (part << (offset * 8))
                    offset += 2
                }
                if count & 1 != 0 {
                    let part = UInt64(source.load(fromByteOffset: offset, as: UInt8.self))
                    word = (word & ~(0xFF << (offset * 8))) | (part << (offset * 8))
                }
                if Self.needsEscape(word) { return false }
                target.storeBytes(of: word.littleEndian, toByteOffset: 1, as: UInt64.self)
            }
        }
        target.storeBytes(of: UInt8(ascii: "\""), toByteOffset: count + 1, as: UInt8.self)
        written += count + 2
        return true
    }

    private mutating func appendEscaped(_ bytes: UnsafeBufferPointer<UInt8>) {
        let raw = UnsafeRawBufferPointer(bytes)
        // Whole words without a quote, a backslash or a control character are copied as is.
        var clean = 0
        while clean + 8 <= raw.count, !Self.needsEscape(raw.loadUnaligned(fromByteOffset: clean, as: UInt64.self)) {
            clean += 8
        }
        var start = 0
        for index in clean..<raw.count {
            let byte = raw[index]
            guard byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte < 0x20 else { continue }
            append(UnsafeRawBufferPointer(rebasing: raw[start..<index]))
            start = index + 1
            append(UInt8(ascii: "\\"))
            switch byte {
            case UInt8(ascii: "\""): append(UInt8(ascii: "\""))
            case UInt8(ascii: "\\"): append(UInt8(ascii: "\\"))
            case 0x0A: append(UInt8(ascii: "n"))
            case 0x0D: append(UInt8(ascii: "r"))
            case 0x09: append(UInt8(ascii: "t"))
            default:
                append("u00")
                append(Self.hex(byte >> 4))
                append(Self.hex(byte & 0xF))
            }
        }
        append(UnsafeRawBufferPointer(rebasing: raw[start...]))
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

    /// How many bytes ``appendJSON(_:sortingKeys:depth:)`` writes for `value`: exact, but for a
    /// double, counted as its longest text (24 bytes). Like the writer, it stops at the parser's
    /// depth (a value nested deeper is written, and counted, as `null`).
    /// Counting walks the value without writing it: a push sizing its batches serialized every
    /// write once more for its length, about 2.5 µs of the client's 30 per operation (measured
    /// with `Tools/bench-sync.sh`).
    static func count(ofJSON value: JSONValue, depth: Int = 1) -> Int {
        switch value {
        case .null: return 4
        case .bool(let flag): return flag ? 4 : 5
        case .int(let number):
            var magnitude = number.magnitude
            var digits = 1
            while magnitude >= 10 {
                magnitude /= 10
                digits += 1
            }
            return number < 0 ? digits + 1 : digits
        case .double: return 24
        case .string(let text): return count(ofJSONString: text)
        case .array(let elements):
            guard depth <= JSONValue.maximumNestingDepth else { return 4 }
            var total = 2 + max(0, elements.count - 1)
            for element in elements { total += count(ofJSON: element, depth: depth + 1) }
            return total
        case .object(let members):
            guard depth <= JSONValue.maximumNestingDepth else { return 4 }
            var total = 2 + max(0, members.count - 1)
            for (key, member) in members {
                total += count(ofJSONString: key) + 1 + count(ofJSON: member, depth: depth + 1)
            }
            return total
        }
    }

    /// The bytes of a string's JSON text, its quotes and escapes included.
    static func count(ofJSONString text: String) -> Int {
        var total = 2
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), 0x0A, 0x0D, 0x09: total += 2
            case ..<0x20: total += 6
            default: total += 1
            }
        }
        return total
    }

    private static func hex(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10
    }
}

// A buffer belongs to the code writing into it.
@available(*, unavailable)
extension JSONTextBuffer: Sendable {}
