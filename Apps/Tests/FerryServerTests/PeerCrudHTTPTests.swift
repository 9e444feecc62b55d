import FerryServer
import Foundation
import ServerStorage
import StoreConformance
import SyncCore
import Testing

/// Replays the peers' 237 CRUD cases (`crud-cases.json`) against the reference server over real
/// loopback HTTP. Each case runs on a fresh server whose tables are configured from the case's
/// table description; the peers' prose bodies and expectations are turned into requests and
/// checks by the interpreter below.
@Suite("Peer CRUD cases over HTTP")
struct PeerCrudHTTPTests {
    /// Cases where Ferry deliberately answers differently; each is explained in
    /// docs/server-peer-differences.md.
    static let deliberateDifferences: [String: String] = [
        "az.ZumoVersion_MissingOrInvalid_BadRequest[tables/movies/id-001 header=None]":
            "no ZUMO-API-VERSION means 3.0.0 (CommunityToolkit clients omit it)",
        "node.version: missing ZUMO-API-VERSION -> 400": "no ZUMO-API-VERSION means 3.0.0",
        "az.AuthenticatedCreateTests[tables/movies_rated,user=success]":
            "no pre-commit hooks (the peer's test uppercases titles)",
        "az.AuthenticatedCreateTests[tables/movies_legal,user=success]":
            "no pre-commit hooks (the peer's test uppercases titles)",
        "net2.Delete_EntityIsDeleted_ReturnsNoContent": "2.0 DELETE answers 200 with the item, as the Node server did",
        "node.link: Link header when results == pageSize": "no Link when no rows follow (the server knows)",
    ]

    static let movieID = "id-000"
    static let blackPanther: JSONObject = [
        "bestPictureWinner": true, "duration": 134, "rating": "PG-13", "releaseDate": "2018-02-16T00:00:00.000Z",
        "title": "Black Panther", "year": 2018,
    ]

    // MARK: - Tables

    /// The movie model's validation rules (title 2…60 characters, year 1920…2030, duration 60…360,
    /// all required; ratings per dataset).
    static func movieFields(toolkit: Bool) -> [String: FieldRule] {
        var fields: [String: FieldRule] = [
            "title": FieldRule(type: .string, required: true, minimumLength: 2, maximumLength: 60),
            "year": FieldRule(type: .integer, required: true, minimum: 1920, maximum: 2030),
            "duration": FieldRule(type: .integer, required: true, minimum: 60, maximum: 360),
            "bestPictureWinner": FieldRule(type: .bool),
            "releaseDate": FieldRule(type: toolkit ? .date : .dateTimeOffset),
        ]
        fields["rating"] =
            toolkit
            ? FieldRule(type: .enumeration(["Unrated", "G", "PG", "PG13", "NC17", "R"]))
            : FieldRule(type: .string, allowedValues: [.null, "G", "PG", "PG-13", "R", "NC-17"])
        return fields
    }

    struct Setup {
        var tables: [TableSettings] = []
        var seeds: [(table: String, dataset: String)] = []
        var dynamicDefaults = TableSettings(name: "*")
    }

