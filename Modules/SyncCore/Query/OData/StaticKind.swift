/// What the parser can know about an expression's type without a schema.
enum StaticKind: Equatable {
    /// A field or anything computed from one whose type is not fixed by the grammar.
    case unknown
    case null
    case boolean
    case number
    case string
    case date
    case dateTimeOffset
    case timeOfDay
    case guid

    init(_ literal: QueryLiteral) {
        switch literal {
        case .null: self = .null
        case .bool: self = .boolean
        case .int, .double, .decimal: self = .number
        case .string: self = .string
        case .dateTimeOffset: self = .dateTimeOffset
        case .date: self = .date
        case .timeOfDay: self = .timeOfDay
        case .guid: self = .guid
        }
    }

    init(_ type: EdmType) {
        switch type {
        case .date: self = .date
        case .dateTimeOffset: self = .dateTimeOffset
        case .timeOfDay: self = .timeOfDay
        case .guid: self = .guid
        case .string: self = .string
        case .int32, .int64, .double, .decimal: self = .number
        case .boolean: self = .boolean
        }
    }

    /// Whether a value of this kind may be Boolean.
    var mayBeBoolean: Bool { self == .unknown || self == .null || self == .boolean }

    /// Whether a value of this kind may be a number.
    var mayBeNumber: Bool { self == .unknown || self == .null || self == .number }

    /// Whether a value of this kind may be a string.
    var mayBeString: Bool { self == .unknown || self == .null || self == .string }

    /// Whether `year`, `month` and `day` accept this kind (dates are often stored as text).
    var hasDate: Bool { [.unknown, .null, .string, .date, .dateTimeOffset].contains(self) }

    /// Whether `hour`, `minute` and `second` accept this kind.
    var hasTime: Bool { [.unknown, .null, .string, .dateTimeOffset, .timeOfDay].contains(self) }

    var isTemporal: Bool { self == .date || self == .dateTimeOffset || self == .timeOfDay }

    /// Whether two values of these kinds can be compared (`eq`, `gt`, `in`, …).
    func isComparable(with other: StaticKind) -> Bool {
        if self == other || self == .unknown || other == .unknown || self == .null || other == .null { return true }
        switch (self, other) {
        case (.string, .date), (.string, .dateTimeOffset), (.string, .timeOfDay), (.string, .guid),
            (.date, .string), (.dateTimeOffset, .string), (.timeOfDay, .string), (.guid, .string),
            (.date, .dateTimeOffset), (.dateTimeOffset, .date):
            return true
        default:
            return false
        }
    }

    /// The kind with an article, for messages.
    var phrase: String {
        switch self {
        case .unknown: "a value"
        case .null: "null"
        case .boolean: "a Boolean"
        case .number: "a number"
        case .string: "a string"
        case .date: "a date"
        case .dateTimeOffset: "a date-time"
        case .timeOfDay: "a time of day"
        case .guid: "a GUID"
        }
    }
}
