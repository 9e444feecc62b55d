import FerryServer
import Foundation
import ServerStorageCore
import ServerTestSupport
import SyncCore
import Testing

/// Small requests that made the server build huge values, and smaller slips, found by a second
/// outside probe: each checked over real HTTP, on the SQLite storage whose SQL path evaluates
/// queries.
@Suite("Server: what a second outside probe found", .timeLimit(.minutes(5)))
struct ResourceBoundTests {
    private static func filter(_ text: String) -> String {
        "/tables/t?$filter=" + (text.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? text)
    }

    @Test func filtersThatWouldBuildHugeStringsAreA400BeforeTheyRun() async throws {
        let live = try await LiveServer.start(tables: [TableSettings(name: "t")])
        #expect(try await live.send("POST", "/tables/t", json: ["id": "one", "s": "a"]).status == 201)
        var doubling = "s"
        for _ in 0..<24 { doubling = "replace(\(doubling),'a','aa')" }
        func tree(_ leaves: Int) -> String {
            leaves == 1 ? "s" : "concat(\(tree(leaves / 2)),\(tree(leaves - leaves / 2)))"
        }
        for text in ["length(\(doubling)) eq 1", "length(\(tree(256))) gt 0"] {
            let reply = try await live.send("GET", Self.filter(text))
            #expect(reply.status == 400, "\(reply.status) \(reply.text)")
            #expect(reply.json?.objectValue?["code"]?.stringValue == "invalidQuery", "\(reply.text)")
            #expect(reply.text.contains("longest field"), "\(reply.text)")
        }
        // A few levels still answer.
        let fine = try await live.send("GET", Self.filter("length(replace(replace(s,'a','aa'),'a','aa')) eq 4"))
        #expect(fine.status == 200 && fine.text.contains("\"one\""), "\(fine.text)")
        try await live.stop()
    }

    @Test func aPatchCannotGrowAnItemPastTheBodyLimit() async throws {
        var limits = RequestLimits()
        limits.maximumBodySize = 64 * 1024
        let live = try await LiveServer.start(tables: [TableSettings(name: "t")], limits: limits)
        #expect(try await live.send("POST", "/tables/t", json: ["id": "j1", "title": "x"]).status == 201)
        // JSON Patch: 16 copies of a member into itself double it 16 times (a 2 KB request, 64 MB).
        var operations: [JSONValue] = [
            ["op": "add", "path": "/g", "value": [.string(String(repeating: "x", count: 1000))]]
        ]
        for _ in 0..<16 { operations.append(["op": "copy", "from": "/g", "path": "/g/-"]) }
        let copies = try await live.send(
            "PATCH", "/tables/t/j1", headers: [("Content-Type", "application/json-patch+json")],
            body: JSONValue.array(operations).serializedUTF8())
        #expect(copies.status == 400, "\(copies.status) \(copies.text)")
        #expect(copies.text.contains("copies add more than"), "\(copies.text)")
        // Merge patches, each under the limit, that would add up past it.
        let half = String(repeating: "y", count: 40 * 1024)
        #expect(try await live.send("PATCH", "/tables/t/j1", json: ["a": .string(half)]).status == 200)
        let second = try await live.send("PATCH", "/tables/t/j1", json: ["b": .string(half)])
        #expect(second.status == 413, "\(second.status) \(second.text)")
        #expect(second.json?.objectValue?["code"]?.stringValue == "itemTooLarge", "\(second.text)")
        // Nothing of the refused patches was kept, and the item can still be read and replaced whole.
        let item = try await live.send("GET", "/tables/t/j1")
        #expect(item.status == 200 && item.json?.objectValue?["b"] == nil && item.json?.objectValue?["g"] == nil)
        try await live.stop()
    }

