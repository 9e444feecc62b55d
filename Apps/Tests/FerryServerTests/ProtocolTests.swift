@testable import FerryServer
import Foundation
import Logging
import ServerStorageSQLite
import StoreConformance
import SyncCore
import Testing

@Suite("Table protocol over HTTP", .timeLimit(.minutes(10)))
struct ProtocolTests {
    static let v2: [(String, String)] = [("ZUMO-API-VERSION", "2.0.0")]

    static func start(
        _ tables: [TableSettings] = [TableSettings(name: "todo", softDelete: true, pageSize: 3)], dynamic: Bool = true
    )
        async throws -> LiveServer
    {
        try await LiveServer.start(tables: tables, allowsDynamicTables: dynamic)
    }

    static func insertSome(_ server: LiveServer, count: Int, table: String = "todo") async throws {
        for index in 0..<count {
            let reply = try await server.send(
                "POST", "/tables/\(table)", json: ["id": .string("t\(index)"), "n": .int(Int64(index))])
            #expect(reply.status == 201)
        }
    }

    @Test func healthAndCommonHeaders() async throws {
        let server = try await Self.start()
        let health = try await server.send("GET", "/health")
        #expect(health.status == 200)
        #expect(health.json?["status"] == "ok")
        #expect(health.json?["tables"] == 1)
        #expect(health.header("x-zumo-server-version")?.hasPrefix("ferry-") == true)
        let missing = try await server.send("GET", "/nowhere")
        #expect(missing.status == 404)
        #expect(missing.json?["error"]?.stringValue != nil)
        #expect(try await server.send("DELETE", "/tables/todo").status == 405)
        #expect(try await server.send("GET", "/tables/todo", headers: [("ZUMO-API-VERSION", "4.0.0")]).status == 400)
        #expect(
            try await server.send("GET", "/tables/todo?zumo-api-version=2.0.0", headers: [("ZUMO-API-VERSION", "9")])
                .status == 200)
        try await server.stop()
    }

    @Test func version3PagesFollowNextLinkInStableOrder() async throws {
        let server = try await Self.start()
        try await Self.insertSome(server, count: 8)
        var ids: [String] = []
        var query: String? = "$count=true"
        var pages = 0
        while let next = query {
            let reply = try await server.send("GET", "/tables/todo?" + next)
            #expect(reply.status == 200)
            #expect(reply.json?["count"] == 8)
            ids += reply.json?["items"]?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? []
            query = reply.json?["nextLink"]?.stringValue
            pages += 1
        }
        #expect(pages == 3)
        #expect(ids == (0..<8).map { "t\($0)" })
        let path = try await server.send("GET", "/tables/todo", headers: [("X-ZUMO-Options", "nextlink=path")])
        #expect(path.json?["nextLink"]?.stringValue?.hasPrefix("/tables/todo?") == true)
        let top = try await server.send("GET", "/tables/todo?$top=4")
        #expect(
            top.json?["nextLink"] == "%24skip=3&%24top=1"
                || top.json?["nextLink"]?.stringValue?.contains("top=1") == true)
        try await server.stop()
    }

    @Test func version2ShapesAndLinkHeader() async throws {
        let server = try await Self.start()
        try await Self.insertSome(server, count: 5)
        let first = try await server.send("GET", "/tables/todo", headers: Self.v2)
        #expect(first.json?.arrayValue?.count == 3)
        let link = try #require(first.header("Link"))
        #expect(link.hasSuffix("; rel=next"))
        #expect(!link.contains("<"))
        let url = String(link.dropLast("; rel=next".count))
        let target = String(url[url.range(of: "/tables/")!.lowerBound...])
        let second = try await server.send("GET", target, headers: Self.v2)
        #expect(second.json?.arrayValue?.compactMap { $0["id"]?.stringValue } == ["t3", "t4"])
        #expect(second.header("Link") == nil)
        let counted = try await server.send("GET", "/tables/todo?$inlinecount=allpages&$top=1", headers: Self.v2)
        #expect(counted.json?["count"] == 5)
        #expect(counted.json?["results"]?.arrayValue?.count == 1)
        let item = try await server.send("GET", "/tables/todo/t1", headers: Self.v2)
        #expect(item.json?["createdAt"]?.stringValue != nil, "2.0 items carry createdAt")
        #expect(try await server.send("GET", "/tables/todo/t1").json?["createdAt"] == nil, "3.0 items do not")
        try await server.stop()
    }

    @Test func singleItemsCarryETagsAndConditionalRequestsWork() async throws {
        let server = try await Self.start()
        let created = try await server.send(
            "POST", "/tables/todo", json: ["id": "a", "title": "one", "updatedAt": "2000-01-01T00:00:00.000Z"])
        #expect(created.status == 201)
        #expect(created.json?["updatedAt"] != "2000-01-01T00:00:00.000Z")
        let etag = try #require(created.header("ETag"))
        #expect(etag == "\"\(created.json?["version"]?.stringValue ?? "")\"")
        #expect(created.header("Location")?.hasSuffix("/tables/todo/a") == true)
        #expect(created.header("Last-Modified") != nil)
        #expect(try await server.send("GET", "/tables/todo/a", headers: [("If-None-Match", etag)]).status == 304)
        let stale = try await server.send(
            "PUT", "/tables/todo/a", headers: [("If-Match", "\"AAAAAAAAAAA=\"")], json: ["title": "two"])
        #expect(stale.status == 412)
        #expect(stale.json?["title"] == "one")
        #expect(stale.header("ETag") == etag)
        let star = try await server.send("PUT", "/tables/todo/a", headers: [("If-Match", "*")], json: ["title": "two"])
        #expect(star.status == 200)
        #expect(star.json?["title"] == "two")
        #expect(star.header("ETag") != etag)
        let duplicate = try await server.send("POST", "/tables/todo", json: ["id": "a", "title": "dup"])
        #expect(duplicate.status == 409)
        #expect(duplicate.json?["title"] == "two")
        #expect(duplicate.header("ETag") == star.header("ETag"))
        // 2.0: a stale version in the body is a 409 with the server's item; reserved properties are refused.
        let conflict = try await server.send(
            "PATCH", "/tables/todo/a", headers: Self.v2, json: ["title": "x", "version": "AAAAAAAAAAE="])
        #expect(conflict.status == 409)
        #expect(conflict.json?["title"] == "two")
        #expect(
            try await server.send("PATCH", "/tables/todo/a", headers: Self.v2, json: ["createdAt": "x"]).status == 400)
        let current = try await server.send("GET", "/tables/todo/a")
        let matching = try await server.send(
            "PATCH", "/tables/todo", headers: Self.v2,
            json: ["id": "a", "title": "three", "version": current.json?["version"] ?? .null])
        #expect(matching.status == 200)
        #expect(matching.json?["title"] == "three")
        try await server.stop()
    }

    @Test func updatesReplaceMergeAndPatch() async throws {
        let server = try await Self.start()
        _ = try await server.send(
            "POST", "/tables/todo", json: ["id": "a", "title": "one", "done": false, "tags": ["x"]])
        let merged = try await server.send("PATCH", "/tables/todo/a", json: ["done": true])
        #expect(merged.json?["title"] == "one")
        #expect(merged.json?["done"] == true)
        let patched = try await server.send(
            "PATCH", "/tables/todo/a", headers: [("Content-Type", "application/json-patch+json")],
            body: Array(
                "[{\"op\":\"add\",\"path\":\"/tags/-\",\"value\":\"y\"},{\"op\":\"remove\",\"path\":\"/done\"}]".utf8))
        #expect(patched.status == 200)
        #expect(patched.json?["tags"] == ["x", "y"])
        #expect(patched.json?["done"] == nil)
        let replaced = try await server.send("PUT", "/tables/todo/a", json: ["title": "new"])
        #expect(replaced.json?["tags"] == nil, "PUT replaces the whole item")
        #expect(try await server.send("PUT", "/tables/todo/a", json: ["id": "b", "title": "x"]).status == 400)
        #expect(try await server.send("PATCH", "/tables/todo/a", json: ["version": "AAAAAAAAAAE="]).status == 409)
        try await server.stop()
    }

    @Test func softDeleteAndUndeleteInBothVersions() async throws {
        let server = try await Self.start([TableSettings(name: "todo", softDelete: true), TableSettings(name: "hard")])
        _ = try await server.send("POST", "/tables/todo", json: ["id": "a", "title": "one"])
        _ = try await server.send("POST", "/tables/todo", json: ["id": "b", "title": "two"])
        #expect(try await server.send("DELETE", "/tables/todo/a").status == 204)
        #expect(try await server.send("GET", "/tables/todo/a").status == 410)
        #expect(try await server.send("GET", "/tables/todo/a", headers: Self.v2).status == 404)
        #expect(try await server.send("GET", "/tables/todo/a?__includedeleted=true").json?["deleted"] == true)
        #expect(try await server.send("GET", "/tables/todo?$count=true").json?["count"] == 1)
        #expect(try await server.send("GET", "/tables/todo?__includeDeleted=true&$count=true").json?["count"] == 2)
        let undeleted = try await server.send("POST", "/tables/todo/a", headers: Self.v2)
        #expect(undeleted.status == 201)
        #expect(undeleted.json?["deleted"] == false)
        let deleted2 = try await server.send("DELETE", "/tables/todo/b", headers: Self.v2)
        #expect(deleted2.status == 200)
        #expect(deleted2.json?["deleted"] == true)
        #expect(
            try await server.send("PUT", "/tables/todo/b", json: ["title": "back", "deleted": false]).status == 410)
        let restored = try await server.send(
            "PUT", "/tables/todo/b?__includedeleted=true", json: ["title": "back", "deleted": false])
        #expect(restored.status == 200)
        #expect(restored.json?["deleted"] == false)
        _ = try await server.send("POST", "/tables/hard", json: ["id": "h"])
        #expect(try await server.send("DELETE", "/tables/hard/h").status == 204)
        #expect(try await server.send("GET", "/tables/hard/h?__includedeleted=true").status == 404)
        #expect(try await server.send("POST", "/tables/hard/h").status == 405)
        try await server.stop()
    }

    @Test func dynamicTablesAppearOnFirstWrite() async throws {
        let server = try await Self.start([], dynamic: true)
        // Before any write the table is empty, not missing: a client tells "no rows yet" (200) from
        // "not a table endpoint" (404) by that.
        let empty = try await server.send("GET", "/tables/things?$count=true")
        #expect(empty.status == 200)
        #expect(empty.json?["items"]?.arrayValue?.isEmpty == true)
        #expect(empty.json?["count"] == .int(0))
        #expect(try await server.send("GET", "/api/tables/things").status == 404)
        #expect(try await server.send("GET", "/tables/things/1").status == 404)
        let created = try await server.send("POST", "/tables/things", json: ["name": "first"])
        #expect(created.status == 201)
        #expect(created.json?["id"]?.stringValue.map(ItemID.isValid) == true)
        #expect(try await server.send("GET", "/tables/things").json?["items"]?.arrayValue?.count == 1)
        #expect(try await server.send("GET", "/tables/__bad").status == 404)
        try await server.stop()
        let closed = try await Self.start([], dynamic: false)
        #expect(try await closed.send("POST", "/tables/things", json: ["name": "x"]).status == 404)
        #expect(try await closed.send("GET", "/tables/things").status == 404)
        try await closed.stop()
    }

    @Test func disabledOperationsAnswer405() async throws {
        let server = try await Self.start([TableSettings(name: "log", disabledOperations: [.update, .delete])])
        #expect(try await server.send("POST", "/tables/log", json: ["id": "1"]).status == 201)
        #expect(try await server.send("PATCH", "/tables/log/1", json: ["a": 1]).status == 405)
        #expect(try await server.send("DELETE", "/tables/log/1").status == 405)
        #expect(try await server.send("GET", "/tables/log/1").status == 200)
        try await server.stop()
    }
}

