// Filters by key path: `\Todo.done == false` builds the same `QueryExpression` as
// `QueryExpression.field("done").eq(false)`, with the field name found by probing the model (FieldProbe.swift).

/// A filter on the models of a typed table, written with key paths and checked by the compiler.
///
/// Compare a stored property with a constant of its type (`==`, `!=`, `<`, `<=`, `>`, `>=`; `== nil` for
/// optionals), combine with `&&`, `||` and `!`, and match text with `contains`,
/// `startsWith` and `endsWith`:
///
/// ```swift
/// struct Todo: SyncModel {
///     static let tableName = "todo"
///     var id: String = .unassigned
///     var title: String
///     var due: Date?
///     var done = false
/// }
/// let open: QueryPredicate<Todo> = \.done == false && (\.due == nil || \.due > Date.now)
/// let milk: QueryPredicate<Todo> = .contains(\.title, "milk") && !(\.title == "Oat milk")
/// ```
///
/// A key path that names no stored field (a computed property), one into a nested value (`\.details.priority`)
/// or a model that cannot be probed does not build a query: the call that runs it throws ``SyncError`` with
/// ``SyncError/Code/invalidQuery``.
public struct QueryPredicate<Model: Codable & Sendable>: Sendable {
    let resolved: Result<QueryExpression, SyncError>

    init(_ resolved: Result<QueryExpression, SyncError>) {
        self.resolved = resolved
    }

    /// The predicate as an untyped expression; throws when a key path names no field.
    ///
    /// ```swift
    /// let expression = try (\Todo.done == false).expression()   // (done eq false)
    /// ```
    public func expression() throws(SyncError) -> QueryExpression { try resolved.get() }

    /// A comparison of the field a key path names with a constant.
    static func compare<Value: TypedQueryValue>(
        _ keyPath: KeyPath<Model, Value>, _ comparison: BinaryOperator, _ value: Value
    ) -> Self {
        Self(
            Result { () throws(SyncError) in
                .binary(comparison, .field(try FieldProbes.field(keyPath)), .literal(value.queryLiteral))
            })
    }

    /// A string function of the field a key path names and a constant.
    static func call<Value: Equatable>(
        _ function: QueryFunction, _ keyPath: KeyPath<Model, Value>, _ text: String
    ) -> Self {
        Self(
            Result { () throws(SyncError) in
                .function(function, [.field(try FieldProbes.field(keyPath)), .literal(.string(text))])
            })
    }

    /// Both predicates.
    public static func && (lhs: Self, rhs: Self) -> Self {
        Self(Result { () throws(SyncError) in .binary(.and, try lhs.expression(), try rhs.expression()) })
    }

    /// Either predicate.
    public static func || (lhs: Self, rhs: Self) -> Self {
        Self(Result { () throws(SyncError) in .binary(.or, try lhs.expression(), try rhs.expression()) })
    }

    /// The opposite predicate.
    public static prefix func ! (operand: Self) -> Self {
        Self(Result { () throws(SyncError) in .unary(.not, try operand.expression()) })
    }

    /// `contains(field, text)`: whether the text field contains `text` (case-sensitive).
    ///
    /// ```swift
    /// let milk: QueryPredicate<Todo> = .contains(\.title, "milk")   // contains(title,'milk')
    /// ```
    public static func contains(_ keyPath: KeyPath<Model, String>, _ text: String) -> Self {
        call(.contains, keyPath, text)
    }

    /// `contains(field, text)` on an optional text field (`nil` does not match).
    public static func contains(_ keyPath: KeyPath<Model, String?>, _ text: String) -> Self {
        call(.contains, keyPath, text)
    }

    /// `startswith(field, prefix)`.
    ///
    /// ```swift
    /// let shopping: QueryPredicate<Todo> = .startsWith(\.title, "Buy")
    /// ```
    public static func startsWith(_ keyPath: KeyPath<Model, String>, _ prefix: String) -> Self {
        call(.startsWith, keyPath, prefix)
    }

