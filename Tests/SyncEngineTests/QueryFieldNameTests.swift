import SyncCore
import SyncTesting
import Testing

/// Field names of queries built in code follow the OData parser's rule, at the call.
@Suite("Query field names")
struct QueryFieldNameTests {
    @Test(arguments: StoreKind.allCases)
    func aStringFieldPathFailsAtTheCallAsTheParserSays(_ kind: StoreKind) async throws {
        let parserError = #expect(throws: QueryError.self) {
            try TableQuery(odata: "$filter=details/priority eq 1", protocolVersion: .v3)
        }
        let reason = try #require(parserError?.reason)
        #expect(reason == "paths such as 'details/…' are not supported")

        let device = try Device(kind: kind, server: ModelServer())
        let table = device.table("errand")
        let query = TableQuery().filter(QueryExpression.field("details/priority").eq(1))
        for error in [
            await expectSyncError(.invalidQuery) { _ = try await table.query(query) },
            await expectSyncError(.invalidQuery) { try await table.pull(query) },
            await expectSyncError(.invalidQuery) { try await table.purge(query) },
            await expectSyncError(.invalidQuery) {
                var observation = table.observe(query).makeAsyncIterator()
                _ = try await observation.next()
            },
            await expectSyncError(.invalidQuery) { _ = try await table.query(TableQuery().orderBy("a.b")) },
            await expectSyncError(.invalidQuery) { _ = try await table.query(TableQuery().select("id", "meta/x")) },
        ] {
            #expect(error?.message.contains("not supported") == true, "\(String(describing: error))")
        }
        let first = await expectSyncError(.invalidQuery) { _ = try await table.query(query) }
        #expect(first?.message.contains(reason) == true)
    }
}
