// The query builder: Swift methods that build `TableQuery` and `QueryExpression` values, so app code never
// writes OData text by hand.
//
// `QueryExpression` is `Hashable`, so `==` compares expressions and cannot build a comparison; the builder uses
// named methods (`eq`, `ne`, `gt`, …) and the logical operators `&&`, `||` and `!`.

// MARK: - Values

/// A Swift value that can stand as a constant in a query.
///
/// ```swift
/// QueryExpression.field("year").ge(1994)          // Int
/// QueryExpression.field("title").eq("Amélie")     // String
/// QueryExpression.field("rating").eq(QueryLiteral.null)
/// ```
public protocol QueryValueConvertible: Sendable {
    /// The value as a query constant.
    var queryLiteral: QueryLiteral { get }
}

extension Int: QueryValueConvertible {
    /// The integer as ``QueryLiteral/int(_:)``.
    public var queryLiteral: QueryLiteral { .int(Int64(self)) }
}

extension Int64: QueryValueConvertible {
    /// The integer as ``QueryLiteral/int(_:)``.
    public var queryLiteral: QueryLiteral { .int(self) }
}

extension Double: QueryValueConvertible {
    /// The number as ``QueryLiteral/double(_:)``.
    public var queryLiteral: QueryLiteral { .double(self) }
}

extension String: QueryValueConvertible {
    /// The text as ``QueryLiteral/string(_:)``.
    public var queryLiteral: QueryLiteral { .string(self) }
}

extension Bool: QueryValueConvertible {
    /// The flag as ``QueryLiteral/bool(_:)``.
    public var queryLiteral: QueryLiteral { .bool(self) }
}

extension Timestamp: QueryValueConvertible {
    /// The instant as ``QueryLiteral/dateTimeOffset(_:)``.
    public var queryLiteral: QueryLiteral { .dateTimeOffset(self) }
}

extension CalendarDate: QueryValueConvertible {
    /// The date as ``QueryLiteral/date(_:)``.
    public var queryLiteral: QueryLiteral { .date(self) }
}

extension TimeOfDay: QueryValueConvertible {
    /// The time as ``QueryLiteral/timeOfDay(_:)``.
    public var queryLiteral: QueryLiteral { .timeOfDay(self) }
}

extension QueryLiteral: QueryValueConvertible {
    /// The literal itself; use it for ``QueryLiteral/null``, GUIDs and decimals.
    public var queryLiteral: QueryLiteral { self }
}

// MARK: - Expressions

extension QueryExpression {
    /// A constant.
    ///
    /// ```swift
    /// QueryExpression.value(42)  // .literal(.int(42))
    /// ```
    public static func value(_ value: some QueryValueConvertible) -> QueryExpression {
        .literal(value.queryLiteral)
    }

    // MARK: Comparisons

    /// `self eq value`.
    ///
    /// ```swift
    /// let unwatched = QueryExpression.field("watched").eq(false)   // (watched eq false)
    /// let noRating = QueryExpression.field("rating").eq(QueryLiteral.null)
    /// ```
    public func eq(_ value: some QueryValueConvertible) -> QueryExpression { .binary(.equal, self, .value(value)) }

    /// `self eq other`.
    public func eq(_ other: QueryExpression) -> QueryExpression { .binary(.equal, self, other) }

    /// `self ne value`.
    public func ne(_ value: some QueryValueConvertible) -> QueryExpression { .binary(.notEqual, self, .value(value)) }

    /// `self ne other`.
    public func ne(_ other: QueryExpression) -> QueryExpression { .binary(.notEqual, self, other) }

    /// `self gt value`.
    public func gt(_ value: some QueryValueConvertible) -> QueryExpression {
        .binary(.greaterThan, self, .value(value))
    }

    /// `self gt other`.
    public func gt(_ other: QueryExpression) -> QueryExpression { .binary(.greaterThan, self, other) }

    /// `self ge value`.
    public func ge(_ value: some QueryValueConvertible) -> QueryExpression {
        .binary(.greaterThanOrEqual, self, .value(value))
    }

    /// `self ge other`.
    public func ge(_ other: QueryExpression) -> QueryExpression { .binary(.greaterThanOrEqual, self, other) }

