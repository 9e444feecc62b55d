/// How long a string an expression can build, bounded before anything runs.
///
/// `concat` and `replace` build strings, and nesting them multiplies: twenty-four nested
/// `replace(x,'a','aa')` turn a one-letter field into 16 MB, in a query of 900 bytes, for every
/// row a server or a store looks at (measured on the reference server: 1.3 s at 22 levels, 5.7 s
/// at 24, doubling with each). A query is refused when one of its strings could be longer than
/// ``maximumFieldCopies`` times the longest field plus ``maximumBytes``, whatever the data: the
/// same rule on the device and on the server, checked once per query.
///
/// The bound of a string is `fields × F + bytes`, where F is the length of the longest field:
/// a field is `1 × F`, a literal its length, `concat` the sum of its arguments, and `replace(x, p,
/// r)` at most `x × r / p` (each match of `p` becomes `r`; a `p` that is not a literal may be one
/// character long). A `replace` whose replacement and text both depend on fields is refused: its
/// bound grows with the square of the data.
struct StringGrowth {
    /// The most copies of the longest field one string of a query may hold.
    static let maximumFieldCopies = 16.0
    /// The most bytes from literals one string of a query may hold.
    static let maximumBytes = 1_048_576.0

    /// `fields × F + bytes`.
    private struct Bound {
        var fields: Double
        var bytes: Double

        static let scalar = Bound(fields: 0, bytes: 64)  // a number, a date or a Boolean as text

        static func + (lhs: Bound, rhs: Bound) -> Bound {
            Bound(fields: lhs.fields + rhs.fields, bytes: lhs.bytes + rhs.bytes)
        }
    }

    let option: String

    /// Throws when a string of `expression` could pass the bounds.
    func check(_ expression: QueryExpression) throws(QueryError) {
        _ = try bound(expression)
    }

    private func bound(_ expression: QueryExpression) throws(QueryError) -> Bound {
        let result: Bound
        switch expression {
        case .literal(.string(let text)): result = Bound(fields: 0, bytes: Double(text.utf8.count))
        case .literal: result = .scalar
        case .field: result = Bound(fields: 1, bytes: 0)
        case .unary(_, let operand):
            _ = try bound(operand)
            result = .scalar
        case .binary(_, let lhs, let rhs):
            _ = try bound(lhs)
            _ = try bound(rhs)
            result = .scalar
        case .isIn(let value, let list):
            _ = try bound(value)
            for member in list { _ = try bound(member) }
            result = .scalar
        case .cast(let value, _):
            result = try bound(value) + .scalar
        case .function(let function, let arguments):
            var bounds: [Bound] = []
            for argument in arguments { bounds.append(try bound(argument)) }
            switch function {
            case .concat: result = bounds.reduce(Bound(fields: 0, bytes: 0), +)
            case .toLower, .toUpper, .trim, .substring: result = bounds.first ?? .scalar
            case .replace where bounds.count == 3:
                result = try replaced(bounds[0], find: arguments[1], replacement: bounds[2])
            default: result = .scalar
            }
        }
        guard result.fields <= Self.maximumFieldCopies, result.bytes <= Self.maximumBytes else {
            throw tooLarge()
        }
        return result
    }

    private func replaced(_ text: Bound, find: QueryExpression, replacement: Bound) throws(QueryError) -> Bound {
        var findLength = 1.0
        if case .literal(.string(let literal)) = find {
            if literal.isEmpty { return text }  // replaces nothing
            findLength = Double(literal.utf8.count)
        }
        if replacement.fields > 0 {
            guard text.fields == 0 else { throw tooLarge() }
            // A literal text: each of its characters may become the replacement.
            let matches = text.bytes / findLength
            return Bound(fields: matches * replacement.fields, bytes: text.bytes + matches * replacement.bytes)
        }
        let factor = max(1, replacement.bytes / findLength)
        return Bound(fields: text.fields * factor, bytes: text.bytes * factor)
    }

    private func tooLarge() -> QueryError {
        QueryError(
            .tooLarge,
            "the expression could build a string longer than \(Int(Self.maximumFieldCopies)) times the longest field "
                + "(nested replace or concat); simplify it", option: option)
    }
}
