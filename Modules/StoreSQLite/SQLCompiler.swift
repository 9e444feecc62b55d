import GRDB
import SyncCore

/// Thrown while compiling a construct that SQL cannot reproduce exactly; the store then leaves that
/// part of the query to ``QueryEvaluator``.
struct NotCompilable: Error {}

/// Compiles ``TableQuery`` filters and sort keys to SQLite SQL with exactly the meaning
/// ``QueryEvaluator`` gives them, over the item table layout of ``ItemTable``.
///
/// ## How values are modelled
///
/// The evaluator works on typed values (null, Boolean, integer, double, string, GUID, enumeration
/// case, instant, date, time, other JSON). A field's kind is only known per row, so every value
/// expression compiles to an ``Operand``: for each kind it may have, a ``Projection`` that is an SQL
/// expression non-NULL exactly when the value has that kind (plus an exact "is null" test). A
/// comparison then enumerates the pairs of kinds the evaluator can compare (numbers with numbers,
/// text with text, a string with a date literal through ISO 8601 parsing, arrays and objects by
/// JSON equality, …) and ORs them; incomparable kinds give `false` (or `true` for `ne`), as in the
/// evaluator. Dates and date-times both compare as milliseconds since 1970 (a date is its midnight
/// UTC), so they share one kind.
///
/// ## What compiles
///
/// - field references (system columns use their indexed columns; other fields use
///   `json_extract(item, '$."name"')`), every literal, `eq ne gt ge lt le`, `and or not`, `in`;
/// - `add sub mul` (SQLite's integer arithmetic overflows to floating point exactly as the
///   evaluator does), `div` and `mod` by a non-zero numeric literal, unary minus;
/// - every function: `contains` and `startswith` with SQLite's `instr`, `concat` with `||`, and the
///   others through the deterministic `ferry_*` functions of ``SQLFunctions`` (UTF-16 lengths,
///   Unicode case mapping, banker's rounding);
/// - `cast` to a string, an integer, a double or a Boolean;
/// - sort keys on any of these, with the evaluator's order of kinds
///   (null < Boolean < number < date/time < text < other JSON) and the final `id` tie-breaker.
///
/// ## What falls back to the evaluator
///
/// `cast` to a date, time or GUID (or of a date or time to a string), arithmetic whose operand may
/// already be infinite (nested floating-point arithmetic), division or modulo by anything but a
/// non-zero literal, string literals holding NUL characters, field names holding `"`, `\` or
/// control characters (SQLite's JSON paths cannot name them), sort keys that mix kinds the
/// evaluator orders inconsistently (a GUID beside plain strings, a date beside a time), and sorting
/// an enumeration field while some row holds text that is not one of its cases. A filter is split
/// at its top-level `and`s: the parts that compile run in SQLite, the rest in Swift on the rows
/// SQLite returns. (``QueryRunner`` also hands a whole table to the evaluator while it holds a
/// string with a NUL character, which `json_extract` would cut short.)
struct SQLCompiler {
    let schema: TableSchema
    /// Sort `updatedAt` by its column alone and enumerations by case position alone; the store
    /// checks the ``OrderCompilation/precheck`` before trusting that.
    var assumesRegularSortKeys = true

    init(schema: TableSchema, assumesRegularSortKeys: Bool = true) {
        self.schema = schema
        self.assumesRegularSortKeys = assumesRegularSortKeys
    }

    // MARK: - Plans

    /// A filter split into the part SQLite runs and the part left to the evaluator.
    struct FilterSplit {
        var sql: SQLFragment?
        var residual: QueryExpression?
    }