    static func setup(for peerCase: JSONObject, name: String) -> (Setup, tablePath: String) {
        var setup = Setup()
        let table = peerCase["table"]?.objectValue
        let path = table?["path"]?.stringValue ?? ""
        let dataset = table?["dataset"]?.stringValue ?? ""
        let setupText = (peerCase["setup"]?.arrayValue ?? []).compactMap(\.stringValue).joined(separator: "; ")
        func movies(_ tableName: String, toolkit: Bool) -> TableSettings {
            var settings = TableSettings(
                name: tableName, softDelete: table?["softDelete"]?.boolValue ?? false,
                pageSize: Int(table?["pageSize"]?.intValue ?? 100), maxTop: 512_000,
                fields: movieFields(toolkit: toolkit), additionalFields: false)
            if let view = table?["dataView"]?.stringValue { settings.dataView = view }
            if let status = table?["unauthorizedStatus"]?.intValue {
                settings.requiresAuth = true
                settings.unauthorizedStatus = Int(status)
            }
            if setupText.contains("dataView = (id == {id})") { settings.dataView = "id eq '\(movieID)'" }
            if setupText.contains("dataView excludes {id}") { settings.dataView = "id ne '\(movieID)'" }
            if setupText.contains("IsAuthorized returns false") { settings.requiresAuth = true }
            return settings
        }
        if name.hasPrefix("net2.") {
            let net2 = TableSettings(
                name: "net2", fields: ["stringValue": FieldRule(type: .string), "intValue": FieldRule(type: .integer)],
                additionalFields: false)
            let moviesTable = TableSettings(name: "net2movies")
            setup.tables = [net2, moviesTable]
            return (setup, "tables/net2")
        }
        switch dataset {
        case "movies-toolkit", "movies-azure":
            let tableName = path.split(separator: "/").last.map(String.init) ?? "movies"
            setup.tables = [movies(tableName, toolkit: dataset == "movies-toolkit")]
            setup.seeds = [(tableName, dataset)]
            return (setup, "tables/\(tableName)")
        case "datetime-azure":
            setup.tables = [
                TableSettings(
                    name: "datetime",
                    fields: ["dateOnly": FieldRule(type: .date), "timeOnly": FieldRule(type: .timeOfDay)])
            ]
            setup.seeds = [("datetime", dataset)]
            return (setup, "tables/datetime")
        case "kitchensink (empty unless seeded)":
            setup.tables = [TableSettings(name: "kitchensink")]
            return (setup, "tables/kitchensink")
        default:
            // The Node cases: tables named in the steps, configured as the case says.
            var settings = TableSettings(
                name: "*", softDelete: table?["softDelete"]?.boolValue ?? false,
                pageSize: Int(table?["pageSize"]?.intValue ?? 50), maxTop: Int(table?["maxTop"]?.intValue ?? 1000),
                perUser: table?["perUser"]?.boolValue ?? false)
            let notes = peerCase["notes"]?.stringValue ?? ""
            if notes.contains("maxTop=0") { settings.maxTop = 0 }
            if notes.contains("read disabled") { settings.disabledOperations = [.query, .read] }
            if settings.perUser { settings.requiresAuth = false }
            setup.dynamicDefaults = settings
            if !name.contains("unregistered table") {
                var names: Set<String> = []
                for step in peerCase["request"]?["steps"]?.arrayValue ?? [] {
                    if let stepPath = step["path"]?.stringValue {
                        let parts = stepPath.split(separator: "/")
                        if parts.count >= 2 { names.insert(String(parts[1])) }
                    }
                }
                setup.tables = names.sorted().map { name in
                    var declared = settings
                    declared.name = name
                    return declared
                }
            }
            return (setup, "tables/{name}")
        }
    }

    static func start(_ setup: Setup, dataSetup: [String]) async throws -> LiveServer {
        // The peers have registered tables only: a table the case does not declare does not exist.
        try await LiveServer.start(
            tables: setup.tables, allowsDynamicTables: false, dynamicDefaults: setup.dynamicDefaults
        ) { storage in
            for (tableName, dataset) in setup.seeds {
                let settings = setup.tables.first { $0.name == tableName }!
                let table = StorageTable(name: tableName, schema: settings.schema)
                for item in try PeerDataset.load(dataset).items {
                    guard let id = item.id else { continue }
                    var content = item
                    for property in SystemProperty.allCases { content[property.rawValue] = nil }
                    let stored = try await storage.insert(into: table, id: id, content: content, owner: nil)
                    if dataSetup.contains(where: { $0.hasPrefix("mark {id} deleted=true") }), id == movieID {
                        _ = try await storage.replace(
                            in: table, id: id, expectedVersion: stored.version, content: content, deleted: true,
                            owner: .all)
                    }
                }
            }
            if let net2 = setup.tables.first(where: { $0.name == "net2" }) {
                _ = try await storage.insert(
                    into: StorageTable(name: "net2", schema: net2.schema), id: movieID,
                    content: ["stringValue": "Apple", "intValue": 1], owner: nil)
                for index in 0..<11 {
                    _ = try await storage.insert(
                        into: StorageTable(name: "net2movies"), id: "m\(index)",
                        content: [
                            "Name": .string("Movie \(String(10 - index))"), "Category": "Drama",
                            "ReleaseDate": "2000-01-01T00:00:00.000Z", "Rating": "PG",
                        ], owner: nil)
                }
            }
            if setup.tables.contains(where: { $0.name == "kitchensink" }) {
                _ = try await storage.insert(
                    into: StorageTable(name: "kitchensink"), id: "ks-serialization", content: kitchenSink, owner: nil)
            }
        }
    }

