public import SyncCore

/// Compiles `TableQuery` filters and sort keys to SQL with exactly the meaning `QueryEvaluator`
/// gives them, for one table layout (``SQLTableLayout``) and one database (``SQLDialect``).
///
/// ```swift
/// let layout = SQLTableLayout(itemHoldsSystemFields: true)
/// let compiler = SQLCompiler(schema: .schemaless, layout: layout, dialect: .sqlite)
/// let split = compiler.split(.binary(.equal, .field("title"), .literal(.string("Milk"))))
/// print(split.sql?.sql(for: .sqlite) ?? "-", split.residual == nil)
/// ```
///
/// ## How values are modelled
///
/// The evaluator works on typed values (null, Boolean, integer, double, string, GUID, enumeration
/// case, instant, date, time, other JSON). A field's kind is only known per row, so every value
/// expression compiles to an `Operand`: for each kind it may have, a `Projection` that is an SQL
/// expression non-NULL exactly when the value has that kind (plus an exact "is null" test). A
/// comparison then enumerates the pairs of kinds the evaluator can compare (numbers with numbers,
/// text with text, a string with a date literal through ISO 8601 parsing, arrays and objects by
/// JSON equality, …) and ORs them; incomparable kinds give `false` (or `true` for `ne`), as in the
/// evaluator. Dates and date-times both compare as milliseconds since 1970 (a date is its midnight
/// UTC), so they share one kind.
///
/// ## What compiles (SQLite; see ``SQLDialect`` for PostgreSQL)
///
/// - field references (system fields with a column in the layout use it; other fields read the
///   item's JSON), every literal, `eq ne gt ge lt le`, `and or not`, `in`;
/// - `add sub mul` (SQLite's integer arithmetic overflows to floating point exactly as the
///   evaluator does), `div` and `mod` by a non-zero numeric literal, unary minus;
/// - every function: `contains` and `startswith` with `instr`, `concat` with `||`, and the others
///   through the deterministic `ferry_*` functions (UTF-16 lengths, Unicode case mapping, banker's
///   rounding);
/// - `cast` to a string, an integer, a double or a Boolean;
/// - sort keys on any of these, with the evaluator's order of kinds
///   (null < Boolean < number < date/time < text < other JSON) and the final `id` tie-breaker.
///
/// ## What falls back to the evaluator
///
/// `cast` to a date, time or GUID (or of a date or time to a string), arithmetic whose operand may
/// already be infinite (nested floating-point arithmetic), division or modulo by anything but a
/// non-zero literal, string literals holding NUL characters, field names holding `"`, `\` or
/// control characters, fields the layout cannot read (``SQLTableLayout/unreadableFields``), sort
/// keys that mix kinds the evaluator orders inconsistently (a GUID beside plain strings, a date
/// beside a time), sorting an enumeration field while some row holds text that is not one of its
/// cases, and anything beyond the ``Limits``. A filter is split at its top-level `and`s: the parts
/// that compile run in SQL, the rest in Swift on the rows SQL returns.
public struct SQLCompiler: Sendable {
    /// Bounds on what one compiled filter may hold, for databases with small expression limits.
    public struct Limits: Sendable, Hashable {
        /// The deepest nesting of expressions (a chain of one connective counts once).
        public var maximumDepth: Int
        /// The most operands of one `and`/`or` chain or `in` list.
        public var maximumOperands: Int
        /// The most bound arguments of the compiled filter.
        public var maximumArguments: Int

        /// Limits; see the properties.
        public init(maximumDepth: Int, maximumOperands: Int, maximumArguments: Int) {
            self.maximumDepth = maximumDepth
            self.maximumOperands = maximumOperands
            self.maximumArguments = maximumArguments
        }
    }

    /// The table's declared fields.
    public let schema: TableSchema
    /// Where the table's columns are.
    public let layout: SQLTableLayout
    /// The SQL written.
    public let dialect: SQLDialect
    /// Bounds on one compiled filter; `nil` for none.
    public let limits: Limits?
    /// Sort irregular timestamp columns by the column alone and enumerations by case position
    /// alone; the caller checks the ``OrderCompilation/precheck`` before trusting that.
    public var assumesRegularSortKeys: Bool

    /// A compiler for one table.
    public init(
        schema: TableSchema, layout: SQLTableLayout, dialect: SQLDialect = .sqlite, limits: Limits? = nil,
        assumesRegularSortKeys: Bool = true
    ) {
        self.schema = schema
        self.layout = layout
        self.dialect = dialect
        self.limits = limits
        self.assumesRegularSortKeys = assumesRegularSortKeys
    }

    // MARK: - Plans

    /// A filter split into the part SQL runs and the part left to the evaluator.
    public struct FilterSplit: Sendable {
        /// The compiled conjuncts, ANDed; `nil` when none compiled.
        public var sql: SQLFragment?
        /// The conjuncts left to the evaluator, ANDed; `nil` when all compiled.
        public var residual: QueryExpression?
    }

