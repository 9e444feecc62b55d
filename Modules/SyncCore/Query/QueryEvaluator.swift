/// Evaluates queries over items in memory, with the semantics of the protocol's servers.
///
/// The memory and LMDB stores answer queries with it, and the SQLite store's SQL is tested against
/// it. The rules, confirmed by replaying the servers' own test cases:
/// - comparisons with `null` are false except `eq null` and `ne null`;
/// - `int div int` is an integer (truncated), any floating-point operand makes it floating-point;
///   `round` rounds half to even; division of an integer by zero gives `null`;
/// - strings compare by their UTF-8 bytes (ordinal, case-sensitive), like SQLite's `BINARY`;
/// - a string compared with a date, date-time, time or GUID literal is read as one;
/// - sorting puts `null` first ascending and last descending, and always ends with `id` ascending;
/// - soft-deleted items (`deleted == true`) are left out unless the query includes them;
/// - the total count is taken after the filter, before skip and top.
///
/// ```swift
/// let evaluator = QueryEvaluator()
/// let query = try TableQuery(odata: "$filter=year ge 2000&$orderby=title&$top=10&$count=true", dialect: .v3)
/// let result = try evaluator.evaluate(query, over: items)
/// print(result.totalCount ?? 0, result.items.count)
/// ```
public struct QueryEvaluator: Sendable {
    /// The schema that types fields and rejects unknown ones.
    public var schema: TableSchema

    public init(schema: TableSchema = .schemaless) {
        self.schema = schema
    }

    /// Checks that every field the query names is known to the schema, and that no expression is
    /// deeper than ``QueryLimits/maximumDepth`` (queries built in code are not bounded by the parser).
    public func validate(_ query: TableQuery) throws(QueryError) {
        if let filter = query.filter { try validate(filter, option: "$filter") }
        for key in query.orderBy { try validate(key.expression, option: "$orderby") }
        for field in query.select ?? [] where !schema.isKnown(field) {
            throw QueryError(.unknownField, "unknown field '\(field)'", option: "$select")
        }
    }

    private func validate(_ expression: QueryExpression, option: String) throws(QueryError) {
        let maximumDepth = QueryLimits.default.maximumDepth
        var stack = [(expression, 0)]
        while let (next, depth) = stack.popLast() {
            if depth > maximumDepth {
                throw QueryError(.tooDeep, "the expression nests deeper than \(maximumDepth) levels", option: option)
            }
            switch next {
            case .literal: break
            case .field(let name):
                if !schema.isKnown(name) { throw QueryError(.unknownField, "unknown field '\(name)'", option: option) }
            case .unary(_, let operand): stack.append((operand, depth + 1))
            case .binary(_, let lhs, let rhs): stack.append(contentsOf: [(lhs, depth + 1), (rhs, depth + 1)])
            case .function(_, let arguments): stack.append(contentsOf: arguments.map { ($0, depth + 1) })
            case .isIn(let value, let list):
                stack.append((value, depth + 1))
                stack.append(contentsOf: list.map { ($0, depth + 1) })
            case .cast(let value, _): stack.append((value, depth + 1))
            }
        }
    }

    /// Runs a whole query: validation, soft-delete, filter, count, order, skip, top and select.
    public func evaluate(_ query: TableQuery, over items: some Sequence<JSONObject>) throws(QueryError) -> QueryResult {
        try validate(query)
        var matching: [JSONObject] = []
        for item in items {
            if !query.includeDeleted, item.isDeleted { continue }
            if let filter = query.filter, !matches(filter, item) { continue }
            matching.append(item)
        }
        let total = query.includeTotalCount ? matching.count : nil
        sort(&matching, by: query.orderBy)
        var page = matching[...]
        if let skip = query.skip { page = page.dropFirst(max(0, skip)) }
        if let top = query.top { page = page.prefix(max(0, top)) }
        let projected = page.map { project($0, query.select) }
        return QueryResult(items: projected, totalCount: total)
    }

    /// Whether `item` satisfies `filter`.
    public func matches(_ filter: QueryExpression, _ item: JSONObject) -> Bool {
        if case .bool(true) = value(of: filter, in: item) { return true }
        return false
    }

