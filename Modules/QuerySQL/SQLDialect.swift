/// The SQL a database understands: placeholders, truth values, JSON access and the functions the
/// compiler may call. ``SQLCompiler`` writes every database-specific piece through its dialect.
///
/// ## SQLite (``sqlite``)
///
/// Items are JSON text read with `json_extract`/`json_type`; truth values are 1 and 0; arguments
/// are `?`. Everything ``SQLCompiler`` documents compiles, using the deterministic `ferry_*`
/// functions that `QuerySQLite` registers on every connection.
///
/// ## PostgreSQL (``postgreSQL``)
///
/// Items are `jsonb` read with `->`, `->>` and `jsonb_typeof`; truth values are `boolean`;
/// arguments are `$1`, `$2`, … with an explicit type (`$1::bigint`, `$2::text`,
/// `$3::double precision`). Only what PostgreSQL's built-ins express with exactly the evaluator's
/// meaning compiles:
///
/// - fields (system columns of the layout, and `jsonb` fields by kind: null, Boolean, number,
///   string), every literal but GUIDs, `eq ne gt ge lt le` between kinds that compare exactly
///   (Booleans, strings in byte order with `COLLATE "C"`, numbers when one side is an integer of
///   magnitude up to 2^53 or any double literal, instants against timestamp columns), `and or not`,
///   `in`, `contains` and `startswith` (`strpos`), `concat` of text columns and literals;
/// - sort keys on system columns and `id` tie-breakers; `LIMIT`/`OFFSET` paging.
///
/// Everything else falls back to the evaluator: arithmetic (PostgreSQL's integers raise on
/// overflow where the evaluator turns to floating point), `cast`, every other function (case
/// mapping depends on the database's locale, lengths count code points, not UTF-16 units), arrays
/// and objects (`jsonb` equality and text differ from the evaluator's), fields declared as GUIDs,
/// dates, times or enumerations, numbers compared where a double and a large integer could meet,
/// and sorting on item fields (the evaluator orders arrays and objects by their serialized text).
///
/// ```swift
/// let fragment: SQLFragment = "id = \(bind: "a")"
/// fragment.sql(for: .sqlite)        // "id = ?"
/// fragment.sql(for: .postgreSQL)    // "id = $1::text"
/// ```
public struct SQLDialect: Sendable, Hashable {
    enum Kind: Sendable, Hashable {
        case sqlite
        case postgreSQL
    }

    let kind: Kind

    /// SQLite 3.38 or later with the `ferry_*` functions registered.
    public static let sqlite = SQLDialect(kind: .sqlite)
    /// PostgreSQL 13 or later, items in a `jsonb` column.
    public static let postgreSQL = SQLDialect(kind: .postgreSQL)

    /// Whether the dialect can call the `ferry_*` functions (SQLite only).
    var hasFerryFunctions: Bool { kind == .sqlite }

    /// The text standing for argument `index` (from 0) of value `value`.
    func placeholder(_ index: Int, _ value: SQLValue) -> String {
        switch kind {
        case .sqlite: return "?"
        case .postgreSQL:
            switch value {
            case .null: return "$\(index + 1)"
            case .integer: return "$\(index + 1)::bigint"
            case .real: return "$\(index + 1)::double precision"
            case .text: return "$\(index + 1)::text"
            }
        }
    }

    /// The constant true.
    var alwaysTrue: SQLFragment { kind == .sqlite ? "1" : "TRUE" }
    /// The constant false.
    var alwaysFalse: SQLFragment { kind == .sqlite ? "0" : "FALSE" }

    /// True exactly when `predicate` is true (never NULL).
    func isTrue(_ predicate: SQLFragment) -> SQLFragment {
        kind == .sqlite ? "((\(predicate)) IS 1)" : "((\(predicate)) IS TRUE)"
    }

    /// True exactly when `predicate` is false or NULL.
    func isNotTrue(_ predicate: SQLFragment) -> SQLFragment {
        kind == .sqlite ? "((\(predicate)) IS NOT 1)" : "((\(predicate)) IS NOT TRUE)"
    }

    /// A Boolean constant as a Boolean value.
    func boolean(_ flag: Bool) -> SQLFragment {
        kind == .sqlite ? "\(bind: Int64(flag ? 1 : 0))" : (flag ? "TRUE" : "FALSE")
    }

