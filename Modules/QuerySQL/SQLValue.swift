/// A value bound to an SQL statement, in no database library's type.
///
/// The compiler only ever binds these four kinds; a store converts them at its edge (GRDB users
/// through `QuerySQLite`, a PostgreSQL client to its own encodable values).
///
/// ```swift
/// let values: [SQLValue] = [.integer(10), .text("milk"), .real(1.5), .null]
/// print(values[0])   // integer(10)
/// ```
public enum SQLValue: Sendable, Hashable {
    /// SQL NULL.
    case null
    /// A 64-bit integer.
    case integer(Int64)
    /// A finite double.
    case real(Double)
    /// UTF-8 text.
    case text(String)
}