    /// Compiles the top-level conjuncts of `filter` that can be compiled.
    func split(_ filter: QueryExpression?) -> FilterSplit {
        guard let filter else { return FilterSplit() }
        var compiled: [SQLFragment] = []
        var residual: [QueryExpression] = []
        for conjunct in conjuncts(of: filter) {
            if let predicate = try? predicate(conjunct) {
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

    private func conjuncts(of expression: QueryExpression) -> [QueryExpression] {
        if case .binary(.and, let lhs, let rhs) = expression { return conjuncts(of: lhs) + conjuncts(of: rhs) }
        return [expression]
    }

    /// An `ORDER BY` list, with the condition under which it is not exact.
    struct OrderCompilation {
        var terms: [SQLFragment]
        /// When some row satisfies this, recompile with `assumesRegularSortKeys` off.
        var precheck: SQLFragment?
    }

    /// Compiles sort keys plus the evaluator's final `id` tie-breaker. `filter` is the query's
    /// filter: a field it only lets through as a number sorts on its bare value, so that a declared
    /// index on that field serves the `ORDER BY` (no sort of every matching row).
    func order(_ keys: [SortKey], filter: QueryExpression? = nil) throws -> OrderCompilation {
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
            let (keyTerms, precheck) = try sortTerms(key.expression)
            terms += keyTerms.map { key.descending ? "\($0) DESC" : $0 }
            if let precheck { prechecks.append(precheck) }
        }
        // Rows whose ids compare equal under a declared id type still need a fixed order.
        if schema.fields["id"] != nil { terms.append("id") }
        return OrderCompilation(
            terms: terms, precheck: prechecks.isEmpty ? nil : SQLFragment.joined(prechecks, separator: " OR "))
    }

    /// The fields that `filter` only lets through holding a number: those compared with a number
    /// (`eq`, `gt`, `ge`, `lt`, `le`) in a top-level conjunct, when the schema leaves them numeric or
    /// undeclared. Every row the filter keeps then has a number there (the comparison's SQL tests
    /// `json_type`), so ordering by the bare value is the evaluator's order.
    func numericFields(_ filter: QueryExpression) -> Set<String> {
        var fields: Set<String> = []
        for conjunct in conjuncts(of: filter) {
            guard case .binary(let op, let lhs, let rhs) = conjunct,
                [.equal, .greaterThan, .greaterThanOrEqual, .lessThan, .lessThanOrEqual].contains(op)
            else { continue }
            let pair: (String, QueryLiteral)? =
                switch (lhs, rhs) {
                case (.field(let name), .literal(let literal)), (.literal(let literal), .field(let name)):
                    (name, literal)
                default: nil
                }
            guard let (name, literal) = pair else { continue }
            switch literal {
            case .int, .double: break
            default: continue
            }
            switch schema.fields[name] {
            case nil where name != "id" && name != "updatedAt", .integer?, .double?: fields.insert(name)
            default: continue
            }
        }
        return fields
    }

    // MARK: - Predicates

    /// A compiled filter: `sql` is true (1) exactly when the evaluator's value is `true`; otherwise
    /// it is 0, or NULL when `isStrict` is false.
    struct Predicate {
        var sql: SQLFragment
        var isStrict: Bool

        static let alwaysTrue = Predicate(sql: "1", isStrict: true)
        static let alwaysFalse = Predicate(sql: "0", isStrict: true)

        /// The same test, 1 or 0, never NULL.
        var strict: SQLFragment { isStrict ? sql : "((\(sql)) IS 1)" }
    }

    func predicate(_ expression: QueryExpression) throws -> Predicate {
        if Self.isConstant(expression) {
            let value = QueryEvaluator(schema: schema).evaluate(expression, in: [:])
            return value == .bool(true) ? .alwaysTrue : .alwaysFalse
        }
        switch expression {
        case .binary(let op, _, _) where op.isLogical:
            // A chain of one connective is written flat: SQLite's parser overflows on deeply
            // nested parentheses.
            let parts = try operands(of: op, in: expression).map { try predicate($0) }
            let keyword = op == .and ? " AND " : " OR "
            return Predicate(
                sql: "(" + SQLFragment.joined(parts.map(\.sql), separator: keyword) + ")",
                isStrict: parts.allSatisfy(\.isStrict))
        case .binary(let op, let lhs, let rhs) where op.isComparison:
            return try compare(op, lhs, rhs)
        case .isIn(let needle, let list):
            if list.isEmpty { return .alwaysFalse }
            let parts = try list.map { try compare(.equal, needle, $0) }
            return Predicate(
                sql: "(" + SQLFragment.joined(parts.map(\.sql), separator: " OR ") + ")",
                isStrict: parts.allSatisfy(\.isStrict))
        case .unary(.not, let operand) where isAlwaysBoolean(operand):
            let inner = try predicate(operand)
            return Predicate(sql: inner.isStrict ? "(NOT \(inner.sql))" : "((\(inner.sql)) IS NOT 1)", isStrict: true)
        default:
            return truth(of: try self.operand(expression))
        }
    }

    /// The operands of a chain of `op` (`a or b or c` gives `[a, b, c]`), in order.
    private func operands(of op: BinaryOperator, in expression: QueryExpression) -> [QueryExpression] {
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

    /// Whether the evaluator's value of `expression` is always a Boolean (never null).
    private func isAlwaysBoolean(_ expression: QueryExpression) -> Bool {
        switch expression {
        case .binary(let op, _, _): return op.isComparison || op.isLogical
        case .isIn: return true
        case .literal(.bool): return true
        case .unary(.not, let operand): return isAlwaysBoolean(operand)
        default: return false
        }
    }

    /// True exactly when the operand is the Boolean `true`.
    private func truth(of operand: Operand) -> Predicate {
        if case .bool(let flag)? = operand.literal { return flag ? .alwaysTrue : .alwaysFalse }
        guard let bool = operand.bool else { return .alwaysFalse }
        return Predicate(sql: bool.guarded("\(bool.payload) = 1"), isStrict: false)
    }

    // MARK: - Comparisons

    private static func sqlOperator(_ op: BinaryOperator) -> SQLFragment {
        switch op {
        case .equal: "="
        case .notEqual: "<>"
        case .greaterThan: ">"
        case .greaterThanOrEqual: ">="
        case .lessThan: "<"
        default: "<="
        }
    }

    /// One pair of kinds the evaluator can compare.
    private struct Pair {
        /// Conditions that must hold besides the comparison being non-NULL (kind guards).
        var guards: [SQLFragment]
        /// Both values have the pair's kinds (for the general form).
        var presence: SQLFragment
        /// The comparison for an SQL operator; NULL when the two values cannot be compared.
        var comparison: (SQLFragment) -> SQLFragment

        func fast(_ op: SQLFragment) -> SQLFragment {
            SQLFragment.joined([comparison(op)] + guards, separator: " AND ").parenthesized
        }
    }

    func compare(_ op: BinaryOperator, _ lhs: QueryExpression, _ rhs: QueryExpression) throws -> Predicate {
        let left = try operand(lhs)
        let right = try operand(rhs)
        if let a = left.literal, let b = right.literal {
            let value = QueryEvaluator(schema: schema).evaluate(.binary(op, .literal(a), .literal(b)), in: [:])
            return value == .bool(true) ? .alwaysTrue : .alwaysFalse
        }
        // Against the null literal: the exact null test.
        if case .null? = right.literal { return nullComparison(op, left) }
        if case .null? = left.literal { return nullComparison(op, right) }

        let pairs = try comparablePairs(left, right)
        let notEqualConstant: SQLFragment = op == .notEqual ? "1" : "0"
        if left.isNull == nil || right.isNull == nil {
            // At most one side can be null: null against anything is "not equal", which is what
            // the absence of every comparable pair gives.
            if op == .notEqual {
                if pairs.isEmpty { return .alwaysTrue }
                let equal = SQLFragment.joined(pairs.map { $0.fast("=") }, separator: " OR ")
                return Predicate(sql: "((\(equal)) IS NOT 1)", isStrict: true)
            }
            if pairs.isEmpty { return .alwaysFalse }
            let sqlOp = Self.sqlOperator(op)
            let parts = pairs.map { $0.fast(sqlOp) }
            return Predicate(
                sql: parts.count == 1 ? parts[0] : "(" + SQLFragment.joined(parts, separator: " OR ") + ")",
                isStrict: false)
        }
        // General form: both sides may be null.
        let sqlOp = Self.sqlOperator(op)
        var sql: SQLFragment = "CASE"
        if let a = left.isNull, let b = right.isNull {
            sql =
                "\(sql) WHEN \(a) AND \(b) THEN \(op == .equal ? "1" : "0") WHEN \(a) OR \(b) THEN \(notEqualConstant)"
        }
        for pair in pairs {
            sql = "\(sql) WHEN \(pair.presence) THEN IFNULL(\(pair.comparison(sqlOp)), \(notEqualConstant))"
        }
        return Predicate(sql: "(\(sql) ELSE \(notEqualConstant) END)", isStrict: true)
    }

    private func nullComparison(_ op: BinaryOperator, _ operand: Operand) -> Predicate {
        switch op {
        case .equal: return operand.isNull.map { Predicate(sql: $0, isStrict: true) } ?? .alwaysFalse
        case .notEqual: return operand.isNull.map { Predicate(sql: "(NOT \($0))", isStrict: true) } ?? .alwaysTrue
        default: return .alwaysFalse
        }
    }

    /// The pairs of kinds of `left` and `right` that the evaluator's `compareValues` can order.
    private func comparablePairs(_ left: Operand, _ right: Operand) throws -> [Pair] {
        var pairs: [Pair] = []
        func add(_ a: Projection, _ b: Projection, _ comparison: @escaping (SQLFragment) -> SQLFragment) {
            pairs.append(
                Pair(
                    guards: [a.condition, b.condition].compactMap { $0 },
                    presence: "(\(a.presence) AND \(b.presence))", comparison: comparison))
        }
        if let a = left.bool, let b = right.bool {
            add(a, b) { "\(a.payload) \($0) \(b.payload)" }
        }
        if let a = left.number, let b = right.number {
            if Operand.numbersCompareExactly(left, right) {
                add(a, b) { "\(a.payload) \($0) \(b.payload)" }
            } else {
                add(a, b) { op in
                    "(CASE WHEN typeof(\(a.payload)) = 'integer' AND typeof(\(b.payload)) = 'integer' THEN \(a.payload) \(op) \(b.payload) ELSE CAST(\(a.payload) AS REAL) \(op) CAST(\(b.payload) AS REAL) END)"
                }
            }
        }
        if let a = left.string, let b = right.string {
            add(a, b) { "\(a.payload) \($0) \(b.payload)" }
        }
        if let a = left.guid, let b = right.guid {
            add(a, b) { "\(a.payload) \($0) \(b.payload)" }
        }
        if let a = left.string, let b = right.guid {
            let lowered = lowercased(a, literal: left.literal)
            add(a, b) { "\(lowered) \($0) \(b.payload)" }
        }
        if let a = left.guid, let b = right.string {
            let lowered = lowercased(b, literal: right.literal)
            add(a, b) { "\(a.payload) \($0) \(lowered)" }
        }
        if let a = left.enumeration, let b = right.enumeration {
            add(a.index, b.index) { "\(a.index.payload) \($0) \(b.index.payload)" }
        }
        if let a = left.enumeration, let b = right.string {
            add(a.index, b, try enumAgainstText(a, textOf: b, literal: right.literal, enumOnLeft: true))
        }
        if let a = left.string, let b = right.enumeration {
            add(a, b.index, try enumAgainstText(b, textOf: a, literal: left.literal, enumOnLeft: false))
        }
        if let a = left.instant, let b = right.instant {
            add(a, b) { "\(a.payload) \($0) \(b.payload)" }
        }
        if let a = left.time, let b = right.time {
            add(a, b) { "\(a.payload) \($0) \(b.payload)" }
        }
        // A string against a date, date-time or time: the string is read as one.
        if let a = left.string, let b = right.instant, left.stringMayBeInstant {
            if let text = left.literalText {
                if let milliseconds = SQLFunctions.instantMilliseconds(text) {
                    add(a, b) { "\(bind: milliseconds) \($0) \(b.payload)" }
                }
            } else {
                add(a, b) { "ferry_instant(\(a.payload)) \($0) \(b.payload)" }
            }
        }
        if let a = left.instant, let b = right.string, right.stringMayBeInstant {
            if let text = right.literalText {
                if let milliseconds = SQLFunctions.instantMilliseconds(text) {
                    add(a, b) { "\(a.payload) \($0) \(bind: milliseconds)" }
                }
            } else {
                add(a, b) { "\(a.payload) \($0) ferry_instant(\(b.payload))" }
            }
        }
        if let a = left.string, let b = right.time, left.stringMayBeTime {
            if let text = left.literalText {
                if let time = TimeOfDay(iso8601: text) {
                    add(a, b) { "\(bind: Int64(time.millisecondsSinceMidnight)) \($0) \(b.payload)" }
                }
            } else {
                add(a, b) { "ferry_time(\(a.payload)) \($0) \(b.payload)" }
            }
        }
        if let a = left.time, let b = right.string, right.stringMayBeTime {
            if let text = right.literalText {
                if let time = TimeOfDay(iso8601: text) {
                    add(a, b) { "\(a.payload) \($0) \(bind: Int64(time.millisecondsSinceMidnight))" }
                }
            } else {
                add(a, b) { "\(a.payload) \($0) ferry_time(\(b.payload))" }
            }
        }
        if let a = left.other, let b = right.other {
            // Arrays and objects are only equal or not (JSON equality: numbers by value, strings by
            // canonical equivalence, which is not text equality).
            add(a, b) { op in
                switch op.text {
                case "=", ">=", "<=": "(ferry_json_equal(\(a.payload), \(b.payload)) = 1)"
                case "<>": "(ferry_json_equal(\(a.payload), \(b.payload)) = 0)"
                default: "0"
                }
            }
        }
        return pairs
    }

    private func lowercased(_ projection: Projection, literal: QueryLiteral?) -> SQLFragment {
        if case .string(let text)? = literal { return "\(bind: text.lowercased())" }
        return "ferry_fn('tolower', \(projection.payload))"
    }

    /// An enumeration value against text: by position when the text names a case, else by name.
    private func enumAgainstText(
        _ enumeration: EnumProjection, textOf text: Projection, literal: QueryLiteral?, enumOnLeft: Bool
    ) throws -> (SQLFragment) -> SQLFragment {
        let index = enumeration.index.payload
        let name = enumeration.text
        if case .string(let value)? = literal {
            if let position = enumeration.cases.firstIndex(of: value) {
                return {
                    enumOnLeft ? "\(index) \($0) \(bind: Int64(position))" : "\(bind: Int64(position)) \($0) \(index)"
                }
            }
            return { enumOnLeft ? "\(name) \($0) \(bind: value)" : "\(bind: value) \($0) \(name)" }
        }
        let other = try Self.enumIndex(of: text.payload, cases: enumeration.cases)
        let payload = text.payload
        return { op in
            enumOnLeft
                ? "(CASE WHEN \(other) IS NOT NULL THEN \(index) \(op) \(other) ELSE \(name) \(op) \(payload) END)"
                : "(CASE WHEN \(other) IS NOT NULL THEN \(other) \(op) \(index) ELSE \(payload) \(op) \(name) END)"
        }
    }

    /// The position of a text value among `cases` as `cases.firstIndex(of:)` finds it (Swift string
    /// equality, which is canonical equivalence), or NULL. Plain byte matches are tried first; the
    /// Swift function decides only for non-ASCII text or cases.
    static func enumIndex(of text: SQLFragment, cases: [String]) throws -> SQLFragment {
        guard !cases.isEmpty else { return "NULL" }
        if cases.contains(where: { $0.utf8.contains(0) }) { throw NotCompilable() }
        let arguments = SQLFragment.joined(cases.map { "\(bind: $0)" }, separator: ", ")
        // Two different ASCII strings are never canonically equivalent: for ASCII cases only text
        // with other characters (K, the Kelvin sign, equals K) needs the Swift comparison.
        guard cases.allSatisfy({ $0.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F } }) else {
            return "ferry_enum(\(text), \(arguments))"
        }
        var sql: SQLFragment = "(CASE \(text)"
        var seen: Set<String> = []
        for (position, name) in cases.enumerated() where seen.insert(name).inserted {
            sql = "\(sql) WHEN \(bind: name) THEN \(bind: Int64(position))"
        }
        return "\(sql) ELSE CASE WHEN \(text) GLOB '*[^ -~]*' THEN ferry_enum(\(text), \(arguments)) END END)"
    }

    /// The case name at a position (what the evaluator compares and prints for an enumeration value).
    static func caseName(at index: SQLFragment, cases: [String]) -> SQLFragment {
        var sql: SQLFragment = "(CASE \(index)"
        for (position, name) in cases.enumerated() {
            sql = "\(sql) WHEN \(bind: Int64(position)) THEN \(bind: name)"
        }
        return "\(sql) END)"
    }

    // MARK: - Sorting

    /// The `ORDER BY` terms (ascending) of one sort key, and a precheck for the regular case.
    private func sortTerms(_ expression: QueryExpression) throws -> ([SQLFragment], SQLFragment?) {
        if case .field(let name) = expression, name == "updatedAt", usesUpdatedAtColumn, assumesRegularSortKeys {
            // Valid date-times and nulls only: the column orders them, NULLs first.
            return (["updatedAt"], "updatedAtIrregular IS NOT NULL")
        }
        let value = try operand(expression)
        if value.literal != nil { return ([], nil) }
        if value.instant != nil, value.time != nil { throw NotCompilable() }
        if value.guid != nil, value.string != nil || value.enumeration != nil { throw NotCompilable() }
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
            groups.append((4, "(\(presence))", text))
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
        return (terms, precheck)
    }

    // MARK: - Operands

    var usesUpdatedAtColumn: Bool {
        schema.fields["updatedAt"] == nil || schema.fields["updatedAt"] == .dateTimeOffset
    }

    /// Whether `expression` names no field (its value is the same for every item).
    static func isConstant(_ expression: QueryExpression) -> Bool {
        var stack = [expression]
        while let next = stack.popLast() {
            switch next {
            case .literal: break
            case .field: return false
            case .unary(_, let operand): stack.append(operand)
            case .binary(_, let lhs, let rhs): stack.append(contentsOf: [lhs, rhs])
            case .function(_, let arguments): stack.append(contentsOf: arguments)
            case .isIn(let value, let list): stack.append(contentsOf: [value] + list)
            case .cast(let value, _): stack.append(value)
            }
        }
        return true
    }

    func operand(_ expression: QueryExpression) throws -> Operand {
        switch expression {
        case .unary, .binary, .function, .isIn:
            // Constant results of these are plain JSON kinds (never dates or GUIDs): evaluate once.
            if Self.isConstant(expression) { return try folded(expression) }
        default: break
        }
        switch expression {
        case .literal(let literal):
            return try Operand.literal(literal)
        case .field(let name):
            return try field(name)
        case .unary(.negate, let inner):
            let value = try operand(inner)
            if value.literal != nil { return try folded(expression) }
            guard let number = value.number else { return .null }
            let sql: SQLFragment = "(-1 * \(number.value))"
            var result = Operand(isNull: "(\(sql) IS NULL)")
            result.number = Projection(payload: sql)
            result.numberMayBeInt = value.numberMayBeInt
            result.numberMayBeDouble = true
            result.mayBeInfinite = value.mayBeInfinite
            return result
        case .unary(.not, let inner):
            if isAlwaysBoolean(inner) { return Operand.boolean(try predicate(expression)) }
            let value = try operand(inner)
            if value.literal != nil { return try folded(expression) }
            guard let bool = value.bool else { return .null }
            var result = Operand(isNull: "(\(bool.presence) IS NOT 1)")
            result.bool = Projection(payload: "(1 - \(bool.payload))", condition: bool.condition)
            return result
        case .binary(let op, let lhs, let rhs) where op.isArithmetic:
            return try arithmetic(op, lhs, rhs, expression)
        case .binary, .isIn:
            return Operand.boolean(try predicate(expression))
        case .function(let function, let arguments):
            return try call(function, arguments, expression)
        case .cast(let inner, let type):
            return try cast(inner, to: type)
        }
    }

    /// `cast` to a plain JSON kind (string, integer, double, Boolean), through the evaluator's own
    /// `cast` on each kind the operand may have. Casts to dates, times and GUIDs are not compiled.
    private func cast(_ inner: QueryExpression, to type: EdmType) throws -> Operand {
        let value = try operand(inner)
        let target = SQLFragment.quoted(type.rawValue)
        var cases: [(SQLFragment, SQLFragment)] = []
        func via(_ tag: String, _ projection: Projection?) {
            guard let projection else { return }
            cases.append(
                (projection.presence, "ferry_cast(\(target), '\(SQLFragment(text: tag))', \(projection.payload))"))
        }
        switch type {
        case .string, .int32, .int64, .double, .decimal, .boolean: break
        default: throw NotCompilable()
        }
        if let literal = value.literal {
            if case .string(let text) = literal, text.utf8.contains(0) { throw NotCompilable() }
            return try folded(.cast(.literal(literal), type))
        }
        via("b", value.bool)
        via("n", value.number)
        via("s", value.string)
        via("g", value.guid)
        if type == .string {
            // A date or time prints differently as a date and as a date-time, which the compiled
            // form does not tell apart.
            if value.instant != nil || value.time != nil { throw NotCompilable() }
            if let enumeration = value.enumeration { cases.append((enumeration.index.presence, enumeration.text)) }
            if let other = value.other { cases.append((other.presence, other.payload)) }
        }
        var sql: SQLFragment = "(CASE"
        for (condition, result) in cases { sql = "\(sql) WHEN \(condition) THEN \(result)" }
        sql = cases.isEmpty ? "NULL" : "\(sql) END)"
        switch type {
        case .string: return .text(sql)
        case .int32, .int64: return .integer(sql)
        case .boolean:
            var result = Operand(isNull: "(\(sql) IS NULL)")
            result.bool = Projection(payload: sql)
            return result
        default:
            var result = Operand(isNull: "(\(sql) IS NULL)")
            result.number = Projection(payload: sql)
            result.numberMayBeInt = false
            result.mayBeInfinite = value.mayBeInfinite
            return result
        }
    }

    /// A constant expression, evaluated once (only for results that are not typed text).
    private func folded(_ expression: QueryExpression) throws -> Operand {
        switch QueryEvaluator(schema: schema).evaluate(expression, in: [:]) {
        case .null: return try .literal(.null)
        case .bool(let flag): return try .literal(.bool(flag))
        case .int(let number): return try .literal(.int(number))
        case .double(let number) where number.isFinite: return try .literal(.double(number))
        case .string(let text): return try .literal(.string(text))
        default: throw NotCompilable()
        }
    }

    private func field(_ name: String) throws -> Operand {
        guard !name.utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) else {
            throw NotCompilable()
        }
        if name == "id", schema.fields["id"] == nil {
            var result = Operand()
            result.string = Projection(payload: "id")
            return result
        }
        let declared = schema.fields[name] ?? (name == "createdAt" || name == "updatedAt" ? .dateTimeOffset : nil)
        let path = SQLFragment.quoted("$.\"" + name + "\"")
        let type: SQLFragment = "json_type(item, \(path))"
        let value: SQLFragment = "json_extract(item, \(path))"
        var result = Operand(isNull: "(\(value) IS NULL)")
        result.bool = Projection(payload: value, condition: "\(type) IN ('true', 'false')")
        result.number = Projection(payload: value, condition: "\(type) IN ('integer', 'real')")
        result.other = Projection(payload: value, condition: "\(type) IN ('array', 'object')")
        let isText: SQLFragment = "\(type) = 'text'"
        if name == "updatedAt", usesUpdatedAtColumn {
            // The column holds the milliseconds of every valid date-time; other text is irregular.
            result.isNull = "(updatedAt IS NULL AND updatedAtIrregular IS NULL)"
            result.instant = Projection(payload: "updatedAt")
            result.string = Projection(payload: value, condition: "(updatedAt IS NULL AND \(isText))")
            result.stringMayBeInstant = false
            return result
        }
        switch declared {
        case .guid?:
            result.guid = Projection(payload: "ferry_fn('tolower', \(value))", condition: isText)
        case .enumeration(let cases)? where !cases.isEmpty:
            let index = try Self.enumIndex(of: value, cases: cases)
            result.enumeration = EnumProjection(
                index: Projection(payload: index, condition: "(\(isText) AND \(index) IS NOT NULL)"),
                text: Self.caseName(at: index, cases: cases), cases: cases)
            result.string = Projection(payload: value, condition: "(\(isText) AND \(index) IS NULL)")
        case .dateTimeOffset?, .date?:
            let instant: SQLFragment = "ferry_instant(\(value))"
            result.instant = Projection(payload: instant, condition: "(\(isText) AND \(instant) IS NOT NULL)")
            result.string = Projection(payload: value, condition: "(\(isText) AND \(instant) IS NULL)")
            result.stringMayBeInstant = false
        case .timeOfDay?:
            let time: SQLFragment = "ferry_time(\(value))"
            result.time = Projection(payload: time, condition: "(\(isText) AND \(time) IS NOT NULL)")
            result.string = Projection(payload: value, condition: "(\(isText) AND \(time) IS NULL)")
            result.stringMayBeTime = false
        default:
            result.string = Projection(payload: value, condition: isText)
        }
        return result
    }

    private func arithmetic(
        _ op: BinaryOperator, _ lhs: QueryExpression, _ rhs: QueryExpression, _ expression: QueryExpression
    ) throws -> Operand {
        let left = try operand(lhs)
        let right = try operand(rhs)
        if left.literal != nil, right.literal != nil { return try folded(expression) }
        // inf - inf, inf * 0 or inf mod x would be NaN, which SQLite turns into NULL.
        if left.mayBeInfinite || right.mayBeInfinite { throw NotCompilable() }
        guard let a = left.number?.value, let b = right.number?.value else { return .null }
        let bothInt = !left.numberMayBeDouble && !right.numberMayBeDouble
        var mayBeInfinite = false
        let sql: SQLFragment
        switch op {
        case .add, .subtract, .multiply:
            let symbol: SQLFragment = op == .add ? "+" : op == .subtract ? "-" : "*"
            sql = "(\(a) \(symbol) \(b))"
            mayBeInfinite = left.numberMayBeDouble || right.numberMayBeDouble
        case .divide, .modulo:
            // SQLite gives NULL for any division by zero; the evaluator only for integers.
            switch right.literal {
            case .int(let divisor)? where divisor != 0: break
            case .double(let divisor)? where divisor != 0, .decimal(let divisor)? where divisor != 0: break
            default: throw NotCompilable()
            }
            if op == .divide {
                sql = "(\(a) / \(b))"
                mayBeInfinite = left.numberMayBeDouble || right.numberMayBeDouble
            } else if bothInt {
                sql = "(\(a) % \(b))"
            } else {
                sql = "ferry_mod(\(a), \(b))"
            }
        default:
            throw NotCompilable()
        }
        var result = Operand(isNull: "(\(sql) IS NULL)")
        result.number = Projection(payload: sql)
        result.numberMayBeInt = left.numberMayBeInt && right.numberMayBeInt
        // Integer overflow (and Int64.min / -1) turns into floating point.
        result.numberMayBeDouble = left.numberMayBeDouble || right.numberMayBeDouble || op != .modulo
        result.mayBeInfinite = mayBeInfinite
        return result
    }

    private func call(
        _ function: QueryFunction, _ arguments: [QueryExpression], _ expression: QueryExpression
    ) throws -> Operand {
        guard function.arity.contains(arguments.count) else { throw NotCompilable() }
        let values = try arguments.map { try operand($0) }
        if values.allSatisfy({ $0.literal != nil }) { return try folded(expression) }
        func named(_ arguments: [SQLFragment]) -> SQLFragment {
            "ferry_fn(" + SQLFragment.joined([SQLFragment.quoted(function.rawValue)] + arguments, separator: ", ") + ")"
        }
        func texts() -> [SQLFragment]? {
            let texts = values.map(\.textValue)
            return texts.contains { $0 == nil } ? nil : texts.compactMap { $0 }
        }
        switch function {
        case .contains, .startsWith, .endsWith:
            guard let texts = texts() else { return .null }
            let sql: SQLFragment
            switch function {
            case .contains: sql = "(instr(\(texts[0]), \(texts[1])) > 0)"
            case .startsWith: sql = "(instr(\(texts[0]), \(texts[1])) = 1)"
            default: sql = named(texts)
            }
            var result = Operand(isNull: "(\(sql) IS NULL)")
            result.bool = Projection(payload: sql)
            return result
        case .length, .indexOf:
            guard let texts = texts() else { return .null }
            return .integer(named(texts))
        case .toLower, .toUpper, .trim, .replace:
            guard let texts = texts() else { return .null }
            return .text(named(texts))
        case .substring:
            guard let text = values[0].textValue else { return .null }
            var parts = [text]
            for value in values.dropFirst() {
                guard let number = value.number else { return .null }
                parts.append(number.value)
            }
            return .text(named(parts))
        case .concat:
            let parts = try values.map { try concatText($0) }
            var result = Operand()
            result.string = Projection(payload: "(" + SQLFragment.joined(parts, separator: " || ") + ")")
            return result
        case .year, .month, .day, .hour, .minute, .second:
            let value = values[0]
            let part = SQLFragment.quoted(function.rawValue)
            var parts: [SQLFragment] = []
            if let instant = value.instant { parts.append("ferry_datepart(\(part), 'i', \(instant.value))") }
            if let time = value.time { parts.append("ferry_datepart(\(part), 't', \(time.value))") }
            if let string = value.string { parts.append("ferry_datepart(\(part), 's', \(string.value))") }
            if parts.isEmpty { return .null }
            return .integer(
                parts.count == 1 ? parts[0] : "COALESCE(" + SQLFragment.joined(parts, separator: ", ") + ")")
        case .floor, .ceiling, .round:
            let value = values[0]
            guard let number = value.number else { return .null }
            let sql = named([number.value])
            var result = Operand(isNull: "(\(sql) IS NULL)")
            result.number = Projection(payload: sql)
            result.numberMayBeInt = value.numberMayBeInt
            result.numberMayBeDouble = value.numberMayBeDouble
            result.mayBeInfinite = value.mayBeInfinite
            return result
        }
    }

    /// The text `concat` makes of one argument.
    private func concatText(_ value: Operand) throws -> SQLFragment {
        if let literal = value.literal {
            guard case .string(let text) = QueryEvaluator().evaluate(.function(.concat, [.literal(literal)]), in: [:]),
                !text.utf8.contains(0)
            else { throw NotCompilable() }
            return "\(bind: text)"
        }
        if value.instant != nil || value.time != nil { throw NotCompilable() }
        var cases: [(SQLFragment, SQLFragment)] = []
        if let isNull = value.isNull { cases.append((isNull, "''")) }
        if let string = value.string { cases.append((string.presence, string.payload)) }
        if let guid = value.guid { cases.append((guid.presence, guid.payload)) }
        if let enumeration = value.enumeration { cases.append((enumeration.index.presence, enumeration.text)) }
        if let bool = value.bool {
            cases.append((bool.presence, "(CASE \(bool.payload) WHEN 1 THEN 'true' ELSE 'false' END)"))
        }
        if let number = value.number {
            let payload = number.payload
            let text: SQLFragment =
                value.numberMayBeDouble
                ? "(CASE WHEN typeof(\(payload)) = 'integer' THEN CAST(\(payload) AS TEXT) ELSE ferry_double_text(\(payload)) END)"
                : "CAST(\(payload) AS TEXT)"
            cases.append((number.presence, text))
        }
        if let other = value.other { cases.append((other.presence, other.payload)) }
        if cases.isEmpty { return "''" }
        var sql: SQLFragment = "(CASE"
        for (condition, text) in cases { sql = "\(sql) WHEN \(condition) THEN \(text)" }
        return "\(sql) ELSE '' END)"
    }
}

// MARK: - Operand model

/// One kind of an operand: `payload` is the value when the operand has this kind.
struct Projection {
    /// The value when the operand has this kind; never NULL then.
    var payload: SQLFragment
    /// When the operand has this kind; `nil` when `payload` is NULL exactly when it does not.
    var condition: SQLFragment?

