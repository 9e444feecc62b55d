public import SyncCore

/// A declared field: its type (which also types queries) and the rules every written value must
/// satisfy. A write that breaks one answers 400 naming the field.
///
/// ```swift
/// let title = FieldRule(type: .string, required: true, minimumLength: 2, maximumLength: 60)
/// let rating = FieldRule(type: .string, allowedValues: [.null, "G", "PG", "PG-13", "R", "NC-17"])
/// ```
public struct FieldRule: Sendable, Hashable {
    /// The field's type; `null` is always accepted unless ``required``.
    public var type: FieldType
    /// Whether every item must hold a non-null value.
    public var required: Bool
    /// The smallest number allowed.
    public var minimum: Double?
    /// The largest number allowed.
    public var maximum: Double?
    /// The fewest characters a string may have.
    public var minimumLength: Int?
    /// The most characters a string may have.
    public var maximumLength: Int?
    /// The only values allowed, when set.
    public var allowedValues: [JSONValue]?

    public init(
        type: FieldType, required: Bool = false, minimum: Double? = nil, maximum: Double? = nil,
        minimumLength: Int? = nil, maximumLength: Int? = nil, allowedValues: [JSONValue]? = nil
    ) {
        self.type = type
        self.required = required
        self.minimum = minimum
        self.maximum = maximum
        self.minimumLength = minimumLength
        self.maximumLength = maximumLength
        self.allowedValues = allowedValues
    }

    func validate(field: String, table: String) throws(ConfigurationError) {
        if let minimum, let maximum, minimum > maximum {
            throw ConfigurationError("table '\(table)', field '\(field)': minimum is above maximum")
        }
        if let minimumLength, let maximumLength, minimumLength > maximumLength || minimumLength < 0 {
            throw ConfigurationError("table '\(table)', field '\(field)': the length bounds are inconsistent")
        }
        if case .enumeration(let cases) = type, cases.isEmpty {
            throw ConfigurationError("table '\(table)', field '\(field)': an enumeration needs at least one case")
        }
    }

    /// Why `value` breaks the rule, or `nil` when it is acceptable.
    func violation(of value: JSONValue?, field: String) -> String? {
        guard let value, value != .null else {
            return required ? "field '\(field)' is required" : nil
        }
        if let allowedValues, !allowedValues.contains(value) {
            return "field '\(field)' must be one of \(allowedValues.map { $0.serialized() }.joined(separator: ", "))"
        }
        switch (type, value) {
        case (.json, _): break
        case (.string, .string), (.bool, .bool), (.integer, .int), (.double, .int), (.double, .double): break
        case (.dateTimeOffset, .string(let text))
        where Timestamp(iso8601: text) != nil || CalendarDate(iso8601: text) != nil:
            break
        case (.date, .string(let text)) where CalendarDate(iso8601: text) != nil || Timestamp(iso8601: text) != nil:
            break
        case (.timeOfDay, .string(let text)) where TimeOfDay(iso8601: text) != nil: break
        case (.guid, .string(let text)) where Self.isGUID(text): break
        case (.enumeration(let cases), .string(let text)) where cases.contains(text): break
        default:
            return "field '\(field)' must be \(Self.describe(type))"
        }
        if let number = value.doubleValue {
            if let minimum, number < minimum { return "field '\(field)' must be at least \(Self.format(minimum))" }
            if let maximum, number > maximum { return "field '\(field)' must be at most \(Self.format(maximum))" }
        }
        if case .string(let text) = value {
            // UTF-16 code units, as the query's `length()` counts them and .NET's StringLength does:
            // counted by characters, 11 emoji passed a limit of 20 that `length(title) gt 20` found.
            let length = text.utf16.count
            if let minimumLength, length < minimumLength {
                return "field '\(field)' must have at least \(minimumLength) characters"
            }
            if let maximumLength, length > maximumLength {
                return "field '\(field)' must have at most \(maximumLength) characters"
            }
        }
        return nil
    }

    static func describe(_ type: FieldType) -> String {
        switch type {
        case .string: "a string"
        case .integer: "an integer"
        case .double: "a number"
        case .bool: "true or false"
        case .dateTimeOffset: "an ISO 8601 date-time string"
        case .date: "an ISO 8601 date string (yyyy-MM-dd)"
        case .timeOfDay: "a time string (HH:mm:ss)"
        case .guid: "a GUID string"
        case .enumeration(let cases): "one of \(cases.joined(separator: ", "))"
        case .json: "any JSON value"
        }
    }

    static func format(_ number: Double) -> String {
        number == number.rounded() && abs(number) < 1e15 ? String(Int64(number)) : String(number)
    }

    /// `8-4-4-4-12` hexadecimal digits, or 32 digits without dashes.
    static func isGUID(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        func isHex(_ byte: UInt8) -> Bool {
            (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x46) || (byte >= 0x61 && byte <= 0x66)
        }
        if bytes.count == 32 { return bytes.allSatisfy(isHex) }
        guard bytes.count == 36 else { return false }
        for (index, byte) in bytes.enumerated() {
            if [8, 13, 18, 23].contains(index) {
                guard byte == UInt8(ascii: "-") else { return false }
            } else if !isHex(byte) {
                return false
            }
        }
        return true
    }
}