@Suite("Starting and stopping the server", .timeLimit(.minutes(10)))
struct LifecycleTests {
    @Test func startsOnAFreePortAndStopsCleanly() async throws {
        let configuration = ServerConfiguration(port: 0, logger: .quietTest)
        let server = try await ReferenceServer.startInMemory(configuration)
        #expect(server.port > 0)
        #expect(server.url == "http://127.0.0.1:\(server.port)")
        // The same port is refused while it is taken.
        var clash = configuration
        clash.port = server.port
        await #expect(throws: (any Error).self) { try await ReferenceServer.startInMemory(clash) }
        try await server.shutdown()
    }

    @Test func aFileDatabaseKeepsItsTablesAcrossRestarts() async throws {
        let temporary = try TemporaryDirectory()
        defer { temporary.remove() }
        let directory = temporary.path
        let configuration = ServerConfiguration(port: 0, logger: .quietTest)
        let path = "\(directory)/ferry.sqlite"
        let first = try await ReferenceServer.start(
            configuration, storage: try sqliteStorage(.file(path), logger: configuration.logger), ownsStorage: true)
        let client = LiveServer(server: first)
        let created = try await client.send("POST", "/tables/notes", json: ["id": "1", "text": "kept"])
        try await first.shutdown()
        let second = try await ReferenceServer.start(
            configuration, storage: try sqliteStorage(.file(path), logger: configuration.logger), ownsStorage: true)
        let read = try await LiveServer(server: second).send("GET", "/tables/notes/1")
        #expect(read.json?["text"] == "kept")
        #expect(read.json?["version"] == created.json?["version"])
        let next = try await LiveServer(server: second).send("POST", "/tables/notes", json: ["id": "2"])
        #expect(next.json?["updatedAt"]?.stringValue ?? "" > created.json?["updatedAt"]?.stringValue ?? "")
        try await second.shutdown()
    }