    init(payload: SQLFragment, condition: SQLFragment? = nil) {
        self.payload = payload
        self.condition = condition
    }

    /// The value, or NULL when the operand has another kind.
    var value: SQLFragment {
        condition.map { "(CASE WHEN \($0) THEN \(payload) END)" } ?? payload
    }

    /// True when the operand has this kind (false or NULL otherwise).
    var presence: SQLFragment {
        condition ?? "(\(payload) IS NOT NULL)"
    }

    /// `test` (written on the raw payload, so that an index on it can serve) and the kind guard.
    func guarded(_ test: SQLFragment) -> SQLFragment {
        condition.map { "(\(test) AND \($0))" } ?? "(\(test))"
    }
}

/// An enumeration value: its case position, and its text.
struct EnumProjection {
    var index: Projection
    /// The text, when the operand is an enumeration case.
    var text: SQLFragment
    var cases: [String]
}

/// A compiled value expression: one projection per kind it may have at run time.
struct Operand {
    /// Exactly when the value is null (1 or 0); `nil` when it never is.
    var isNull: SQLFragment?
    var bool: Projection?
    var number: Projection?
    var numberMayBeInt = true
    var numberMayBeDouble = true
    var string: Projection?
    /// Whether the string kind may hold text that reads as a date or date-time.
    var stringMayBeInstant = true
    /// Whether the string kind may hold text that reads as a time of day.
    var stringMayBeTime = true
    var guid: Projection?
    var enumeration: EnumProjection?
    /// A date-time or a date, as milliseconds since 1970 (a date at midnight UTC).
    var instant: Projection?
    /// A time of day, as milliseconds since midnight.
    var time: Projection?
    /// An array or object, as its JSON text.
    var other: Projection?
    /// Whether floating-point overflow may have made the value infinite.
    var mayBeInfinite = false
    /// Set when the operand is a constant.
    var literal: QueryLiteral?