    @Test func aMergePatchReadsDeletedAsAPutDoes() async throws {
        let live = try await LiveServer.start(tables: [TableSettings(name: "t", softDelete: true)])
        #expect(try await live.send("POST", "/tables/t", json: ["id": "d"]).status == 201)
        let before = try await live.send("GET", "/tables/t/d").json?.objectValue?["version"]
        for value: JSONValue in ["true", 1, .null, [true]] {
            let reply = try await live.send(
                "PATCH", "/tables/t/d", headers: [("ZUMO-API-VERSION", "3.0.0")], json: ["deleted": value])
            #expect(reply.status == 400, "\(value): \(reply.status) \(reply.text)")
        }
        #expect(
            try await live.send("GET", "/tables/t/d").json?.objectValue?["version"] == before,
            "a refused patch changed the version")
        try await live.stop()
    }

    @Test func healthSaysTheKindOfStorageNotWhereItIs() async throws {
        let live = try await LiveServer.start(tables: [TableSettings(name: "t")])
        let health = try await live.send("GET", "/health")
        #expect(health.status == 200)
        #expect(health.json?.objectValue?["storage"] == "memory", "\(health.text)")
        try await live.stop()
    }

    @Test func aMethodAnAttachmentDoesNotTakeIsA405() async throws {
        let live = try await LiveServer.start(tables: [TableSettings(name: "t")], attachments: AttachmentLimits())
        #expect(try await live.send("POST", "/tables/t", json: ["id": "i"]).status == 201)
        for method in ["POST", "PATCH", "OPTIONS"] {
            let reply = try await live.send(method, "/tables/t/i/$attachments/f.txt")
            #expect(reply.status == 405, "\(method): \(reply.status) \(reply.text)")
        }
        try await live.stop()
    }

    /// Inserts create tables only up to `maximumDynamicTables`, counting the tables already in the
    /// database and not the declared ones; a batch's inserts into new tables are counted as they
    /// are admitted, before any of them is written.
    @Test(arguments: ServerBackend.allCases)
    func insertsCreateAtMostTheBoundedNumberOfTables(_ backend: ServerBackend) async throws {
        var limits = RequestLimits()
        limits.maximumDynamicTables = 3
        let server = try await LiveServer.start(
            tables: [TableSettings(name: "declared")], limits: limits, backend: backend,
            seed: { storage in try await storage.prepare([StorageTable(name: "old")]) })
        #expect(try await server.send("POST", "/tables/a", json: ["id": "1"]).status == 201)
        #expect(try await server.send("POST", "/tables/b", json: ["id": "1"]).status == 201)
        let refused = try await server.send("POST", "/tables/c", json: ["id": "1"])
        #expect(refused.status == 403, "\(refused.text)")
        #expect(refused.json?.objectValue?["code"]?.stringValue == "tooManyTables", "\(refused.text)")
        #expect(refused.text.contains("(3, maxDynamicTables)"), "\(refused.text)")
        // Tables that exist, and declared ones, still take inserts; a query of a new name is empty.
        for table in ["a", "old", "declared"] {
            #expect(try await server.send("POST", "/tables/\(table)", json: ["id": "2"]).status == 201, "\(table)")
        }
        #expect(try await server.send("GET", "/tables/c").status == 200)
        let batch = try await server.send(
            "POST", "/tables/$batch",
            json: ["requests": [BatchSetTests.post("1", table: "d"), BatchSetTests.post("3", table: "b")]])
        #expect(BatchSetTests.responses(batch).map(\.status) == [403, 201], "\(batch.text)")
        try await server.stop()

        // Room for one: of a batch into two new tables, the first is written, the second refused.
        limits.maximumDynamicTables = 1
        let fresh = try await LiveServer.start(tables: [], limits: limits, backend: backend)
        let both = try await fresh.send(
            "POST", "/tables/$batch",
            json: ["requests": [BatchSetTests.post("1", table: "e"), BatchSetTests.post("1", table: "f")]])
        #expect(BatchSetTests.responses(both).map(\.status) == [201, 403], "\(both.text)")
        #expect(try await fresh.send("GET", "/tables/f/1").status == 404)
        try await fresh.stop()
    }
}
