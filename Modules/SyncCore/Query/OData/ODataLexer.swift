// The OData lexer: tokens with their byte offsets.

/// What a token is.
enum ODataTokenKind {
    /// A name: a field, keyword, operator, function or `Edm.Type` (dots allowed between parts).
    case identifier(String)
    /// `'…'` with `''` unescaped.
    case string(String)
    /// `prefix'…'`, such as `datetime'2011-11-21T05:16:21.010Z'`.
    case typedString(prefix: String, body: String)
    /// Unsigned number text, checked against the grammar, with its suffix.
    case number(String)
    /// A bare date, date-time, time of day or GUID.
    case literal(QueryLiteral)
    case openParen
    case closeParen
    case comma
    case minus
    case slash
    case end
}

/// A token and where it is in the text.
struct ODataToken {
    var kind: ODataTokenKind
    /// The byte offsets of the token in the text.
    var start: Int
    var end: Int
}

/// Reads the tokens of a `$filter` or `$orderby` text one at a time, keeping the byte offsets that error positions
/// are counted from.
struct ODataLexer {
    private let bytes: [UInt8]
    /// The option the text belongs to, named in errors.
    private let option: String
    /// Where the next token starts.
    private var index = 0
    /// The current token.
    private(set) var token = ODataToken(kind: .end, start: 0, end: 0)
    /// The token before ``token``, for messages.
    private(set) var previous: ODataToken?

    /// Reads the first token.
    init(text: String, option: String) throws(QueryError) {
        self.bytes = Array(text.utf8)
        self.option = option
        try advance()
        previous = nil
    }

    /// An error at a byte offset of the text, with the position counted in characters.
    func error(_ code: QueryError.Code, _ reason: String, at byteOffset: Int) -> QueryError {
        QueryError(
            code,
            reason,
            option: option,
            position: ODataSyntax.characterOffset(in: bytes, byteOffset: byteOffset)
        )
    }

    /// The text of a token.
    func text(of token: ODataToken) -> String {
        String(decoding: bytes[token.start..<token.end], as: UTF8.self)
    }

    /// A token for messages: quoted, or "the end of the text".
    func describe(_ token: ODataToken) -> String {
        if case .end = token.kind { return "the end of the text" }
        return "'\(text(of: token))'"
    }

    /// The first byte after the current token that is not whitespace (a `(` makes a name a call).
    func nextSignificantByte() -> UInt8? {
        var offset = index
        while offset < bytes.count, ODataSyntax.isWhitespace(bytes[offset]) { offset += 1 }
        return offset < bytes.count ? bytes[offset] : nil
    }

    /// Moves to the next token.
    mutating func advance() throws(QueryError) {
        previous = token
        token = try lex()
    }

    private mutating func lex() throws(QueryError) -> ODataToken {
        while index < bytes.count, ODataSyntax.isWhitespace(bytes[index]) { index += 1 }
        let start = index
        guard index < bytes.count else { return ODataToken(kind: .end, start: start, end: start) }
        let byte = bytes[index]
        let single: ODataTokenKind? =
            switch byte {
            case UInt8(ascii: "("): .openParen
            case UInt8(ascii: ")"): .closeParen
            case UInt8(ascii: ","): .comma
            case UInt8(ascii: "-"): .minus
            case UInt8(ascii: "/"): .slash
            default: nil
            }
        if let single {
            index += 1
            return ODataToken(kind: single, start: start, end: index)
        }
        if byte == UInt8(ascii: "'") {
            let value = try lexQuoted()
            return ODataToken(kind: .string(value), start: start, end: index)
        }
        if let guid = ODataSyntax.guid(in: bytes, at: index) {
            index += 36
            return ODataToken(kind: .literal(.guid(guid)), start: start, end: index)
        }
        if ODataSyntax.isIdentifierStart(byte) {
            index += 1
            while index < bytes.count {
                if ODataSyntax.isIdentifierPart(bytes[index]) {
                    index += 1
                } else if bytes[index] == UInt8(ascii: "."), index + 1 < bytes.count,
                    ODataSyntax.isIdentifierStart(bytes[index + 1])
                {
                    index += 2
                } else {
                    break
                }
            }
            let name = String(decoding: bytes[start..<index], as: UTF8.self)
            if index < bytes.count, bytes[index] == UInt8(ascii: "'") {
                let body = try lexQuoted()
                return ODataToken(kind: .typedString(prefix: name, body: body), start: start, end: index)
            }
            return ODataToken(kind: .identifier(name), start: start, end: index)
        }
        if ODataSyntax.isDigit(byte) {
            let kind = try lexNumeric()
            return ODataToken(kind: kind, start: start, end: index)
        }
        throw error(.syntax, "unexpected character '\(ODataSyntax.character(in: bytes, at: start))'", at: start)
    }