    static let kitchenSink: JSONObject = [
        "booleanValue": true, "byteValue": 42, "byteArrayValue": "AQIDBA==", "charValue": "a",
        "dateOnlyValue": "2023-12-15", "dateTimeValue": "2023-12-20T10:26:30.231Z",
        "dateTimeOffsetValue": "2023-12-20T10:21:05.421Z", "decimalValue": 42.42, "doubleValue": 42.42,
        "enumValue": "Completed", "floatValue": 42.42, "guidValue": "29386779-34b1-464a-bb5b-4053c2ee61b3",
        "intValue": 42, "longValue": 42, "nullableDouble": .null, "nullableEnumValue": .null,
        "pointValue": ["type": "Point", "coordinates": [-122.333056, 47.609722]], "stringValue": "state=none",
        "timeOnlyValue": "09:52:35.321",
    ]

    // MARK: - The test

    @Test("peer CRUD cases over HTTP", .enabled(if: PeerData.isAvailable, PeerData.missingNotice))
    func replay() async throws {
        guard let cases = try PeerData.load("crud-cases.json").arrayValue else {
            throw ReplayError(description: "crud-cases.json is not an array")
        }
        var failures: [(name: String, reason: String)] = []
        for value in cases {
            guard let peerCase = value.objectValue, let name = peerCase["name"]?.stringValue else { continue }
            let dataSetup = (peerCase["setup"]?.arrayValue ?? []).compactMap(\.stringValue)
            let (setup, tablePath) = Self.setup(for: peerCase, name: name)
            let server = try await Self.start(setup, dataSetup: dataSetup)
            var runner = Runner(
                server: server, name: name, protocolVersion: peerCase["protocol"]?.stringValue ?? "3.0",
                tablePath: tablePath)
            let reason: String?
            do {
                if peerCase["request"]?["steps"] != nil {
                    reason = try await runner.runSteps(peerCase)
                } else {
                    reason = try await runner.runSingle(peerCase)
                }
            } catch {
                reason = "error: \(error)"
            }
            try await server.stop()
            if let reason { failures.append((name, reason)) }
        }
        let unexpected = failures.filter { Self.deliberateDifferences[$0.name] == nil }
        print("peer CRUD cases over HTTP: \(cases.count - failures.count) passed, \(failures.count) failed")
        for failure in failures {
            let note = Self.deliberateDifferences[failure.name].map { " [deliberate: \($0)]" } ?? ""
            print("  FAIL \(failure.name): \(failure.reason)\(note)")
        }
        #expect(cases.count == 237)
        #expect(unexpected.isEmpty, "\(unexpected.count) cases failed that are not documented differences")
        let failed = Set(failures.map(\.name))
        for name in Self.deliberateDifferences.keys {
            #expect(failed.contains(name), "'\(name)' is listed as a difference but now passes")
        }
    }

    // MARK: - Interpreter

    struct Runner {
        let server: LiveServer
        let name: String
        let protocolVersion: String
        let tablePath: String
        var lastBody: JSONObject = [:]

        init(server: LiveServer, name: String, protocolVersion: String, tablePath: String) {
            self.server = server
            self.name = name
            self.protocolVersion = protocolVersion
            self.tablePath = tablePath
        }

        var versionHeader: [(String, String)] {
            protocolVersion == "2.0" ? [("ZUMO-API-VERSION", "2.0.0")] : []
        }

