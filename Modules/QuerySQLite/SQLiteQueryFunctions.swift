public import GRDB
import GRDBSQLite
import QuerySQL
import SyncCore

/// The few SQL functions `SQLCompiler` needs beyond SQLite's built-ins: every store that runs
/// compiled SQLite registers them on each connection it opens.
///
/// ```swift
/// var configuration = Configuration()
/// configuration.prepareDatabase { db in try SQLiteQueryFunctions.register(db) }
/// ```
///
/// Each one is deterministic and delegates to SyncCore (`QueryEvaluator`, `Timestamp`,
/// `CalendarDate`, `TimeOfDay`), so compiled SQL has the evaluator's semantics by construction
/// where SQLite's own functions differ (Unicode case mapping, UTF-16 lengths and offsets, banker's
/// rounding, ISO 8601 parsing, enumeration case matching). They read and return text with explicit
/// byte counts, so strings holding NUL characters survive.
///
/// | function | meaning |
/// | --- | --- |
/// | `ferry_instant(text)` | milliseconds since 1970 of an ISO 8601 date-time or date, else NULL |
/// | `ferry_time(text)` | milliseconds since midnight of an ISO 8601 time of day, else NULL |
/// | `ferry_fn(name, args…)` | the query function `name` applied by the evaluator |
/// | `ferry_datepart(part, kind, value)` | `year`…`second` of an instant (`i`), a time (`t`) or text (`s`) |
/// | `ferry_mod(a, b)` | the evaluator's `mod` |
/// | `ferry_enum(text, cases…)` | the position of `text` in `cases` (Swift string equality), else NULL |
/// | `ferry_double_text(real)` | the text `concat` gives a floating-point number |
/// | `ferry_json_equal(a, b)` | whether two JSON texts hold equal values (`JSONValue` equality) |
/// | `ferry_cast(type, kind, value)` | the evaluator's `cast` of a Boolean (`b`), number (`n`), string (`s`) or GUID (`g`) |
public enum SQLiteQueryFunctions: Sendable {
    enum Function: Int, CaseIterable {
        case instant
        case time
        case call
        case datePart
        case modulo
        case enumIndex
        case doubleText
        case jsonEqual
        case cast

        var name: String {
            switch self {
            case .instant: "ferry_instant"
            case .time: "ferry_time"
            case .call: "ferry_fn"
            case .datePart: "ferry_datepart"
            case .modulo: "ferry_mod"
            case .enumIndex: "ferry_enum"
            case .doubleText: "ferry_double_text"
            case .jsonEqual: "ferry_json_equal"
            case .cast: "ferry_cast"
            }
        }

        var argumentCount: Int32 {
            switch self {
            case .instant, .time, .doubleText: 1
            case .modulo, .jsonEqual: 2
            case .datePart, .cast: 3
            case .call, .enumIndex: -1
            }
        }
    }

    /// Registers every function on `db`'s connection.
    /// Whether ``register(_:)`` ran on this connection.
    public static func areRegistered(_ db: Database) throws -> Bool {
        try Bool.fetchOne(
            db, sql: "SELECT EXISTS (SELECT 1 FROM pragma_function_list WHERE name = ?)",
            arguments: [Function.instant.name]) ?? false
    }

    public static func register(_ db: Database) throws {
        guard let connection = db.sqliteConnection else { return }
        for function in Function.allCases {
            let code = sqlite3_create_function_v2(
                connection, function.name, function.argumentCount, SQLITE_UTF8 | SQLITE_DETERMINISTIC,
                UnsafeMutableRawPointer(bitPattern: function.rawValue + 1), ferrySQLFunction, nil, nil, nil)
            guard code == SQLITE_OK else {
                throw DatabaseError(resultCode: ResultCode(rawValue: code), message: "cannot register \(function.name)")
            }
        }
    }

    static let evaluator = QueryEvaluator()

    /// An SQL argument as a query literal: NULL, INTEGER, REAL or TEXT (a BLOB reads as NULL).
    static func literal(_ value: OpaquePointer?) -> QueryLiteral {
        switch sqlite3_value_type(value) {
        case SQLITE_INTEGER: return .int(sqlite3_value_int64(value))
        case SQLITE_FLOAT: return .double(sqlite3_value_double(value))
        case SQLITE_TEXT: return text(value).map(QueryLiteral.string) ?? .null
        default: return .null
        }
    }

    static func text(_ value: OpaquePointer?) -> String? {
        guard sqlite3_value_type(value) == SQLITE_TEXT, let pointer = sqlite3_value_text(value) else { return nil }
        let count = Int(sqlite3_value_bytes(value))
        return String(decoding: UnsafeBufferPointer(start: pointer, count: count), as: UTF8.self)
    }

    static func setResult(_ context: OpaquePointer?, _ value: JSONValue) {
        switch value {
        case .bool(let flag): sqlite3_result_int64(context, flag ? 1 : 0)
        case .int(let number): sqlite3_result_int64(context, number)
        case .double(let number) where !number.isNaN: sqlite3_result_double(context, number)
        case .string(let string): setText(context, string)
        default: sqlite3_result_null(context)
        }
    }

