// The constants of typed queries: each value becomes the literal that compares with what the model encoder stores
// (JSONValueEncoder): a `Date` an instant (`dateTimeOffset`) that the stored ISO 8601 text is read as, a `UUID` a
// GUID (the stored lowercase text), a `Decimal` a decimal number.

#if canImport(FoundationEssentials)
    public import FoundationEssentials
#else
    public import Foundation
#endif

extension Date: QueryValueConvertible {
    /// The instant as ``QueryLiteral/dateTimeOffset(_:)``, truncated to the millisecond as the model encoder
    /// truncates it; a stored ISO 8601 string compares with it as an instant, locally and on the server.
    ///
    /// ```swift
    /// QueryExpression.field("due").lt(Date.now)  // (due lt 2023-11-14T22:13:20.123Z)
    /// ```
    public var queryLiteral: QueryLiteral { .dateTimeOffset(Timestamp(self)) }
}

extension UUID: QueryValueConvertible {
    /// The id as ``QueryLiteral/guid(_:)`` in lowercase, as the model encoder writes it.
    public var queryLiteral: QueryLiteral { .guid(wireText) }
}

extension Decimal: QueryValueConvertible {
    /// The number as ``QueryLiteral/decimal(_:)`` (the model encoder stores a `Decimal` as a JSON number).
    public var queryLiteral: QueryLiteral { .decimal(Double(description) ?? .nan) }
}

extension Float: QueryValueConvertible {
    /// The number as ``QueryLiteral/double(_:)``, widened as the model encoder widens it.
    public var queryLiteral: QueryLiteral { .double(Double(self)) }
}

extension Int32: QueryValueConvertible {
    /// The integer as ``QueryLiteral/int(_:)``.
    public var queryLiteral: QueryLiteral { .int(Int64(self)) }
}

extension Optional: QueryValueConvertible where Wrapped: QueryValueConvertible {
    /// The wrapped value's literal, or ``QueryLiteral/null`` for `nil`.
    public var queryLiteral: QueryLiteral { map(\.queryLiteral) ?? .null }
}

/// A property type that typed queries compare with constants: `Bool`, `String`, `Int`, `Int32`, `Int64`,
/// `Double`, `Float`, `Date`, `UUID`, `Decimal`, ``Timestamp``, and optionals of them.
///
/// A conforming type's ``QueryValueConvertible/queryLiteral`` must be the constant that compares with the value
/// as the model encoder stores it.
///
/// ```swift
/// let overdue: QueryPredicate<Todo> = \.due < Date.now && \.done == false
/// ```
public protocol TypedQueryValue: QueryValueConvertible, Equatable {}

extension Bool: TypedQueryValue {}
extension String: TypedQueryValue {}
extension Int: TypedQueryValue {}
extension Int32: TypedQueryValue {}
extension Int64: TypedQueryValue {}
extension Double: TypedQueryValue {}
extension Float: TypedQueryValue {}
extension Date: TypedQueryValue {}
extension UUID: TypedQueryValue {}
extension Decimal: TypedQueryValue {}
extension Timestamp: TypedQueryValue {}
extension Optional: TypedQueryValue where Wrapped: TypedQueryValue {}
