import SyncCore
import SyncTesting
import Testing

/// Legacy bugs whose fix does not belong to one of the other suites (see docs/legacy-bugs.md).
@Suite("Legacy bugs")
struct LegacyBugTests {
    /// Bug #17: work cancelled before it starts says so, and changes nothing.
    @Test(arguments: StoreKind.allCases)
    func workCancelledBeforeItStartsThrows(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let device = try Device(kind: kind, server: server)
        server.seed("todo", [["id": "s"]])
        try await device.table().insert(["id": "a"])
        let context = device.context
        let results = await Task {
            withUnsafeCurrentTask { $0?.cancel() }
            var codes: [SyncError.Code?] = []
            for work in [
                { _ = try await context.push() }, { _ = try await context.table("todo").pull() },
                { _ = try await context.table("todo").purge(force: true) },
                { try await context.resolveError("e", .discardLocalChange) },
            ] as [@Sendable () async throws -> Void] {
                do {
                    try await work()
                    codes.append(nil)
                } catch {
                    codes.append((error as? SyncError)?.code)
                }
            }
            return codes
        }.value
        #expect(results == [.cancelled, .cancelled, .cancelled, .cancelled])
        #expect(server.requests.isEmpty)
        #expect(try await device.context.queuedOperationCount() == 1)
    }

    /// Bug #13: items without `updatedAt` cannot be paged by time; the pull says so instead of
    /// silently missing rows.
    @Test func itemsWithoutUpdatedAtAreReported() async throws {
        let noTimes = FixedPages { _ in RemotePage(items: [["id": "a"], ["id": "b"]]) }
        let context = SyncContext(store: try TestStore(.memory).store) { _ in noTimes }
        let error = await expectSyncError(.invalidResponse) { try await context.table("t").pull(queryID: "q") }
        #expect(error?.description.contains("updatedAt") == true)
        #expect(try await context.table("t").query().items.isEmpty)
        // With skip paging (an explicit order), a plain pull does not need them.
        try await context.table("t").pull(TableQuery().orderBy("id"))
        #expect(try await context.table("t").query().items.count == 2)
    }

    /// Bug #14: a plain pull pages by keyset too (stable under concurrent changes), not by `$skip`.
    @Test func aPlainPullPagesByKeyset() async throws {
        let server = ModelServer()
        let device = try Device(kind: .memory, server: server)
        server.seed("todo", PullTests.rows(5))
        try await device.table().pull(options: PullOptions(pageSize: 2))
        let queries = server.requests.compactMap(\.query)
        #expect(queries.count == 3)
        #expect(queries.allSatisfy { $0.skip == nil && $0.orderBy == [.field("updatedAt"), .field("id")] })
    }

    /// Bug #19: a local query counts every match even without paging.
    @Test(arguments: StoreKind.allCases)
    func aLocalCountWithoutPagingIsRight(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        for index in 0..<4 { try await device.table().insert(["id": .string("i\(index)")]) }
        #expect(try await device.table().query(TableQuery().includingTotalCount()).totalCount == 4)
    }

    /// Bug #20: a count that cannot be read throws instead of answering a huge number.
    @Test func aFailingCountThrows() async throws {
        let storage = try TestStore(.memory)
        let context = SyncContext(store: storage.store, remote: ModelServer().remote())
        try await storage.store.close()
        await expectSyncError(.store) { _ = try await context.queuedOperationCount() }
    }

    /// Bug #27: text that looks like a date stays text.
    @Test(arguments: StoreKind.allCases)
    func dateLikeTextStaysText(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let device = try Device(kind: kind, server: server)
        server.seed("todo", [["id": "a", "note": "2024-01-01T00:00:00.000Z"]])
        try await device.table().pull()
        let item = try #require(try await device.table().item(id: "a"))
        #expect(item["note"] == .string("2024-01-01T00:00:00.000Z"))
        #expect(item["updatedAt"]?.stringValue != nil)
    }
}
