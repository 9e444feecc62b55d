import StoreConformance
import SyncCore

/// Generates items and queries that exercise the evaluator's corner cases.
enum QueryFuzz {
    static let typedSchema = TableSchema(fields: [
        "d": .dateTimeOffset, "day": .date, "t": .timeOfDay, "e": .enumeration(["G", "PG", "R", "K"]), "g": .guid,
        "s": .string, "n": .integer,
    ])

    static let texts: [String] = [
        "a", "B", "b", "abc", "ABC", "é", "e\u{301}", "K", "\u{212A}", "Straße", "ǅ", "日本語", "🎬", " trim me ", "",
        "x'y", "%_*?[", "G", "PG", "R", "pg", "10:30:00", "10:30", "2024-01-01", "2024-01-01T10:00:00.000Z",
        "2024-01-01T11:00:00+02:00", "2023-12-31T23:59:59.999Z", "1999-02-28", "not a date",
        "6F9619FF-8B86-D011-B42D-00C04FC964FF", "6f9619ff-8b86-d011-b42d-00c04fc964ff", "5", "true", "a\u{0}b",
    ]

    static let numbers: [JSONValue] = [
        0, 1, -1, 2, 3, 5, 7, 10, -7, 42, .int(Int64.max), .int(Int64.min), .int(9_007_199_254_740_993), 0.5, -2.5, 3.0,
        2.5, 1e300, -0.0, 1e-7, 123.456,
    ]

    static func value(_ random: inout SeededRandom, flavour: Int, withNUL: Bool) -> JSONValue? {
        let roll = Int.random(in: 0..<100, using: &random)
        switch roll {
        case 0..<6: return nil
        case 6..<12: return .null
        case 12..<20: return .bool(Bool.random(using: &random))
        case 20..<24: return [.int(1), "a", .null]
        case 24..<26: return ["k": 1]
        default: break
        }
        if flavour == 0 || roll < 50 { return numbers.randomElement(using: &random)! }
        return .string(texts.filter { withNUL || !$0.contains("\u{0}") }.randomElement(using: &random)!)
    }

    static func items(_ random: inout SeededRandom, count: Int, withNUL: Bool) -> [JSONObject] {
        (0..<count).map { index in
            var item: JSONObject = ["id": .string(index % 9 == 0 ? "I\(100 + index)" : "i\(100 + index)")]
            for (field, flavour) in [
                ("n", 0), ("m", 0), ("s", 1), ("d", 1), ("day", 1), ("t", 1), ("e", 1), ("g", 1), ("b", 1),
            ] {
                if let value = value(&random, flavour: flavour, withNUL: withNUL) { item[field] = value }
            }
            switch Int.random(in: 0..<10, using: &random) {
            case 0: break
            case 1: item["updatedAt"] = .string("not a date")
            case 2: item["updatedAt"] = .int(5)
            default:
                item["updatedAt"] = .string(
                    Timestamp(millisecondsSince1970: Int64.random(in: 0..<4, using: &random) * 86_400_000).iso8601)
            }
            if Int.random(in: 0..<6, using: &random) == 0 { item["deleted"] = true }
            return item
        }
    }

    static let fields = ["n", "m", "s", "d", "day", "t", "e", "g", "b", "id", "updatedAt", "deleted", "missing"]

