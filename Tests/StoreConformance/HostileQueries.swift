public import SyncCore

/// Hostile queries and the items to run them over, for the fuzz tests of every query path (the OData
/// parser, the evaluator, the SQLite store's SQL and the server's SQLite storage): extreme integers,
/// huge and tiny doubles, NaN and infinity made by arithmetic, dates with extreme years, every
/// function with every argument count from 0 to 4, casts to every type, and expressions nested up to
/// the parser's and the evaluator's limits. Draw from it with a ``SeededRandom`` so that a failing
/// seed replays.
///
/// A trap (an arithmetic overflow, a bad conversion) kills the test process, so a fuzz test passes
/// that check by finishing.
public enum HostileQueries: Sendable {
    /// Integers at and around the limits of `Int64`, `Int32` and exact doubles.
    public static let integers: [Int64] = [
        .min, .min + 1, -1, 0, 1, 2, 3, .max - 1, .max, 2_147_483_647, 2_147_483_648, -2_147_483_648, -2_147_483_649,
        9_007_199_254_740_993, -9_007_199_254_740_993,
    ]

    /// Doubles at the limits of the format and of `Int64` and `Int32` (finite: JSON holds no others).
    public static let doubles: [Double] = itemDoubles + [9_223_372_036_854_775_808.0, -9_223_372_036_854_775_808.0]

    /// The doubles items hold: none equals an integer of ``integers`` beyond 2^53 once converted
    /// (`Int64.max` and `Int64.max - 1` both convert to 2^63), where the evaluator's order of mixed
    /// numbers is not transitive and so has no SQL equivalent (a documented approximation).
    static let itemDoubles: [Double] = [
        1e308, -1e308, .greatestFiniteMagnitude, -.greatestFiniteMagnitude, .leastNonzeroMagnitude, -0.0, 0.0, 0.5,
        -2.5, 9.3e18, -9.3e18, 2_147_483_647.5, -2_147_483_648.5, 1e-300,
    ]

    /// Texts that read as extreme numbers, dates and times, or as nothing; empty and long ones.
    public static let texts: [String] = [
        "", "hello", "x", String(repeating: "long text ", count: 300), "9223372036854775807", "9223372036854775808",
        "-9223372036854775809", "2147483648", "1e999", "-1e999", "inf", "nan", "NaN", "0x1p3", " 5", "true",
        "9999-12-31", "0000-01-01", "9999-12-31T23:59:59.999Z", "0000-01-01T00:00:00.000Z",
        "0000-01-01T00:00:00+23:59", "9999-12-31T23:59:59-23:59", "23:59:59.999", "00:00", "2024-02-30",
        "6f9619ff-8b86-d011-b42d-00c04fc964ff", "🎬 é",
    ]

    /// Instants, dates and times of day at the limits of the text forms. (Instants beyond the years
    /// 0000-9999, `Timestamp`'s own limits, are refused by every store's validation, as no query text
    /// carries them: they would only be refused here.)
    public static let temporals: [QueryLiteral] = [
        .dateTimeOffset(Timestamp(millisecondsSince1970: 0)), .dateTimeOffset(Timestamp(millisecondsSince1970: -1)),
        .dateTimeOffset(Timestamp(iso8601: "9999-12-31T23:59:59.999Z")!),
        .dateTimeOffset(Timestamp(iso8601: "0000-01-01T00:00:00.000Z")!),
        .date(CalendarDate(year: 9999, month: 12, day: 31)!), .date(CalendarDate(year: 0, month: 1, day: 1)!),
        .date(CalendarDate(year: .max, month: 12, day: 31)!), .date(CalendarDate(year: .min, month: 1, day: 1)!),
        .date(CalendarDate(year: 999_999_999, month: 12, day: 31)!),
        .timeOfDay(TimeOfDay(millisecondsSinceMidnight: 86_399_999)),
        .timeOfDay(TimeOfDay(millisecondsSinceMidnight: 0)),
    ]

