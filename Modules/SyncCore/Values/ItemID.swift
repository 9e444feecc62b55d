import Synchronization

/// Item ids: validation with the legacy rules, and time-ordered generation.
///
/// A valid id is a non-empty string of at most 255 UTF-16 code units that is not only white space,
/// contains none of `+ ? ` " / \` nor a control character (U+0000–U+001F, U+007F–U+009F), and is not
/// `.` or `..`.
///
/// ```swift
/// try ItemID.validate("todo-1")          // fine
/// try ItemID.validate("a/b")             // throws ItemIDError(.forbiddenCharacter)
/// let id = ItemID.generate()              // "0193f4a2-7c1e-7a3b-8c2d-5e6f7a8b9c0d": UUIDv7, sorts by time
/// ```
public enum ItemID: Sendable {
    /// The longest id, in UTF-16 code units (the legacy limit).
    public static let maximumLength = 255

    /// Throws ``ItemIDError`` when `id` breaks a rule; see the type's documentation.
    public static func validate(_ id: String) throws(ItemIDError) {
        if isValidASCII(id) { return }
        try validateInGeneral(id)
    }

    /// The rules for any id, scalar by scalar (the fast path's reference).
    static func validateInGeneral(_ id: String) throws(ItemIDError) {
        if id.isEmpty { throw ItemIDError(id: id, reason: .empty) }
        if id.utf16.count > maximumLength { throw ItemIDError(id: id, reason: .tooLong) }
        if id == "." || id == ".." { throw ItemIDError(id: id, reason: .reservedName) }
        var onlyWhitespace = true
        for scalar in id.unicodeScalars {
            switch scalar.value {
            case 0x00...0x1F, 0x7F...0x9F:
                throw ItemIDError(id: id, reason: .controlCharacter)
            case 0x2B, 0x3F, 0x60, 0x22, 0x2F, 0x5C:  // + ? ` " / \
                throw ItemIDError(id: id, reason: .forbiddenCharacter(Character(scalar)))
            default:
                // Only looked at until one non-space is seen; ASCII needs no property lookup.
                if onlyWhitespace, scalar.value != 0x20, scalar.value < 0x80 || !scalar.properties.isWhitespace {
                    onlyWhitespace = false
                }
            }
        }
        if onlyWhitespace { throw ItemIDError(id: id, reason: .whitespaceOnly) }
    }

    /// Whether `id` is plain printable ASCII that passes ``validate(_:)``, checked a byte at a time
    /// without Unicode property lookups (the common case). `false` says nothing: ``validate(_:)``
    /// then takes the general path, which gives the reason.
    ///
    /// For ASCII the rules reduce to: 1 to 255 bytes, none below 0x20 or equal to 0x7F, none of
    /// `+ ? ` " / \`, not `.` or `..`, and not only spaces.
    static func isValidASCII(_ id: String) -> Bool {
        id.utf8.withContiguousStorageIfAvailable { bytes -> Bool in
            guard !bytes.isEmpty, bytes.count <= maximumLength else { return false }
            var onlySpaces = true
            // Eight bytes at a time while they are all allowed, then byte by byte.
            var start = 0
            let raw = UnsafeRawBufferPointer(bytes)
            while start + 8 <= raw.count {
                let word = raw.loadUnaligned(fromByteOffset: start, as: UInt64.self)
                guard !wordHasForbiddenByte(word) else { return false }
                if word != 0x2020_2020_2020_2020 { onlySpaces = false }
                start += 8
            }
            for byte in bytes[start...] {
                let allowed =
                    byte < 64
                    ? (allowedBelow64 >> UInt64(byte)) & 1 : byte < 128 ? (allowedFrom64 >> UInt64(byte - 64)) & 1 : 0
                if allowed == 0 { return false }
                if byte != 0x20 { onlySpaces = false }
            }
            if onlySpaces { return false }
            if bytes.count <= 2, bytes.allSatisfy({ $0 == UInt8(ascii: ".") }) { return false }
            return true
        } ?? false
    }

    /// Whether one of eight bytes may not appear in an ASCII id: below 0x20, from 0x7F on, or one of
    /// `" + / ? \ `` (bit tricks: a byte of `x - 0x01…` borrows only where `x` was zero).
    @inline(__always)
    static func wordHasForbiddenByte(_ word: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        func hasZeroByte(_ value: UInt64) -> UInt64 { (value &- ones) & ~value & highs }
        func hasByte(_ byte: UInt64) -> UInt64 { hasZeroByte(word ^ (ones &* byte)) }
        // Below 0x20 or from 0x80 on: subtracting 0x20 borrows, or the high bit is set.
        let outside = ((word &- ones &* 0x20) | word) & highs
        let forbidden =
            hasByte(0x7F) | hasByte(0x22) | hasByte(0x2B) | hasByte(0x2F) | hasByte(0x3F) | hasByte(0x5C)
            | hasByte(0x60)
        return (outside | forbidden) != 0
    }

