public import GRDB
public import QuerySQL

extension SQLValue {
    /// The value in GRDB's form.
    ///
    /// ```swift
    /// SQLValue.text("a").databaseValue   // "a"
    /// ```
    public var databaseValue: DatabaseValue {
        switch self {
        case .null: .null
        case .integer(let number): number.databaseValue
        case .real(let number): number.databaseValue
        case .text(let text): text.databaseValue
        }
    }
}

extension SQLFragment {
    /// The arguments in GRDB's form.
    ///
    /// ```swift
    /// let fragment: SQLFragment = "id = \(bind: "a")"
    /// let arguments = fragment.statementArguments   // ["a"]
    /// ```
    public var statementArguments: StatementArguments {
        StatementArguments(arguments.map(\.databaseValue))
    }

    /// The SQLite statement text (arguments as `?`).
    public var sqliteText: String { sql(for: .sqlite) }
}
