import GRDB

/// SQL text with its bound arguments, in order.
///
/// Values always travel as bound arguments (`?`). The only things written into the text are fixed
/// SQL, table identifiers built from a catalog number, and JSON paths built from field names that
/// consist of letters, digits and `_` only (other names are bound as arguments too).
///
/// ```swift
/// let limit: SQLFragment = "LIMIT \(bind: 10)"             // "LIMIT ?" with one argument
/// let query: SQLFragment = "SELECT id FROM t \(limit)"     // fragments nest, arguments stay in order
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

    static let alwaysTrue: SQLFragment = "1"
    static let alwaysFalse: SQLFragment = "0"

    var isAlwaysTrue: Bool { text == "1" && arguments.isEmpty }
    var isAlwaysFalse: Bool { text == "0" && arguments.isEmpty }

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

    /// `(a AND b AND …)`, simplified around constants.
    static func and(_ parts: [SQLFragment]) -> SQLFragment {
        if parts.contains(where: \.isAlwaysFalse) { return .alwaysFalse }
        let kept = parts.filter { !$0.isAlwaysTrue }
        if kept.isEmpty { return .alwaysTrue }
        if kept.count == 1 { return kept[0] }
        return "(" + joined(kept, separator: " AND ") + ")"
    }

    /// `(a OR b OR …)`, simplified around constants.
    static func or(_ parts: [SQLFragment]) -> SQLFragment {
        if parts.contains(where: \.isAlwaysTrue) { return .alwaysTrue }
        let kept = parts.filter { !$0.isAlwaysFalse }
        if kept.isEmpty { return .alwaysFalse }
        if kept.count == 1 { return kept[0] }
        return "(" + joined(kept, separator: " OR ") + ")"
    }

    /// True exactly when `a` is not true: a predicate's NULL (an unknown, as `json_type` of a
    /// missing field gives) counts as false, so its negation is true. Simplified around constants.
    static func not(_ part: SQLFragment) -> SQLFragment {
        if part.isAlwaysTrue { return .alwaysFalse }
        if part.isAlwaysFalse { return .alwaysTrue }
        return "((\(part)) IS NOT 1)"
    }

    static func + (lhs: SQLFragment, rhs: SQLFragment) -> SQLFragment {
        SQLFragment(text: lhs.text + rhs.text, arguments: lhs.arguments + rhs.arguments)
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

        mutating func appendInterpolation(bind value: some DatabaseValueConvertible) {
            text += "?"
            arguments.append(value.databaseValue)
        }
    }
}
