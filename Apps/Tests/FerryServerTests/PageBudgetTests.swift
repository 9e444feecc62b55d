import FerryServer
import Foundation
import ServerStorageCore
import ServerTestSupport
import SyncCore
import Testing

/// A page of large items ends at `RequestLimits.maximumPageBytes` with a next-page link, in both
/// protocol versions and on both storages, and following the links gives every item once.
@Suite("Server: a page's byte budget", .timeLimit(.minutes(5)))
struct PageBudgetTests {
    static let itemBytes = 10_000

    /// Starts a server whose pages hold at most 64 KiB, with 30 items of about 10 KB.
    static func serverWithLargeItems(_ backend: ServerBackend) async throws -> LiveServer {
        var limits = RequestLimits()
        limits.maximumPageBytes = 64 * 1024
        let live = try await LiveServer.start(tables: [TableSettings(name: "t")], limits: limits, backend: backend)
        for index in 0..<30 {
            let id = String(format: "item-%02d", index)
            let body: JSONValue = ["id": .string(id), "text": .string(String(repeating: "x", count: itemBytes))]
            #expect(try await live.send("POST", "/tables/t", json: body).status == 201)
        }
        return live
    }

    @Test(arguments: ServerBackend.allCases)
    func aPageOfLargeItemsEndsAtTheBudgetAndItsNextLinksWalkEveryItem(_ backend: ServerBackend) async throws {
        let live = try await Self.serverWithLargeItems(backend)
        // 3.0: nextLink in the body, a relative query.
        var seen: [String] = []
        var target = "/tables/t?$orderby=id&$count=true"
        var pages = 0
        while true {
            let reply = try await live.send("GET", target, headers: [("ZUMO-API-VERSION", "3.0.0")])
            #expect(reply.status == 200, "\(reply.status) \(reply.text.prefix(200))")
            let body = try #require(reply.json?.objectValue)
            let items = body["items"]?.arrayValue ?? []
            #expect(!items.isEmpty && items.count <= 64 * 1024 / Self.itemBytes, "page of \(items.count)")
            #expect(reply.text.utf8.count < 64 * 1024 + 8 * 1024, "a page of \(reply.text.utf8.count) bytes")
            #expect(body["count"] == 30, "the count is of every matching item, whatever the page holds")
            seen += items.compactMap { $0.objectValue?["id"]?.stringValue }
            pages += 1
            guard let next = body["nextLink"]?.stringValue, pages < 40 else { break }
            target = "/tables/t?" + next
        }
        #expect(seen == (0..<30).map { String(format: "item-%02d", $0) })
        #expect(pages >= 5)

        // 2.0: the Link header, and a client's $top is still honoured across the cut.
        var links = 0
        var legacy: [String] = []
        target = "/tables/t?$orderby=id%20desc&$top=20"
        while true {
            let reply = try await live.send("GET", target, headers: [("ZUMO-API-VERSION", "2.0.0")])
            legacy += (reply.json?.arrayValue ?? []).compactMap { $0.objectValue?["id"]?.stringValue }
            guard let link = reply.header("Link"), links < 40 else { break }
            links += 1
            let url = try #require(URL(string: String(link.prefix { $0 != ";" })))
            target = url.path + "?" + (url.query ?? "")
        }
        #expect(legacy == (10..<30).reversed().map { String(format: "item-%02d", $0) })
        #expect(links >= 3)
        try await live.stop()
    }

    @Test(arguments: ServerBackend.allCases)
    func aFilterTheDatabaseCannotRunIsPagedByTheBudgetToo(_ backend: ServerBackend) async throws {
        let live = try await Self.serverWithLargeItems(backend)
        // `version` comparisons run in the evaluator over the rows the database reads in order.
        let filter = "version%20ne%20'none'"
        let reply = try await live.send(
            "GET", "/tables/t?$filter=\(filter)&$orderby=id&$count=true", headers: [("ZUMO-API-VERSION", "3.0.0")])
        let body = try #require(reply.json?.objectValue)
        let items = body["items"]?.arrayValue ?? []
        #expect(!items.isEmpty && items.count <= 64 * 1024 / Self.itemBytes, "page of \(items.count)")
        #expect(body["count"] == 30)
        #expect(body["nextLink"]?.stringValue?.contains("$skip=\(items.count)") == true, "\(body["nextLink"] ?? .null)")
        try await live.stop()
    }

    @Test func oneItemLargerThanTheBudgetStillMakesAPage() async throws {
        var limits = RequestLimits()
        limits.maximumPageBytes = 4 * 1024
        let live = try await LiveServer.start(tables: [TableSettings(name: "t")], limits: limits)
        for id in ["a", "b"] {
            let body: JSONValue = ["id": .string(id), "text": .string(String(repeating: "y", count: 20_000))]
            #expect(try await live.send("POST", "/tables/t", json: body).status == 201)
        }
        let first = try await live.send("GET", "/tables/t?$orderby=id", headers: [("ZUMO-API-VERSION", "3.0.0")])
        let body = try #require(first.json?.objectValue)
        #expect(body["items"]?.arrayValue?.count == 1)
        #expect(body["nextLink"]?.stringValue != nil)
        try await live.stop()
    }
}