    /// A `'…'` literal starting at `index`, with `''` unescaped.
    private mutating func lexQuoted() throws(QueryError) -> String {
        let start = index
        index += 1
        var content: [UInt8] = []
        while index < bytes.count {
            let byte = bytes[index]
            index += 1
            if byte == UInt8(ascii: "'") {
                if index < bytes.count, bytes[index] == UInt8(ascii: "'") {
                    content.append(byte)
                    index += 1
                } else {
                    return String(decoding: content, as: UTF8.self)
                }
            } else {
                content.append(byte)
            }
        }
        throw error(.syntax, "unterminated string literal", at: start)
    }

    /// A token that starts with a digit: a number, a date, a date-time or a time of day.
    private mutating func lexNumeric() throws(QueryError) -> ODataTokenKind {
        let start = index
        while index < bytes.count {
            let byte = bytes[index]
            guard
                ODataSyntax.isIdentifierPart(byte) || byte == UInt8(ascii: ".") || byte == UInt8(ascii: ":")
                    || byte == UInt8(ascii: "+") || byte == UInt8(ascii: "-")
            else { break }
            index += 1
        }
        let word = bytes[start..<index]
        let text = String(decoding: word, as: UTF8.self)
        func digits(_ offsets: Range<Int>) -> Bool {
            offsets.allSatisfy { start + $0 < index && ODataSyntax.isDigit(bytes[start + $0]) }
        }
        func byte(_ offset: Int, is character: Unicode.Scalar) -> Bool {
            start + offset < index && bytes[start + offset] == UInt8(ascii: character)
        }
        if digits(0..<4), byte(4, is: "-"), digits(5..<7), byte(7, is: "-"), digits(8..<10) {
            if word.count == 10 {
                guard let date = CalendarDate(iso8601: text) else {
                    throw error(.syntax, "'\(text)' is not a valid date", at: start)
                }
                return .literal(.date(date))
            }
            guard let instant = Timestamp(iso8601: text) else {
                throw error(.syntax, "'\(text)' is not a valid date-time", at: start)
            }
            return .literal(.dateTimeOffset(instant))
        }
        if digits(0..<2), byte(2, is: ":") {
            guard let time = TimeOfDay(iso8601: text) else {
                throw error(.syntax, "'\(text)' is not a valid time of day", at: start)
            }
            return .literal(.timeOfDay(time))
        }
        guard Self.isNumber(Array(word)) else {
            throw error(.syntax, "'\(text)' is not a valid number", at: start)
        }
        return .number(text)
    }

    /// `digits ['.' digits] [('e'|'E') ['+'|'-'] digits] [suffix]`; the suffix `L` only on integers.
    private static func isNumber(_ bytes: [UInt8]) -> Bool {
        var index = 0
        func digitRun() -> Bool {
            let start = index
            while index < bytes.count, ODataSyntax.isDigit(bytes[index]) { index += 1 }
            return index > start
        }
        guard digitRun() else { return false }
        var isInteger = true
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            isInteger = false
            guard digitRun() else { return false }
        }
        if index < bytes.count, bytes[index] | 0x20 == UInt8(ascii: "e") {
            index += 1
            isInteger = false
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                index += 1
            }
            guard digitRun() else { return false }
        }
        if index < bytes.count {
            switch bytes[index] | 0x20 {
            case UInt8(ascii: "m"), UInt8(ascii: "d"), UInt8(ascii: "f"): index += 1
            case UInt8(ascii: "l") where isInteger: index += 1
            default: return false
            }
        }
        return index == bytes.count
    }
}