    /// `self lt value`.
    public func lt(_ value: some QueryValueConvertible) -> QueryExpression { .binary(.lessThan, self, .value(value)) }

    /// `self lt other`.
    public func lt(_ other: QueryExpression) -> QueryExpression { .binary(.lessThan, self, other) }

    /// `self le value`.
    public func le(_ value: some QueryValueConvertible) -> QueryExpression {
        .binary(.lessThanOrEqual, self, .value(value))
    }

    /// `self le other`.
    public func le(_ other: QueryExpression) -> QueryExpression { .binary(.lessThanOrEqual, self, other) }

    /// `self in (values…)`.
    ///
    /// ```swift
    /// QueryExpression.field("rating").isIn(["G", "PG"])  // 3.0: (rating in ('G','PG'))
    /// ```
    public func isIn(_ values: [some QueryValueConvertible]) -> QueryExpression {
        .isIn(self, values.map { .literal($0.queryLiteral) })
    }

    /// `self in (expressions…)`.
    public func isIn(_ values: [QueryExpression]) -> QueryExpression { .isIn(self, values) }

    // MARK: Strings

    /// `contains(self, text)`: whether the string contains `text` (2.0: `substringof(text, self)`).
    ///
    /// ```swift
    /// QueryExpression.field("title").lowercased().contains("star")  // contains(tolower(title),'star')
    /// ```
    public func contains(_ text: String) -> QueryExpression { .function(.contains, [self, .value(text)]) }

    /// `contains(self, other)`.
    public func contains(_ other: QueryExpression) -> QueryExpression { .function(.contains, [self, other]) }

    /// `startswith(self, prefix)`.
    public func startsWith(_ prefix: String) -> QueryExpression { .function(.startsWith, [self, .value(prefix)]) }

    /// `startswith(self, other)`.
    public func startsWith(_ other: QueryExpression) -> QueryExpression { .function(.startsWith, [self, other]) }

    /// `endswith(self, suffix)`.
    public func endsWith(_ suffix: String) -> QueryExpression { .function(.endsWith, [self, .value(suffix)]) }

    /// `endswith(self, other)`.
    public func endsWith(_ other: QueryExpression) -> QueryExpression { .function(.endsWith, [self, other]) }

    /// `tolower(self)`.
    public func lowercased() -> QueryExpression { .function(.toLower, [self]) }

    /// `toupper(self)`.
    public func uppercased() -> QueryExpression { .function(.toUpper, [self]) }

    /// `trim(self)`.
    public func trimmed() -> QueryExpression { .function(.trim, [self]) }

    /// `length(self)`.
    public func length() -> QueryExpression { .function(.length, [self]) }

    // MARK: Dates and times

    /// `year(self)`.
    ///
    /// ```swift
    /// QueryExpression.field("releaseDate").year().eq(1994)  // (year(releaseDate) eq 1994)
    /// ```
    public func year() -> QueryExpression { .function(.year, [self]) }

    /// `month(self)`, 1 to 12.
    public func month() -> QueryExpression { .function(.month, [self]) }

    /// `day(self)`, the day of the month.
    public func day() -> QueryExpression { .function(.day, [self]) }

    /// `hour(self)`.
    public func hour() -> QueryExpression { .function(.hour, [self]) }

    /// `minute(self)`.
    public func minute() -> QueryExpression { .function(.minute, [self]) }

    /// `second(self)`.
    public func second() -> QueryExpression { .function(.second, [self]) }

    // MARK: Math

    /// `round(self)`: to the nearest integer, halves to even.
    public func rounded() -> QueryExpression { .function(.round, [self]) }

    /// `floor(self)`.
    public func floor() -> QueryExpression { .function(.floor, [self]) }

    /// `ceiling(self)`.
    public func ceiling() -> QueryExpression { .function(.ceiling, [self]) }

    /// `self add value`.
    ///
    /// ```swift
    /// QueryExpression.field("duration").divided(by: 60.0).rounded().eq(2)  // (round((duration div 60.0)) eq 2)
    /// ```
    public func adding(_ value: some QueryValueConvertible) -> QueryExpression { .binary(.add, self, .value(value)) }

