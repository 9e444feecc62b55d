import FerryServer
import Foundation
import ServerStorageCore
import StoreConformance
import ServerTestSupport
import SyncCore
import Testing

/// Throws generated hostile requests at a running server over HTTP (a fixed seed, a bounded count):
/// queries with extreme numbers, dates and nesting, every function with every arity, odd encodings,
/// and bodies no server should store. Every answer must be below 500, the server must still answer
/// `/health`, and the rows written before must read back byte for byte.
@Suite("HTTP fuzz", .timeLimit(.minutes(10)))
struct HTTPFuzzTests {
    static let requestCount = 2_000

    static let seeded: [JSONObject] = [
        ["id": "a", "title": "hello", "year": .int(Int64.max), "small": .int(Int64.min), "ratio": 1.5e308],
        ["id": "b", "title": "", "year": 0, "small": -1, "ratio": -0.0, "when": "0001-01-01T00:00:00.000Z"],
        [
            "id": "c", "title": "Ünïcödé 🎬 'quoted' \"x\"", "year": 2024, "ratio": .double(.leastNonzeroMagnitude),
            "when": "9999-12-31T23:59:59.999Z",
        ],
        [
            "id": "d", "title": .string(String(repeating: "long ", count: 400)), "year": -9_223_372_036_854_775_000,
            "tags": [1, "x"],
        ],
        ["id": "e", "title": "a+b", "year": 1, "small": 9_223_372_036_854_775_807, "nested": ["k": ["deep": true]]],
    ]

    @Test(arguments: ServerBackend.allCases)
    func hostileRequestsNeverGetA5xxAndLeaveTheDataAlone(_ backend: ServerBackend) async throws {
        let movies = TableSettings(name: "movies", softDelete: true)
        let server = try await LiveServer.start(tables: [movies], backend: backend) { storage in
            let table = StorageTable(name: "movies", schema: movies.schema)
            for item in Self.seeded {
                var content = item
                content["id"] = nil
                _ = try await storage.insert(into: table, id: item.id!, content: content, owner: nil)
            }
        }
        let snapshot = "/tables/movies?$orderby=id&__includedeleted=true&$top=100"
        let before = try await server.send("GET", snapshot)
        #expect(before.status == 200)

        var generator = Generator(random: SeededRandom(seed: 0x5EED_F00D))
        var failures: [String] = []
        var statuses: [Int: Int] = [:]
        for _ in 0..<Self.requestCount {
            let request = generator.request()
            do {
                let reply = try await server.send(
                    request.method, request.target, headers: request.headers, body: request.body)
                statuses[reply.status / 100 * 100, default: 0] += 1
                if reply.status >= 500 {
                    failures.append(
                        "\(request.method) \(request.target.prefix(300)) → \(reply.status) \(reply.text.prefix(200))")
                }
            } catch {
                failures.append("\(request.method) \(request.target.prefix(300)) → no answer: \(error)")
            }
            if failures.count >= 20 { break }
        }
        #expect(failures.isEmpty, "\(failures.count) hostile requests failed:\n\(failures.joined(separator: "\n"))")
        print("HTTP fuzz: \(Self.requestCount) requests, answers by class: \(statuses.sorted { $0.key < $1.key })")
        #expect(try await server.send("GET", "/health").status == 200)
        let after = try await server.send("GET", snapshot)
        #expect(after.body == before.body, "the rows written before the fuzz changed")
        try await server.stop()
    }

    struct FuzzRequest {
        var method: String
        var target: String
        var headers: [(String, String)] = []
        var body: [UInt8]?
    }

    // MARK: - Generation

    /// Values with the well-formed ones first: a strict query picks among the first `valid` only, so
    /// it reaches evaluation; a hostile one picks among all.
    struct Pool {
        var values: [String]
        var valid: Int
    }

