/// An error in JSON text: what is wrong and at which byte offset.
public struct JSONParseError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The byte offset (0-based, UTF-8) where the problem was found.
    public var offset: Int
    /// What is wrong, in one line.
    public var reason: String

    public init(offset: Int, reason: String) {
        self.offset = offset
        self.reason = reason
    }

    public var description: String { "invalid JSON at byte \(offset): \(reason)" }
}

extension JSONValue {
    /// The deepest nesting of arrays and objects the parser accepts.
    public static let maximumNestingDepth = 512

    /// Parses JSON text.
    ///
    /// Numbers without a fraction or exponent that fit in `Int64` become ``int(_:)``; every other
    /// number becomes ``double(_:)``. Duplicate keys keep the last value.
    ///
    /// - Throws: ``JSONParseError`` with the byte offset and the reason.
    public init(parsing text: String) throws(JSONParseError) {
        var text = text
        let result = text.withUTF8 { bytes in
            Result { () throws(JSONParseError) in try JSONValue(parsingUTF8: bytes) }
        }
        self = try result.get()
    }

    /// Parses UTF-8 encoded JSON bytes. See ``init(parsing:)-(String)``.
    public init(parsingUTF8 bytes: some Collection<UInt8>) throws(JSONParseError) {
        let result = bytes.withContiguousStorageIfAvailable { buffer in
            Result { () throws(JSONParseError) in try JSONValue(parsingUTF8: buffer) }
        }
        if let result {
            self = try result.get()
        } else {
            let array = Array(bytes)
            let result = array.withUnsafeBufferPointer { buffer in
                Result { () throws(JSONParseError) in try JSONValue(parsingUTF8: buffer) }
            }
            self = try result.get()
        }
    }

    init(parsingUTF8 buffer: UnsafeBufferPointer<UInt8>) throws(JSONParseError) {
        var parser = JSONParser(bytes: buffer)
        parser.skipWhitespace()
        let value = try parser.parseValue(depth: 0)
        parser.skipWhitespace()
        guard parser.index == buffer.count else {
            throw JSONParseError(offset: parser.index, reason: "unexpected text after the value")
        }
        self = value
    }

    /// The compact JSON text of this value, object keys sorted, no insignificant white space.
    ///
    /// Non-finite doubles, which JSON cannot express, and arrays or objects nested deeper than
    /// ``maximumNestingDepth`` (which the parser refuses) are written as `null`.
    public func serialized() -> String {
        var buffer = JSONTextBuffer()
        buffer.appendJSON(self)
        return buffer.withBytes { String(decoding: $0, as: UTF8.self) }
    }

    /// The compact JSON text of this value as UTF-8 bytes. See ``serialized()``.
    public func serializedUTF8() -> [UInt8] {
        var buffer = JSONTextBuffer()
        buffer.appendJSON(self)
        return buffer.array
    }
}

private struct JSONParser {
    let bytes: UnsafeBufferPointer<UInt8>
    var index = 0
    /// By nesting depth, how many members the last object parsed there had: the room a new
    /// object's dictionary starts with (the rows of a page look alike). Room for 8 members in
    /// every object took about 700 bytes for `{}` or `{"a":0}`: a 4.5 MB page of 1.5 million
    /// of them took the CLI to 1.15 GB.
    var membersSeen: [Int] = []

    init(bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
    }

    mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    func fail(_ reason: String, at offset: Int? = nil) -> JSONParseError {
        JSONParseError(offset: offset ?? index, reason: reason)
    }

    mutating func parseValue(depth: Int) throws(JSONParseError) -> JSONValue {
        guard index < bytes.count else { throw fail("unexpected end of input") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject(depth: depth + 1)
        case UInt8(ascii: "["): return try parseArray(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"):
            try expectWord("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try expectWord("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try expectWord("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw fail("unexpected character '\(Unicode.Scalar(bytes[index]))'")
        }
    }

    mutating func expectWord(_ word: StaticString) throws(JSONParseError) {
        let start = index
        let count = word.utf8CodeUnitCount
        guard bytes.count - index >= count else { throw fail("invalid literal", at: start) }
        let pointer = word.utf8Start
        for offset in 0..<count where bytes[index + offset] != pointer[offset] {
            throw fail("invalid literal", at: start)
        }
        index += count
    }

    mutating func parseObject(depth: Int) throws(JSONParseError) -> JSONValue {
        guard depth <= JSONValue.maximumNestingDepth else {
            throw fail("nesting deeper than \(JSONValue.maximumNestingDepth)")
        }
        index += 1
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return .object([:])
        }
        // Room for as many members as the object before at this depth had (a handful for the
        // first): growing a dictionary member by member rehashes it several times.
        if membersSeen.count <= depth {
            membersSeen.append(contentsOf: repeatElement(8, count: depth + 1 - membersSeen.count))
        }
        var members = JSONObject(minimumCapacity: membersSeen[depth] * 2)
        defer { membersSeen[depth] = members.count }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else {
                throw fail("expected a string key")
            }
            let key = try parseString()
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else {
                throw fail("expected ':' after an object key")
            }
            index += 1
            skipWhitespace()
            members[key] = try parseValue(depth: depth)
            skipWhitespace()
            guard index < bytes.count else { throw fail("unterminated object") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
            } else if bytes[index] == UInt8(ascii: "}") {
                index += 1
                return .object(members)
            } else {
                throw fail("expected ',' or '}' in an object")
            }
        }
    }

    mutating func parseArray(depth: Int) throws(JSONParseError) -> JSONValue {
        guard depth <= JSONValue.maximumNestingDepth else {
            throw fail("nesting deeper than \(JSONValue.maximumNestingDepth)")
        }
        index += 1
        var elements: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            return .array(elements)
        }
        while true {
            skipWhitespace()
            elements.append(try parseValue(depth: depth))
            skipWhitespace()
            guard index < bytes.count else { throw fail("unterminated array") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
            } else if bytes[index] == UInt8(ascii: "]") {
                index += 1
                return .array(elements)
            } else {
                throw fail("expected ',' or ']' in an array")
            }
        }
    }