        /// The entity as the server holds it now, read through the protocol.
        func current(_ table: String, _ id: String) async throws -> JSONObject? {
            let reply = try await server.send(
                "GET", "/\(table)/\(id)?__includedeleted=true",
                headers: [("Authorization", "Bearer " + LiveServer.token("success"))])
            return reply.status == 200 ? reply.json?.objectValue : nil
        }

        func userHeaders(_ user: String?) -> [(String, String)] {
            switch user {
            case "success"?, "user1"?, "user2"?: [("Authorization", "Bearer " + LiveServer.token(user!))]
            case "failed"?: [("X-ZUMO-AUTH", LiveServer.token("failed", secret: "another-secret-0123456789"))]
            default: []
            }
        }

        mutating func runSingle(_ peerCase: JSONObject) async throws -> String? {
            guard let request = peerCase["request"]?.objectValue, let expect = peerCase["expect"]?.objectValue else {
                return "malformed case"
            }
            let method = request["method"]?.stringValue ?? "GET"
            var path = request["path"]?.stringValue ?? "{table}"
            if let cut = path.range(of: " (") { path = String(path[..<cut.lowerBound]) }
            path = path.replacingOccurrences(of: "{table}", with: tablePath)
            path = path.replacingOccurrences(of: "tables/{t}", with: tablePath)
            if path == "movies" { path = "tables/net2movies" }
            path = path.replacingOccurrences(of: "{id}", with: movieID)
            path = path.replacingOccurrences(of: "{ksId}", with: "ks-serialization")
            var query = request["query"]?.stringValue ?? ""
            if let mark = path.firstIndex(of: "?") {
                query = String(path[path.index(after: mark)...])
                path = String(path[..<mark])
            }
            let segments = path.split(separator: "/").map(String.init)
            let table = segments.prefix(2).joined(separator: "/")
            let targetID = segments.count > 2 ? segments[2] : movieID
            let before = try await current(table, targetID)
            let existing = try await current(table, movieID)
            let etag = before.flatMap { $0["version"]?.stringValue }.map { "\"\($0)\"" } ?? "\"none\""
            let updatedAt = before.flatMap { $0["updatedAt"]?.stringValue }.flatMap { Timestamp(iso8601: $0) }

            // Headers.
            var headers: [(String, String)] = []
            var sentVersionHeader = false
            for (key, value) in request["headers"]?.objectValue ?? [:] {
                guard var text = value.stringValue, !key.hasPrefix("(") else { continue }
                if key == "X-MS-CLIENT-PRINCIPAL" { continue }
                if key.lowercased() == "zumo-api-version" { sentVersionHeader = true }
                text = text.replacingOccurrences(of: "{etag}", with: etag)
                if text.hasPrefix("RFC1123({updatedAt}"), let updatedAt {
                    let shift: Int64 = text.contains("+1h") ? 3_600_000 : -3_600_000
                    text = HTTPDateText.format(
                        Timestamp(millisecondsSince1970: updatedAt.millisecondsSince1970 + shift))
                }
                headers.append((key, text))
            }
            if !sentVersionHeader && !query.lowercased().contains("zumo-api-version") && !name.contains("ZumoVersion") {
                headers += versionHeader
            }
            var user: String?
            if let range = name.range(of: "user=") {
                user = String(name[range.upperBound...].prefix { $0 != "]" && $0 != "," })
            }
            if let auth = request["auth"]?.stringValue { user = auth }
            if (peerCase["table"]?["path"]?.stringValue ?? "").contains("authorized") && user == nil
                && !(peerCase["setup"]?.arrayValue ?? []).contains(where: {
                    $0.stringValue?.contains("IsAuthorized returns false") ?? false
                })
            {
                user = "success"
            }
            headers += userHeaders(user)

            // Body.
            var body: [UInt8]?
            var sentObject: JSONObject?
            if let raw = request["rawBody"]?.stringValue {
                body = Array(raw.utf8)
            } else if let value = request["body"] {
                let json = try materialize(value, before: existing, urlID: targetID)
                if case .object(let object) = json { sentObject = object }
                body = json.serializedUTF8()
                if !headers.contains(where: { $0.0.lowercased() == "content-type" }) {
                    headers.append(("Content-Type", "application/json"))
                }
            }
            let target = "/" + path + (query.isEmpty ? "" : "?" + encodedQuery(query))
            let reply = try await server.send(method, target, headers: headers, body: body)

            // Checks.
            let expectedStatus = Int(expect["status"]?.intValue ?? 200)
            guard reply.status == expectedStatus else {
                return "status \(reply.status), expected \(expectedStatus): \(reply.text.prefix(160))"
            }
            let object = reply.json?.objectValue
            if reply.status >= 400, reply.status != 409, reply.status != 412, object?["error"]?.stringValue == nil,
                expectedStatus != 400 || !(expect["body"]?.stringValue?.contains("no payload") ?? false)
            {
                return "a \(reply.status) without a JSON error message"
            }
            for (header, value) in expect["headers"]?.objectValue ?? [:] {
                let expected = value.stringValue ?? ""
                switch header {
                case "ETag":
                    guard let actual = reply.header("ETag") else { return "no ETag" }
                    if let version = object?["version"]?.stringValue, actual != "\"\(version)\"" {
                        return "ETag \(actual) is not the body's version \(version)"
                    }
                    if expected == "{etag}" && actual != etag { return "ETag \(actual), expected \(etag)" }
                case "Location":
                    guard let location = reply.header("Location"), let id = object?["id"]?.stringValue,
                        location.hasPrefix("http"), location.hasSuffix("/\(table)/\(id)")
                    else { return "Location \(reply.header("Location") ?? "absent")" }
                case "Last-Modified":
                    guard let lastModified = reply.header("Last-Modified"), HTTPDateText.parse(lastModified) != nil
                    else {
                        return "Last-Modified \(reply.header("Last-Modified") ?? "absent")"
                    }
                case "Content-Type":
                    if reply.header("Content-Type")?.hasPrefix(expected) != true {
                        return "Content-Type \(reply.header("Content-Type") ?? "absent"), expected \(expected)"
                    }
                default:
                    return "unknown header check \(header)"
                }
            }
            if let prose = expect["body"]?.stringValue,
                let problem = checkBody(prose, object, sent: sentObject, before: before)
            {
                return problem
            }
            if let values = expect["jsonValues"]?.objectValue, let problem = checkValues(values, reply.json) {
                return problem
            }
            if let state = expect["stateAfter"]?.stringValue {
                let after = try await current(table, targetID)
                let afterSent = try await current(table, sentObject?["id"]?.stringValue ?? "test-id")
                switch state {
                case "nothing stored":
                    if afterSent != nil && sentObject?["id"]?.stringValue == "test-id" { return "test-id was stored" }
                case "unchanged":
                    if after?["version"] != before?["version"] { return "the item changed" }
                case "entity removed (hard delete)", "count 247, entity gone":
                    if after != nil { return "the item is still there" }
                case let text where text.contains("deleted=true"):
                    guard after?["deleted"] == true, after?["version"] != before?["version"] else {
                        return "the item is not soft-deleted with a new version"
                    }
                case "entity stored with same metadata as returned":
                    if let id = object?["id"]?.stringValue,
                        try await current(table, id)?["version"] != object?["version"]
                    {
                        return "the stored item differs from the returned one"
                    }
                default:
                    return "unknown state check '\(state)'"
                }
            }
            return nil
        }