    static let fields = Pool(
        values: [
            "title", "year", "small", "ratio", "when", "tags", "nested", "missing", "id", "updatedAt", "version",
            "deleted", "createdAt",
        ], valid: 13)
    static let integers = Pool(
        values: [
            "0", "1", "-1", "9223372036854775807", "-9223372036854775808", "2147483647", "-2147483648",
            "4294967296", "00000000001", "9223372036854775808", "99999999999999999999999999",
        ], valid: 9)
    static let doubles = Pool(
        values: [
            "1e308", "-1e308", "1.7976931348623157e308", "5e-324", "0.0", "-0.0", "1.5", "1e-400",
            "123456789012345678901234567890.5", "1e400", "-1e400", "2.5M", "1.0d", "NaN", "INF", "-INF",
        ], valid: 9)
    static let dates = Pool(
        values: [
            "0001-01-01", "9999-12-31", "2024-02-29", "1970-01-01T00:00:00Z", "9999-12-31T23:59:59.9999999Z",
            "2024-01-01T00:00:00+14:00", "2024-01-01T00:00:00-23:59", "12:00:00", "0001-01-01T00:00:00Z",
            "2023-02-29", "0000-01-01T00:00:00Z", "99999-01-01T00:00:00Z", "2024-13-01T00:00:00Z", "23:59:60",
        ], valid: 9)
    static let strings = Pool(
        values: [
            "''", "'x'", "'it''s'", "'🎬'", "'%00'", "'a+b'", "'%27'", "'\\'",
            "'" + String(repeating: "z", count: 300) + "'", "'open",
        ], valid: 9)
    static let others = Pool(
        values: ["null", "true", "false", "6f9619ff-8b86-d011-b42d-00c04fc964ff", "duration'P1D'"], valid: 4)
    static let arithmetic = Pool(values: ["add", "sub", "mul", "div", "mod", "divby"], valid: 5)
    static let comparisons = Pool(values: ["eq", "ne", "gt", "ge", "lt", "le", "has"], valid: 6)
    static let types = Pool(
        values: [
            "Edm.Int32", "Edm.Int64", "Edm.Double", "Edm.Decimal", "Edm.String", "Edm.Boolean",
            "Edm.DateTimeOffset", "Edm.Date", "Edm.TimeOfDay", "Edm.Guid", "Edm.Byte", "Edm.Nope",
        ], valid: 10)
    /// Each function with the arity it takes (a hostile call picks another).
    static let functions: [(name: String, arity: Int)] = [
        ("substring", 3), ("substring", 2), ("indexof", 2), ("length", 1), ("tolower", 1), ("toupper", 1),
        ("trim", 1), ("concat", 2), ("contains", 2), ("startswith", 2), ("endswith", 2), ("substringof", 2),
        ("replace", 3), ("year", 1), ("month", 1), ("day", 1), ("hour", 1), ("minute", 1), ("second", 1),
        ("round", 1), ("floor", 1), ("ceiling", 1), ("date", 1), ("time", 1), ("now", 0), ("isof", 2),
        ("geo.distance", 2), ("totaloffsetminutes", 1), ("fractionalseconds", 1), ("maxdatetime", 0),
        ("matchesPattern", 2),
    ]

    struct Generator {
        var random: SeededRandom
        /// Whether this request keeps to well-formed values (most do, so they reach evaluation).
        var strict = true

        mutating func number(_ bound: Int) -> Int { Int(random.next() % UInt64(bound)) }
        mutating func chance(_ percent: UInt64) -> Bool { random.next() % 100 < percent }

        mutating func pick(_ pool: Pool) -> String {
            pool.values[number(strict ? pool.valid : pool.values.count)]
        }

        mutating func pick<T>(_ values: [T]) -> T { values[number(values.count)] }

        mutating func operand(depth: Int) -> String {
            if depth > 6 || chance(35) {
                switch number(7) {
                case 0: return pick(HTTPFuzzTests.fields)
                case 1: return pick(integers)
                case 2: return pick(doubles)
                case 3: return pick(dates)
                case 4: return pick(strings)
                case 5: return pick(others)
                default: return "cast(\(pick(HTTPFuzzTests.fields)),\(pick(types)))"
                }
            }
            switch number(6) {
            case 0: return "(\(operand(depth: depth + 1)) \(pick(arithmetic)) \(operand(depth: depth + 1)))"
            case 1:
                let function = pick(functions)
                let arity = strict ? function.arity : number(5)
                let arguments = (0..<arity).map { _ in operand(depth: depth + 1) }
                return "\(function.name)(\(arguments.joined(separator: ",")))"
            case 2: return "-\(operand(depth: depth + 1))"
            case 3: return "cast(\(operand(depth: depth + 1)),\(pick(types)))"
            case 4: return "(\(operand(depth: depth + 1)))"
            default: return predicate(depth: depth + 1)
            }
        }

        mutating func predicate(depth: Int) -> String {
            switch number(5) {
            case 0:
                let op = pick(["and", "or"])
                return "(\(predicate(depth: depth + 1)) \(op) \(predicate(depth: depth + 1)))"
            case 1: return "not \(operand(depth: depth + 1))"
            case 2:
                let list = (0..<(1 + number(3))).map { _ in operand(depth: depth + 1) }
                return "\(operand(depth: depth + 1)) in (\(list.joined(separator: ",")))"
            default:
                return "\(operand(depth: depth + 1)) \(pick(comparisons)) \(operand(depth: depth + 1))"
            }
        }