    static func setText(_ context: OpaquePointer?, _ string: String) {
        var string = string
        string.withUTF8 { bytes in
            guard let base = bytes.baseAddress, !bytes.isEmpty else {
                sqlite3_result_text(context, "", 0, sqliteTransient)
                return
            }
            let pointer = UnsafeRawPointer(base).assumingMemoryBound(to: CChar.self)
            // The 64-bit length: SQLite reports a result over its length limit as SQLITE_TOOBIG
            // (the store then answers with the evaluator), where `Int32(count)` would trap.
            sqlite3_result_text64(context, pointer, UInt64(bytes.count), sqliteTransient, UInt8(SQLITE_UTF8))
        }
    }

    static func run(_ function: Function, _ context: OpaquePointer?, _ arguments: [OpaquePointer?]) {
        switch function {
        case .instant:
            guard let text = text(arguments[0]) else { return sqlite3_result_null(context) }
            if let value = SQLCompiler.instantMilliseconds(text) {
                sqlite3_result_int64(context, value)
            } else {
                sqlite3_result_null(context)
            }
        case .time:
            guard let text = text(arguments[0]), let time = TimeOfDay(iso8601: text) else {
                return sqlite3_result_null(context)
            }
            sqlite3_result_int64(context, Int64(time.millisecondsSinceMidnight))
        case .call:
            guard let name = text(arguments[0]), let function = QueryFunction(rawValue: name) else {
                return sqlite3_result_null(context)
            }
            let literals = arguments.dropFirst().map { QueryExpression.literal(literal($0)) }
            setResult(context, evaluator.evaluate(.function(function, literals), in: [:]))
        case .datePart:
            guard let name = text(arguments[0]), let function = QueryFunction(rawValue: name),
                let kind = text(arguments[1])
            else { return sqlite3_result_null(context) }
            let argument: QueryLiteral
            switch (kind, literal(arguments[2])) {
            case ("i", .int(let milliseconds)):
                argument = .dateTimeOffset(Timestamp(millisecondsSince1970: milliseconds))
            case ("t", .int(let milliseconds)):
                argument = .timeOfDay(TimeOfDay(millisecondsSinceMidnight: Int(milliseconds)))
            case ("s", .string(let text)): argument = .string(text)
            default: return sqlite3_result_null(context)
            }
            setResult(context, evaluator.evaluate(.function(function, [.literal(argument)]), in: [:]))
        case .modulo:
            let expression = QueryExpression.binary(
                .modulo, .literal(literal(arguments[0])), .literal(literal(arguments[1])))
            setResult(context, evaluator.evaluate(expression, in: [:]))
        case .enumIndex:
            guard let text = text(arguments[0]) else { return sqlite3_result_null(context) }
            for (index, argument) in arguments.dropFirst().enumerated()
            where SQLiteQueryFunctions.text(argument) == text {
                return sqlite3_result_int64(context, Int64(index))
            }
            sqlite3_result_null(context)
        case .cast:
            guard let name = text(arguments[0]), let type = EdmType(rawValue: name), let kind = text(arguments[1])
            else { return sqlite3_result_null(context) }
            let argument: QueryLiteral
            switch (kind, literal(arguments[2])) {
            case ("b", .int(let flag)): argument = .bool(flag != 0)
            case ("n", .int(let number)): argument = .int(number)
            case ("n", .double(let number)): argument = .double(number)
            case ("s", .string(let text)): argument = .string(text)
            case ("g", .string(let text)): argument = .guid(text)
            default: return sqlite3_result_null(context)
            }
            setResult(context, evaluator.evaluate(.cast(.literal(argument), type), in: [:]))
        case .jsonEqual:
            guard let a = text(arguments[0]).flatMap({ try? JSONValue(parsing: $0) }),
                let b = text(arguments[1]).flatMap({ try? JSONValue(parsing: $0) })
            else { return sqlite3_result_null(context) }
            sqlite3_result_int64(context, a == b ? 1 : 0)
        case .doubleText:
            guard case .double(let number) = literal(arguments[0]) else { return sqlite3_result_null(context) }
            setResult(context, evaluator.evaluate(.function(.concat, [.literal(.double(number))]), in: [:]))
        }
    }
}

/// SQLite's `SQLITE_TRANSIENT`: SQLite copies the bytes before the call returns.
private let sqliteTransient = unsafeBitCast(OpaquePointer(bitPattern: -1), to: sqlite3_destructor_type.self)

/// The C entry point of every function; the user data pointer says which one (raw value + 1).
private func ferrySQLFunction(
    _ context: OpaquePointer?, _ count: Int32, _ values: UnsafeMutablePointer<OpaquePointer?>?
) {
    let tag = Int(bitPattern: sqlite3_user_data(context)) - 1
    guard let function = SQLiteQueryFunctions.Function(rawValue: tag) else { return sqlite3_result_null(context) }
    let arguments = (0..<Int(count)).map { values?[$0] }
    if function.argumentCount < 0, arguments.isEmpty { return sqlite3_result_null(context) }
    SQLiteQueryFunctions.run(function, context, arguments)
}