    /// `self add other`.
    public func adding(_ other: QueryExpression) -> QueryExpression { .binary(.add, self, other) }

    /// `self sub value`.
    public func subtracting(_ value: some QueryValueConvertible) -> QueryExpression {
        .binary(.subtract, self, .value(value))
    }

    /// `self sub other`.
    public func subtracting(_ other: QueryExpression) -> QueryExpression { .binary(.subtract, self, other) }

    /// `self mul value`.
    public func multiplied(by value: some QueryValueConvertible) -> QueryExpression {
        .binary(.multiply, self, .value(value))
    }

    /// `self mul other`.
    public func multiplied(by other: QueryExpression) -> QueryExpression { .binary(.multiply, self, other) }

    /// `self div value`: an integer quotient when both sides are integers.
    public func divided(by value: some QueryValueConvertible) -> QueryExpression {
        .binary(.divide, self, .value(value))
    }

    /// `self div other`.
    public func divided(by other: QueryExpression) -> QueryExpression { .binary(.divide, self, other) }

    /// `self mod value`.
    public func modulo(_ value: some QueryValueConvertible) -> QueryExpression { .binary(.modulo, self, .value(value)) }

    /// `self mod other`.
    public func modulo(_ other: QueryExpression) -> QueryExpression { .binary(.modulo, self, other) }

    // MARK: Logic

    /// `lhs and rhs`.
    ///
    /// ```swift
    /// let nineties = QueryExpression.field("year").ge(1990) && QueryExpression.field("year").lt(2000)
    /// ```
    public static func && (lhs: QueryExpression, rhs: QueryExpression) -> QueryExpression { .binary(.and, lhs, rhs) }

    /// `lhs or rhs`.
    public static func || (lhs: QueryExpression, rhs: QueryExpression) -> QueryExpression { .binary(.or, lhs, rhs) }

    /// `not operand`.
    public static prefix func ! (operand: QueryExpression) -> QueryExpression { .unary(.not, operand) }
}

// MARK: - Queries

extension TableQuery {
    /// A copy filtered by `expression`, ANDed with any filter the query already has.
    ///
    /// ```swift
    /// let query = TableQuery()
    ///     .filter(QueryExpression.field("done").eq(false))
    ///     .filter(QueryExpression.field("title").startsWith("Buy"))   // ((done eq false) and startswith(title,'Buy'))
    ///     .orderBy("updatedAt", descending: true)
    ///     .top(20)
    /// ```
    public func filter(_ expression: QueryExpression) -> TableQuery {
        var copy = self
        copy.filter = self.filter.map { .binary(.and, $0, expression) } ?? expression
        return copy
    }

    /// A copy that also sorts by `field` after the existing sort keys.
    public func orderBy(_ field: String, descending: Bool = false) -> TableQuery {
        orderBy(.field(field), descending: descending)
    }

    /// A copy that also sorts by `expression` after the existing sort keys.
    public func orderBy(_ expression: QueryExpression, descending: Bool = false) -> TableQuery {
        var copy = self
        copy.orderBy.append(SortKey(expression, descending: descending))
        return copy
    }

    /// A copy that skips the first `count` matching items.
    public func skip(_ count: Int) -> TableQuery {
        var copy = self
        copy.skip = count
        return copy
    }

    /// A copy that returns at most `count` items.
    public func top(_ count: Int) -> TableQuery {
        var copy = self
        copy.top = count
        return copy
    }

    /// A copy that returns only `fields`.
    ///
    /// ```swift
    /// TableQuery().select("id", "title")  // $select=id,title
    /// ```
    public func select(_ fields: String...) -> TableQuery { select(fields) }

    /// A copy that returns only `fields`.
    public func select(_ fields: [String]) -> TableQuery {
        var copy = self
        copy.select = fields
        return copy
    }

    /// A copy that asks for the count of every matching item (`$count=true`, 2.0 `$inlinecount=allpages`).
    public func includingTotalCount() -> TableQuery {
        var copy = self
        copy.includeTotalCount = true
        return copy
    }

    /// A copy that includes soft-deleted items (`__includedeleted=true`).
    public func includingDeleted() -> TableQuery {
        var copy = self
        copy.includeDeleted = true
        return copy
    }
}
