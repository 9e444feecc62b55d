import GRDB

/// SQL text with its bound arguments, in order.
///
/// Values always travel as bound arguments (`?`); the only things ever written into the text are
/// fixed SQL, quoted table identifiers built from a catalog number, and JSON paths built from field
/// names (single-quoted, with `'` doubled; names that SQLite's path syntax cannot express are never
/// compiled). Build fragments by interpolation:
///
/// ```swift
/// let limit: SQLFragment = "LIMIT \(bind: 10)"          // "LIMIT ?" with one argument
/// let query: SQLFragment = "SELECT item FROM t \(limit)"  // fragments nest, arguments stay in order
/// ```
struct SQLFragment: Sendable, ExpressibleByStringInterpolation {
    var text: String
    var arguments: [DatabaseValue]

    init(text: String, arguments: [DatabaseValue] = []) {
        self.text = text
        self.arguments = arguments
    }

    init(stringLiteral value: String) {
        self.init(text: value)
    }

    init(stringInterpolation: Interpolation) {
        self.init(text: stringInterpolation.text, arguments: stringInterpolation.arguments)
    }

    /// The arguments in GRDB's form.
    var statementArguments: StatementArguments { StatementArguments(arguments) }

    /// The two fragments one after the other.
    static func + (lhs: SQLFragment, rhs: SQLFragment) -> SQLFragment {
        SQLFragment(text: lhs.text + rhs.text, arguments: lhs.arguments + rhs.arguments)
    }

    /// The fragments joined by `separator` (an SQL keyword or punctuation).
    static func joined(_ parts: [SQLFragment], separator: String) -> SQLFragment {
        var result = SQLFragment(text: "")
        for (index, part) in parts.enumerated() {
            if index > 0 { result.text += separator }
            result.text += part.text
            result.arguments += part.arguments
        }
        return result
    }

    /// Builds fragments: literal text, nested fragments, and bound values.
    struct Interpolation: StringInterpolationProtocol {
        var text = ""
        var arguments: [DatabaseValue] = []

        init(literalCapacity: Int, interpolationCount: Int) {
            text.reserveCapacity(literalCapacity + 16 * interpolationCount)
        }

        mutating func appendLiteral(_ literal: String) {
            text += literal
        }

        mutating func appendInterpolation(_ fragment: SQLFragment) {
            text += fragment.text
            arguments += fragment.arguments
        }

        mutating func appendInterpolation(bind value: DatabaseValue) {
            text += "?"
            arguments.append(value)
        }

        mutating func appendInterpolation(bind value: Int64) {
            appendInterpolation(bind: value.databaseValue)
        }

        mutating func appendInterpolation(bind value: String) {
            appendInterpolation(bind: value.databaseValue)
        }
    }
}

extension SQLFragment {
    /// A double-quoted SQL identifier (`"` doubled).
    static func identifier(_ name: String) -> SQLFragment {
        SQLFragment(text: "\"" + name.replacingBytes("\"", with: "\"\"") + "\"")
    }

    /// A single-quoted SQL string literal (`'` doubled), for text that is part of the query's shape
    /// (JSON paths, SQL function names), never for values.
    static func quoted(_ text: String) -> SQLFragment {
        SQLFragment(text: "'" + text.replacingBytes("'", with: "''") + "'")
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