    /// Sorts items by the keys, then by `id` ascending (stable).
    public func sort(_ items: inout [JSONObject], by keys: [SortKey]) {
        if items.count < 2 { return }
        var effective = keys
        if !keys.contains(where: { $0.expression == .field("id") }) { effective.append(.field("id")) }
        // Decorate once so each key is evaluated once per item, not once per comparison.
        let decorated = items.enumerated().map { position, item in
            (key: effective.map { value(of: $0.expression, in: item) }, position: position)
        }
        let directions = effective.map(\.descending)
        let order = decorated.sorted { lhs, rhs in
            for index in directions.indices {
                let result = sortOrder(lhs.key[index], rhs.key[index])
                if result != 0 { return directions[index] ? result > 0 : result < 0 }
            }
            return lhs.position < rhs.position
        }
        items = order.map { items[$0.position] }
    }

    /// Compares two items by the keys and then `id`: negative, zero or positive.
    public func compare(_ lhs: JSONObject, _ rhs: JSONObject, by keys: [SortKey]) -> Int {
        for key in keys {
            let result = sortOrder(value(of: key.expression, in: lhs), value(of: key.expression, in: rhs))
            if result != 0 { return key.descending ? -result : result }
        }
        return sortOrder(value(of: .field("id"), in: lhs), value(of: .field("id"), in: rhs))
    }

    /// Keeps only the selected fields.
    public func project(_ item: JSONObject, _ select: [String]?) -> JSONObject {
        guard let select else { return item }
        var result = JSONObject(minimumCapacity: select.count)
        for field in select { if let value = item[field] { result[field] = value } }
        return result
    }

    /// The value of an expression for an item, as JSON (typed values such as dates become their
    /// ISO 8601 text). Useful for computed sort keys and for debugging.
    public func evaluate(_ expression: QueryExpression, in item: JSONObject) -> JSONValue {
        value(of: expression, in: item).json
    }
}

/// The answer to a query: one page of items and, when asked for, the total count.
public struct QueryResult: Sendable, Hashable {
    /// The items of the page, in order.
    public var items: [JSONObject]
    /// The number of matching items before skip and top, when the query asked for it.
    public var totalCount: Int?

    public init(items: [JSONObject], totalCount: Int? = nil) {
        self.items = items
        self.totalCount = totalCount
    }
}

// MARK: - Values during evaluation

enum QueryValue: Hashable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case timestamp(Timestamp)
    case date(CalendarDate)
    case time(TimeOfDay)
    case guid(String)
    /// A declared enumeration's value: its position in `cases`.
    case enumCase(Int, cases: [String])
    case other(JSONValue)

    init(_ literal: QueryLiteral) {
        switch literal {
        case .null: self = .null
        case .bool(let value): self = .bool(value)
        case .int(let value): self = .int(value)
        case .double(let value), .decimal(let value): self = .double(value)
        case .string(let value): self = .string(value)
        case .dateTimeOffset(let value): self = .timestamp(value)
        case .date(let value): self = .date(value)
        case .timeOfDay(let value): self = .time(value)
        case .guid(let value): self = .guid(value.lowercased())
        }
    }

    var json: JSONValue {
        switch self {
        case .null: .null
        case .bool(let value): .bool(value)
        case .int(let value): .int(value)
        case .double(let value): .double(value)
        case .string(let value), .guid(let value): .string(value)
        case .enumCase(let index, let cases): .string(cases[index])
        case .timestamp(let value): .string(value.iso8601)
        case .date(let value): .string(value.iso8601)
        case .time(let value): .string(value.iso8601)
        case .other(let value): value
        }
    }

    var text: String? {
        switch self {
        case .string(let value), .guid(let value): value
        case .enumCase(let index, let cases): cases[index]
        default: nil
        }
    }

    var number: Double? {
        switch self {
        case .int(let value): Double(value)
        case .double(let value): value
        default: nil
        }
    }

    /// The rank of the value's kind in the total order used for sorting mixed kinds.
    var rank: Int {
        switch self {
        case .null: 0
        case .bool: 1
        case .int, .double: 2
        case .timestamp, .date, .time: 3
        case .string, .guid, .enumCase: 4
        case .other: 5
        }
    }
}