    /// The predicate "this Boolean value is true".
    func isTrueValue(_ value: SQLFragment) -> SQLFragment {
        kind == .sqlite ? "\(value) = 1" : value
    }

    /// The Boolean value negated.
    func negated(_ value: SQLFragment) -> SQLFragment {
        kind == .sqlite ? "(1 - \(value))" : "(NOT \(value))"
    }

    /// The 1-based position of `needle` in `text` (0 when absent), in bytes or characters, which
    /// agree on valid UTF-8.
    func position(of needle: SQLFragment, in text: SQLFragment) -> SQLFragment {
        kind == .sqlite ? "instr(\(text), \(needle))" : "strpos(\(text), \(needle))"
    }

    /// `lhs op rhs` for two texts, in byte order.
    func compareText(_ lhs: SQLFragment, _ op: SQLFragment, _ rhs: SQLFragment) -> SQLFragment {
        kind == .sqlite ? "\(lhs) \(op) \(rhs)" : "\(lhs) COLLATE \"C\" \(op) \(rhs)"
    }

    /// A call of a `ferry_*` function, or `NotCompilable` where there are none.
    func ferry(_ name: String, _ arguments: [SQLFragment]) throws(NotCompilable) -> SQLFragment {
        guard hasFerryFunctions else { throw NotCompilable() }
        return SQLFragment(text: name + "(") + SQLFragment.joined(arguments, separator: ", ") + ")"
    }

    /// A number as a double, for comparisons that convert integers.
    func real(_ value: SQLFragment) -> SQLFragment {
        kind == .sqlite ? "CAST(\(value) AS REAL)" : "(\(value))::double precision"
    }

    /// `LIMIT … OFFSET …`; `limit` nil is no limit.
    public func page(limit: Int64?, offset: Int64) -> SQLFragment {
        switch kind {
        case .sqlite: return "LIMIT \(bind: limit ?? -1) OFFSET \(bind: offset)"
        case .postgreSQL:
            guard let limit else { return "LIMIT ALL OFFSET \(bind: offset)" }
            return "LIMIT \(bind: limit) OFFSET \(bind: offset)"
        }
    }

    /// How one item field is read: its value per JSON kind, and when it is null or missing.
    struct JSONField {
        var isNull: SQLFragment
        var bool: Projection
        var number: Projection
        var other: Projection
        /// The field's text when it is a string (NULL or garbage otherwise), and the test for that.
        var text: SQLFragment
        var isText: SQLFragment
    }

    /// The field `name` of the JSON column `item` (a name with no control character).
    func jsonField(_ item: String, _ name: String) -> JSONField {
        switch kind {
        case .sqlite:
            let path = SQLFragment.quoted("$.\"" + name + "\"")
            let column = SQLFragment(text: item)
            let type: SQLFragment = "json_type(\(column), \(path))"
            let value: SQLFragment = "json_extract(\(column), \(path))"
            return JSONField(
                isNull: "(\(value) IS NULL)",
                bool: Projection(payload: value, condition: "\(type) IN ('true', 'false')"),
                number: Projection(payload: value, condition: "\(type) IN ('integer', 'real')"),
                other: Projection(payload: value, condition: "\(type) IN ('array', 'object')"),
                text: value, isText: "\(type) = 'text'")
        case .postgreSQL:
            let key = SQLFragment.quoted(name)
            let json: SQLFragment = "\(SQLFragment(text: item))->\(key)"
            let type: SQLFragment = "jsonb_typeof(\(json))"
            // Each kind's value is only computed for that kind: PostgreSQL raises on a bad cast.
            return JSONField(
                isNull: "(COALESCE(\(type), 'null') = 'null')",
                bool: Projection(payload: "(CASE WHEN \(type) = 'boolean' THEN (\(json))::boolean END)"),
                number: Projection(payload: "(CASE WHEN \(type) = 'number' THEN (\(json))::numeric END)"),
                other: Projection(payload: "(CASE WHEN \(type) IN ('array', 'object') THEN \(json) END)"),
                text: "(\(SQLFragment(text: item))->>\(key))", isText: "\(type) = 'string'")
        }
    }
}

/// Thrown while compiling a construct that the dialect cannot reproduce exactly; the caller then
/// leaves that part of the query to `QueryEvaluator`.
public struct NotCompilable: Error, Sendable {
    /// The error; it carries nothing, the caller only falls back.
    public init() {}
}