    /// `startswith(field, prefix)` on an optional text field.
    public static func startsWith(_ keyPath: KeyPath<Model, String?>, _ prefix: String) -> Self {
        call(.startsWith, keyPath, prefix)
    }

    /// `endswith(field, suffix)`.
    public static func endsWith(_ keyPath: KeyPath<Model, String>, _ suffix: String) -> Self {
        call(.endsWith, keyPath, suffix)
    }

    /// `endswith(field, suffix)` on an optional text field.
    public static func endsWith(_ keyPath: KeyPath<Model, String?>, _ suffix: String) -> Self {
        call(.endsWith, keyPath, suffix)
    }
}

/// `field eq value`; `\.due == nil` for an optional field.
///
/// ```swift
/// let open: QueryPredicate<Todo> = \.done == false   // (done eq false)
/// ```
public func == <Model: Codable & Sendable, Value: TypedQueryValue>(lhs: KeyPath<Model, Value>, rhs: Value)
    -> QueryPredicate<Model>
{
    .compare(lhs, .equal, rhs)
}

/// `field ne value`.
public func != <Model: Codable & Sendable, Value: TypedQueryValue>(lhs: KeyPath<Model, Value>, rhs: Value)
    -> QueryPredicate<Model>
{
    .compare(lhs, .notEqual, rhs)
}

/// `field lt value`.
///
/// ```swift
/// let overdue: QueryPredicate<Todo> = \.due < Date.now   // (due lt 2023-11-14T22:13:20.123Z)
/// ```
public func < <Model: Codable & Sendable, Value: TypedQueryValue>(lhs: KeyPath<Model, Value>, rhs: Value)
    -> QueryPredicate<Model>
{
    .compare(lhs, .lessThan, rhs)
}

/// `field le value`.
public func <= <Model: Codable & Sendable, Value: TypedQueryValue>(lhs: KeyPath<Model, Value>, rhs: Value)
    -> QueryPredicate<Model>
{
    .compare(lhs, .lessThanOrEqual, rhs)
}

/// `field gt value`.
public func > <Model: Codable & Sendable, Value: TypedQueryValue>(lhs: KeyPath<Model, Value>, rhs: Value)
    -> QueryPredicate<Model>
{
    .compare(lhs, .greaterThan, rhs)
}

/// `field ge value`.
public func >= <Model: Codable & Sendable, Value: TypedQueryValue>(lhs: KeyPath<Model, Value>, rhs: Value)
    -> QueryPredicate<Model>
{
    .compare(lhs, .greaterThanOrEqual, rhs)
}

/// `field eq value` for an enum stored as its raw value.
///
/// ```swift
/// let urgent: QueryPredicate<Todo> = \.priority == .high   // (priority eq 'high')
/// ```
public func == <Model: Codable & Sendable, Value: RawRepresentable & Equatable>(
    lhs: KeyPath<Model, Value>, rhs: Value
) -> QueryPredicate<Model> where Value.RawValue: TypedQueryValue {
    .compareRaw(lhs, .equal, rhs)
}

/// `field ne value` for an enum stored as its raw value.
public func != <Model: Codable & Sendable, Value: RawRepresentable & Equatable>(
    lhs: KeyPath<Model, Value>, rhs: Value
) -> QueryPredicate<Model> where Value.RawValue: TypedQueryValue {
    .compareRaw(lhs, .notEqual, rhs)
}

extension QueryPredicate {
    static func compareRaw<Value: RawRepresentable & Equatable>(
        _ keyPath: KeyPath<Model, Value>, _ comparison: BinaryOperator, _ value: Value
    ) -> Self where Value.RawValue: TypedQueryValue {
        Self(
            Result { () throws(SyncError) in
                .binary(comparison, .field(try FieldProbes.field(keyPath)), .literal(value.rawValue.queryLiteral))
            })
    }
}
