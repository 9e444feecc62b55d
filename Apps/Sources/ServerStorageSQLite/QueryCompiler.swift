import GRDB
import SyncCore

/// Thrown while compiling a construct that SQL cannot reproduce exactly; the storage then leaves
/// that part of the query to ``QueryEvaluator``.
struct NotCompilable: Error {}

/// Compiles filters and sort keys to SQLite SQL with exactly the meaning ``QueryEvaluator`` gives
/// them over ``StoredItem/queryable``, for the row layout of ``ItemTableLayout``.
///
/// ## What compiles
///
/// - `id`, `createdAt`, `updatedAt` and `deleted` use their own indexed columns; any other field is
///   `json_extract(item, '$."name"')` together with `json_type(…)`, so that a value's JSON kind
///   (null, Boolean, integer, real, text, array, object) is known per row, as the evaluator knows it;
/// - a field compared with a literal (`eq ne gt ge lt le`), on either side, for null, Boolean,
///   number and string literals; date-time and date literals against `createdAt`/`updatedAt`;
///   string literals against a declared enumeration (by case position, as .NET enums compare);
/// - `and`, `or`, `not`, `in` (of such comparisons), a Boolean field on its own, and `contains`,
///   `startswith`, `endswith` of a field and a string literal, also compared with `true`/`false`;
/// - sort keys on `id`, `createdAt`, `updatedAt`, `deleted` and plain fields (the evaluator's order
///   of kinds: null < Boolean < number < text < array/object), then the final `id` tie-breaker.
///
/// ## What falls back to the evaluator
///
/// Everything else: arithmetic and the other functions (`tolower`, `year`, `round`, …), casts,
/// comparisons of two fields, `version` (its tag does not sort like its number), fields declared
/// as dates, times, date-times or GUIDs (their text must be parsed), date and GUID literals against
/// text, sorting on a declared enumeration, string literals holding NUL, field names holding `"`,
/// `\` or control characters, and expressions nested deeper than ``maximumDepth`` or with more than
/// ``maximumOperands`` operands in one chain (SQLite's expression depth limit is 1000).
///
/// One approximation is documented rather than avoided: sorting a field that holds an integer beyond
/// 2^53 and a floating-point number equal to it as a double may order that pair differently (the
/// evaluator's own order is not transitive there).
struct QueryCompiler {
    let schema: TableSchema

    static let maximumDepth = 48
    static let maximumOperands = 200
    static let maximumArguments = 5_000

    // MARK: - Filters

    /// A filter split into the part SQLite runs and the part left to the evaluator.
    struct FilterSplit {
        var sql: SQLFragment = .alwaysTrue
        var residual: QueryExpression?
    }

    /// Compiles the top-level conjuncts of `filter` that compile; the others stay `residual`.
    func split(_ filter: QueryExpression?) -> FilterSplit {
        guard let filter else { return FilterSplit() }
        var compiled: [SQLFragment] = []
        var residual: [QueryExpression] = []
        var arguments = 0
        for conjunct in Self.chain(.and, filter) {
            if let predicate = try? truth(conjunct, depth: 0),
                arguments + predicate.isTrue.arguments.count <= Self.maximumArguments
            {
                arguments += predicate.isTrue.arguments.count
                compiled.append(predicate.isTrue)
            } else {
                residual.append(conjunct)
            }
        }
        var rest: QueryExpression?
        for part in residual { rest = rest.map { .binary(.and, $0, part) } ?? part }
        return FilterSplit(sql: SQLFragment.and(compiled), residual: rest)
    }

    /// The operands of a chain of one connective (`a or b or c` gives `[a, b, c]`), in order.
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

    /// When the evaluator's value of an expression is `true`, and when it is `false` (it may be
    /// neither: `null`). Both are strict SQL truth values, never NULL.
    struct Truth {
        var isTrue: SQLFragment
        var isFalse: SQLFragment

        static let alwaysTrue = Truth(isTrue: .alwaysTrue, isFalse: .alwaysFalse)
        static let alwaysFalse = Truth(isTrue: .alwaysFalse, isFalse: .alwaysTrue)
        static let neither = Truth(isTrue: .alwaysFalse, isFalse: .alwaysFalse)

