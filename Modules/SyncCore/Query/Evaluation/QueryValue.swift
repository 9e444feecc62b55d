// The values expressions take during evaluation, and how a field or an expression gets one.

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

}
