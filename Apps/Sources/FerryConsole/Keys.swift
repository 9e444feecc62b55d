/// A key press, decoded from a terminal's bytes.
public enum Key: Sendable, Hashable {
    case character(Character)
    case enter, tab, backspace, delete
    case left, right, up, down, home, end, wordLeft, wordRight
    /// Ctrl-C.
    case interrupt
    /// Ctrl-D.
    case endOfInput
    /// Ctrl-K.
    case killToEnd
    /// Ctrl-U.
    case killToStart
    /// Ctrl-W.
    case deleteWordBefore
    /// Ctrl-L.
    case clearScreen
    /// A sequence this editor does not handle.
    case unknown
}

/// Turns the bytes a terminal sends in raw mode into ``Key``s: UTF-8 characters, control keys and
/// the common escape sequences (xterm and VT100 forms of arrows, Home, End, Delete).
///
/// ```swift
/// var decoder = KeyDecoder()
/// decoder.feed(Array("é\u{1B}[D".utf8))  // [.character("é"), .left]
/// ```
public struct KeyDecoder: Sendable {
    private var pending: [UInt8] = []

    public init() {}

    /// The keys completed by `bytes`; an unfinished sequence waits for the next call.
    public mutating func feed(_ bytes: [UInt8]) -> [Key] {
        pending += bytes
        var keys: [Key] = []
        while let (key, used) = Self.decode(pending) {
            keys.append(key)
            pending.removeFirst(used)
        }
        return keys
    }

    /// A lone ESC that nothing followed: reported when input pauses.
    public mutating func flush() -> [Key] {
        defer { pending = [] }
        return pending.isEmpty ? [] : [.unknown]
    }

    /// The first key of `bytes` and how many bytes it used, or `nil` when more bytes are needed.
    static func decode(_ bytes: [UInt8]) -> (Key, Int)? {
        guard let first = bytes.first else { return nil }
        switch first {
        case 0x01: return (.home, 1)
        case 0x02: return (.left, 1)
        case 0x03: return (.interrupt, 1)
        case 0x04: return (.endOfInput, 1)
        case 0x05: return (.end, 1)
        case 0x06: return (.right, 1)
        case 0x08, 0x7F: return (.backspace, 1)
        case 0x09: return (.tab, 1)
        case 0x0A, 0x0D: return (.enter, 1)
        case 0x0B: return (.killToEnd, 1)
        case 0x0C: return (.clearScreen, 1)
        case 0x0E: return (.down, 1)
        case 0x10: return (.up, 1)
        case 0x15: return (.killToStart, 1)
        case 0x17: return (.deleteWordBefore, 1)
        case 0x1B: return escape(bytes)
        case 0x00..<0x20: return (.unknown, 1)
        default: return utf8(bytes)
        }
    }

    private static func escape(_ bytes: [UInt8]) -> (Key, Int)? {
        guard bytes.count >= 2 else { return nil }
        switch bytes[1] {
        case UInt8(ascii: "["):
            // CSI: parameters (digits and ';') then a final byte.
            var index = 2
            while index < bytes.count, (0x30...0x3F).contains(bytes[index]) { index += 1 }
            guard index < bytes.count else { return nil }
            let parameters = String(decoding: bytes[2..<index], as: UTF8.self)
            let final = bytes[index]
            let used = index + 1
            let modified = parameters.hasSuffix(";5") || parameters.hasSuffix(";3")
            switch final {
            case UInt8(ascii: "A"): return (.up, used)
            case UInt8(ascii: "B"): return (.down, used)
            case UInt8(ascii: "C"): return (modified ? .wordRight : .right, used)
            case UInt8(ascii: "D"): return (modified ? .wordLeft : .left, used)
            case UInt8(ascii: "H"): return (.home, used)
            case UInt8(ascii: "F"): return (.end, used)
            case UInt8(ascii: "~"):
                switch parameters {
                case "1", "7": return (.home, used)
                case "4", "8": return (.end, used)
                case "3": return (.delete, used)
                default: return (.unknown, used)
                }
            default: return (.unknown, used)
            }
        case UInt8(ascii: "O"):
            guard bytes.count >= 3 else { return nil }
            switch bytes[2] {
            case UInt8(ascii: "A"): return (.up, 3)
            case UInt8(ascii: "B"): return (.down, 3)
            case UInt8(ascii: "C"): return (.right, 3)
            case UInt8(ascii: "D"): return (.left, 3)
            case UInt8(ascii: "H"): return (.home, 3)
            case UInt8(ascii: "F"): return (.end, 3)
            default: return (.unknown, 3)
            }
        case UInt8(ascii: "b"): return (.wordLeft, 2)
        case UInt8(ascii: "f"): return (.wordRight, 2)
        case 0x7F: return (.deleteWordBefore, 2)
        default: return (.unknown, 2)
        }
    }

    private static func utf8(_ bytes: [UInt8]) -> (Key, Int)? {
        let first = bytes[0]
        let length =
            switch first {
            case 0x00..<0x80: 1
            case 0xC0..<0xE0: 2
            case 0xE0..<0xF0: 3
            case 0xF0..<0xF8: 4
            default: 0
            }
        guard length > 0 else { return (.unknown, 1) }
        guard bytes.count >= length else { return nil }
        let scalarBytes = Array(bytes[0..<length])
        guard let text = String(validating: scalarBytes, as: UTF8.self), let character = text.first else {
            return (.unknown, length)
        }
        return (.character(character), length)
    }
}
