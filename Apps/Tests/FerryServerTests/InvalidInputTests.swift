import FerryServer
import Foundation
import ServerStorageCore
import StoreConformance
import SyncCore
import Testing

/// Hostile and malformed input: every answer is a 4xx with a JSON message, never a 5xx, and the data
/// is intact afterwards.
@Suite("Invalid input over HTTP", .timeLimit(.minutes(10)))
struct InvalidInputTests {
    static let movies = TableSettings(
        name: "movies", softDelete: true,
        fields: ["title": FieldRule(type: .string, required: true), "year": FieldRule(type: .integer)],
        additionalFields: false)

    static func server(limits: RequestLimits = RequestLimits(maximumBodySize: 4096, maximumQueryLength: 2048))
        async throws
        -> LiveServer
    {
        try await LiveServer.start(tables: [movies], limits: limits) { storage in
            let table = StorageTable(name: "movies", schema: movies.schema)
            for index in 0..<20 {
                _ = try await storage.insert(
                    into: table, id: "m\(index)",
                    content: ["title": .string("Movie \(index)"), "year": .int(Int64(1990 + index))],
                    owner: nil)
            }
        }
    }

    /// Expects a 4xx with a JSON body that carries a message.
    static func expectClientError(
        _ reply: LiveServer.Reply, _ what: String, status: Int? = nil, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        #expect(
            (400..<500).contains(reply.status), "\(what): status \(reply.status) \(reply.text.prefix(120))",
            sourceLocation: sourceLocation)
        if let status {
            #expect(reply.status == status, "\(what): \(reply.text.prefix(120))", sourceLocation: sourceLocation)
        }
        let message = reply.json?["error"]?.stringValue ?? ""
        #expect(
            !message.isEmpty, "\(what): no JSON error message in \(reply.text.prefix(120))",
            sourceLocation: sourceLocation)
        #expect(!message.contains("\n"), "\(what): the message is not one line", sourceLocation: sourceLocation)
    }

    static func expectIntact(_ server: LiveServer, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let reply = try await server.send("GET", "/tables/movies?$count=true&$top=0")
        #expect(reply.json?["count"] == 20, "the table changed: \(reply.text)", sourceLocation: sourceLocation)
        #expect(try await server.send("GET", "/health").status == 200, sourceLocation: sourceLocation)
    }

    @Test func malformedODataIsA400() async throws {
        let server = try await Self.server()
        let queries = [
            "$filter=(year ge 2000", "$filter=year ge", "$filter=year - 1900 ge 2", "$filter=nofunc(title) eq 1",
            "$filter=substring(title)", "$filter=title eq 'unterminated", "$top=abc", "$top=-1", "$skip=1.5",
            "$orderby=title sideways", "$orderby=title,", "$select=missing", "$filter=missing eq 1", "$unknown=1",
            "$top=1&$top=2", "$count=maybe", "$inlinecount=some",
            "$filter=" + String(repeating: "(", count: 5000) + "true",
            "$filter=" + Array(repeating: "year eq 1", count: 400).joined(separator: " or "),
            "$filter=title eq 1 eq 2 eq", "$filter=cast(title, Edm.Nothing) eq 1", "$filter=%ZZ",
            "$filter=tolower(42) eq 'a'",
            "$top=99999999999999999999",
        ]
        for query in queries {
            let reply = try await server.send("GET", "/tables/movies?" + encodedQuery(query))
            Self.expectClientError(reply, query)
        }
        try await Self.expectIntact(server)
        try await server.stop()
    }

    @Test func injectionAttemptsAreData() async throws {
        let server = try await Self.server()
        let filters = [
            "title eq 'x'' OR ''1''=''1'", "title eq 'x''); DROP TABLE ferry_tables; --'",
            "title eq '\\'' or 1 eq 1", "startswith(title, '%') or contains(title, '_')",
            "title eq 'Movie 1' or title eq 'x'' UNION SELECT * FROM ferry_tables --'",
        ]
        for filter in filters {
            let reply = try await server.send("GET", "/tables/movies?" + encodedQuery("$filter=" + filter))
            if reply.status == 200 {
                let count = reply.json?["items"]?.arrayValue?.count ?? -1
                #expect(count <= 1, "\(filter) matched \(count) items")
            } else {
                Self.expectClientError(reply, filter, status: 400)  // OData has no backslash escape
            }
        }
        // Ids and bodies carrying SQL.
        for id in ["x' OR '1'='1", "1; DROP TABLE ferry_tables", "\"; --"] {
            let encoded = id.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? id
            let read = try await server.send("GET", "/tables/movies/" + encoded)
            #expect(read.status == 404 || read.status == 400, "\(id): \(read.status)")
        }
        let inserted = try await server.send(
            "POST", "/tables/movies", json: ["id": "'; DROP TABLE ferry_tables; --", "title": "x' OR 1=1 --"])
        #expect(inserted.status == 201, "\(inserted.text)")
        let stored = try await server.send(
            "GET",
            "/tables/movies/" + "'; DROP TABLE ferry_tables; --".addingPercentEncoding(
                withAllowedCharacters: .alphanumerics)!)
        #expect(stored.json?["title"] == "x' OR 1=1 --")
        let reply = try await server.send("GET", "/tables/movies?$count=true&$top=0")
        #expect(reply.json?["count"] == 21)
        try await server.stop()
    }

    @Test func badIDsAreRefused() async throws {
        let server = try await Self.server()
        for path in [
            "/tables/movies/%00", "/tables/movies/a%2Fb", "/tables/movies/%E0%A4", "/tables/movies/%zz",
            "/tables/movies/" + String(repeating: "i", count: 300), "/tables/movies/a%60b", "/tables/movies/%20%20",
        ] {
            let reply = try await server.send("GET", path)
            Self.expectClientError(reply, path)
        }
        for id: JSONValue in [
            true, 1.5, ["a"], ["k": "v"], "", "a/b", "..", .string(String(repeating: "x", count: 256)),
        ] {
            let reply = try await server.send("POST", "/tables/movies", json: ["id": id, "title": "t"])
            Self.expectClientError(reply, "id \(id)", status: 400)
        }
        try await Self.expectIntact(server)
        try await server.stop()
    }

    @Test func badBodiesAreRefused() async throws {
        let server = try await Self.server()
        let raw: [(String, String?, Int)] = [
            ("{ \"title\": \"a\",, }", "application/json", 400), ("{\"title\": \"a\"", "application/json", 400),
            ("[]", "application/json", 400), ("\"text\"", "application/json", 400), ("42", "application/json", 400),
            ("", "application/json", 400), ("<html></html>", "text/html", 415),
            ("title=a", "application/x-www-form-urlencoded", 415),
            ("{\"title\": \"a\\u0000b\"}", "application/json", 400), ("\u{FF}\u{FE}", "application/json", 400),
            (String(repeating: "[", count: 600) + String(repeating: "]", count: 600), "application/json", 400),
        ]
        for (body, type, status) in raw {
            let headers = type.map { [("Content-Type", $0)] } ?? []
            let reply = try await server.send("POST", "/tables/movies", headers: headers, body: Array(body.utf8))
            Self.expectClientError(reply, "body \(body.prefix(30))", status: status)
        }
        // Wrong JSON types for declared and dynamic fields.
        for body: JSONObject in [
            ["title": 5], ["title": "ok", "year": "1999"], ["title": "ok", "year": 1.5], ["year": 2000],
            ["title": .null],
        ] {
            Self.expectClientError(
                try await server.send("POST", "/tables/movies", json: .object(body)), "\(body)", status: 400)
        }
        #expect(try await server.send("POST", "/tables/notes", json: ["id": "1", "n": 1]).status == 201)
        Self.expectClientError(
            try await server.send("POST", "/tables/notes", json: ["id": "2", "n": "one"]), "field kind", status: 400)
        Self.expectClientError(
            try await server.send("PATCH", "/tables/notes/1", json: ["n": true]), "field kind on update", status: 400)
        // System properties with other spellings, and a 3.0 `deleted` that is not a Boolean.
        Self.expectClientError(
            try await server.send("POST", "/tables/movies", json: ["title": "t", "UpdatedAt": "x"]), "UpdatedAt",
            status: 400)
        Self.expectClientError(
            try await server.send("PUT", "/tables/movies/m1", json: ["title": "t", "deleted": "yes"]), "deleted",
            status: 400)
        Self.expectClientError(
            try await server.send(
                "PATCH", "/tables/movies/m1", headers: [("Content-Type", "application/json-patch+json")],
                body: Array("[{\"op\": \"explode\", \"path\": \"/title\"}]".utf8)), "json patch", status: 400)
        try await Self.expectIntact(server)
        try await server.stop()
    }

    @Test func oversizedRequestsAreRefused() async throws {
        let server = try await Self.server()
        let big = JSONValue.object(["title": .string(String(repeating: "x", count: 10_000))])
        Self.expectClientError(try await server.send("POST", "/tables/movies", json: big), "large body", status: 413)
        let longQuery = "$filter=" + encodedQuery("title eq '" + String(repeating: "y", count: 5000) + "'")
        Self.expectClientError(try await server.send("GET", "/tables/movies?" + longQuery), "long query", status: 414)
        Self.expectClientError(
            try await server.send("GET", "/tables/movies?$top=5000"), "$top above maxTop", status: 400)
        try await Self.expectIntact(server)
        try await server.stop()
    }

    @Test func randomGarbageNeverGivesA5xx() async throws {
        let server = try await Self.server()
        var random = SeededRandom(seed: 0xFE44)
        let alphabet = Array("$()' ,=&%/\\\"eqandornotgtlt0123456789-.:TZabcxyz_~[]{}+*;@!".unicodeScalars)
        let methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]
        for round in 0..<150 {
            var query = ""
            for _ in 0..<Int.random(in: 0...60, using: &random) {
                query.unicodeScalars.append(alphabet.randomElement(using: &random)!)
            }
            var body: [UInt8] = []
            for _ in 0..<Int.random(in: 0...80, using: &random) {
                body.append(UInt8.random(in: 0...255, using: &random))
            }
            if round % 3 == 0 {
                body = Array("{\"title\": \"\(query.replacingOccurrences(of: "\"", with: ""))\"}".utf8)
            }
            let method = methods.randomElement(using: &random)!
            let path = round % 2 == 0 ? "/tables/movies" : "/tables/movies/m\(round % 25)"
            let target = path + "?" + (query.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")
            let reply = try await server.send(
                method, target, headers: [("Content-Type", "application/json")], body: method == "GET" ? nil : body)
            #expect(reply.status < 500, "\(method) \(target): \(reply.status) \(reply.text.prefix(120))")
            if reply.status >= 400 { #expect(reply.json?["error"]?.stringValue != nil, "\(method) \(target)") }
        }
        #expect(try await server.send("GET", "/health").status == 200)
        try await server.stop()
    }
}