        /// For expressions that are always Boolean.
        static func boolean(_ isTrue: SQLFragment) -> Truth { Truth(isTrue: isTrue, isFalse: .not(isTrue)) }
    }

    func truth(_ expression: QueryExpression, depth: Int) throws(NotCompilable) -> Truth {
        guard depth <= Self.maximumDepth else { throw NotCompilable() }
        switch expression {
        case .literal(.bool(let flag)):
            return flag ? .alwaysTrue : .alwaysFalse
        case .literal:
            return .neither
        case .field(let name):
            let field = try reference(name)
            switch field {
            case .deleted: return Truth(isTrue: "deleted = 1", isFalse: "deleted = 0")
            case .content(let access, _):
                return Truth(isTrue: "\(access.type) = 'true'", isFalse: "\(access.type) = 'false'")
            case .id, .createdAt, .updatedAt: return .neither
            case .version: throw NotCompilable()
            }
        case .binary(let op, _, _) where op.isLogical:
            let operands = Self.chain(op, expression)
            guard operands.count <= Self.maximumOperands else { throw NotCompilable() }
            var parts: [SQLFragment] = []
            for operand in operands { parts.append(try truth(operand, depth: depth + 1).isTrue) }
            return .boolean(op == .and ? .and(parts) : .or(parts))
        case .unary(.not, let operand):
            let inner = try truth(operand, depth: depth + 1)
            return Truth(isTrue: inner.isFalse, isFalse: inner.isTrue)
        case .binary(let op, let lhs, let rhs) where op.isComparison:
            return .boolean(try comparison(op, lhs, rhs, depth: depth))
        case .isIn(let needle, let list):
            return .boolean(try membership(needle, list, depth: depth))
        case .function(let function, let arguments):
            return try stringTest(function, arguments)
        default:
            throw NotCompilable()
        }
    }

    // MARK: Comparisons

    private func comparison(
        _ op: BinaryOperator, _ lhs: QueryExpression, _ rhs: QueryExpression, depth: Int
    ) throws(NotCompilable) -> SQLFragment {
        // Put the literal on the right.
        var op = op
        var subject = lhs
        var literal: QueryLiteral
        if case .literal(let value) = rhs {
            literal = value
        } else if case .literal(let value) = lhs {
            literal = value
            subject = rhs
            op = Self.mirrored(op)
        } else {
            throw NotCompilable()
        }
        if case .literal = subject { throw NotCompilable() }  // constants are folded by the caller
        if case .field(let name) = subject {
            return try fieldComparison(op, try reference(name), literal)
        }
        // A Boolean-valued expression (comparison, connective, string test) against a literal.
        let inner = try truth(subject, depth: depth + 1)
        let defined = SQLFragment.or([inner.isTrue, inner.isFalse])
        switch literal {
        case .null:
            return op == .equal ? .not(defined) : (op == .notEqual ? defined : .alwaysFalse)
        case .bool(let flag):
            // false < true, as the evaluator orders Booleans.
            switch (op, flag) {
            case (.equal, true), (.greaterThanOrEqual, true), (.greaterThan, false): return inner.isTrue
            case (.equal, false), (.lessThanOrEqual, false), (.lessThan, true): return inner.isFalse
            case (.notEqual, true): return .not(inner.isTrue)
            case (.notEqual, false): return .not(inner.isFalse)
            case (.greaterThanOrEqual, false), (.lessThanOrEqual, true): return defined
            default: return .alwaysFalse  // gt true, lt false
            }
        default:
            // Any other literal cannot be compared with a Boolean or null.
            return op == .notEqual ? .alwaysTrue : .alwaysFalse
        }
    }

    static func mirrored(_ op: BinaryOperator) -> BinaryOperator {
        switch op {
        case .greaterThan: .lessThan
        case .greaterThanOrEqual: .lessThanOrEqual
        case .lessThan: .greaterThan
        case .lessThanOrEqual: .greaterThanOrEqual
        default: op
        }
    }