        /// A well-typed Boolean expression, so that it passes the parser and reaches evaluation (and
        /// the SQL paths) with extreme values.
        mutating func typedBoolean(depth: Int) -> String {
            if depth > 5 { return "\(typedNumber(depth: depth + 1)) \(pick(["eq", "lt", "ge"])) \(pick(integers))" }
            switch number(8) {
            case 0:
                return "(\(typedBoolean(depth: depth + 1)) \(pick(["and", "or"])) \(typedBoolean(depth: depth + 1)))"
            case 1: return "not (\(typedBoolean(depth: depth + 1)))"
            case 2:
                let name = pick(["contains", "startswith", "endswith"])
                return "\(name)(\(typedString(depth: depth + 1)),\(typedString(depth: depth + 1)))"
            case 3:
                let list = (0..<(1 + number(3))).map { _ in typedNumber(depth: depth + 1) }
                return "\(typedNumber(depth: depth + 1)) in (\(list.joined(separator: ",")))"
            case 4:
                return "\(typedString(depth: depth + 1)) \(pick(comparisons)) \(typedString(depth: depth + 1))"
            case 5: return "\(typedDate(depth: depth + 1)) \(pick(comparisons)) \(typedDate(depth: depth + 1))"
            default:
                return "\(typedNumber(depth: depth + 1)) \(pick(comparisons)) \(typedNumber(depth: depth + 1))"
            }
        }

        mutating func typedNumber(depth: Int) -> String {
            if depth > 5 || chance(30) {
                return pick([pick(integers), pick(integers), pick(doubles), pick(["year", "small", "ratio"])])
            }
            switch number(9) {
            case 0, 1:
                return "(\(typedNumber(depth: depth + 1)) \(pick(arithmetic)) \(typedNumber(depth: depth + 1)))"
            case 2: return "-(\(typedNumber(depth: depth + 1)))"
            case 3: return "length(\(typedString(depth: depth + 1)))"
            case 4: return "indexof(\(typedString(depth: depth + 1)),\(typedString(depth: depth + 1)))"
            case 5:
                return "\(pick(["year", "month", "day", "hour", "minute", "second"]))(\(typedDate(depth: depth + 1)))"
            case 6: return "\(pick(["round", "floor", "ceiling"]))(\(typedNumber(depth: depth + 1)))"
            case 7:
                let type = pick(["Edm.Int32", "Edm.Int64", "Edm.Double", "Edm.Decimal"])
                return "cast(\(chance(50) ? typedNumber(depth: depth + 1) : typedString(depth: depth + 1)),\(type))"
            default: return pick(integers)
            }
        }

        mutating func typedString(depth: Int) -> String {
            if depth > 5 || chance(35) { return chance(50) ? pick(strings) : "title" }
            switch number(6) {
            case 0: return "\(pick(["tolower", "toupper", "trim"]))(\(typedString(depth: depth + 1)))"
            case 1:
                let start = typedNumber(depth: depth + 1)
                if chance(50) { return "substring(\(typedString(depth: depth + 1)),\(start))" }
                return "substring(\(typedString(depth: depth + 1)),\(start),\(typedNumber(depth: depth + 1)))"
            case 2: return "concat(\(typedString(depth: depth + 1)),\(typedString(depth: depth + 1)))"
            case 3:
                return
                    "replace(\(typedString(depth: depth + 1)),\(typedString(depth: depth + 1)),\(typedString(depth: depth + 1)))"
            case 4: return "cast(\(typedNumber(depth: depth + 1)),Edm.String)"
            default: return pick(strings)
            }
        }

        mutating func typedDate(depth: Int) -> String {
            switch number(4) {
            case 0: return pick(["when", "updatedAt"])
            case 1: return "cast(\(typedString(depth: depth + 1)),Edm.DateTimeOffset)"
            default: return pick(Pool(values: dates.values.filter { $0.contains("T") }, valid: 6))
            }
        }

        /// Percent-encodes some characters, leaves others raw, and writes some spaces as `+`.
        mutating func encode(_ text: String) -> String {
            let mode = number(3)
            var output = ""
            for byte in text.utf8 {
                let raw =
                    byte > 0x20 && byte < 0x7F && byte != UInt8(ascii: "&") && byte != UInt8(ascii: "#")
                    && byte != UInt8(ascii: "%") && byte != UInt8(ascii: "+")
                if byte == 0x20 && mode == 1 {
                    output += "+"
                } else if raw && (mode != 2 || byte == UInt8(ascii: "'")) {
                    output.unicodeScalars.append(Unicode.Scalar(byte))
                } else {
                    output += String(format: "%%%02X", byte)
                }
            }
            return output
        }

