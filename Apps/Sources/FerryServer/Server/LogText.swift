/// Text from a request (its path, a table name in a message, a storage error about it) made safe
/// for a text log: control characters are written as escapes, so a request cannot end a log line
/// and forge the next one (`%0a`), or write a NUL or a terminal escape into the log.
///
/// ```swift
/// LogText.escaped("/tables/x\n2026-11-27 error FORGED")   // "/tables/x\\n2026-11-27 error FORGED"
/// LogText.escaped("a\u{0}b")                               // "a\\u{0}b"
/// ```
///
/// Every place the server logs request-derived text goes through this; a line with nothing to
/// escape is returned as it is, without a copy.
enum LogText {
    static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: needsEscape) else { return text }
        var result = ""
        result.reserveCapacity(text.utf8.count + 8)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\n": result += "\\n"
            case "\r": result += "\\r"
            case "\t": result += "\\t"
            case _ where needsEscape(scalar): result += "\\u{\(String(scalar.value, radix: 16))}"
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    /// C0 and C1 controls, DEL, and the Unicode line and paragraph separators.
    private static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) || scalar.value == 0x2028 || scalar.value == 0x2029
    }
}
