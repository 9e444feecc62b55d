/// A query over one table: one language for the device and the server.
///
/// The same value is evaluated by the memory and LMDB stores (``QueryEvaluator``), compiled to SQL
/// by the SQLite store and the reference server, and encoded to OData for the wire
/// (``TableQuery/odataQueryString(protocolVersion:)``). A query means the same thing everywhere.
///
/// Build one with the query builder rather than writing OData by hand:
///
/// ```swift
/// let query = TableQuery()
///     .filter(QueryExpression.field("done").eq(false) && QueryExpression.field("title").startsWith("Buy"))
///     .orderBy("updatedAt", descending: true)
///     .top(20)
/// ```
public struct TableQuery: Sendable, Hashable {
    /// The filter; `nil` matches every item.
    public var filter: QueryExpression?
    /// Sort keys, applied in order. Stores and servers append `id` ascending as the final
    /// tie-breaker so that paging is stable.
    public var orderBy: [SortKey]
    /// How many matching items to skip.
    public var skip: Int?
    /// The most items to return.
    public var top: Int?
    /// The fields to return; `nil` returns every field.
    public var select: [String]?
    /// Whether to count every matching item before skip and top.
    public var includeTotalCount: Bool
    /// Whether soft-deleted items (`deleted == true`) are included.
    public var includeDeleted: Bool

    public init(
        filter: QueryExpression? = nil,
        orderBy: [SortKey] = [],
        skip: Int? = nil,
        top: Int? = nil,
        select: [String]? = nil,
        includeTotalCount: Bool = false,
        includeDeleted: Bool = false
    ) {
        self.filter = filter
        self.orderBy = orderBy
        self.skip = skip
        self.top = top
        self.select = select
        self.includeTotalCount = includeTotalCount
        self.includeDeleted = includeDeleted
    }
}

/// One sort key of a query.
public struct SortKey: Sendable, Hashable {
    /// What to sort by: usually a ``QueryExpression/field(_:)``.
    public var expression: QueryExpression
    /// `true` for descending order.
    public var descending: Bool

    public init(_ expression: QueryExpression, descending: Bool = false) {
        self.expression = expression
        self.descending = descending
    }

    /// Sorts by a field.
    public static func field(_ name: String, descending: Bool = false) -> SortKey {
        SortKey(.field(name), descending: descending)
    }
}

/// A filter or value expression of the query language.
public indirect enum QueryExpression: Sendable, Hashable {
    /// A constant.
    case literal(QueryLiteral)
    /// The value of an item's field (a top-level member of the JSON object).
    case field(String)
    /// `not x`, or `-x` on a number.
    case unary(UnaryOperator, QueryExpression)
    /// A comparison, a logical connective or arithmetic.
    case binary(BinaryOperator, QueryExpression, QueryExpression)
    /// A function call with its arguments.
    case function(QueryFunction, [QueryExpression])
    /// `x in (a, b, c)`.
    case isIn(QueryExpression, [QueryExpression])
    /// `cast(x, Edm.Type)` of a non-literal value (a cast of a literal is folded into a typed literal).
    case cast(QueryExpression, EdmType)
}

/// The unary operators.
public enum UnaryOperator: String, Sendable, Hashable, CaseIterable {
    case not
    case negate
}

/// The binary operators, named as in OData.
public enum BinaryOperator: String, Sendable, Hashable, CaseIterable {
    case equal = "eq"
    case notEqual = "ne"
    case greaterThan = "gt"
    case greaterThanOrEqual = "ge"
    case lessThan = "lt"
    case lessThanOrEqual = "le"
    case and
    case or
    case add
    case subtract = "sub"
    case multiply = "mul"
    case divide = "div"
    case modulo = "mod"

    /// `true` for `eq ne gt ge lt le`.
    public var isComparison: Bool {
        switch self {
        case .equal, .notEqual, .greaterThan, .greaterThanOrEqual, .lessThan, .lessThanOrEqual: true
        default: false
        }
    }

    /// `true` for `and or`.
    public var isLogical: Bool { self == .and || self == .or }

    /// `true` for `add sub mul div mod`.
    public var isArithmetic: Bool { !isComparison && !isLogical }
}

/// The functions of both protocol versions.
public enum QueryFunction: String, Sendable, Hashable, CaseIterable {
    // Strings.
    /// 3.0 `contains(haystack, needle)`; 2.0 `substringof(needle, haystack)` is parsed into it with
    /// the arguments swapped.
    case contains
    case startsWith = "startswith"
    case endsWith = "endswith"
    case length
    case toLower = "tolower"
    case toUpper = "toupper"
    case trim
    case indexOf = "indexof"
    case substring
    case concat
    /// `replace(s, find, replacement)`, an extension of the 2.0 node server.
    case replace
    // Dates and times.
    case year, month, day, hour, minute, second
    // Math.
    case floor, ceiling, round

    /// The argument counts the function accepts.
    public var arity: ClosedRange<Int> {
        switch self {
        case .length, .toLower, .toUpper, .trim, .year, .month, .day, .hour, .minute, .second, .floor,
            .ceiling, .round:
            1...1
        case .contains, .startsWith, .endsWith, .indexOf, .concat: 2...2
        case .substring: 2...3
        case .replace: 3...3
        }
    }
}

/// The Edm types a `cast` may name.
public enum EdmType: String, Sendable, Hashable, CaseIterable {
    case date = "Edm.Date"
    case dateTimeOffset = "Edm.DateTimeOffset"
    case timeOfDay = "Edm.TimeOfDay"
    case guid = "Edm.Guid"
    case string = "Edm.String"
    case int32 = "Edm.Int32"
    case int64 = "Edm.Int64"
    case double = "Edm.Double"
    case decimal = "Edm.Decimal"
    case boolean = "Edm.Boolean"
}

/// A constant in a query.
public enum QueryLiteral: Sendable, Hashable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    /// A decimal literal (`2.0M`); it evaluates as a floating-point number.
    case decimal(Double)
    case string(String)
    /// An instant: 2.0 `datetime'…'`/`datetimeoffset'…'`, 3.0 `cast(…, Edm.DateTimeOffset)` or a bare
    /// date-time.
    case dateTimeOffset(Timestamp)
    /// A calendar date: `cast(1994-10-14, Edm.Date)` or a bare `1994-10-14`.
    case date(CalendarDate)
    /// A time of day: `cast(07:14:00, Edm.TimeOfDay)` or a bare `07:14:00`.
    case timeOfDay(TimeOfDay)
    /// A GUID, kept in its canonical lowercase `D` form.
    case guid(String)
}

/// The two protocol versions of the table protocol.
public enum ProtocolVersion: String, Sendable, Hashable, CaseIterable, Codable {
    /// Azure Mobile Apps (ZUMO) 2.0.0.
    case v2 = "2.0.0"
    /// Datasync 3.0.0.
    case v3 = "3.0.0"
}