    /// The fields of ``items(_:count:)``; `missing` is in none.
    public static let fields = ["n", "m", "s", "d", "id", "updatedAt", "missing"]

    /// A schema that types `d` as a date-time and `n` as an integer; queries must mean the same with
    /// and without it.
    public static let typedSchema = TableSchema(fields: ["d": .dateTimeOffset, "n": .integer, "s": .string])

    /// One JSON value of any kind, extreme ones often.
    public static func jsonValue(_ random: inout SeededRandom) -> JSONValue? {
        switch Int.random(in: 0..<12, using: &random) {
        case 0: return nil
        case 1: return .null
        case 2: return .bool(Bool.random(using: &random))
        case 3, 4, 5: return .int(integers.randomElement(using: &random)!)
        case 6, 7: return .double(itemDoubles.randomElement(using: &random)!)
        case 8, 9, 10: return .string(texts.randomElement(using: &random)!)
        default: return [.int(.max), "x"]
        }
    }

    /// Items holding extreme values: every row has `n`, `m`, `s` and `d` drawn from the pools (or
    /// missing), and the first rows hold `Int64.max`, `Int64.min`, `1e308`, an empty and a long string.
    public static func items(_ random: inout SeededRandom, count: Int) -> [JSONObject] {
        (0..<count).map { index in
            var item: JSONObject = ["id": .string("h\(100 + index)")]
            for field in ["n", "m", "s", "d"] {
                if let value = jsonValue(&random) { item[field] = value }
            }
            switch index {
            case 0: item["n"] = .int(.max)
            case 1: item["n"] = .int(.min)
            case 2: item["n"] = .double(1e308)
            case 3: item["s"] = ""
            case 4: item["s"] = .string(texts[3])
            case 5: item["d"] = "9999-12-31T23:59:59.999Z"
            case 6: item["d"] = "0000-01-01"
            default: break
            }
            return item
        }
    }

