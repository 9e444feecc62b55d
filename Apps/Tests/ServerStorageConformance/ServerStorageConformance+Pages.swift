import ServerStorageCore
import StoreConformance
import SyncCore
import Testing

extension ServerStorageConformanceSuite {
    static var pages: [ServerStorageCheck] {
        [
            .init("a page ends before the row that would pass its byte budget; paging by it walks every row once") {
                fixture async throws in
                let table = StorageTable(name: "sized")
                var random = SeededRandom(seed: 5)
                var payloads: [String: Int] = [:]
                for index in 0..<40 {
                    let id = "row-\(index < 10 ? "0" : "")\(index)"
                    let size = Int.random(in: 100...3_000, using: &random)
                    payloads[id] = size
                    _ = try await fixture.storage.insert(
                        into: table, id: id, content: ["p": .string(String(repeating: "x", count: size))], owner: nil)
                }
                let budget = 6_000
                // The order SQL gives, and a filter left to the evaluator (over rows read in order).
                let filters: [QueryExpression?] = [
                    nil, .binary(.notEqual, .field("version"), .literal(.string("none"))),
                ]
                for filter in filters {
                    for descending in [false, true] {
                        let order = [SortKey.field("id", descending: descending)]
                        let all = try await fixture.storage.query(table, StorageQuery(filter: filter, orderBy: order))
                        var walked: [String] = []
                        var skip = 0
                        while walked.count < 60 {
                            let page = try await fixture.storage.query(
                                table,
                                StorageQuery(
                                    filter: filter, orderBy: order, skip: skip, limit: 12, includeTotalCount: true,
                                    maximumBytes: budget))
                            let ids = page.items.map(\.id)
                            let bytes = ids.reduce(0) { $0 + payloads[$1]! }
                            #expect(!ids.isEmpty, "an empty page at \(skip)")
                            #expect(ids.count == 1 || bytes <= budget, "\(bytes) bytes in \(ids.count) rows")
                            #expect(page.totalCount == 40)
                            walked += ids
                            skip += ids.count
                            let following = all.items.dropFirst(skip).first
                            #expect(page.hasMore == (following != nil))
                            // The page stopped only because the next row would not fit, or at its limit
                            // (200 bytes of slack a row for the item's stored form around the payload).
                            if let following, ids.count < 12 {
                                #expect(bytes + payloads[following.id]! + 200 * (ids.count + 1) > budget)
                            }
                            if !page.hasMore { break }
                        }
                        #expect(walked == all.items.map(\.id), "filter \(String(describing: filter))")
                    }
                }
            }
        ]
    }
}