    init(isNull: SQLFragment? = nil) {
        self.isNull = isNull
    }

    /// The null constant.
    static var null: Operand {
        var result = Operand(isNull: "1")
        result.literal = .null
        return result
    }

    static func literal(_ literal: QueryLiteral) throws -> Operand {
        var result = Operand()
        result.literal = literal
        switch literal {
        case .null:
            return .null
        case .bool(let flag):
            result.bool = Projection(payload: "\(bind: Int64(flag ? 1 : 0))")
        case .int(let number):
            result.number = Projection(payload: "\(bind: number)")
            result.numberMayBeDouble = false
        case .double(let number), .decimal(let number):
            guard number.isFinite else { throw NotCompilable() }
            result.number = Projection(payload: "\(bind: number.databaseValue)")
            result.numberMayBeInt = false
        case .string(let text):
            guard !text.utf8.contains(0) else { throw NotCompilable() }
            result.string = Projection(payload: "\(bind: text)")
            result.stringMayBeInstant = SQLFunctions.instantMilliseconds(text) != nil
            result.stringMayBeTime = TimeOfDay(iso8601: text) != nil
        case .dateTimeOffset(let timestamp):
            result.instant = Projection(payload: "\(bind: timestamp.millisecondsSince1970)")
        case .date(let date):
            result.instant = Projection(payload: "\(bind: date.midnightUTC.millisecondsSince1970)")
        case .timeOfDay(let time):
            result.time = Projection(payload: "\(bind: Int64(time.millisecondsSinceMidnight))")
        case .guid(let text):
            guard !text.utf8.contains(0) else { throw NotCompilable() }
            result.guid = Projection(payload: "\(bind: text.lowercased())")
        }
        return result
    }