    static func literal(_ random: inout SeededRandom) -> QueryLiteral {
        switch Int.random(in: 0..<14, using: &random) {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &random))
        case 2, 3:
            return .int([0, 1, 2, 3, 5, -1, 42, Int64.max, 9_007_199_254_740_992].randomElement(using: &random)!)
        case 4:
            return .double([0.5, 2.5, 3.0, -2.5, 1e300, 9_007_199_254_740_992.0, 1e-7].randomElement(using: &random)!)
        case 5, 6, 7: return .string(texts.filter { !$0.contains("\u{0}") }.randomElement(using: &random)!)
        case 8:
            return .dateTimeOffset(
                Timestamp(millisecondsSince1970: Int64.random(in: 0..<4, using: &random) * 86_400_000))
        case 9: return .date(CalendarDate(year: 2024, month: 1, day: Int.random(in: 1...2, using: &random))!)
        case 10: return .timeOfDay(TimeOfDay(hour: 10, minute: [0, 30].randomElement(using: &random)!)!)
        case 11: return .guid("6F9619FF-8B86-D011-B42D-00C04FC964FF")
        case 12: return .decimal(2.5)
        default: return .string("a\u{0}b")
        }
    }

    static func value(_ random: inout SeededRandom, depth: Int) -> QueryExpression {
        let field = QueryExpression.field(fields.randomElement(using: &random)!)
        switch Int.random(in: 0..<(depth > 2 ? 2 : 12), using: &random) {
        case 0: return field
        case 1: return .literal(literal(&random))
        case 2, 3:
            let op: BinaryOperator = [.add, .subtract, .multiply, .divide, .modulo].randomElement(using: &random)!
            let rhs: QueryExpression =
                Bool.random(using: &random) ? .literal(literal(&random)) : value(&random, depth: depth + 1)
            return .binary(op, value(&random, depth: depth + 1), rhs)
        case 4: return .unary(.negate, value(&random, depth: depth + 1))
        case 5:
            let function: QueryFunction = [
                .length, .toLower, .toUpper, .trim, .year, .month, .day, .hour, .minute, .second, .floor, .ceiling,
                .round,
            ]
            .randomElement(using: &random)!
            return .function(function, [value(&random, depth: depth + 1)])
        case 6:
            let function: QueryFunction = [.indexOf, .concat, .contains, .startsWith, .endsWith].randomElement(
                using: &random)!
            return .function(function, [value(&random, depth: depth + 1), .literal(literal(&random))])
        case 7:
            var arguments = [
                value(&random, depth: depth + 1), .literal(.int(Int64.random(in: -1...3, using: &random))),
            ]
            if Bool.random(using: &random) {
                arguments.append(.literal(.int(Int64.random(in: -1...3, using: &random))))
            }
            return .function(.substring, arguments)
        case 8: return .function(.replace, [field, .literal(.string("a")), .literal(.string("zz"))])
        case 9:
            return .cast(field, [.string, .int64, .double, .dateTimeOffset, .boolean].randomElement(using: &random)!)
        default: return field
        }
    }

    static func filter(_ random: inout SeededRandom, depth: Int = 0) -> QueryExpression {
        switch Int.random(in: 0..<(depth > 2 ? 6 : 12), using: &random) {
        case 0..<5:
            let op: BinaryOperator = [
                .equal, .notEqual, .greaterThan, .greaterThanOrEqual, .lessThan, .lessThanOrEqual,
            ]
            .randomElement(using: &random)!
            let lhs = value(&random, depth: depth + 1)
            let rhs: QueryExpression =
                Int.random(in: 0..<4, using: &random) == 0
                ? value(&random, depth: depth + 1) : .literal(literal(&random))
            return Bool.random(using: &random) ? .binary(op, lhs, rhs) : .binary(op, rhs, lhs)
        case 5: return value(&random, depth: depth + 1)
        case 6, 7:
            return .binary(
                Bool.random(using: &random) ? .and : .or, filter(&random, depth: depth + 1),
                filter(&random, depth: depth + 1))
        case 8: return .unary(.not, filter(&random, depth: depth + 1))
        case 9:
            return .isIn(
                value(&random, depth: depth + 1),
                (0..<Int.random(in: 0...3, using: &random)).map { _ in .literal(literal(&random)) })
        case 10:
            return .function(
                [.contains, .startsWith, .endsWith].randomElement(using: &random)!,
                [.field("s"), .literal(literal(&random))])
        default:
            return .binary(
                .equal, .field(fields.randomElement(using: &random)!), .field(fields.randomElement(using: &random)!))
        }
    }

    static func query(_ random: inout SeededRandom) -> TableQuery {
        var query = TableQuery(filter: Int.random(in: 0..<8, using: &random) == 0 ? nil : filter(&random))
        for _ in 0..<Int.random(in: 0...2, using: &random) {
            let expression: QueryExpression =
                Int.random(in: 0..<5, using: &random) == 0
                ? value(&random, depth: 1) : .field(fields.randomElement(using: &random)!)
            query.orderBy.append(SortKey(expression, descending: Bool.random(using: &random)))
        }
        if Bool.random(using: &random) { query.skip = Int.random(in: 0..<20, using: &random) }
        if Bool.random(using: &random) { query.top = Int.random(in: 0..<30, using: &random) }
        query.includeDeleted = Int.random(in: 0..<3, using: &random) == 0
        query.includeTotalCount = true
        return query
    }
}