        /// Turns a case's body (JSON, or prose describing one) into JSON.
        func materialize(_ value: JSONValue, before: JSONObject?, urlID: String) throws -> JSONValue {
            guard case .string(let prose) = value else { return substitute(value, before: before) }
            var entity = before ?? [:]
            switch prose {
            case "[...]": return []
            case "Black Panther movie":
                var movie = blackPanther
                movie["id"] = .string(urlID)
                return .object(movie)
            case "a movie with id=\"missing\"":
                var movie = blackPanther
                movie["id"] = "missing"
                return .object(movie)
            case "replacement", "existing entity with changed fields", "existing entity with new title":
                entity["title"] = "Replacement Title"
            case "delta":
                // A 2.0 client sends the changed members only.
                return ["stringValue": "Banana"]
            case "full item":
                // A 2.0 client strips the system properties the server owns (all but version).
                for key in ["createdAt", "updatedAt", "deleted"] { entity[key] = nil }
                entity["stringValue"] = "Banana"
            default:
                if let range = prose.range(of: "with title=\"New Title\"") {
                    _ = range
                    entity["title"] = "New Title"
                } else if let range = prose.range(of: " with ") {
                    let assignment = prose[range.upperBound...]
                    let parts = assignment.split(separator: "=", maxSplits: 1)
                    if parts.count == 2 {
                        var text = String(parts[1])
                        if text.hasPrefix("'") { text = String(text.dropFirst().dropLast()) }
                        let field = String(parts[0])
                        if let number = Int64(text) {
                            entity[field] = .int(number)
                        } else if text == "false" || text == "true" {
                            entity[field] = .bool(text == "true")
                        } else {
                            entity[field] = .string(text)
                        }
                    }
                }
            }
            return .object(entity)
        }