    static func sqlOperator(_ op: BinaryOperator) -> String {
        switch op {
        case .equal: "="
        case .notEqual: "<>"
        case .greaterThan: ">"
        case .greaterThanOrEqual: ">="
        case .lessThan: "<"
        default: "<="
        }
    }

    /// `field op literal` with the evaluator's null and kind rules: a comparison with `null` is
    /// true only for `eq null` on a null value and `ne null` on a non-null one; values of kinds that
    /// cannot be compared give `false` (`true` for `ne`).
    func fieldComparison(_ op: BinaryOperator, _ field: FieldReference, _ literal: QueryLiteral) throws(NotCompilable)
        -> SQLFragment
    {
        if case .null = literal {
            let isNull = try nullTest(field)
            switch op {
            case .equal: return isNull
            case .notEqual: return .not(isNull)
            default: return .alwaysFalse
            }
        }
        if op == .notEqual { return .not(try comparable(.equal, field, literal)) }
        return try comparable(op, field, literal)
    }

    private func nullTest(_ field: FieldReference) throws(NotCompilable) -> SQLFragment {
        switch field {
        case .id, .createdAt, .updatedAt, .deleted: return .alwaysFalse
        case .version: throw NotCompilable()
        case .content(let access, _): return "(\(access.value) IS NULL)"
        }
    }

    /// True exactly when the field's value and the (non-null) literal are comparable and `op` holds.
    private func comparable(_ op: BinaryOperator, _ field: FieldReference, _ literal: QueryLiteral)
        throws(NotCompilable) -> SQLFragment
    {
        let sqlOp = SQLFragment(text: Self.sqlOperator(op))
        switch field {
        case .version:
            throw NotCompilable()
        case .id:
            switch literal {
            case .string(let text):
                try Self.checkText(text)
                return "(id \(sqlOp) \(bind: text))"
            case .date, .dateTimeOffset, .timeOfDay, .guid:
                throw NotCompilable()  // text may be read as a date, or compared without case
            default:
                return .alwaysFalse
            }
        case .createdAt, .updatedAt:
            let column: SQLFragment = field == .createdAt ? "created_at" : "updated_at"
            let milliseconds: Int64?
            switch literal {
            case .dateTimeOffset(let value): milliseconds = value.millisecondsSince1970
            case .date(let value): milliseconds = value.midnightUTC.millisecondsSince1970
            case .string(let text):
                milliseconds =
                    (Timestamp(iso8601: text) ?? CalendarDate(iso8601: text)?.midnightUTC)?
                    .millisecondsSince1970
            default: milliseconds = nil
            }
            guard let milliseconds else { return .alwaysFalse }
            return "(\(column) \(sqlOp) \(bind: milliseconds))"
        case .deleted:
            guard case .bool(let flag) = literal else { return .alwaysFalse }
            return "(deleted \(sqlOp) \(bind: flag ? 1 : 0))"
        case .content(let access, let declared):
            let type = access.type
            let value = access.value
            switch literal {
            case .null:
                return .alwaysFalse
            case .bool(let flag):
                return "(\(type) IN ('true','false') AND (\(type) = 'true') \(sqlOp) \(bind: flag ? 1 : 0))"
            case .int(let number):
                return "((\(type) = 'integer' AND \(value) \(sqlOp) \(bind: number))"
                    + " OR (\(type) = 'real' AND \(value) \(sqlOp) \(bind: Double(number))))"
            case .double(let number), .decimal(let number):
                return "(\(type) IN ('integer','real') AND CAST(\(value) AS REAL) \(sqlOp) \(bind: number))"
            case .string(let text):
                try Self.checkText(text)
                switch declared {
                case .date?, .dateTimeOffset?, .timeOfDay?, .guid?:
                    throw NotCompilable()
                case .enumeration(let cases)? where cases.contains(text):
                    let position = cases.firstIndex(of: text)!
                    let list = SQLFragment.joined(cases.map { "\(bind: $0)" }, separator: ",")
                    var positions = SQLFragment(text: "CASE \(value.text)", arguments: value.arguments)
                    for (index, name) in cases.enumerated() {
                        positions = positions + " WHEN \(bind: name) THEN " + SQLFragment(text: String(index))
                    }
                    positions = positions + " END"
                    return "(\(type) = 'text' AND ((\(value) IN (\(list)) AND \(positions) \(sqlOp) \(bind: position))"
                        + " OR (\(value) NOT IN (\(list)) AND \(value) \(sqlOp) \(bind: text))))"
                default:
                    return "(\(type) = 'text' AND \(value) \(sqlOp) \(bind: text))"
                }
            case .date, .dateTimeOffset, .timeOfDay, .guid:
                // Text (and a declared date's text) may be read as one: only the evaluator parses it.
                throw NotCompilable()
            }
        }
    }