    /// Bit `n` is set when byte `n` may appear in an ASCII id: 0x20–0x3F but `" + / ?`.
    static let allowedBelow64: UInt64 = 0x7FFF_77FB_0000_0000

    /// Bit `n` is set when byte `64 + n` may appear in an ASCII id: 0x40–0x7E but `\ ``.
    static let allowedFrom64: UInt64 = 0x7FFF_FFFE_EFFF_FFFF

    /// `true` when `id` is valid.
    public static func isValid(_ id: String) -> Bool {
        do {
            try validate(id)
            return true
        } catch {
            return false
        }
    }

    /// A new id: a lowercase RFC 9562 UUIDv7.
    ///
    /// Ids generated by one process sort in generation order (a 48-bit millisecond timestamp and a
    /// counter that increases within a millisecond), so they insert several times faster into a
    /// B-tree than random ids.
    public static func generate() -> String {
        generator.next(nowMilliseconds: currentMilliseconds())
    }

    static let generator = UUIDv7Generator()
}

/// Why an id was rejected.
public struct ItemIDError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What rule the id breaks.
    public enum Reason: Sendable, Hashable {
        case empty
        case tooLong
        case whitespaceOnly
        case controlCharacter
        case forbiddenCharacter(Character)
        case reservedName
    }

    /// The rejected id.
    public var id: String
    public var reason: Reason

    public var description: String {
        let shown = id.count > 40 ? String(id.prefix(40)) + "…" : id
        switch reason {
        case .empty: return "invalid id: the id is empty"
        case .tooLong: return "invalid id '\(shown)': longer than \(ItemID.maximumLength) characters"
        case .whitespaceOnly: return "invalid id '\(shown)': only white space"
        case .controlCharacter: return "invalid id: it contains a control character"
        case .forbiddenCharacter(let character):
            return "invalid id '\(shown)': the character '\(character)' is not allowed (none of + ? ` \" / \\)"
        case .reservedName: return "invalid id '\(shown)': '.' and '..' are reserved"
        }
    }
}

/// Generates RFC 9562 version 7 UUIDs that are strictly increasing within one process.
final class UUIDv7Generator: Sendable {
    private struct State {
        var lastMilliseconds: UInt64 = 0
        var counter: UInt16 = 0
        var random = SystemRandomNumberGenerator()
    }

    private let state = Mutex(State())

    func next(nowMilliseconds: UInt64) -> String {
        let (milliseconds, counter, tail) = state.withLock { state -> (UInt64, UInt16, UInt64) in
            if nowMilliseconds > state.lastMilliseconds {
                state.lastMilliseconds = nowMilliseconds
                state.counter = UInt16.random(in: 0..<0x400, using: &state.random)
            } else if state.counter >= 0xFFF {
                // The 12-bit counter is exhausted: borrow the next millisecond.
                state.lastMilliseconds += 1
                state.counter = 0
            } else {
                state.counter += 1
            }
            return (state.lastMilliseconds, state.counter, state.random.next())
        }
        var bytes = [UInt8](repeating: 0, count: 16)
        for index in 0..<6 { bytes[index] = UInt8(truncatingIfNeeded: milliseconds >> (40 - 8 * UInt64(index))) }
        bytes[6] = 0x70 | UInt8(truncatingIfNeeded: counter >> 8)
        bytes[7] = UInt8(truncatingIfNeeded: counter)
        for index in 8..<16 { bytes[index] = UInt8(truncatingIfNeeded: tail >> (8 * UInt64(index - 8))) }
        bytes[8] = 0x80 | (bytes[8] & 0x3F)
        return formatUUID(bytes)
    }
}

func formatUUID(_ bytes: [UInt8]) -> String {
    let hex = Array("0123456789abcdef".utf8)
    var output: [UInt8] = []
    output.reserveCapacity(36)
    for (index, byte) in bytes.enumerated() {
        if index == 4 || index == 6 || index == 8 || index == 10 { output.append(UInt8(ascii: "-")) }
        output.append(hex[Int(byte >> 4)])
        output.append(hex[Int(byte & 0xF)])
    }
    return String(decoding: output, as: UTF8.self)
}

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

func currentMilliseconds() -> UInt64 {
    var spec = timespec()
    clock_gettime(CLOCK_REALTIME, &spec)
    return UInt64(spec.tv_sec) * 1000 + UInt64(spec.tv_nsec) / 1_000_000
}
