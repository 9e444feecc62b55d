/// What a table declares about its fields, so that queries can be checked and typed.
///
/// Tables are schemaless: any JSON object can be stored, and a query without a schema treats
/// each field as the JSON value it holds. A schema adds two things:
/// - **validation**: with ``allowsUndeclaredFields`` off, a query naming a field that is neither
///   declared nor a system property fails with ``QueryError/Code/unknownField``;
/// - **typing**: a string field declared as a date, date-time or time compares as one, and an
///   enumeration sorts by the order of its cases (as .NET enums do), not alphabetically.
///
/// ```swift
/// let movies = TableSchema(fields: [
///     "title": .string, "year": .integer, "releaseDate": .date,
///     "rating": .enumeration(["Unrated", "G", "PG", "PG13", "NC17", "R"]),
/// ], allowsUndeclaredFields: false)
/// ```
public struct TableSchema: Sendable, Hashable {
    /// The declared fields and their types.
    public var fields: [String: FieldType]
    /// Whether queries may name fields that are not declared (default `true`: schemaless).
    public var allowsUndeclaredFields: Bool

    public init(fields: [String: FieldType] = [:], allowsUndeclaredFields: Bool = true) {
        self.fields = fields
        self.allowsUndeclaredFields = allowsUndeclaredFields
    }

    /// A schema that declares nothing and accepts every field.
    public static let schemaless = TableSchema()

    /// The declared type of `field`; system properties have their fixed types.
    public func type(of field: String) -> FieldType? {
        if let declared = fields[field] { return declared }
        switch field {
        case "id", "version": return .string
        case "createdAt", "updatedAt": return .dateTimeOffset
        case "deleted": return .bool
        default: return nil
        }
    }

    /// Whether a query may name `field`.
    public func isKnown(_ field: String) -> Bool {
        allowsUndeclaredFields || type(of: field) != nil
    }
}

/// The type of a declared field.
public enum FieldType: Sendable, Hashable {
    case string
    case integer
    case double
    case bool
    /// An instant stored as ISO 8601 text (`…Z` or `+00:00`).
    case dateTimeOffset
    /// A calendar date stored as `yyyy-MM-dd`.
    case date
    /// A time of day stored as `HH:mm:ss[.fff]`.
    case timeOfDay
    /// A GUID stored as text; compared without regard to case.
    case guid
    /// A string with a fixed set of values that sorts by their position in `cases`.
    case enumeration([String])
    /// Any JSON value (objects and arrays included).
    case json
}
