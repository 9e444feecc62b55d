// The OData writer: queries and expressions as the text each protocol version reads.
//
// Output is canonical: every binary expression is parenthesized (a chain of one `and`/`or` once, flat), there are
// no optional spaces, and the
// parser reads it back to the same tree (`parse(encode(parse(q))) == parse(q)`). In 2.0 the 3.0-only forms are
// rewritten: `in` becomes an `or` chain of `eq`, a date becomes midnight UTC and a time of day a string.

extension TableQuery {
    /// The query's OData parameters as `(name, raw value)` pairs, in a canonical order: `$filter`, `$orderby`,
    /// `$skip`, `$top`, `$select`, then `$count=true` (3.0) or `$inlinecount=allpages` (2.0), then
    /// `__includedeleted=true`. Parameters at their default (`nil`, empty, `false`) are left out.
    ///
    /// ```swift
    /// let query = TableQuery().filter(.field("year").ge(1930)).orderBy("title").top(10).includingTotalCount()
    /// query.odataParameters(protocolVersion: .v3)
    /// // [("$filter", "(year ge 1930)"), ("$orderby", "title"), ("$top", "10"), ("$count", "true")]
    /// ```
    public func odataParameters(protocolVersion: ProtocolVersion) -> [(name: String, value: String)] {
        var parameters: [(name: String, value: String)] = []
        if let filter { parameters.append(("$filter", filter.odata(protocolVersion: protocolVersion))) }
        if !orderBy.isEmpty {
            let keys = orderBy.map { key in
                ODataEncoding(protocolVersion: protocolVersion).encode(key.expression).text
                    + (key.descending ? " desc" : "")
            }
            parameters.append(("$orderby", keys.joined(separator: ",")))
        }
        if let skip { parameters.append(("$skip", String(skip))) }
        if let top { parameters.append(("$top", String(top))) }
        if let select { parameters.append(("$select", select.joined(separator: ","))) }
        if includeTotalCount {
            switch protocolVersion {
            case .v2: parameters.append(("$inlinecount", "allpages"))
            case .v3: parameters.append(("$count", "true"))
            }
        }
        if includeDeleted { parameters.append(("__includedeleted", "true")) }
        return parameters
    }

    /// The query as a URL query component (without the `?`): ``odataParameters(protocolVersion:)`` joined with `&` and
    /// percent-encoded per RFC 3986.
    ///
    /// Unreserved characters (`A-Z a-z 0-9 - . _ ~`) and `$ ' ( ) , :` stay as they are; everything else,
    /// including space (`%20`), `& = + # %` and every byte of a non-ASCII character, is percent-encoded.
    ///
    /// ```swift
    /// TableQuery().filter(.field("title").eq("Amélie & co")).odataQueryString(protocolVersion: .v3)
    /// // "$filter=(title%20eq%20'Am%C3%A9lie%20%26%20co')"
    /// ```
    public func odataQueryString(protocolVersion: ProtocolVersion) -> String {
        odataParameters(protocolVersion: protocolVersion)
            .map { PercentEncoding.queryComponent($0.name) + "=" + PercentEncoding.queryComponent($0.value) }
            .joined(separator: "&")
    }
}

extension QueryExpression {
    /// The expression as `$filter` text in a protocol version.
    ///
    /// ```swift
    /// let filter = QueryExpression.field("title").contains("Star") && QueryExpression.field("year").ge(1977)
    /// filter.odata(protocolVersion: .v3)  // "(contains(title,'Star') and (year ge 1977))"
    /// filter.odata(protocolVersion: .v2)  // "(substringof('Star',title) and (year ge 1977))"
    /// ```
    ///
    /// Literals use each protocol version's form: in 3.0 `cast(2024-08-23T20:22:54.291Z,Edm.DateTimeOffset)`,
    /// `cast(1994-10-14,Edm.Date)`, `cast(07:14:00,Edm.TimeOfDay)` and `cast(<guid>,Edm.Guid)`; in 2.0
    /// `datetimeoffset'…'`, `datetime'1994-10-14T00:00:00.000Z'`, `'07:14:00'` and `guid'…'`. Decimals carry an
    /// `M`, and doubles always have a `.` or an exponent and read back to the same `Double`. An empty `in` list
    /// is written `false`.
    public func odata(protocolVersion: ProtocolVersion) -> String {
        ODataEncoding(protocolVersion: protocolVersion).encode(self).text
    }
}

/// Writes expressions and literals as OData text.
struct ODataEncoding {
    let protocolVersion: ProtocolVersion

