// The parser's literals: numbers, typed strings (`datetime'…'`, `guid'…'`) and the folding of `cast`.

extension ODataExpressionParser {
    /// Converts checked number text (with an optional leading `-` and suffix) to a literal.
    func numberLiteral(_ text: String, at start: Int) throws(QueryError) -> QueryLiteral {
        var body = Substring(text)
        var suffix: UInt8?
        if let last = body.utf8.last, ODataSyntax.isLetter(last), last != UInt8(ascii: "e"), last != UInt8(ascii: "E") {
            suffix = last | 0x20
            body = body.dropLast()
        }
        let isReal = body.utf8.contains {
            $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "e") || $0 == UInt8(ascii: "E")
        }
        func real() throws(QueryError) -> Double {
            guard let value = Double(body), value.isFinite else {
                throw error(.syntax, "the number '\(text)' is out of range", at: start)
            }
            return value
        }
        switch suffix {
        case UInt8(ascii: "m"): return .decimal(try real())
        case UInt8(ascii: "d"), UInt8(ascii: "f"): return .double(try real())
        default:
            if isReal { return .double(try real()) }
            guard let value = Int64(body) else {
                throw error(.syntax, "the integer '\(text)' is out of range", at: start)
            }
            return .int(value)
        }
    }

    /// `datetime'…'`, `datetimeoffset'…'`, `guid'…'`; other OData prefixes are recognised but unsupported.
    func typedLiteral(prefix: String, body: String, at start: Int) throws(QueryError) -> QueryLiteral {
        switch prefix.lowercased() {
        case "datetime", "datetimeoffset":
            guard let value = ODataSyntax.timestamp(body) else {
                throw error(.syntax, "'\(body)' is not a valid date-time", at: start)
            }
            return .dateTimeOffset(value)
        case "guid":
            guard let value = ODataSyntax.guid(body) else {
                throw error(.syntax, "'\(body)' is not a valid GUID", at: start)
            }
            return .guid(value)
        case "time", "duration", "binary", "x", "geography", "geometry":
            throw error(.unsupported, "'\(prefix)' literals are not supported", at: start)
        default:
            throw error(.syntax, "unknown literal prefix '\(prefix)'", at: start)
        }
    }

    /// The literal `cast(literal, type)` stands for.
    func fold(_ literal: QueryLiteral, to type: EdmType, at start: Int) throws(QueryError) -> QueryLiteral {
        if case .null = literal { return .null }
        let result: QueryLiteral?
        switch (type, literal) {
        case (.date, .date): result = literal
        case (.date, .dateTimeOffset(let value)): result = .date(value.date)
        case (.date, .string(let text)): result = CalendarDate(iso8601: text).map(QueryLiteral.date)
        case (.dateTimeOffset, .dateTimeOffset): result = literal
        case (.dateTimeOffset, .date(let value)): result = .dateTimeOffset(value.midnightUTC)
        case (.dateTimeOffset, .string(let text)): result = ODataSyntax.timestamp(text).map(QueryLiteral.dateTimeOffset)
        case (.timeOfDay, .timeOfDay): result = literal
        case (.timeOfDay, .dateTimeOffset(let value)): result = .timeOfDay(value.timeOfDay)
        case (.timeOfDay, .string(let text)): result = TimeOfDay(iso8601: text).map(QueryLiteral.timeOfDay)
        case (.guid, .guid): result = literal
        case (.guid, .string(let text)): result = ODataSyntax.guid(text).map(QueryLiteral.guid)
        case (.string, .string): result = literal
        case (.string, .date(let value)): result = .string(value.iso8601)
        case (.string, .dateTimeOffset(let value)): result = .string(value.iso8601)
        case (.string, .timeOfDay(let value)): result = .string(value.iso8601)
        case (.string, .guid(let value)): result = .string(value)
        case (.string, .int(let value)): result = .string(String(value))
        case (.string, .double(let value)), (.string, .decimal(let value)): result = .string(String(value))
        case (.string, .bool(let value)): result = .string(value ? "true" : "false")
        case (.int32, .int(let value)): result = Int32(exactly: value) != nil ? literal : nil
        case (.int64, .int): result = literal
        case (.int32, .double(let value)), (.int32, .decimal(let value)):
            result = Int32(exactly: value).map { .int(Int64($0)) }
        case (.int64, .double(let value)), (.int64, .decimal(let value)):
            result = Int64(exactly: value).map(QueryLiteral.int)
        case (.int32, .string(let text)): result = Int32(text).map { .int(Int64($0)) }
        case (.int64, .string(let text)): result = Int64(text).map(QueryLiteral.int)
        case (.double, .int(let value)): result = .double(Double(value))
        case (.double, .double(let value)), (.double, .decimal(let value)): result = .double(value)
        case (.double, .string(let text)): result = Double(text).flatMap { $0.isFinite ? .double($0) : nil }
        case (.decimal, .int(let value)): result = .decimal(Double(value))
        case (.decimal, .double(let value)), (.decimal, .decimal(let value)): result = .decimal(value)
        case (.decimal, .string(let text)): result = Double(text).flatMap { $0.isFinite ? .decimal($0) : nil }
        case (.boolean, .bool): result = literal
        case (.boolean, .string(let text)):
            switch text.lowercased() {
            case "true": result = .bool(true)
            case "false": result = .bool(false)
            default: result = nil
            }
        default:
            throw error(.typeMismatch, "cannot cast \(StaticKind(literal).phrase) to \(type.rawValue)", at: start)
        }
        guard let result else {
            if case .string = literal {
                throw error(.syntax, "the text is not a valid \(type.rawValue) value", at: start)
            }
            throw error(.typeMismatch, "the value does not fit \(type.rawValue)", at: start)
        }
        return result
    }
}
