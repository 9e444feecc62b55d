// Arithmetic, the OData functions and casts, as the protocol's servers compute them.

extension QueryEvaluator {
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