    /// The text, and whether it is already enclosed in its own parentheses.
    func encode(_ expression: QueryExpression) -> (text: String, isWrapped: Bool) {
        switch expression {
        case .literal(let literal):
            return (encode(literal), false)
        case .field(let name):
            return (name, false)
        case .unary(let op, let operand):
            let inner = wrapped(encode(operand))
            switch op {
            case .not: return ("not " + inner, false)
            case .negate: return ("-" + inner, false)
            }
        case .binary(let op, let lhs, let rhs):
            // A left-nested chain of one logical operator is written flat, `(a or b or c)`, which parses
            // back to the same left-nested tree without nesting parentheses as deep as the chain is long.
            if op.isLogical, case .binary(let inner, _, _) = lhs, inner == op {
                let left = encode(lhs).text.dropFirst().dropLast()
                return ("(" + left + " " + op.rawValue + " " + encode(rhs).text + ")", true)
            }
            return ("(" + encode(lhs).text + " " + op.rawValue + " " + encode(rhs).text + ")", true)
        case .function(let function, let arguments):
            var arguments = arguments
            var name = function.rawValue
            if function == .contains, protocolVersion == .v2, arguments.count == 2 {
                name = "substringof"
                arguments.swapAt(0, 1)
            }
            return (name + "(" + arguments.map { encode($0).text }.joined(separator: ",") + ")", false)
        case .isIn(let subject, let items):
            guard !items.isEmpty else { return ("false", false) }
            let subjectText = encode(subject).text
            switch protocolVersion {
            case .v3:
                return ("(" + subjectText + " in (" + items.map { encode($0).text }.joined(separator: ",") + "))", true)
            case .v2:
                let comparisons = items.map { "(" + subjectText + " eq " + encode($0).text + ")" }
                return (
                    comparisons.count == 1 ? comparisons[0] : "(" + comparisons.joined(separator: " or ") + ")", true
                )
            }
        case .cast(let value, let type):
            return ("cast(" + encode(value).text + "," + type.rawValue + ")", false)
        }
    }

    private func wrapped(_ encoded: (text: String, isWrapped: Bool)) -> String {
        encoded.isWrapped ? encoded.text : "(" + encoded.text + ")"
    }

    func encode(_ literal: QueryLiteral) -> String {
        switch literal {
        case .null: return "null"
        case .bool(let value): return value ? "true" : "false"
        case .int(let value): return String(value)
        case .double(let value): return Self.encode(value)
        case .decimal(let value): return value.isFinite ? Self.encode(value) + "M" : Self.encode(value)
        case .string(let value): return Self.quoted(value)
        case .dateTimeOffset(let value):
            switch protocolVersion {
            case .v2: return "datetimeoffset'" + value.iso8601 + "'"
            case .v3: return "cast(" + value.iso8601 + ",Edm.DateTimeOffset)"
            }
        case .date(let value):
            switch protocolVersion {
            case .v2: return "datetime'" + value.midnightUTC.iso8601 + "'"
            case .v3: return "cast(" + value.iso8601 + ",Edm.Date)"
            }
        case .timeOfDay(let value):
            switch protocolVersion {
            case .v2: return Self.quoted(value.iso8601)
            case .v3: return "cast(" + value.iso8601 + ",Edm.TimeOfDay)"
            }
        case .guid(let value):
            switch protocolVersion {
            case .v2: return "guid'" + value + "'"
            case .v3: return "cast(" + value + ",Edm.Guid)"
            }
        }
    }

    /// The shortest text that reads back to the same `Double`, always with a `.` or an exponent; the OData
    /// keywords `INF`, `-INF` and `NaN` for the non-finite values.
    ///
    /// The exponent carries no `+` (`1e16`, not `1e+16`): some URL builders leave `+` unencoded, and servers that
    /// read the query as form data would turn it into a space.
    static func encode(_ value: Double) -> String {
        if value.isNaN { return "NaN" }
        if value.isInfinite { return value < 0 ? "-INF" : "INF" }
        let text = value.description
        if text.utf8.contains(UInt8(ascii: "e")) {
            return text.split(separator: "+", omittingEmptySubsequences: false).joined()
        }
        return text.utf8.contains(UInt8(ascii: ".")) ? text : text + ".0"
    }

    /// `'text'` with each `'` doubled.
    static func quoted(_ text: String) -> String {
        var output = "'"
        for character in text.unicodeScalars {
            if character == "'" { output += "''" } else { output.unicodeScalars.append(character) }
        }
        return output + "'"
    }
}
