/// How a store lays out one table's rows: the only thing a store tells ``SQLCompiler`` about its
/// SQL besides the dialect.
///
/// Every layout has an item column (the JSON of the item) and a text id column. A system field
/// (`id`, `createdAt`, `updatedAt`, `deleted`, `version`) may have its own column, which the
/// compiler then reads instead of the JSON (so the column's indexes serve); a field in
/// ``unreadableFields`` never compiles.
///
/// ```swift
/// // The client store: the whole item in `item`, plus an indexed `updatedAt` in milliseconds.
/// let client = SQLTableLayout(
///     updatedAt: .init(name: "updatedAt", irregularColumn: "updatedAtIrregular"), itemHoldsSystemFields: true)
/// // The server storage: the item's own fields in `item`, system fields in columns.
/// let server = SQLTableLayout(
///     updatedAt: .init(name: "updated_at"), createdAt: .init(name: "created_at"), deletedColumn: "deleted",
///     unreadableFields: ["version"], itemHoldsSystemFields: false)
/// ```
public struct SQLTableLayout: Sendable, Hashable {
    /// A timestamp column: milliseconds since 1970 of a valid ISO 8601 date-time (or date).
    public struct TimestampColumn: Sendable, Hashable {
        /// The column's name.
        public var name: String
        /// A column set (non-NULL) when the field holds something other than a date-time or null;
        /// `nil` when the timestamp column is never NULL (the field always holds a date-time).
        public var irregularColumn: String?

        /// A timestamp column; see ``irregularColumn``.
        public init(name: String, irregularColumn: String? = nil) {
            self.name = name
            self.irregularColumn = irregularColumn
        }
    }

    /// The column holding the item's JSON.
    public var itemColumn: String
    /// The text column holding the item's id (never NULL).
    public var idColumn: String
    /// `updatedAt`'s column, if it has one.
    public var updatedAt: TimestampColumn?
    /// `createdAt`'s column, if it has one.
    public var createdAt: TimestampColumn?
    /// `deleted`'s column (1 or 0, never NULL), if it has one.
    public var deletedColumn: String?
    /// Fields that SQL cannot read with the evaluator's meaning (the server's `version`, a number
    /// whose text is the tag queries see).
    public var unreadableFields: Set<String>
    /// Whether the item column also holds the system fields (else those without a column are
    /// unreadable).
    public var itemHoldsSystemFields: Bool

    /// A layout; see the properties.
    public init(
        itemColumn: String = "item", idColumn: String = "id", updatedAt: TimestampColumn? = nil,
        createdAt: TimestampColumn? = nil, deletedColumn: String? = nil, unreadableFields: Set<String> = [],
        itemHoldsSystemFields: Bool
    ) {
        self.itemColumn = itemColumn
        self.idColumn = idColumn
        self.updatedAt = updatedAt
        self.createdAt = createdAt
        self.deletedColumn = deletedColumn
        self.unreadableFields = unreadableFields
        self.itemHoldsSystemFields = itemHoldsSystemFields
    }

    /// The names of the system fields.
    static let systemFields: Set<String> = ["id", "createdAt", "updatedAt", "deleted", "version"]

    /// The timestamp column of `name`, if any.
    func timestampColumn(_ name: String) -> TimestampColumn? {
        switch name {
        case "updatedAt": updatedAt
        case "createdAt": createdAt
        default: nil
        }
    }
}