        /// Replaces placeholders inside JSON bodies.
        func substitute(_ value: JSONValue, before: JSONObject?) -> JSONValue {
            switch value {
            case .string(let text):
                switch text {
                case "{id}": return .string(movieID)
                case "{newGuid}", "{newGuid N-format}":
                    return .string(UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: ""))
                case "<base64 of a random guid>", "<base64>", "<base64 random guid>":
                    return .string(Data(UUID().uuidString.utf8.prefix(16)).base64EncodedString())
                case "<date>": return "2024-01-01T00:00:00.000Z"
                default: return value
                }
            case .array(let values): return .array(values.map { substitute($0, before: before) })
            case .object(var object):
                if object["op"] != nil, object["value"] == "<the entity's current value>",
                    let path = object["path"]?.stringValue
                {
                    object["value"] = before?[String(path.drop { $0 == "/" })] ?? .null
                    return .object(object)
                }
                return .object(object.mapValues { substitute($0, before: before) })
            default: return value
            }
        }

        func checkBody(_ prose: String, _ object: JSONObject?, sent: JSONObject?, before: JSONObject?) -> String? {
            let lower = prose.lowercased()
            if lower.contains("no payload") {
                return object?["id"] == nil ? nil : "the conflicting entity was returned"
            }
            if lower.contains("existing") || lower.contains("current") || lower.contains("server entity")
                || lower == "entity" || lower.contains("db values")
            {
                guard let object, object["id"] != nil, object["version"] != nil else { return "no entity in the body" }
                if let before, lower.contains("existing") || lower.contains("current"),
                    object["version"] != before["version"] || object["title"] != before["title"]
                {
                    return "the body is not the server's current entity"
                }
            }
            if lower.contains("upper-cased") {
                let title = object?["title"]?.stringValue ?? ""
                if title != title.uppercased() { return "title '\(title)' is not upper-cased" }
            }
            if lower.contains("client-sent values ignored") {
                if object?["updatedAt"] == sent?["updatedAt"] || object?["version"] == sent?["version"] {
                    return "client-sent system values were kept"
                }
            }
            if lower.contains("new version"), object?["version"] == before?["version"] {
                return "the version did not change"
            }
            if lower.contains("deleted=false"), object?["deleted"] != false { return "the entity is still deleted" }
            if lower.contains("title changed"), object?["title"] != "New Title" { return "the title did not change" }
            if lower.hasPrefix("patched entity"), object?["title"] != "Test Movie Title" {
                return "the patch was not applied"
            }
            if lower.contains("createdat"), lower.contains("no version") {
                return nil  // checked through jsonValues-like logic in runSingle's list check below
            }
            if prose.hasPrefix("{\"results\":[5 items") {
                guard let results = object?["results"]?.arrayValue, results.count == 5, object?["count"] == 11 else {
                    return "expected 5 results and count 11"
                }
            }
            return nil
        }

