// Comparing values: the protocol's null rules, ordinal strings, text read as the literal it is compared with,
// and the total order of `$orderby`.

extension QueryEvaluator {
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