    private func membership(_ needle: QueryExpression, _ list: [QueryExpression], depth: Int) throws(NotCompilable)
        -> SQLFragment
    {
        if list.isEmpty { return .alwaysFalse }
        guard case .field(let name) = needle else { throw NotCompilable() }
        let field = try reference(name)
        var literals: [QueryLiteral] = []
        for element in list {
            guard case .literal(let literal) = element else { throw NotCompilable() }
            literals.append(literal)
        }
        // The common case, strings against plain text or ids, as one SQL IN list.
        let strings = literals.compactMap { literal -> String? in
            if case .string(let text) = literal { return text }
            return nil
        }
        if strings.count == literals.count, strings.allSatisfy({ !$0.utf8.contains(0) }) {
            let values = SQLFragment.joined(strings.map { "\(bind: $0)" }, separator: ",")
            switch field {
            case .id: return "(id IN (\(values)))"
            case .content(let access, nil), .content(let access, .string?):
                return "(\(access.type) = 'text' AND \(access.value) IN (\(values)))"
            default: break
            }
        }
        guard literals.count <= Self.maximumOperands else { throw NotCompilable() }
        var parts: [SQLFragment] = []
        for literal in literals { parts.append(try fieldComparison(.equal, field, literal)) }
        return .or(parts)
    }

    private func stringTest(_ function: QueryFunction, _ arguments: [QueryExpression]) throws(NotCompilable) -> Truth {
        guard [.contains, .startsWith, .endsWith].contains(function), arguments.count == 2,
            case .field(let name) = arguments[0], case .literal(.string(let needle)) = arguments[1]
        else { throw NotCompilable() }
        try Self.checkText(needle)
        let subject: SQLFragment
        let isText: SQLFragment
        switch try reference(name) {
        case .id:
            subject = "id"
            isText = .alwaysTrue
        case .content(let access, let declared):
            switch declared {
            case .date?, .dateTimeOffset?, .timeOfDay?, .guid?: throw NotCompilable()
            default: break
            }
            subject = access.value
            isText = "(\(access.type) = 'text')"
        case .createdAt, .updatedAt, .deleted:
            return .neither  // not text: the function's value is null
        case .version:
            throw NotCompilable()
        }
        // instr, substr and length count characters; on valid UTF-8 that matches the evaluator's
        // byte-wise search, because a byte match of valid UTF-8 starts and ends on characters.
        let test: SQLFragment
        switch function {
        case .contains: test = "(instr(\(subject), \(bind: needle)) > 0)"
        case .startsWith: test = "(instr(\(subject), \(bind: needle)) = 1)"
        default:
            let length = needle.unicodeScalars.count
            test = length == 0 ? .alwaysTrue : "(substr(\(subject), \(bind: -length)) = \(bind: needle))"
        }
        return Truth(isTrue: .and([isText, test]), isFalse: .and([isText, .not(test)]))
    }

    /// Strings holding NUL are left to the evaluator (SQLite text functions stop at NUL).
    static func checkText(_ text: String) throws(NotCompilable) {
        if text.utf8.contains(0) { throw NotCompilable() }
    }

    // MARK: - Fields

    /// How SQL reads one JSON field of the item column.
    struct JSONAccess: Equatable {
        /// `json_extract(item, path)`: NULL for null and missing values.
        var value: SQLFragment
        /// `json_type(item, path)`: NULL when missing, else `'null'`, `'true'`, `'integer'`, ….
        var type: SQLFragment

