import FerryServer
import Foundation
import ServerTestSupport
import SyncCore
import Testing

/// DESIGN §3 over the wire: concurrent writers through HTTP, and a reader that pages with a keyset
/// cursor on (updatedAt, id) expressed as a plain OData filter, misses nothing.
@Suite("Commit-ordered stamps over HTTP", .timeLimit(.minutes(10)))
struct CommitOrderHTTPTests {
    @Test(arguments: ServerBackend.allCases)
    func aKeysetReaderMissesNoRowWhileWritersRun(_ backend: ServerBackend) async throws {
        let server = try await LiveServer.start(tables: [TableSettings(name: "feed", pageSize: 10)], backend: backend)
        let writers = 4
        let perWriter = 30
        let total = writers * perWriter
        let seen = try await withThrowingTaskGroup(of: [String].self) { group in
            for writer in 0..<writers {
                group.addTask {
                    for step in 0..<perWriter {
                        let id = "\(writers - writer)-\(1000 - step)"  // ids do not follow time
                        let reply = try await server.send(
                            "POST", "/tables/feed", json: ["id": .string(id), "n": .int(Int64(step))])
                        guard reply.status == 201 else {
                            throw ReplayError(description: "insert \(id): \(reply.status)")
                        }
                    }
                    return []
                }
            }
            group.addTask {
                var ids: [String] = []
                var cursor: (String, String)?
                var quietPasses = 0
                while quietPasses < 2 {
                    var query = "$orderby=updatedAt,id&$top=10&__includedeleted=true"
                    if let (time, id) = cursor {
                        let filter =
                            "(updatedAt gt cast(\(time),Edm.DateTimeOffset)) or "
                            + "(updatedAt eq cast(\(time),Edm.DateTimeOffset) and id gt '\(id)')"
                        query += "&$filter=" + filter
                    }
                    let reply = try await server.send("GET", "/tables/feed?" + encodedQuery(query))
                    if reply.status == 404 { continue }  // the first insert has not created the table yet
                    let items = reply.json?["items"]?.arrayValue ?? []
                    for item in items {
                        guard let id = item["id"]?.stringValue, let time = item["updatedAt"]?.stringValue else {
                            continue
                        }
                        ids.append(id)
                        cursor = (time, id)
                    }
                    if items.isEmpty {
                        let count = try await server.send("GET", "/tables/feed?$count=true&$top=0").json?["count"]
                        if count == .int(Int64(total)) { quietPasses += 1 }
                    }
                }
                return ids
            }
            var all: [String] = []
            for try await part in group { all += part }
            return all
        }
        #expect(seen.count == total, "the reader saw \(seen.count) of \(total) rows")
        #expect(Set(seen).count == seen.count)
        // updatedAt and version are unique and agree on commit order.
        var items: [JSONValue] = []
        var next: String? = "$orderby=updatedAt"
        while let query = next {
            let page = try await server.send("GET", "/tables/feed?" + query)
            items += page.json?["items"]?.arrayValue ?? []
            next = page.json?["nextLink"]?.stringValue
        }
        #expect(items.count == total)
        let times = items.compactMap { $0["updatedAt"]?.stringValue }
        #expect(Set(times).count == total)
        let versions = items.compactMap { $0["version"]?.stringValue }.compactMap { ItemVersionText.number($0) }
        #expect(versions == versions.sorted())
        #expect(Set(versions).count == total)
        try await server.stop()
    }
}

/// Decodes the server's version tags (base64 of 8 big-endian bytes) to compare their order.
enum ItemVersionText {
    static func number(_ tag: String) -> UInt64? {
        guard let data = Data(base64Encoded: tag), data.count == 8 else { return nil }
        return data.reduce(0) { $0 << 8 | UInt64($1) }
    }
}