extension QueryEvaluator {
    func fieldValue(_ name: String, in item: JSONObject) -> QueryValue {
        guard let raw = item[name] else { return .null }
        let declared = schema.fields[name] ?? (name == "createdAt" || name == "updatedAt" ? .dateTimeOffset : nil)
        switch raw {
        case .null: return .null
        case .bool(let value): return .bool(value)
        case .int(let value): return .int(value)
        case .double(let value): return .double(value)
        case .string(let text):
            switch declared {
            case .dateTimeOffset?:
                if let value = Timestamp(iso8601: text) { return .timestamp(value) }
                if let value = CalendarDate(iso8601: text) { return .timestamp(value.midnightUTC) }
            case .date?:
                if let value = CalendarDate(iso8601: text) { return .date(value) }
                if let value = Timestamp(iso8601: text) { return .timestamp(value) }
            case .timeOfDay?:
                if let value = TimeOfDay(iso8601: text) { return .time(value) }
            case .guid?:
                return .guid(text.lowercased())
            case .enumeration(let cases)?:
                if let index = cases.firstIndex(of: text) { return .enumCase(index, cases: cases) }
            default: break
            }
            return .string(text)
        case .array, .object: return .other(raw)
        }
    }

    func value(of expression: QueryExpression, in item: JSONObject) -> QueryValue {
        switch expression {
        case .literal(let literal): return QueryValue(literal)
        case .field(let name): return fieldValue(name, in: item)
        case .unary(.not, let operand):
            if case .bool(let flag) = value(of: operand, in: item) { return .bool(!flag) }
            return .null
        case .unary(.negate, let operand):
            switch value(of: operand, in: item) {
            case .int(let number): return number == .min ? .double(-Double(number)) : .int(-number)
            case .double(let number): return .double(-number)
            default: return .null
            }
        case .binary(.and, let lhs, let rhs):
            guard case .bool(true) = value(of: lhs, in: item) else { return .bool(false) }
            if case .bool(true) = value(of: rhs, in: item) { return .bool(true) }
            return .bool(false)
        case .binary(.or, let lhs, let rhs):
            if case .bool(true) = value(of: lhs, in: item) { return .bool(true) }
            if case .bool(true) = value(of: rhs, in: item) { return .bool(true) }
            return .bool(false)
        case .binary(let op, let lhs, let rhs) where op.isComparison:
            return .bool(compare(op, value(of: lhs, in: item), value(of: rhs, in: item)))
        case .binary(let op, let lhs, let rhs):
            return arithmetic(op, value(of: lhs, in: item), value(of: rhs, in: item))
        case .function(let function, let arguments):
            return call(function, arguments.map { value(of: $0, in: item) })
        case .isIn(let needle, let list):
            let probe = value(of: needle, in: item)
            return .bool(list.contains { compare(.equal, probe, value(of: $0, in: item)) })
        case .cast(let operand, let type):
            return cast(value(of: operand, in: item), to: type)
        }
    }

    /// Applies a comparison operator with the null rules of the protocol.
    func compare(_ op: BinaryOperator, _ lhs: QueryValue, _ rhs: QueryValue) -> Bool {
        if case .null = lhs {
            if case .null = rhs { return op == .equal }
            return op == .notEqual
        }
        if case .null = rhs { return op == .notEqual }
        guard let order = compareValues(lhs, rhs) else { return op == .notEqual }
        switch op {
        case .equal: return order == 0
        case .notEqual: return order != 0
        case .greaterThan: return order > 0
        case .greaterThanOrEqual: return order >= 0
        case .lessThan: return order < 0
        case .lessThanOrEqual: return order <= 0
        default: return false
        }
    }