    /// Compiles the top-level conjuncts of `filter` that can be compiled.
    public func split(_ filter: QueryExpression?) -> FilterSplit {
        guard let filter else { return FilterSplit() }
        var compiled: [SQLFragment] = []
        var residual: [QueryExpression] = []
        var arguments = 0
        for conjunct in Self.chain(.and, filter) {
            if withinLimits(conjunct), let predicate = try? predicate(conjunct),
                arguments + predicate.sql.arguments.count <= limits?.maximumArguments ?? Int.max
            {
                arguments += predicate.sql.arguments.count
                compiled.append(predicate.sql)
            } else {
                residual.append(conjunct)
            }
        }
        return FilterSplit(
            sql: compiled.isEmpty ? nil : SQLFragment.joined(compiled, separator: " AND "),
            residual: residual.dropFirst().reduce(residual.first) { partial, next in
                partial.map { .binary(.and, $0, next) }
            })
    }

    /// Whether `expression` is within ``limits`` (always without limits).
    private func withinLimits(_ expression: QueryExpression) -> Bool {
        guard let limits else { return true }
        func fits(_ expression: QueryExpression, _ depth: Int) -> Bool {
            guard depth <= limits.maximumDepth else { return false }
            switch expression {
            case .literal, .field: return true
            case .unary(_, let operand), .cast(let operand, _): return fits(operand, depth + 1)
            case .binary(let op, _, _) where op.isLogical:
                let operands = Self.chain(op, expression)
                return operands.count <= limits.maximumOperands && operands.allSatisfy { fits($0, depth + 1) }
            case .binary(_, let lhs, let rhs): return fits(lhs, depth + 1) && fits(rhs, depth + 1)
            case .function(_, let arguments): return arguments.allSatisfy { fits($0, depth + 1) }
            case .isIn(let needle, let list):
                return list.count <= limits.maximumOperands && fits(needle, depth + 1)
                    && list.allSatisfy { fits($0, depth + 1) }
            }
        }
        return fits(expression, 0)
    }

    /// The operands of a chain of `op` (`a or b or c` gives `[a, b, c]`), in order.
    static func chain(_ op: BinaryOperator, _ expression: QueryExpression) -> [QueryExpression] {
        var result: [QueryExpression] = []
        var stack = [expression]
        while let next = stack.popLast() {
            if case .binary(op, let lhs, let rhs) = next {
                stack.append(rhs)
                stack.append(lhs)
            } else {
                result.append(next)
            }
        }
        return result
    }

    /// An `ORDER BY` list, with the condition under which it is not exact.
    public struct OrderCompilation: Sendable {
        /// The terms, each with its direction.
        public var terms: [SQLFragment]
        /// When some row satisfies this, recompile with ``assumesRegularSortKeys`` off.
        public var precheck: SQLFragment?

        /// The terms joined for `ORDER BY`.
        public var sql: SQLFragment { SQLFragment.joined(terms, separator: ", ") }
    }

    /// Compiles sort keys plus the evaluator's final `id` tie-breaker. `filter` is the query's
    /// filter: a field it only lets through as a number sorts on its bare value, so that a declared
    /// index on that field serves the `ORDER BY` (no sort of every matching row).
    public func order(_ keys: [SortKey], filter: QueryExpression? = nil) throws(NotCompilable) -> OrderCompilation {
        var terms: [SQLFragment] = []
        var prechecks: [SQLFragment] = []
        var effective = keys
        if !keys.contains(where: { $0.expression == .field("id") }) { effective.append(.field("id")) }
        let numeric = filter.map(numericFields) ?? []
        for key in effective {
            if case .field(let name) = key.expression, numeric.contains(name),
                let number = try operand(key.expression).number
            {
                terms.append(key.descending ? "\(number.payload) DESC" : number.payload)
                continue
            }
            let (keyTerms, precheck, nullable) = try sortTerms(key.expression)
            terms += keyTerms.map { direction($0, descending: key.descending, nullable: nullable) }
            if let precheck { prechecks.append(precheck) }
        }
        // Rows whose ids compare equal under a declared id type still need a fixed order.
        if schema.fields["id"] != nil { terms.append(SQLFragment(text: layout.idColumn)) }
        return OrderCompilation(
            terms: terms, precheck: prechecks.isEmpty ? nil : SQLFragment.joined(prechecks, separator: " OR "))
    }

