/// SQL text with its bound arguments, in order, written once and rendered for any ``SQLDialect``.
///
/// Values always travel as bound arguments; the only things ever written into the text are fixed
/// SQL, quoted identifiers, and JSON paths built from field names (single-quoted, with `'` doubled;
/// names holding control characters are never compiled). Where an argument goes, the text holds a
/// marker that ``sql(for:)`` turns into `?` (SQLite) or `$1`, `$2`, … (PostgreSQL). Build fragments
/// by interpolation:
///
/// ```swift
/// let limit: SQLFragment = "LIMIT \(bind: 10)"
/// let query: SQLFragment = "SELECT item FROM t WHERE id = \(bind: "a") \(limit)"
/// print(query.sql(for: .sqlite))       // SELECT item FROM t WHERE id = ? LIMIT ?
/// print(query.sql(for: .postgreSQL))   // SELECT item FROM t WHERE id = $1::text LIMIT $2::bigint
/// print(query.arguments)               // [.text("a"), .integer(10)]
/// ```
public struct SQLFragment: Sendable, Hashable, ExpressibleByStringInterpolation {
    /// The text, with ``placeholder`` where each argument goes.
    public var text: String
    /// The bound values, in order.
    public var arguments: [SQLValue]

    /// Marks an argument's place in ``text`` (a control character, which no compiled name holds).
    public static let placeholder: Character = "\u{1}"
    static let placeholderByte: UInt8 = 1

    /// A fragment from raw text (which must not hold ``placeholder`` unless `arguments` match).
    public init(text: String, arguments: [SQLValue] = []) {
        self.text = text
        self.arguments = arguments
    }

    /// Fixed SQL text, with no arguments.
    public init(stringLiteral value: String) {
        self.init(text: value)
    }

    /// Text and arguments built by interpolation (see ``Interpolation``).
    public init(stringInterpolation: Interpolation) {
        self.init(text: stringInterpolation.text, arguments: stringInterpolation.arguments)
    }

    /// The statement text for `dialect`: each argument's marker becomes the dialect's placeholder.
    public func sql(for dialect: SQLDialect) -> String {
        guard !arguments.isEmpty else { return text }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count + 8 * arguments.count)
        var index = 0
        for byte in text.utf8 {
            if byte == Self.placeholderByte, index < arguments.count {
                bytes += dialect.placeholder(index, arguments[index]).utf8
                index += 1
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The two fragments one after the other.
    public static func + (lhs: SQLFragment, rhs: SQLFragment) -> SQLFragment {
        SQLFragment(text: lhs.text + rhs.text, arguments: lhs.arguments + rhs.arguments)
    }

    /// The fragments joined by `separator` (an SQL keyword or punctuation).
    public static func joined(_ parts: [SQLFragment], separator: String) -> SQLFragment {
        var result = SQLFragment(text: "")
        for (index, part) in parts.enumerated() {
            if index > 0 { result.text += separator }
            result.text += part.text
            result.arguments += part.arguments
        }
        return result
    }

    /// A double-quoted SQL identifier (`"` doubled).
    public static func identifier(_ name: String) -> SQLFragment {
        SQLFragment(text: "\"" + name.replacingBytes("\"", with: "\"\"") + "\"")
    }

    /// A single-quoted SQL string literal (`'` doubled), for text that is part of the query's shape
    /// (JSON paths, SQL function names), never for values.
    public static func quoted(_ text: String) -> SQLFragment {
        SQLFragment(text: "'" + text.replacingBytes("'", with: "''") + "'")
    }

    /// The fragment in parentheses.
    public var parenthesized: SQLFragment { "(\(self))" }

    /// Builds fragments: literal text, nested fragments, and bound values.
    public struct Interpolation: StringInterpolationProtocol, Sendable {
        var text = ""
        var arguments: [SQLValue] = []

        /// An empty builder, sized for the literal.
        public init(literalCapacity: Int, interpolationCount: Int) {
            text.reserveCapacity(literalCapacity + 16 * interpolationCount)
        }

        /// Appends fixed SQL text.
        public mutating func appendLiteral(_ literal: String) {
            text += literal
        }

        /// Appends a fragment, its arguments after those already there.
        public mutating func appendInterpolation(_ fragment: SQLFragment) {
            text += fragment.text
            arguments += fragment.arguments
        }

        /// Appends a placeholder bound to `value`.
        public mutating func appendInterpolation(bind value: SQLValue) {
            text.append(SQLFragment.placeholder)
            arguments.append(value)
        }

        /// Appends a placeholder bound to an integer.
        public mutating func appendInterpolation(bind value: Int64) {
            appendInterpolation(bind: .integer(value))
        }

        /// Appends a placeholder bound to an integer.
        public mutating func appendInterpolation(bind value: Int) {
            appendInterpolation(bind: .integer(Int64(value)))
        }

        /// Appends a placeholder bound to a double.
        public mutating func appendInterpolation(bind value: Double) {
            appendInterpolation(bind: .real(value))
        }

        /// Appends a placeholder bound to text.
        public mutating func appendInterpolation(bind value: String) {
            appendInterpolation(bind: .text(value))
        }
    }
}

extension String {
    /// Replaces every occurrence of `target` (compared by UTF-8 bytes) with `replacement`.
    func replacingBytes(_ target: String, with replacement: String) -> String {
        let bytes = Array(utf8)
        let pattern = Array(target.utf8)
        guard !pattern.isEmpty, bytes.count >= pattern.count else { return self }
        var result: [UInt8] = []
        result.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            if index + pattern.count <= bytes.count, bytes[index..<index + pattern.count].elementsEqual(pattern) {
                result.append(contentsOf: replacement.utf8)
                index += pattern.count
            } else {
                result.append(bytes[index])
                index += 1
            }
        }
        return String(decoding: result, as: UTF8.self)
    }
}