    /// Orders two non-null values of comparable kinds; `nil` when they cannot be compared.
    func compareValues(_ lhs: QueryValue, _ rhs: QueryValue) -> Int? {
        switch (lhs, rhs) {
        case (.int(let a), .int(let b)): return a == b ? 0 : (a < b ? -1 : 1)
        case (.int, .double), (.double, .int), (.double, .double):
            let a = lhs.number!
            let b = rhs.number!
            if a.isNaN || b.isNaN { return nil }
            return a == b ? 0 : (a < b ? -1 : 1)
        case (.bool(let a), .bool(let b)): return a == b ? 0 : (a ? 1 : -1)
        case (.string(let a), .string(let b)): return ordinalCompare(a, b)
        case (.guid(let a), .guid(let b)): return ordinalCompare(a, b)
        case (.string(let a), .guid(let b)): return ordinalCompare(a.lowercased(), b)
        case (.guid(let a), .string(let b)): return ordinalCompare(a, b.lowercased())
        case (.enumCase(let a, _), .enumCase(let b, _)): return a == b ? 0 : (a < b ? -1 : 1)
        case (.enumCase(let index, let cases), .string(let text)):
            return compareEnum(index, cases, text)
        case (.string(let text), .enumCase(let index, let cases)):
            return compareEnum(index, cases, text).map { -$0 }
        case (.timestamp(let a), .timestamp(let b)): return threeWay(a, b)
        case (.date(let a), .date(let b)): return threeWay(a, b)
        case (.time(let a), .time(let b)): return threeWay(a, b)
        case (.timestamp(let a), .date(let b)): return threeWay(a, b.midnightUTC)
        case (.date(let a), .timestamp(let b)): return threeWay(a.midnightUTC, b)
        case (.string(let text), .timestamp), (.string(let text), .date), (.string(let text), .time):
            guard let coerced = coerce(text, like: rhs) else { return nil }
            return compareValues(coerced, rhs)
        case (.timestamp, .string(let text)), (.date, .string(let text)), (.time, .string(let text)):
            guard let coerced = coerce(text, like: lhs) else { return nil }
            return compareValues(lhs, coerced)
        case (.other(let a), .other(let b)): return a == b ? 0 : nil
        default: return nil
        }
    }

    /// An enumeration value against text: by position when the text names a case, else by name.
    private func compareEnum(_ index: Int, _ cases: [String], _ text: String) -> Int? {
        if let other = cases.firstIndex(of: text) { return threeWay(index, other) }
        return ordinalCompare(cases[index], text)
    }

    private func coerce(_ text: String, like target: QueryValue) -> QueryValue? {
        switch target {
        case .timestamp:
            if let value = Timestamp(iso8601: text) { return .timestamp(value) }
            if let value = CalendarDate(iso8601: text) { return .timestamp(value.midnightUTC) }
        case .date:
            if let value = CalendarDate(iso8601: text) { return .date(value) }
            if let value = Timestamp(iso8601: text) { return .timestamp(value) }
        case .time:
            if let value = TimeOfDay(iso8601: text) { return .time(value) }
        default: break
        }
        return nil
    }

    /// The total order used by `$orderby`: kinds by rank, then values; `null` first.
    func sortOrder(_ lhs: QueryValue, _ rhs: QueryValue) -> Int {
        if let order = compareValues(lhs, rhs) { return order }
        if lhs.rank != rhs.rank { return lhs.rank < rhs.rank ? -1 : 1 }
        if case .null = lhs { return 0 }
        // Same rank but not comparable (for example two different arrays): order by JSON text.
        return ordinalCompare(lhs.json.serialized(), rhs.json.serialized())
    }

    func arithmetic(_ op: BinaryOperator, _ lhs: QueryValue, _ rhs: QueryValue) -> QueryValue {
        if case .int(let a) = lhs, case .int(let b) = rhs {
            switch op {
            case .add:
                let (result, overflow) = a.addingReportingOverflow(b)
                return overflow ? .double(Double(a) + Double(b)) : .int(result)
            case .subtract:
                let (result, overflow) = a.subtractingReportingOverflow(b)
                return overflow ? .double(Double(a) - Double(b)) : .int(result)
            case .multiply:
                let (result, overflow) = a.multipliedReportingOverflow(by: b)
                return overflow ? .double(Double(a) * Double(b)) : .int(result)
            case .divide:
                if b == 0 { return .null }
                let (result, overflow) = a.dividedReportingOverflow(by: b)
                return overflow ? .double(Double(a) / Double(b)) : .int(result)
            case .modulo:
                if b == 0 { return .null }
                let (result, overflow) = a.remainderReportingOverflow(dividingBy: b)
                return overflow ? .int(0) : .int(result)
            default: return .null
            }
        }
        guard let a = lhs.number, let b = rhs.number else { return .null }
        switch op {
        case .add: return .double(a + b)
        case .subtract: return .double(a - b)
        case .multiply: return .double(a * b)
        case .divide: return .double(a / b)
        case .modulo: return .double(a.truncatingRemainder(dividingBy: b))
        default: return .null
        }
    }