    mutating func parseString() throws(JSONParseError) -> String {
        let start = index
        index += 1
        // Fast path: no escapes.
        var scan = index
        // Every byte OR-ed: below 0x80, the string is ASCII and needs no UTF-8 validation.
        var bits: UInt8 = 0
        while scan < bytes.count {
            let byte = bytes[scan]
            if byte == UInt8(ascii: "\"") {
                let slice = UnsafeBufferPointer(rebasing: bytes[index..<scan])
                index = scan + 1
                return try Self.string(slice, ascii: bits < 0x80, failing: fail("invalid UTF-8 in a string", at: start))
            }
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { throw fail("control character in a string", at: scan) }
            bits |= byte
            scan += 1
        }
        guard scan < bytes.count else { throw fail("unterminated string", at: start) }
        var buffer: [UInt8] = Array(bytes[index..<scan])
        index = scan
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                guard let string = String(validating: buffer, as: UTF8.self) else {
                    throw fail("invalid UTF-8 in a string", at: start)
                }
                return string
            case UInt8(ascii: "\\"):
                index += 1
                guard index < bytes.count else { throw fail("unterminated escape") }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""): buffer.append(0x22)
                case UInt8(ascii: "\\"): buffer.append(0x5C)
                case UInt8(ascii: "/"): buffer.append(0x2F)
                case UInt8(ascii: "b"): buffer.append(0x08)
                case UInt8(ascii: "f"): buffer.append(0x0C)
                case UInt8(ascii: "n"): buffer.append(0x0A)
                case UInt8(ascii: "r"): buffer.append(0x0D)
                case UInt8(ascii: "t"): buffer.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try parseHex4()
                    if (0xD800...0xDBFF).contains(scalar) {
                        guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"),
                            bytes[index + 1] == UInt8(ascii: "u")
                        else { throw fail("unpaired surrogate") }
                        index += 2
                        let low = try parseHex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw fail("unpaired surrogate") }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(scalar) {
                        throw fail("unpaired surrogate")
                    }
                    guard let unicode = Unicode.Scalar(scalar) else { throw fail("invalid \\u escape") }
                    buffer.append(contentsOf: UTF8.encode(unicode)!)
                default:
                    throw fail("invalid escape '\\\(Unicode.Scalar(escape))'", at: index - 2)
                }
            default:
                if byte < 0x20 { throw fail("control character in a string") }
                buffer.append(byte)
                index += 1
            }
        }
        throw fail("unterminated string", at: start)
    }

    /// The string of `bytes`, which must be valid UTF-8. ASCII takes `String(decoding:as:)`, several
    /// times faster than `String(validating:as:)` (generic, unspecialized: it was 7% of a push's
    /// client CPU in `perf`), and exact for ASCII.
    @inline(__always)
    static func string(
        _ bytes: UnsafeBufferPointer<UInt8>, ascii: Bool, failing failure: @autoclosure () -> JSONParseError
    )
        throws(JSONParseError) -> String
    {
        if ascii { return String(decoding: bytes, as: UTF8.self) }
        guard let string = String(validating: bytes, as: UTF8.self) else { throw failure() }
        return string
    }

    mutating func parseHex4() throws(JSONParseError) -> UInt32 {
        guard bytes.count - index >= 4 else { throw fail("short \\u escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: throw fail("invalid hex digit in a \\u escape")
            }
            value = value << 4 | digit
            index += 1
        }
        return value
    }

    mutating func parseNumber() throws(JSONParseError) -> JSONValue {
        let start = index
        var isInteger = true
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count, isDigit(bytes[index]) else { throw fail("invalid number", at: start) }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
            if index < bytes.count, isDigit(bytes[index]) {
                throw fail("leading zero in a number", at: start)
            }
        } else {
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            guard index < bytes.count, isDigit(bytes[index]) else {
                throw fail("expected a digit after '.'")
            }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            isInteger = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                index += 1
            }
            guard index < bytes.count, isDigit(bytes[index]) else {
                throw fail("expected a digit in the exponent")
            }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        if isInteger, let value = Int64(text) { return .int(value) }
        guard let value = Double(text) else { throw fail("invalid number", at: start) }
        return .double(value)
    }

    func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }
}