    /// A Boolean that is never null.
    static func boolean(_ predicate: SQLCompiler.Predicate) -> Operand {
        var result = Operand()
        result.bool = Projection(payload: predicate.strict)
        return result
    }

    /// An integer or null.
    static func integer(_ sql: SQLFragment) -> Operand {
        var result = Operand(isNull: "(\(sql) IS NULL)")
        result.number = Projection(payload: sql)
        result.numberMayBeDouble = false
        return result
    }

    /// A string or null.
    static func text(_ sql: SQLFragment) -> Operand {
        var result = Operand(isNull: "(\(sql) IS NULL)")
        result.string = Projection(payload: sql)
        return result
    }

    /// The literal string, when the operand is one.
    var literalText: String? {
        if case .string(let text)? = literal { return text }
        return nil
    }

    /// The text the evaluator's string functions see (string, GUID or enumeration case), or NULL;
    /// `nil` when the operand never has text.
    var textValue: SQLFragment? {
        var parts: [SQLFragment] = []
        if let string { parts.append(string.value) }
        if let guid { parts.append(guid.value) }
        if let enumeration { parts.append("(CASE WHEN \(enumeration.index.presence) THEN \(enumeration.text) END)") }
        if parts.isEmpty { return nil }
        return parts.count == 1 ? parts[0] : "COALESCE(" + SQLFragment.joined(parts, separator: ", ") + ")"
    }

    /// Whether SQLite's number comparison (exact between integers and reals) gives the evaluator's
    /// answer (which converts an integer to a double when the other side is a double).
    static func numbersCompareExactly(_ lhs: Operand, _ rhs: Operand) -> Bool {
        if !lhs.numberMayBeDouble && !rhs.numberMayBeDouble { return true }
        if !lhs.numberMayBeInt && !rhs.numberMayBeInt { return true }
        return lhs.isSafeNumberLiteral || rhs.isSafeNumberLiteral
    }

    /// A number literal that every integer compares with the same way exactly and after conversion
    /// to a double.
    private var isSafeNumberLiteral: Bool {
        let limit = 9_007_199_254_740_992.0  // 2^53
        switch literal {
        case .int(let number)?: return number.magnitude <= 1 << 53
        case .double(let number)?, .decimal(let number)?: return number.magnitude < limit
        default: return false
        }
    }
}

extension SQLFragment {
    /// The fragment in parentheses.
    var parenthesized: SQLFragment { "(\(self))" }
}