    func call(_ function: QueryFunction, _ arguments: [QueryValue]) -> QueryValue {
        switch function {
        case .contains, .startsWith, .endsWith:
            guard arguments.count == 2, let haystack = arguments[0].text, let needle = arguments[1].text else {
                return .null
            }
            let h = Array(haystack.utf8)
            let n = Array(needle.utf8)
            switch function {
            case .contains: return .bool(n.isEmpty || h.firstRange(of: n) != nil)
            case .startsWith: return .bool(h.starts(with: n))
            default: return .bool(h.count >= n.count && h.suffix(n.count).elementsEqual(n))
            }
        case .length:
            guard let text = arguments.first?.text else { return .null }
            return .int(Int64(text.utf16.count))
        case .toLower:
            guard let text = arguments.first?.text else { return .null }
            return .string(text.lowercased())
        case .toUpper:
            guard let text = arguments.first?.text else { return .null }
            return .string(text.uppercased())
        case .trim:
            guard let text = arguments.first?.text else { return .null }
            return .string(text.trimmingWhitespace())
        case .indexOf:
            guard arguments.count == 2, let haystack = arguments[0].text, let needle = arguments[1].text else {
                return .null
            }
            let h = Array(haystack.utf16)
            let n = Array(needle.utf16)
            if n.isEmpty { return .int(0) }
            guard let range = h.firstRange(of: n) else { return .int(-1) }
            return .int(Int64(range.lowerBound))
        case .substring:
            guard let text = arguments.first?.text, (2...3).contains(arguments.count),
                case .int(let start) = arguments[1]
            else { return .null }
            // Clamped into the text without adding the length to the start, so that no start or
            // length (Int64.min through Int64.max) can overflow.
            let units = Array(text.utf16)
            let count = Int64(units.count)
            let from = max(0, min(start, count))
            var to = count
            if arguments.count == 3 {
                guard case .int(let length) = arguments[2] else { return .null }
                to = from + min(max(0, length), count - from)
            }
            return .string(String(decoding: units[Int(from)..<Int(to)], as: UTF16.self))
        case .concat:
            return .string(arguments.map(concatText).joined())
        case .replace:
            guard arguments.count == 3, let text = arguments[0].text, let find = arguments[1].text,
                let replacement = arguments[2].text
            else { return .null }
            if find.isEmpty { return .string(text) }
            return .string(text.replacingAll(find, with: replacement))
        case .year, .month, .day, .hour, .minute, .second:
            guard let argument = arguments.first else { return .null }
            return datePart(function, of: argument)
        case .floor, .ceiling, .round:
            switch arguments.first {
            case .int(let value)?: return .int(value)
            case .double(let value)?:
                switch function {
                case .floor: return .double(value.rounded(.down))
                case .ceiling: return .double(value.rounded(.up))
                default: return .double(value.rounded(.toNearestOrEven))
                }
            default: return .null
            }
        }
    }

    private func concatText(_ value: QueryValue) -> String {
        switch value {
        case .null: ""
        case .string(let text), .guid(let text): text
        case .enumCase(let index, let cases): cases[index]
        case .bool(let flag): flag ? "true" : "false"
        case .int(let number): String(number)
        case .double(let number): number.description
        case .timestamp(let value): value.iso8601
        case .date(let value): value.iso8601
        case .time(let value): value.iso8601
        case .other(let json): json.serialized()
        }
    }

    private func datePart(_ function: QueryFunction, of value: QueryValue) -> QueryValue {
        var timestamp: Timestamp?
        var date: CalendarDate?
        var time: TimeOfDay?
        switch value {
        case .timestamp(let value): timestamp = value
        case .date(let value): date = value
        case .time(let value): time = value
        case .string(let text):
            if let value = CalendarDate(iso8601: text) {
                date = value
            } else if let value = Timestamp(iso8601: text) {
                timestamp = value
            } else if let value = TimeOfDay(iso8601: text) {
                time = value
            }
        default: break
        }
        if let timestamp {
            date = timestamp.date
            time = timestamp.timeOfDay
        }
        switch function {
        case .year: return date.map { .int(Int64($0.year)) } ?? .null
        case .month: return date.map { .int(Int64($0.month)) } ?? .null
        case .day: return date.map { .int(Int64($0.day)) } ?? .null
        case .hour: return time.map { .int(Int64($0.hour)) } ?? (date != nil ? .int(0) : .null)
        case .minute: return time.map { .int(Int64($0.minute)) } ?? (date != nil ? .int(0) : .null)
        case .second: return time.map { .int(Int64($0.second)) } ?? (date != nil ? .int(0) : .null)
        default: return .null
        }
    }