    /// The fields that `filter` only lets through holding a number: those compared with a number
    /// (`eq`, `gt`, `ge`, `lt`, `le`) in a top-level conjunct, when the schema leaves them numeric or
    /// undeclared. Every row the filter keeps then has a number there (the comparison's SQL tests
    /// the JSON kind), so ordering by the bare value is the evaluator's order.
    func numericFields(_ filter: QueryExpression) -> Set<String> {
        var fields: Set<String> = []
        for conjunct in Self.chain(.and, filter) {
            guard case .binary(let op, let lhs, let rhs) = conjunct,
                [.equal, .greaterThan, .greaterThanOrEqual, .lessThan, .lessThanOrEqual].contains(op)
            else { continue }
            let pair: (String, QueryLiteral)? =
                switch (lhs, rhs) {
                case (.field(let name), .literal(let literal)), (.literal(let literal), .field(let name)):
                    (name, literal)
                default: nil
                }
            guard let (name, literal) = pair, !SQLTableLayout.systemFields.contains(name) else { continue }
            switch literal {
            case .int, .double: break
            default: continue
            }
            switch schema.fields[name] {
            case nil, .integer?, .double?: fields.insert(name)
            default: continue
            }
        }
        return fields
    }

    /// The expression an index on `field` must use for the compiled SQL to use it, or `nil` when
    /// the compiler never reads the field that way.
    public func indexedExpression(_ field: String) -> String? {
        guard let value = try? operand(.field(field)) else { return nil }
        if let column = layout.timestampColumn(field), usesColumn(field) { return column.name }
        if field == "id", value.string?.payload.text == layout.idColumn { return layout.idColumn }
        guard let number = value.number, number.payload.arguments.isEmpty else { return nil }
        return number.payload.text
    }

    // MARK: - Sorting

    /// `term` in the direction asked, NULLs first ascending and last descending (the evaluator
    /// sorts null first), which SQLite does by itself and PostgreSQL must be told.
    private func direction(_ term: SQLFragment, descending: Bool, nullable: Bool) -> SQLFragment {
        switch (dialect.kind, nullable) {
        case (.postgreSQL, true): descending ? "\(term) DESC NULLS LAST" : "\(term) NULLS FIRST"
        default: descending ? "\(term) DESC" : term
        }
    }

    /// The `ORDER BY` terms (ascending) of one sort key, a precheck for the regular case, and
    /// whether some term may be NULL.
    private func sortTerms(_ expression: QueryExpression) throws(NotCompilable) -> (
        [SQLFragment], SQLFragment?, Bool
    ) {
        if case .field(let name) = expression, let column = layout.timestampColumn(name), usesColumn(name),
            let irregular = column.irregularColumn, assumesRegularSortKeys
        {
            // Valid date-times and nulls only: the column orders them, NULLs first.
            return ([SQLFragment(text: column.name)], SQLFragment(text: "\(irregular) IS NOT NULL"), true)
        }
        let value = try operand(expression)
        if value.literal != nil { return ([], nil, false) }
        if value.instant != nil, value.time != nil { throw NotCompilable() }
        if value.guid != nil, value.string != nil || value.enumeration != nil { throw NotCompilable() }
        // PostgreSQL cannot order arrays and objects by the evaluator's serialized text.
        if value.other != nil, !dialect.hasFerryFunctions { throw NotCompilable() }
        var precheck: SQLFragment?
        var text: SQLFragment?
        if let enumeration = value.enumeration {
            if let string = value.string {
                // The evaluator orders a case against other text by name, which is not a total
                // order together with case positions: only exact when no row holds such text.
                guard assumesRegularSortKeys else { throw NotCompilable() }
                precheck = string.presence
            }
            text = enumeration.index.value
        } else {
            text = (value.string ?? value.guid)?.value
        }
        var groups: [(rank: Int, presence: SQLFragment, term: SQLFragment)] = []
        if let bool = value.bool { groups.append((1, bool.presence, bool.value)) }
        if let number = value.number { groups.append((2, number.presence, number.value)) }
        if let temporal = value.instant ?? value.time { groups.append((3, temporal.presence, temporal.value)) }
        if let text {
            let presence = SQLFragment.joined(
                [value.string?.presence, value.guid?.presence, value.enumeration?.index.presence].compactMap { $0 },
                separator: " OR ")
            let term = value.enumeration == nil && dialect.kind == .postgreSQL ? "\(text) COLLATE \"C\"" : text
            groups.append((4, "(\(presence))", term))
        }
        if let other = value.other { groups.append((5, other.presence, other.value)) }
        var terms: [SQLFragment] = []
        if groups.count > 1 {
            var rank: SQLFragment = "CASE"
            if let isNull = value.isNull { rank = "\(rank) WHEN \(isNull) THEN 0" }
            for group in groups { rank = "\(rank) WHEN \(group.presence) THEN \(bind: Int64(group.rank))" }
            terms.append("\(rank) END")
        }
        // Null rows have every term NULL, which sorts first ascending and last descending.
        terms += groups.map(\.term)
        return (terms, precheck, value.isNull != nil || groups.count > 1)
    }
}