    /// A literal from the hostile pools, of any kind.
    public static func literal(_ random: inout SeededRandom) -> QueryLiteral {
        switch Int.random(in: 0..<12, using: &random) {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &random))
        case 2, 3, 4: return .int(integers.randomElement(using: &random)!)
        case 5, 6: return .double(doubles.randomElement(using: &random)!)
        case 7: return .decimal(doubles.randomElement(using: &random)!)
        case 8, 9: return .string(texts.randomElement(using: &random)!)
        case 10: return temporals.randomElement(using: &random)!
        default: return .guid("6F9619FF-8B86-D011-B42D-00C04FC964FF")
        }
    }

    /// A value expression: fields, literals, arithmetic (which makes infinities and NaN from the
    /// extreme doubles: `1e308 mul 1e308`, then `sub` of two of them), negation, every function with
    /// 0 to 4 arguments, and casts to every type.
    public static func value(_ random: inout SeededRandom, depth: Int) -> QueryExpression {
        let field = QueryExpression.field(fields.randomElement(using: &random)!)
        switch Int.random(in: 0..<(depth > 3 ? 2 : 12), using: &random) {
        case 0: return field
        case 1: return .literal(literal(&random))
        case 2, 3, 4:
            let op: BinaryOperator = [.add, .subtract, .multiply, .divide, .modulo].randomElement(using: &random)!
            return .binary(op, value(&random, depth: depth + 1), value(&random, depth: depth + 1))
        case 5: return .unary(.negate, value(&random, depth: depth + 1))
        case 6, 7, 8:
            let function = QueryFunction.allCases.randomElement(using: &random)!
            // Mostly a count the function takes, sometimes any count from 0 to 4.
            let count =
                Int.random(in: 0..<4, using: &random) == 0
                ? Int.random(in: 0...4, using: &random)
                : Int.random(in: function.arity, using: &random)
            return .function(function, (0..<count).map { _ in value(&random, depth: depth + 1) })
        case 9, 10: return .cast(value(&random, depth: depth + 1), EdmType.allCases.randomElement(using: &random)!)
        default:
            // The crash the outside probe found, and its neighbours.
            return .function(
                .substring,
                [
                    Bool.random(using: &random) ? field : .literal(.string("hello")),
                    .literal(.int(integers.randomElement(using: &random)!)),
                    Bool.random(using: &random) ? field : .literal(.int(integers.randomElement(using: &random)!)),
                ])
        }
    }

    /// A filter: comparisons of hostile values, connectives, `not`, `in`, and now and then an
    /// expression nested `nesting` levels deep (the evaluator and the compilers must cope with
    /// every depth the parser accepts).
    public static func filter(_ random: inout SeededRandom, depth: Int = 0, nesting: Int = 90) -> QueryExpression {
        switch Int.random(in: 0..<(depth > 2 ? 6 : 12), using: &random) {
        case 0..<6:
            let op: BinaryOperator = [
                .equal, .notEqual, .greaterThan, .greaterThanOrEqual, .lessThan, .lessThanOrEqual,
            ]
            .randomElement(using: &random)!
            return .binary(op, value(&random, depth: depth + 1), value(&random, depth: depth + 1))
        case 6, 7:
            return .binary(
                Bool.random(using: &random) ? .and : .or, filter(&random, depth: depth + 1, nesting: nesting),
                filter(&random, depth: depth + 1, nesting: nesting))
        case 8: return .unary(.not, filter(&random, depth: depth + 1, nesting: nesting))
        case 9:
            return .isIn(
                value(&random, depth: depth + 1),
                (0..<Int.random(in: 0...3, using: &random)).map { _ in .literal(literal(&random)) })
        case 10:
            var deep = value(&random, depth: 3)
            for _ in 0..<nesting {
                switch Int.random(in: 0..<4, using: &random) {
                case 0: deep = .unary(.negate, deep)
                case 1: deep = .binary(.add, deep, .literal(.int(integers.randomElement(using: &random)!)))
                case 2: deep = .function(.round, [deep])
                default: deep = .binary(.multiply, deep, .literal(.double(doubles.randomElement(using: &random)!)))
                }
            }
            return .binary(.greaterThan, deep, .literal(literal(&random)))
        default:
            return .binary(.equal, value(&random, depth: depth + 1), .literal(.null))
        }
    }

    /// A whole query: a hostile filter, up to two hostile sort keys, and extreme skip and top (in
    /// code a negative top means an empty page and a negative skip none).
    public static func query(_ random: inout SeededRandom) -> TableQuery {
        var query = TableQuery(filter: Int.random(in: 0..<6, using: &random) == 0 ? nil : filter(&random))
        for _ in 0..<Int.random(in: 0...2, using: &random) {
            query.orderBy.append(SortKey(value(&random, depth: 1), descending: Bool.random(using: &random)))
        }
        let counts = [Int.min, -1, 0, 1, 2, 5, 1000, Int.max - 1, Int.max]
        if Bool.random(using: &random) { query.skip = counts.randomElement(using: &random)! }
        if Bool.random(using: &random) { query.top = counts.randomElement(using: &random)! }
        query.includeDeleted = Bool.random(using: &random)
        query.includeTotalCount = true
        return query
    }

    /// OData text pieces: extreme number literals (some out of range), INF and NaN, date and time
    /// literals at the limits of their forms (and beyond), function names, operators and brackets.
    static let tokens: [String] = [
        "9223372036854775807", "-9223372036854775808", "9223372036854775808", "-9223372036854775809",
        "99999999999999999999999", "1e308", "1e309", "-1e308", "5e-324", "1e-400", "0.0", "0", "-0", "2147483648L",
        "1.5m", "1e308d", "3.4e38f", "INF", "-INF", "NaN", "null", "true", "'hello'", "''", "'it''s'",
        "9999-12-31", "0000-01-01", "9999-12-31T23:59:59.999Z", "0000-01-01T00:00:00-23:59", "99999-01-01",
        "23:59:59.999", "24:00:00", "datetime'9999-12-31T23:59:59'", "datetimeoffset'0000-01-01T00:00:00Z'",
        "duration'P1D'", "guid'6F9619FF-8B86-D011-B42D-00C04FC964FF'", "n", "m", "s", "d", "id", "updatedAt",
        "add", "sub", "mul", "div", "mod", "eq", "ne", "gt", "ge", "lt", "le", "and", "or", "not", "-", "(", ")",
        ",", "in", "Edm.Int32", "Edm.Int64", "Edm.Double", "Edm.Decimal", "Edm.Date", "Edm.DateTimeOffset",
        "Edm.String", "Edm.Boolean", "Edm.Guid", "Edm.TimeOfDay",
    ]

    /// Filter text: a well-formed comparison of hostile calls most of the time, token soup otherwise,
    /// and sometimes brackets, calls or minus signs nested to `nesting` levels.
    public static func filterText(_ random: inout SeededRandom, nesting: Int = 100) -> String {
        func operand() -> String {
            let name = QueryFunction.allCases.randomElement(using: &random)!.rawValue
            let count = Int.random(in: 0...4, using: &random)
            let arguments = (0..<count).map { _ in tokens.randomElement(using: &random)! }
            switch Int.random(in: 0..<4, using: &random) {
            case 0: return tokens.randomElement(using: &random)!
            case 1:
                let type = EdmType.allCases.randomElement(using: &random)!.rawValue
                return "cast(\(tokens.randomElement(using: &random)!),\(type))"
            default: return "\(name)(\(arguments.joined(separator: ",")))"
            }
        }
        switch Int.random(in: 0..<14, using: &random) {
        case 11, 12, 13:
            // A hostile tree as its encoder writes it.
            return filter(&random).odata(protocolVersion: .v3)
        case 10:
            // A chain as deep as `QueryLimits.maximumDepth` allows, and just beyond.
            let length = Int.random(in: 995...1_001, using: &random)
            return "n" + String(repeating: " add 9223372036854775807", count: length) + " gt 0"
        case 0..<5:
            let op = ["eq", "ne", "gt", "lt", "add", "mul", "sub", "div", "mod"].randomElement(using: &random)!
            return "\(operand()) \(op) \(operand())"
        case 5, 6:
            return (0..<Int.random(in: 1...8, using: &random)).map { _ in tokens.randomElement(using: &random)! }
                .joined(separator: Bool.random(using: &random) ? " " : "")
        case 7:
            let depth = Int.random(in: nesting - 2...nesting + 1, using: &random)
            return String(repeating: "(", count: depth) + operand() + String(repeating: ")", count: depth) + " eq 1"
        case 8:
            let depth = Int.random(in: nesting - 2...nesting + 1, using: &random)
            return String(repeating: "-", count: depth) + "9223372036854775807 gt n"
        default:
            let depth = Int.random(in: nesting - 2...nesting + 1, using: &random)
            return String(repeating: "round(", count: depth) + operand() + String(repeating: ")", count: depth)
                + " eq n"
        }
    }

    /// A whole query string: hostile filter text with extreme `$top`, `$skip` and `$orderby`.
    public static func queryText(_ random: inout SeededRandom) -> String {
        var parts = ["$filter=" + filterText(&random)]
        let counts = ["0", "1", "-1", "9223372036854775807", "9223372036854775808", "99999999999999999999", "1e3", ""]
        if Bool.random(using: &random) { parts.append("$top=" + counts.randomElement(using: &random)!) }
        if Bool.random(using: &random) { parts.append("$skip=" + counts.randomElement(using: &random)!) }
        if Bool.random(using: &random) { parts.append("$orderby=" + filterText(&random) + " desc") }
        return parts.shuffled(using: &random).joined(separator: "&")
    }
}