    func cast(_ value: QueryValue, to type: EdmType) -> QueryValue {
        switch (type, value) {
        case (_, .null): return .null
        case (.dateTimeOffset, .timestamp), (.date, .date), (.timeOfDay, .time), (.guid, .guid): return value
        case (.dateTimeOffset, .date(let date)): return .timestamp(date.midnightUTC)
        case (.date, .timestamp(let timestamp)): return .date(timestamp.date)
        case (.timeOfDay, .timestamp(let timestamp)): return .time(timestamp.timeOfDay)
        case (.dateTimeOffset, .string(let text)):
            return Timestamp(iso8601: text).map { .timestamp($0) }
                ?? CalendarDate(iso8601: text).map { .timestamp($0.midnightUTC) } ?? .null
        case (.date, .string(let text)):
            return CalendarDate(iso8601: text).map { .date($0) } ?? Timestamp(iso8601: text).map { .date($0.date) }
                ?? .null
        case (.timeOfDay, .string(let text)): return TimeOfDay(iso8601: text).map { .time($0) } ?? .null
        case (.guid, .string(let text)): return .guid(text.lowercased())
        case (.string, _): return .string(concatText(value))
        case (.int32, _), (.int64, _):
            // A value that does not fit the type (NaN, an infinity, out of range) gives null.
            let integer: Int64?
            switch value {
            case .int(let number): integer = number
            case .double(let number): integer = Int64(exactly: number.rounded(.towardZero))
            case .string(let text): integer = Int64(text)
            default: integer = nil
            }
            guard let integer, type == .int64 || Int32(exactly: integer) != nil else { return .null }
            return .int(integer)
        case (.double, _), (.decimal, _):
            if let number = value.number { return .double(number) }
            // Text must read as a finite number ("1e999", "inf" and "nan" give null), as the parser
            // requires of a cast literal.
            if case .string(let text) = value, let number = Double(text), number.isFinite { return .double(number) }
            return .null
        case (.boolean, .bool): return value
        case (.boolean, .string(let text)):
            if text.caseInsensitiveEquals("true") { return .bool(true) }
            if text.caseInsensitiveEquals("false") { return .bool(false) }
            return .null
        default: return .null
        }
    }
}

/// Compares strings by their UTF-8 bytes (code point order), like SQLite's `BINARY` collation.
func ordinalCompare(_ lhs: String, _ rhs: String) -> Int {
    var lhs = lhs
    var rhs = rhs
    return lhs.withUTF8 { a in
        rhs.withUTF8 { b in
            let common = min(a.count, b.count)
            if common > 0, let base = a.baseAddress, let other = b.baseAddress {
                let result = memcmpBytes(base, other, common)
                if result != 0 { return result < 0 ? -1 : 1 }
            }
            return a.count == b.count ? 0 : (a.count < b.count ? -1 : 1)
        }
    }
}

@inline(__always)
private func memcmpBytes(_ a: UnsafePointer<UInt8>, _ b: UnsafePointer<UInt8>, _ count: Int) -> Int32 {
    for index in 0..<count where a[index] != b[index] {
        return a[index] < b[index] ? -1 : 1
    }
    return 0
}

private func threeWay<T: Comparable>(_ a: T, _ b: T) -> Int {
    a == b ? 0 : (a < b ? -1 : 1)
}

extension String {
    func trimmingWhitespace() -> String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !$0.properties.isWhitespace }) else { return "" }
        let last = scalars.lastIndex(where: { !$0.properties.isWhitespace })!
        return String(scalars[first...last])
    }

    func replacingAll(_ target: String, with replacement: String) -> String {
        var result = ""
        var rest = Substring(self)
        while let range = rest.firstRange(of: target) {
            result += rest[..<range.lowerBound]
            result += replacement
            rest = rest[range.upperBound...]
        }
        result += rest
        return result
    }
}