    @Test func invalidConfigurationsAreRefused() async throws {
        var configuration = ServerConfiguration(
            port: 0, tables: [TableSettings(name: "p", requiresAuth: true)], logger: .quietTest)
        #expect(throws: ConfigurationError.self) { try configuration.validate() }
        configuration.authSecret = "short"
        #expect(throws: ConfigurationError.self) { try configuration.validate() }
        configuration.authSecret = LiveServer.secret
        try configuration.validate()
        configuration.tables = [TableSettings(name: "a", pageSize: 0)]
        #expect(throws: ConfigurationError.self) { try configuration.validate() }
        configuration.tables = [TableSettings(name: "a", dataView: "year gt")]
        #expect(throws: ConfigurationError.self) { try configuration.validate() }
        configuration.tables = [TableSettings(name: "a", fields: ["updatedAt": FieldRule(type: .string)])]
        #expect(throws: ConfigurationError.self) { try configuration.validate() }
    }

    @Test func tablesFilesAreReadStrictly() throws {
        let document = try JSONValue(
            parsing: """
                {"dynamicTables": false, "defaults": {"pageSize": 20},
                 "tables": {"notes": {"softDelete": true, "perUser": true, "maxTop": 0,
                                      "fields": {"title": {"type": "string", "required": true, "maxLength": 10},
                                                 "rating": {"type": "enum", "cases": ["G", "R"]}, "done": "bool"},
                                      "disabledOperations": ["delete"]}}}
                """)
        var configuration = ServerConfiguration(logger: .quietTest)
        try TablesFile.apply(document, to: &configuration)
        #expect(!configuration.allowsDynamicTables)
        let notes = try #require(configuration.tables.first)
        #expect(notes.name == "notes" && notes.softDelete && notes.perUser && notes.pageSize == 20 && notes.maxTop == 0)
        #expect(notes.fields["title"] == FieldRule(type: .string, required: true, maximumLength: 10))
        // Lengths count UTF-16 code units, as `length()` does: 6 emoji are 12, over 10.
        let title = try #require(notes.fields["title"])
        #expect(title.violation(of: .string(String(repeating: "😀", count: 6)), field: "title") != nil)
        #expect(title.violation(of: .string(String(repeating: "😀", count: 5)), field: "title") == nil)
        #expect(notes.fields["rating"]?.type == .enumeration(["G", "R"]))
        #expect(notes.disabledOperations == [.delete])
        for bad in [
            "{\"tables\": {\"a\": {\"softdelete\": true}}}", "{\"tables\": {\"a\": {\"pageSize\": \"10\"}}}",
            "{\"tables\": {\"a\": {\"fields\": {\"x\": \"blob\"}}}}",
            "{\"tables\": {\"a\": {\"disabledOperations\": [\"drop\"]}}}",
            "[]", "{\"extra\": 1}",
        ] {
            var scratch = ServerConfiguration(logger: .quietTest)
            #expect(throws: ConfigurationError.self, "\(bad)") {
                try TablesFile.apply(try JSONValue(parsing: bad), to: &scratch)
            }
        }
    }
}