        func checkValues(_ values: JSONObject, _ body: JSONValue?) -> String? {
            for (path, expected) in values {
                var current = body
                for part in path.split(separator: ".") {
                    if part.hasSuffix("[0]") {
                        current = current?[String(part.dropLast(3))]?.arrayValue?.first
                    } else {
                        current = current?[String(part)]
                    }
                }
                if path == "updatedAt" {
                    guard let text = current?.stringValue, Timestamp(iso8601: text) != nil, text.hasSuffix("Z") else {
                        return "updatedAt \(current?.serialized() ?? "absent") is not an ISO 8601 UTC date-time"
                    }
                    continue
                }
                if current != expected {
                    return "\(path) is \(current?.serialized() ?? "absent"), expected \(expected.serialized())"
                }
            }
            return nil
        }

        // MARK: Node step sequences

        mutating func runSteps(_ peerCase: JSONObject) async throws -> String? {
            let steps = peerCase["request"]?["steps"]?.arrayValue ?? []
            var created: Set<String> = []
            for (index, stepValue) in steps.enumerated() {
                guard let step = stepValue.objectValue else { continue }
                let method = step["method"]?.stringValue ?? "GET"
                if method == "POST (x4)" {
                    for (id, value, user) in [
                        ("1", "test1", "user1"), ("2", "test2", "user1"), ("3", "test1", "user2"),
                        ("4", "test2", "user2"),
                    ] {
                        let reply = try await server.send(
                            "POST", "/tables/perUser", headers: versionHeader + userHeaders(user),
                            json: ["id": .string(id), "value": .string(value)])
                        guard reply.status == 201 else { return "step \(index): insert \(id) gave \(reply.status)" }
                    }
                    continue
                }
                let path = step["path"]?.stringValue ?? "/"
                let parts = path.split(separator: "/")
                // A read of an item no earlier step created (the peer test relied on a previous test).
                if method == "GET", parts.count == 3, step["expectStatus"]?.intValue == 200, !created.contains(path) {
                    _ = try await server.send(
                        "POST", "/" + parts.prefix(2).joined(separator: "/"), headers: versionHeader,
                        json: ["id": .string(String(parts[2]))])
                }
                var headers: [(String, String)] = []
                var hasVersion = false
                for (key, value) in step["headers"]?.objectValue ?? [:] {
                    guard var text = value.stringValue else { continue }
                    if key.lowercased() == "zumo-api-version" { hasVersion = true }
                    if text.hasPrefix("<version from POST") { text = lastBody["version"]?.stringValue ?? "" }
                    headers.append((key, text))
                }
                let query = step["query"]?.stringValue ?? ""
                if !hasVersion && !query.lowercased().contains("zumo-api-version")
                    && !name.hasPrefix("node.version: missing")
                {
                    headers += versionHeader
                }
                headers += userHeaders(step["user"]?.stringValue)
                var body: [UInt8]?
                if let raw = step["rawBody"]?.stringValue {
                    body = Array(raw.utf8)
                } else if let value = step["body"] {
                    var json = substitute(value, before: nil)
                    if case .object(var object) = json,
                        object["version"]?.stringValue?.hasPrefix("<version from POST") == true
                    {
                        object["version"] = lastBody["version"] ?? .null
                        json = .object(object)
                    }
                    body = json.serializedUTF8()
                    headers.append(("Content-Type", "application/json"))
                }
                let target = path + (query.isEmpty ? "" : "?" + encodedQuery(query))
                let reply = try await server.send(method, target, headers: headers, body: body)
                if method == "POST", reply.status == 201, let object = reply.json?.objectValue {
                    lastBody = object
                    if let id = object["id"]?.stringValue {
                        created.insert("/" + parts.prefix(2).joined(separator: "/") + "/" + id)
                    }
                }
                let label = "step \(index + 1) (\(method) \(path))"
                if let expected = step["expectStatus"]?.intValue, reply.status != Int(expected) {
                    return "\(label): status \(reply.status), expected \(expected): \(reply.text.prefix(160))"
                }
                for (header, value) in step["expectHeaders"]?.objectValue ?? [:] {
                    let expected = value.stringValue ?? ""
                    let actual = reply.header(header)
                    if expected == "absent" {
                        if actual != nil { return "\(label): \(header) is present" }
                    } else if expected.hasPrefix("contains ") {
                        let needle = String(expected.dropFirst("contains ".count).dropFirst().dropLast())
                        if actual?.contains(needle) != true {
                            return "\(label): \(header) \(actual ?? "absent") lacks \(needle)"
                        }
                    } else if expected.contains("body.version") {
                        let version = reply.json?["version"]?.stringValue ?? "?"
                        if actual != "\"\(version)\"" {
                            return "\(label): ETag \(actual ?? "absent"), body version \(version)"
                        }
                    } else if expected.contains("weak") {
                        if let actual, !actual.hasPrefix("W/") { return "\(label): a list carries a strong ETag" }
                    } else if actual == nil {
                        return "\(label): no \(header)"
                    }
                }
                if let problem = checkStepBody(step, reply) { return "\(label): \(problem)" }
                if let ids = step["expectIds"]?.arrayValue {
                    let actual = reply.json?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? []
                    if actual != ids.compactMap(\.stringValue) { return "\(label): ids \(actual), expected \(ids)" }
                }
            }
            return nil
        }