        mutating func query() -> String {
            var parts: [String] = []
            if chance(90) {
                var filter = strict ? typedBoolean(depth: 0) : predicate(depth: 0)
                if chance(3) {
                    let depth = number(300)
                    filter = String(repeating: "(", count: depth) + filter + String(repeating: ")", count: depth)
                }
                parts.append("$filter=" + encode(filter))
            }
            if chance(30) {
                let key = chance(50) ? pick(HTTPFuzzTests.fields) : operand(depth: 3)
                parts.append("$orderby=" + encode("\(key) \(pick(["asc", "desc", ""]))"))
            }
            let counts = Pool(
                values: ["0", "1", "5", "9223372036854775807", "-1", "99999999999999999999", "1e3", "", "NaN", "+5"],
                valid: 4)
            if chance(25) { parts.append("$top=" + pick(counts)) }
            if chance(25) { parts.append("$skip=" + pick(counts)) }
            if chance(15) { parts.append("$select=" + encode(strict ? "id,title" : "title,,*")) }
            if chance(15) { parts.append("$count=" + pick(Pool(values: ["true", "false", "yes"], valid: 2))) }
            if chance(10) { parts.append("__includedeleted=true") }
            if !strict && chance(10) { parts.append("$filter=%E0%80%80%FF%00") }
            return parts.joined(separator: "&")
        }

        mutating func body() -> [UInt8] {
            let values = [
                "1e400", "-1e400", String(repeating: "9", count: 401), "9223372036854775808", "\"\\u0000\"",
                "\"\\ud800\"", "[" + String(repeating: "[", count: 600) + "]",
                "{\"a\":" + String(repeating: "{\"a\":", count: 50) + "1" + String(repeating: "}", count: 51), "null",
                "true", "\"x\"", "[1,2,3]", "{}", "1.5",
            ]
            var object: [String] = []
            if chance(60) { object.append("\"id\":\"fz\(number(50))\"") }
            for _ in 0..<number(4) {
                let key = pick(["title", "n", "id", "ID", "updatedAt", "version", "deleted", "\\u0000", ""])
                object.append("\"\(key)\":\(pick(values))")
            }
            var text = "{" + object.joined(separator: ",") + "}"
            if chance(10) { text = String(text.dropLast(number(3))) }
            if chance(5) { return [0xFF, 0xFE, 0x00, 0x7B] }
            return Array(text.utf8)
        }

        mutating func request() -> FuzzRequest {
            strict = chance(75)
            let version: [(String, String)] = chance(30) ? [("ZUMO-API-VERSION", "2.0.0")] : []
            if chance(70) {
                // Queries over the seeded table: they must leave it alone.
                return FuzzRequest(method: "GET", target: "/tables/movies?" + query(), headers: version)
            }
            // Writes go to a scratch table (or odd paths), never to the seeded rows.
            let id = pick(["fz1", "fz2", "a%00b", "..", "%2F", String(repeating: "x", count: 300), "fz%2B3"])
            let path = pick([
                "/tables/scratch", "/tables/scratch/\(id)", "/tables/", "/tables/scratch/\(id)/extra", "/tables/__x",
            ])
            let method = pick(["POST", "PUT", "PATCH", "DELETE", "GET", "HEAD", "OPTIONS", "TRACE"])
            var headers = version
            let contentType = pick([
                "application/json", "application/json-patch+json", "application/json; charset=utf-16", "text/plain",
                "application/json; charset=\"utf-8\"", "",
            ])
            headers.append(("Content-Type", contentType))
            if chance(20) {
                let name = pick(["If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since"])
                headers.append(
                    (name, pick(["*", "\"x\"", "W/\"x\"", "Sun, 06 Nov 123456789 08:49:37 GMT", "garbage", ""])))
            }
            var body = body()
            if contentType == "application/json-patch+json" {
                let op = pick(["add", "remove", "replace", "move", "copy", "test", "nope"])
                let target = pick(["/id", "", "/title", "/a/b/c", "/tags/-", "/deleted", "/version", "~1"])
                body = Array(#"[{"op":"\#(op)","path":"\#(target)","from":"\#(target)","value":1e400}]"#.utf8)
            }
            return FuzzRequest(method: method, target: path, headers: headers, body: method == "GET" ? nil : body)
        }
    }
}
