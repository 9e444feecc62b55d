import FerryServer
import Foundation
import ServerStorageCore
import ServerTestSupport
import SyncCore
import Testing
import Transport

/// A request names a table whatever the case of its letters, as on the protocol's other servers:
/// the 2.0 .NET client asks for `TodoItem` where the 3.0 one asks for the lower-cased `todoitem`.
@Suite("Table names, whatever their case", .timeLimit(.minutes(5)))
struct TableNameCaseTests {
    @Test(arguments: ServerBackend.allCases)
    func aTableIsOneTableWhateverTheCaseOfItsName(_ backend: ServerBackend) async throws {
        let declared = TableSettings(name: "Movies", disabledOperations: [.delete])
        let server = try await LiveServer.start(
            tables: [declared], backend: backend,
            seed: { storage in try await storage.prepare([StorageTable(name: "Old")]) })
        // A dynamic table: created by its first insert, then the same table under any case.
        #expect(try await server.send("POST", "/tables/todoitem", json: ["id": "t1"]).status == 201)
        #expect(try await server.send("POST", "/tables/TodoItem", json: ["id": "t2"]).status == 201)
        let listed = try await server.send("GET", "/tables/TODOITEM?$orderby=id")
        #expect(
            listed.json?["items"]?.arrayValue?.compactMap { $0["id"]?.stringValue } == ["t1", "t2"], "\(listed.text)")
        #expect(try await server.send("GET", "/tables/todoItem/t2").status == 200)
        // A table that was in the database before the server started.
        #expect(try await server.send("POST", "/tables/old", json: ["id": "o1"]).status == 201)
        #expect(try await server.send("GET", "/tables/Old/o1").status == 200)
        // A declared table keeps its rules under another case.
        #expect(try await server.send("POST", "/tables/movies", json: ["id": "m1"]).status == 201)
        #expect(try await server.send("DELETE", "/tables/MOVIES/m1").status == 405)
        #expect(try await server.send("GET", "/tables/Movies/m1").status == 200)
        // A batch names tables the same way.
        let batch = try await server.send(
            "POST", "/tables/$batch", json: ["requests": [BatchSetTests.post("t3", table: "TODOITEM")]])
        #expect(BatchSetTests.responses(batch).map(\.status) == [201], "\(batch.text)")
        #expect(try await server.send("GET", "/tables/todoitem/t3").status == 200)
        // A name no table has is still no table.
        #expect(try await server.send("GET", "/tables/nothing/x").status == 404)
        try await server.stop()
    }

    /// First inserts racing into a new table under several spellings, on one instance and (on
    /// PostgreSQL) two: one table, holding every acknowledged row, read under every spelling. Each
    /// spelling made a table of its own, and rows acknowledged in one could not be read.
    @Test(arguments: ServerBackend.allCases)
    func firstInsertsRacingUnderSeveralSpellingsMakeOneTable(_ backend: ServerBackend) async throws {
        let first = try await LiveServer.start(tables: [], backend: backend)
        let second =
            backend == .postgreSQL ? try await LiveServer.start(tables: [], backend: backend, sharing: first) : nil
        let servers = [first] + (second.map { [$0] } ?? [])
        let spellings = ["RaceX", "racex", "RACEX", "raceX", "Racex", "rACEX"]
        for round in 0..<3 {
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for (index, spelling) in spellings.enumerated() {
                    let server = servers[index % servers.count]
                    group.addTask {
                        try await server.send("POST", "/tables/\(spelling)\(round)", json: ["id": .string("r\(index)")])
                            .status
                    }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.allSatisfy { $0 == 201 }, "round \(round): \(statuses)")
            let tables = try await first.server.storage.tableNames().filter { $0.lowercased() == "racex\(round)" }
            #expect(tables.count == 1, "round \(round): \(tables)")
            for server in servers {
                for spelling in spellings {
                    let listed = try await server.send("GET", "/tables/\(spelling)\(round)?$orderby=id")
                    let ids = listed.json?["items"]?.arrayValue?.compactMap { $0["id"]?.stringValue }
                    #expect(ids == spellings.indices.map { "r\($0)" }, "round \(round), \(spelling): \(listed.text)")
                }
            }
        }
        try await second?.stop()
        try await first.stop()
    }

    /// A feed of `todoitem` tells of writes to the table created as `TodoItem`.
    @Test func aFeedNamesTablesWhateverTheirCase() async throws {
        let live = try await LiveServer.start(tables: [])
        defer { Task { try? await live.stop() } }
        let remote = ChangeFeedTests.remote(live.server.port)
        _ = try await remote.onlineTable("TodoItem").insert(["id": "a"])
        let feed = FeedReader(try await remote.changeFeed(tables: ["todoitem"], after: nil))
        guard case .ready(let versions, _)? = try await feed.first(1).first else {
            Issue.record("the feed did not start with ready")
            return
        }
        #expect(versions["TodoItem"] == 1, "\(versions)")
        _ = try await remote.onlineTable("todoitem").insert(["id": "b"])
        let events = try await feed.first(2)
        #expect(events.dropFirst().map(ChangeFeedTests.table) == ["TodoItem"], "\(events)")
        feed.stop()
    }

    /// Two tables that differ only in case, made before names matched whatever their case, stay
    /// two: each exact name is its own table.
    @Test func anExactNameWinsOverAnotherCase() async throws {
        let server = try await LiveServer.start(
            tables: [],
            seed: { storage in try await storage.prepare([StorageTable(name: "Notes"), StorageTable(name: "notes")]) })
        #expect(try await server.send("POST", "/tables/Notes", json: ["id": "upper"]).status == 201)
        #expect(try await server.send("POST", "/tables/notes", json: ["id": "lower"]).status == 201)
        #expect(try await server.send("GET", "/tables/Notes/lower").status == 404)
        #expect(try await server.send("GET", "/tables/notes/upper").status == 404)
        try await server.stop()
    }

    @Test func declaredTablesThatDifferOnlyInCaseAreRefused() {
        let configuration = ServerConfiguration(
            host: "127.0.0.1", port: 0, tables: [TableSettings(name: "Todo"), TableSettings(name: "todo")],
            logger: .quietTest)
        let error = #expect(throws: ConfigurationError.self) { try configuration.validate() }
        #expect(
            error?.message.contains("'Todo' and 'todo' differ only in case") == true, "\(String(describing: error))")
    }
}