        func checkStepBody(_ step: JSONObject, _ reply: LiveServer.Reply) -> String? {
            guard let expected = step["expectBody"] else { return nil }
            let json = reply.json
            switch expected {
            case .array(let items) where items.isEmpty:
                return json == .array([]) ? nil : "body \(reply.text.prefix(80)), expected []"
            case .object(let object):
                guard let results = json?["results"]?.arrayValue, json?["count"] == object["count"] else {
                    return "body \(reply.text.prefix(120))"
                }
                for (actual, wanted) in zip(results, object["results"]?.arrayValue ?? []) {
                    for (key, value) in wanted.objectValue ?? [:] where actual[key] != value {
                        return "results[\(key)] is \(actual[key]?.serialized() ?? "absent")"
                    }
                }
                return nil
            case .string(let prose):
                switch prose {
                case "[] (length 0)": return json?.arrayValue?.count == 0 ? nil : "expected an empty array"
                case "array length 1": return json?.arrayValue?.count == 1 ? nil : "expected one item"
                case "object (not array)": return json?.objectValue != nil ? nil : "expected an object"
                case "count == 1":
                    return json?["count"] == 1 ? nil : "count \(json?["count"]?.serialized() ?? "absent")"
                case "userId == \"user1\"": return json?["userId"] == "user1" ? nil : "userId is not user1"
                case "1 item with id defined (uuid v4)":
                    return json?.arrayValue?.count == 1 && json?.arrayValue?.first?["id"]?.stringValue != nil
                        ? nil : "expected one item with an id"
                case "[{id:\"1\",value:\"test\",...}]":
                    let first = json?.arrayValue?.first
                    return first?["id"] == "1" && first?["value"] == "test" ? nil : "expected item 1 with value test"
                default:
                    if prose.hasPrefix("server item") || prose == "deleted item" || prose.hasPrefix("node returns")
                        || prose == "contains the sent fields"
                    {
                        guard let object = json?.objectValue, object["id"] != nil else { return "no item in the body" }
                        if prose.contains("!= \\\"incorrect version\\\"") || prose.contains("!= \"incorrect version\""),
                            object["version"] == "incorrect version"
                        {
                            return "the body holds the sent version"
                        }
                        return nil
                    }
                    if prose.hasPrefix("{\"error\"") { return json?["error"] != nil ? nil : "no error message" }
                    return "unknown body check '\(prose)'"
                }
            default:
                return "unknown body check"
            }
        }
    }
}

/// HTTP dates for the conditional-request cases (the server's own formatter is internal).
enum HTTPDateText {
    static func format(_ timestamp: Timestamp) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: Date(timeIntervalSince1970: Double(timestamp.millisecondsSince1970) / 1000))
    }

    static func parse(_ text: String) -> Date? {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.date(from: text)
    }
}