        static func == (lhs: JSONAccess, rhs: JSONAccess) -> Bool {
            lhs.value.text == rhs.value.text && lhs.value.arguments == rhs.value.arguments
        }
    }

    enum FieldReference: Equatable {
        case id, createdAt, updatedAt, deleted, version
        case content(JSONAccess, FieldType?)
    }

    func reference(_ name: String) throws(NotCompilable) -> FieldReference {
        switch name {
        case "id": return schema.fields["id"] == nil ? .id : try contentReference(name)
        case "createdAt": return .createdAt
        case "updatedAt": return .updatedAt
        case "deleted": return .deleted
        case "version": return .version
        default: return try contentReference(name)
        }
    }

    private func contentReference(_ name: String) throws(NotCompilable) -> FieldReference {
        if name == "id" { throw NotCompilable() }  // a declared id type changes how ids compare
        guard !name.isEmpty,
            name.unicodeScalars.allSatisfy({ $0 != "\"" && $0 != "\\" && $0.value >= 0x20 && $0.value != 0x7F })
        else { throw NotCompilable() }
        let path = "$.\"\(name)\""
        let simple = name.utf8.allSatisfy { byte in
            (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
                || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
                || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: "_")
        }
        let access: JSONAccess
        if simple {
            access = JSONAccess(
                value: SQLFragment(text: "json_extract(item, '\(path)')"),
                type: SQLFragment(text: "json_type(item, '\(path)')"))
        } else {
            access = JSONAccess(value: "json_extract(item, \(bind: path))", type: "json_type(item, \(bind: path))")
        }
        return .content(access, schema.fields[name])
    }

    // MARK: - Order

    /// An `ORDER BY` list for the keys plus the final `id` tie-breaker.
    func order(_ keys: [SortKey]) throws(NotCompilable) -> SQLFragment {
        var terms: [SQLFragment] = []
        var effective = keys
        if !keys.contains(where: { $0.expression == .field("id") }) { effective.append(.field("id")) }
        for key in effective {
            guard case .field(let name) = key.expression else { throw NotCompilable() }
            let suffix = key.descending ? " DESC" : ""
            switch try reference(name) {
            case .id: terms.append("id" + SQLFragment(text: suffix))
            case .createdAt: terms.append("created_at" + SQLFragment(text: suffix))
            case .updatedAt: terms.append("updated_at" + SQLFragment(text: suffix))
            case .deleted: terms.append("deleted" + SQLFragment(text: suffix))
            case .version: throw NotCompilable()
            case .content(let access, let declared):
                switch declared {
                case .date?, .dateTimeOffset?, .timeOfDay?, .guid?, .enumeration?: throw NotCompilable()
                default: break
                }
                let type = access.type
                let value = access.value
                let rank: SQLFragment =
                    "CASE WHEN \(type) IS NULL OR \(type) = 'null' THEN 0 WHEN \(type) IN ('true','false') THEN 1"
                    + " WHEN \(type) IN ('integer','real') THEN 2 WHEN \(type) = 'text' THEN 4 ELSE 5 END"
                let scalar: SQLFragment =
                    "CASE WHEN \(type) IN ('true','false') THEN (\(type) = 'true')"
                    + " WHEN \(type) IN ('integer','real') THEN CAST(\(value) AS REAL) END"
                // Integers equal as doubles still order exactly (the evaluator compares two integers as
                // integers): by how far each is from its double. Reals and ordinary integers give 0.
                let exactInteger: SQLFragment =
                    "CASE WHEN \(type) = 'integer' THEN \(value) - CAST(CAST(\(value) AS REAL) AS INTEGER) ELSE 0 END"
                let text: SQLFragment = "CASE WHEN \(type) IN ('text','array','object') THEN \(value) END"
                for term in [rank, scalar, exactInteger, text] { terms.append(term + SQLFragment(text: suffix)) }
            }
        }
        return SQLFragment.joined(terms, separator: ", ")
    }
}
