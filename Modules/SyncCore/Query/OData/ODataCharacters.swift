// The byte-level building blocks of OData text, shared by the option readers, the lexer and the literals.

extension ODataSyntax {

    static func isWhitespace(_ byte: UInt8) -> Bool {
        byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D
    }

    static func isBlank(_ text: String) -> Bool { text.utf8.allSatisfy(isWhitespace) }

    static func trimmed(_ text: String) -> String {
        let bytes = Array(text.utf8)
        guard let first = bytes.firstIndex(where: { !isWhitespace($0) }),
            let last = bytes.lastIndex(where: { !isWhitespace($0) })
        else { return "" }
        return String(decoding: bytes[first...last], as: UTF8.self)
    }

    static func isLetter(_ byte: UInt8) -> Bool {
        (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
            || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
    }

    static func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

    static func isHexDigit(_ byte: UInt8) -> Bool {
        isDigit(byte) || (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "f"))
            || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "F"))
    }

    static func isIdentifierStart(_ byte: UInt8) -> Bool { isLetter(byte) || byte == UInt8(ascii: "_") }

    static func isIdentifierPart(_ byte: UInt8) -> Bool { isIdentifierStart(byte) || isDigit(byte) }

    /// The number of characters in the text before `byteOffset`.
    static func characterOffset(in bytes: [UInt8], byteOffset: Int) -> Int {
        String(decoding: bytes[0..<min(max(byteOffset, 0), bytes.count)], as: UTF8.self).count
    }

    /// The character (Unicode scalar) that starts at `offset`, for messages.
    static func character(in bytes: [UInt8], at offset: Int) -> String {
        guard offset < bytes.count else { return "" }
        var end = offset + 1
        while end < bytes.count, bytes[end] & 0xC0 == 0x80 { end += 1 }
        return String(decoding: bytes[offset..<end], as: UTF8.self)
    }

    /// Whether `bytes[start...]` begins with a GUID in the `D` form (8-4-4-4-12 hexadecimal digits) that is not
    /// followed by more identifier or number characters.
    static func guid(in bytes: [UInt8], at start: Int) -> String? {
        guard bytes.count - start >= 36 else { return nil }
        for offset in 0..<36 {
            let byte = bytes[start + offset]
            switch offset {
            case 8, 13, 18, 23: guard byte == UInt8(ascii: "-") else { return nil }
            default: guard isHexDigit(byte) else { return nil }
            }
        }
        if start + 36 < bytes.count {
            let next = bytes[start + 36]
            if isIdentifierPart(next) || next == UInt8(ascii: "-") || next == UInt8(ascii: ".") { return nil }
        }
        return String(decoding: bytes[start..<start + 36], as: UTF8.self).lowercased()
    }

    /// A GUID in the `D` form, lowercased, or `nil`.
    static func guid(_ text: String) -> String? {
        let bytes = Array(text.utf8)
        guard bytes.count == 36 else { return nil }
        return guid(in: bytes, at: 0)
    }

    /// Reads an instant for `datetime'…'`, `datetimeoffset'…'` and casts from text: any form
    /// ``Timestamp/init(iso8601:)`` accepts, a date-time without a zone (taken as UTC), or a date (midnight UTC).
    static func timestamp(_ text: String) -> Timestamp? {
        if let value = Timestamp(iso8601: text) { return value }
        if let date = CalendarDate(iso8601: text) { return date.midnightUTC }
        return Timestamp(iso8601: text + "Z")
    }
}
