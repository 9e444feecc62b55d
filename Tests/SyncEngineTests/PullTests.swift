import Synchronization
import SyncCore
import SyncTesting
import Testing

@Suite("Pull")
struct PullTests {
    static func rows(_ count: Int, prefix: String = "r") -> [JSONObject] {
        (0..<count).map { index in
            let digits = String(index)
            let padded = String(repeating: "0", count: max(0, 3 - digits.count)) + digits
            return ["id": .string(prefix + padded), "n": .int(Int64(index))]
        }
    }

    /// A pull cut after its first page did sync, in part: the time is recorded ("never synced"
    /// after thousands of items pulled was wrong), and the page stays.
    @Test(arguments: StoreKind.allCases)
    func aPullCutAfterItsFirstPageRecordsTheSyncTime(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let device = try Device(kind: kind, server: server)
        server.seed("todo", Self.rows(6))
        server.dropQueries(after: 1)
        await expectSyncError(.network) {
            try await device.table().pull(queryID: "q", options: PullOptions(pageSize: 2, pushesFirst: false))
        }
        #expect(try await device.table().query().items.count == 2)
        #expect(try await device.context.lastSyncedAt() != nil)
        // Not everything is here: the table's pull is unfinished until one ends (a status said
        // "everything synced" after a cancelled pull), and a pull of another table changes nothing.
        #expect(try await device.context.unfinishedPulls() == ["todo"])
        server.setFaultPolicy(nil)
        server.seed("other", Self.rows(1))
        try await device.table("other").pull(options: PullOptions(pushesFirst: false))
        #expect(try await device.context.unfinishedPulls() == ["todo"])
        try await device.table().pull(queryID: "q", options: PullOptions(pageSize: 2, pushesFirst: false))
        #expect(try await device.context.unfinishedPulls() == [])
        #expect(try await device.table().query().items.count == 6)
    }

    /// A process killed midway through a pull (SIGKILL, a Ctrl-C it dies of) runs no code on its
    /// way out: what it leaves must already say the table's pull is unfinished. Seen from the
    /// store while the second page is on its way, after the first was applied.
    @Test(arguments: StoreKind.allCases)
    func aPullKilledMidwayLeavesItsTableUnfinished(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let device = try Device(kind: kind, server: server)
        server.seed("todo", Self.rows(6))
        let context = device.context
        let midway = Mutex<(items: Int, unfinished: [String])?>(nil)
        let queries = Mutex(0)
        server.setFaultPolicy { request in
            guard request.kind == .query else { return nil }
            guard
                queries.withLock({ count in
                    count += 1
                    return count
                }) == 2
            else { return nil }
            return .hook {
                // The second page downloads while the first is applied: waits for it.
                for _ in 0..<500 {
                    let items = (try? await context.table("todo").query().items.count) ?? 0
                    if items == 2, let unfinished = try? await context.unfinishedPulls() {
                        midway.withLock { $0 = (items, unfinished) }
                        break
                    }
                    try? await Task.sleep(for: .milliseconds(10))
                }
                return nil
            }
        }
        try await device.table().pull(queryID: "q", options: PullOptions(pageSize: 2, pushesFirst: false))
        let seen = try #require(midway.withLock { $0 }, "the first page was never seen applied")
        #expect(seen.unfinished == ["todo"], "a process killed here would leave 2 of 6 items as everything")
        // Finished: nothing unfinished, and a pull of one page marks nothing on its way.
        #expect(try await device.context.unfinishedPulls() == [])
        server.clearFaults()
        try await device.table().pull(queryID: "q", options: PullOptions(pageSize: 100, pushesFirst: false))
        #expect(try await device.context.unfinishedPulls() == [])
        #expect(try await device.table().query().items.count == 6)
    }

    /// Legacy bugs #12 and #14, and the gap hazard of `gt`: a keyset cursor on (updatedAt, id) pages
    /// through rows that share one millisecond, and the next pull downloads nothing again.
    @Test(arguments: StoreKind.allCases)
    func anIncrementalPullPagesByKeysetThroughASharedMillisecond(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let device = try Device(kind: kind, server: server)
        server.seed("todo", Self.rows(25))  // one commit: all 25 share one updatedAt
        #expect(Set(server.rows("todo").map(\.updatedAt)).count == 1)
        let result = try await device.table().pull(queryID: "all", options: PullOptions(pageSize: 4))
        #expect(result.pages == 7)
        #expect(result.items.upserted == 25)
        #expect(try await device.table().query().items.count == 25)

        let queries = server.requests.compactMap(\.query)
        #expect(queries.count == 7)
        #expect(queries.allSatisfy { $0.top == 4 && $0.includeDeleted && $0.skip == nil })
        #expect(queries.allSatisfy { $0.orderBy == [.field("updatedAt"), .field("id")] })
        #expect(queries[0].filter == nil)
        let stamp = try #require(server.rows("todo").first?.updatedAt)
        let time = QueryExpression.literal(.dateTimeOffset(stamp))
        #expect(
            queries[1].filter
                == .binary(
                    .and, .binary(.greaterThanOrEqual, .field("updatedAt"), time),
                    .binary(
                        .or, .binary(.greaterThan, .field("updatedAt"), time),
                        .binary(
                            .and, .binary(.equal, .field("updatedAt"), time),
                            .binary(.greaterThan, .field("id"), .literal(.string("r003")))))))
        // A plain OData filter for both protocol versions.
        #expect(
            queries[1].odataQueryString(protocolVersion: .v2).contains(
                "$filter=((updatedAt%20ge%20datetimeoffset'2023-11-14T22:13:20.000Z')%20and%20((updatedAt%20gt"))

        server.clearRequests()
        let again = try await device.table().pull(queryID: "all", options: PullOptions(pageSize: 4))
        #expect(again.items.received == 0)
        #expect(server.requests.count == 1)
    }

    @Test(arguments: StoreKind.allCases)
    func laterChangesAndDeletionsArrive(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let device = try Device(kind: kind, server: server)
        server.seed("todo", Self.rows(10))
        try await device.table().pull(queryID: "all", options: PullOptions(pageSize: 3))
        server.touch("todo", ids: ["r001", "r002", "r003"], set: ["n": 100])
        server.seed("todo", [["id": "new1"], ["id": "new2"]])
        server.softDelete("todo", ids: ["r004", "r005"])
        let result = try await device.table().pull(queryID: "all", options: PullOptions(pageSize: 3))
        #expect(result.items.received == 7)
        #expect(result.items.upserted == 5)
        #expect(result.items.deleted == 2)
        let local = try await device.table().query().items
        #expect(local.count == 10)
        #expect(try await device.table().item(id: "r004") == nil)
        #expect(try await device.table().item(id: "r002")?["n"] == 100)
        #expect(
            local.map { $0.filter { $0.key != "deleted" } }
                == server.rows("todo").map { $0.filter { $0.key != "deleted" } })
        #expect(try await device.table().pull(queryID: "all").items.received == 0)
    }

    /// Crash safety: each page commits with its delta token; a pull that stops resumes after the last
    /// applied page and never applies a page twice or out of order.
    @Test(arguments: StoreKind.allCases)
    func aPullThatStopsResumesAfterTheLastAppliedPage(_ kind: StoreKind) async throws {
        let server = ModelServer()
        var device = try Device(kind: kind, server: server)
        server.seed("todo", Self.rows(10))
        server.inject(.dropBeforeApply, on: .query, count: 1)
        await expectSyncError(.network) { try await device.table().pull(queryID: "q") }
        #expect(try await device.table().query().items.isEmpty)

        server.inject(.hook { nil }, on: .query, count: 2)  // two pages arrive, the third answer is lost
        server.inject(.dropAfterApply, on: .query, count: 1)
        await expectSyncError(.network) {
            try await device.table().pull(queryID: "q", options: PullOptions(pageSize: 3))
        }
        #expect(try await device.table().query().items.map(\.id) == ["r000", "r001", "r002", "r003", "r004", "r005"])

        try await device.restart()
        server.clearRequests()
        let rest = try await device.table().pull(queryID: "q", options: PullOptions(pageSize: 3))
        #expect(rest.items.upserted == 4)
        #expect(server.requests.first?.query?.filter?.odata(protocolVersion: .v3).contains("'r005'") == true)
        #expect(try await device.table().query().items.count == 10)
    }

    @Test(arguments: StoreKind.allCases)
    func itemsWithPendingOperationsAreNotOverwritten(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let device = try Device(kind: kind, server: server)
        server.seed("todo", [["id": "a", "title": "base"], ["id": "b", "title": "base"]])
        try await device.table().pull(queryID: "all")
        try await device.table().update(["id": "a", "title": "mine"])
        server.touch("todo", ids: ["a", "b"], set: ["title": "theirs"])
        let result = try await device.table().pull(queryID: "all", options: PullOptions(pushesFirst: false))
        #expect(result.items.skipped == 1)
        #expect(try await device.table().item(id: "a")?["title"] == "mine")
        #expect(try await device.table().item(id: "b")?["title"] == "theirs")
    }

    @Test(arguments: StoreKind.allCases)
    func aPullPushesTheTablesOperationsFirst(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let device = try Device(kind: kind, server: server)
        try await device.table().insert(["id": "a", "title": "mine"])
        try await device.table().insert(["id": "b", "title": "mine"])
        server.inject(.status(500, "down"), on: .insert, itemID: "b")
        server.seed("todo", [["id": "c"]])
        let result = try await device.table().pull(queryID: "all")
        #expect(result.push?.pushed == 1)
        #expect(result.push?.failed.map(\.itemID) == ["b"])
        #expect(server.requests.map(\.kind) == [.insert, .insert, .query])
        // The pull went on, leaving alone the item whose operation is still queued.
        #expect(try await device.table().item(id: "a")?.version == server.row("todo", id: "a")?.version)
        #expect(try await device.table().item(id: "c") != nil)
        #expect(try await device.table().item(id: "b")?.version == nil)
        // A push that cannot reach the server stops the pull.
        server.inject(.dropBeforeApply, on: .insert)
        await expectSyncError(.network) { try await device.table().pull(queryID: "all") }
        // A table without pending operations does not push (even if another table has some).
        try await device.table("other").insert(["id": "x"])
        server.clearRequests()
        try await device.table("fresh").pull(queryID: "t")
        #expect(server.requests.map(\.kind) == [.query])
    }

    @Test(arguments: StoreKind.allCases)
    func aCompletePullRemovesDeletedItems(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let device = try Device(kind: kind, server: server)
        server.seed("todo", Self.rows(6))
        try await device.table().pull()
        server.softDelete("todo", ids: ["r001"])
        server.hardDelete("todo", ids: ["r002"])
        let plain = try await device.table().pull()
        #expect(plain.items.deleted == 1)
        #expect(try await device.table().item(id: "r002") != nil)  // a hard delete is invisible to a pull
        try await device.table().update(["id": "r003", "n": 33])
        server.hardDelete("todo", ids: ["r003"])
        // Legacy bug #15: a complete pull can also drop what the server no longer has.
        let mirrored = try await device.table().pull(
            options: PullOptions(pushesFirst: false, removesMissingItems: true))
        #expect(mirrored.removedMissing == 1)
        #expect(try await device.table().item(id: "r002") == nil)
        #expect(try await device.table().item(id: "r003") != nil)  // it has a pending operation
    }

    @Test(arguments: StoreKind.allCases)
    func aPlainPullHonoursTopSkipAndOrder(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let device = try Device(kind: kind, server: server)
        server.seed("todo", Self.rows(12))
        let limited = try await device.table().pull(TableQuery().top(5), options: PullOptions(pageSize: 2))
        #expect(limited.items.received == 5)
        #expect(server.requests.compactMap(\.query).map(\.top) == [2, 2, 1])
        server.clearRequests()
        let ordered = try await device.table().pull(
            TableQuery().filter(.field("n").ge(4)).orderBy("n", descending: true).skip(1),
            options: PullOptions(pageSize: 3))
        #expect(ordered.items.received == 7)
        let queries = server.requests.compactMap(\.query)
        #expect(queries.map(\.skip) == [1, 4, 7])
        #expect(queries.first?.orderBy == [.field("n", descending: true), .field("id")])
        // r000…r004 from the first pull, n = 10…4 from the second (n = 11 was skipped).
        #expect(try await device.table().query().items.count == 11)
        #expect(try await device.table().item(id: "r011") == nil)
    }

    /// The server caps pages below the requested size: its next-page hint keeps the pull going.
    @Test func aServerPageCapDoesNotEndThePull() async throws {
        let server = ModelServer(maximumPageSize: 3)
        let device = try Device(kind: .memory, server: server)
        server.seed("todo", Self.rows(10))
        let result = try await device.table().pull(queryID: "all", options: PullOptions(pageSize: 50))
        #expect(result.items.received == 10)
        #expect(result.pages == 4)
    }

    /// A table nobody has written to is an empty table: the first pull succeeds with nothing.
    @Test func aFirstPullOfATableNobodyHasWrittenIsEmpty() async throws {
        let server = ModelServer()
        let device = try Device(kind: .memory, server: server)
        let result = try await device.table("never").pull(queryID: "all")
        #expect(result.items.received == 0)
        #expect(server.requests.map(\.kind) == [.query])
    }

    /// A 404 on a query means there is no table endpoint there (a wrong server URL): the pull fails
    /// and says so, rather than reporting an empty pull.
    @Test func aPullWhoseQueryIsNotFoundFails() async throws {
        let server = ModelServer()
        let device = try Device(kind: .memory, server: server)
        server.seed("todo", Self.rows(2))
        server.inject(
            .status(404, "querying 'todo': there is no table endpoint at http://h/api/tables/todo"), on: .query)
        let error = await expectSyncError(.remote) { try await device.table().pull(queryID: "all") }
        #expect(error?.description.contains("no table endpoint") == true, "\(String(describing: error))")
        #expect(try await device.table().query().items.isEmpty)
        // The delta token did not move: the next pull downloads everything.
        #expect(try await device.table().pull(queryID: "all").items.received == 2)
    }

    @Test(arguments: StoreKind.allCases)
    func anotherFilterForTheSameQueryIDStartsOver(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let device = try Device(kind: kind, server: server)
        server.seed("todo", Self.rows(6))
        try await device.table().pull(TableQuery().filter(.field("n").lt(3)), queryID: "q")
        #expect(try await device.table().query().items.count == 3)
        server.clearRequests()
        try await device.table().pull(TableQuery().filter(.field("n").ge(3)), queryID: "q")
        #expect(server.requests.first?.query?.filter == .binary(.greaterThanOrEqual, .field("n"), .literal(.int(3))))
        #expect(try await device.table().query().items.count == 6)
        // Independent delta tokens per query id and per table.
        server.seed("note", Self.rows(2))
        #expect(try await device.table("note").pull(queryID: "q").items.received == 2)
        #expect(try await device.table().pull(queryID: "other").items.received == 6)
    }

    /// Legacy §5.1, bug #18 (select was silently dropped) and bug #21 (query ids were not checked).
    @Test func invalidPullsAreRejectedBeforeAnyRequest() async throws {
        let server = ModelServer()
        let device = try Device(kind: .memory, server: server)
        let todos = device.table()
        let rejected: [(TableQuery, String?, PullOptions)] = [
            (TableQuery().select("id"), nil, PullOptions()),
            (TableQuery().includingTotalCount(), nil, PullOptions()),
            (TableQuery().orderBy("n"), "q", PullOptions()),
            (TableQuery().skip(1), "q", PullOptions()),
            (TableQuery().top(1), "q", PullOptions()),
            (TableQuery(), "", PullOptions()),
            (TableQuery(), "has space", PullOptions()),
            (TableQuery(), String(repeating: "q", count: 256), PullOptions()),
            (TableQuery(), nil, PullOptions(pageSize: 0)),
            (TableQuery().top(-1), nil, PullOptions()),
            (TableQuery(), "q", PullOptions(removesMissingItems: true)),
            (TableQuery().top(3), nil, PullOptions(removesMissingItems: true)),
        ]
        for (query, queryID, options) in rejected {
            await expectSyncError(.invalidQuery, "\(query) \(queryID ?? "-")") {
                try await todos.pull(query, queryID: queryID, options: options)
            }
        }
        await expectSyncError(.invalidTableName) { try await device.context.table("bad name").pull() }
        #expect(server.requests.isEmpty)
        // Accepted: orderBy, skip and top without a query id; a query id with a filter.
        try await todos.pull(TableQuery().orderBy("n").skip(1).top(2))
        try await todos.pull(TableQuery().filter(.field("n").eq(1)), queryID: "q-1.a:b_c")
    }

    /// A page size above what some servers allow, refused with a 400 whose words name `$top` (the
    /// Node server's "You cannot request more than 1000 records"), says what to change; a 400 for
    /// a page size every server takes, or for the caller's own `top`, is left as the server said it.
    @Test func aPageSizeAServerRefusesIsExplained() async throws {
        let server = ModelServer()
        server.setFaultPolicy { request in
            guard request.kind == .query, let top = request.query?.top, top > 1_000 else { return nil }
            return .status(400, "You cannot request more than 1000 records")
        }
        let device = try Device(kind: .memory, server: server)
        let todos = device.table()
        do {
            try await todos.pull(options: PullOptions(pageSize: 5_000))
            Issue.record("a refused page size was not reported")
        } catch {
            #expect(error.code == .remote)
            #expect(error.remoteError?.status == 400)
            #expect(error.message.contains("You cannot request more than 1000 records"), "\(error.message)")
            #expect(error.message.contains("pages of 5000 items are more than some servers allow"), "\(error)")
        }
        try await todos.pull(options: PullOptions(pageSize: 1_000))
        do {
            try await todos.pull(TableQuery().top(2_000), options: PullOptions(pageSize: 5_000))
            Issue.record("a refused top was not reported")
        } catch {
            #expect(error.remoteError?.status == 400)
            #expect(!error.message.contains("pages of"), "the caller's own top: \(error.message)")
        }
        server.setFaultPolicy { $0.kind == .query ? .status(400, "unknown field 'n'") : nil }
        do {
            try await todos.pull(options: PullOptions(pageSize: 50))
            Issue.record("a refused query was not reported")
        } catch {
            #expect(!error.message.contains("pages of"), "\(error.message)")
        }
    }

    /// A server that ignores the delta token cannot make the pull loop forever.
    @Test func aServerThatIgnoresTheDeltaTokenIsReported() async throws {
        let stuck = FixedPages { query in
            RemotePage(items: [["id": "a", "updatedAt": "2024-01-01T00:00:00.000Z"]], nextPage: query)
        }
        let context = SyncContext(store: try TestStore(.memory).store) { _ in stuck }
        await expectSyncError(.invalidResponse) { try await context.table("t").pull(queryID: "q") }
        #expect(try await context.table("t").item(id: "a") != nil)  // the first page was fine
    }

    /// A server that ignores `$skip` (paging by an explicit order) answers the first page again and
    /// again: the pull stops with the reason instead of looping forever.
    @Test func aServerThatIgnoresSkipIsReported() async throws {
        let firstPageOnly = FixedPages { query in
            RemotePage(items: (0..<(query.top ?? 2)).map { ["id": .string("r\($0)"), "n": .int(Int64($0))] })
        }
        let context = SyncContext(store: try TestStore(.memory).store) { _ in firstPageOnly }
        let error = await expectSyncError(.invalidResponse) {
            try await context.table("t").pull(TableQuery().orderBy("n"), options: PullOptions(pageSize: 2))
        }
        #expect(error?.message.contains("does it ignore $skip?") == true, "\(String(describing: error))")
        #expect(try await context.table("t").item(id: "r1") != nil)  // the first page was fine

        // Once in a row is a page shifted by inserts meanwhile, not a server ignoring $skip.
        let shifted = FixedPages { query in
            let ids: [String] =
                switch query.skip ?? 0 {
                case 0, 2: ["a", "b"]
                case 4: ["c"]
                default: []
                }
            return RemotePage(items: ids.map { ["id": .string($0)] })
        }
        let other = SyncContext(store: try TestStore(.memory).store) { _ in shifted }
        let pulled = try await other.table("t").pull(TableQuery().orderBy("n"), options: PullOptions(pageSize: 2))
        #expect(pulled.pages == 3)
        #expect(try await other.table("t").item(id: "c") != nil)
    }

    /// A page that holds an item twice (an update, then its deletion) means its last copy: before,
    /// deletions were applied before upserts and the deleted item stayed, past the pull's cursor.
    @Test(arguments: StoreKind.allCases)
    func aPageThatRepeatsAnIdMeansItsLastCopy(_ kind: StoreKind) async throws {
        let at = "2024-01-01T00:00:00.000Z"
        let repeating = FixedPages { _ in
            RemotePage(items: [
                ["id": 7, "title": "no valid id", "updatedAt": .string(at)],
                ["id": "gone", "title": "kept", "updatedAt": .string(at)],
                ["id": "back", "title": "deleted first", "updatedAt": .string(at), "deleted": true],
                ["id": "gone", "title": "kept", "updatedAt": .string(at), "deleted": true],
                ["id": "back", "title": "then back", "updatedAt": .string(at)],
            ])
        }
        let test = try TestStore(kind)
        let store = test.store
        try await store.upsert("t", [["id": "gone", "title": "here before"]])
        let context = SyncContext(store: store) { _ in repeating }
        let result = try await context.table("t").pull()
        #expect(try await context.table("t").item(id: "gone") == nil)
        #expect(try await context.table("t").item(id: "back")?["title"] == "then back")
        #expect(result.items.deleted == 1 && result.items.upserted == 1)
        #expect(result.items.skipped == 2 && result.items.invalid == 1)
    }

    /// An item whose `version` is not a string, or whose `deleted` is not a Boolean, is ignored
    /// and counted: kept as it came, a number for a version went back without `If-Match`, and each
    /// later edit overwrote the server's copy whatever other devices had changed.
    @Test(arguments: StoreKind.allCases)
    func itemsWhoseSystemPropertiesHaveTheWrongTypesAreIgnored(_ kind: StoreKind) async throws {
        let at = "2024-01-01T00:00:00.000Z"
        let odd = FixedPages { _ in
            RemotePage(items: [
                ["id": "number", "version": 7, "updatedAt": .string(at)],
                ["id": "object", "version": ["a": 1], "updatedAt": .string(at)],
                ["id": "yes", "version": "v1", "deleted": "yes", "updatedAt": .string(at)],
                ["id": "fine", "version": "v2", "deleted": false, "updatedAt": .string(at)],
                ["id": "plain", "version": .null, "updatedAt": .string(at)],
            ])
        }
        let test = try TestStore(kind)
        try await test.store.upsert("t", [["id": "yes", "title": "here before"]])
        let context = SyncContext(store: test.store) { _ in odd }
        let result = try await context.table("t").pull()
        #expect(result.items.invalid == 3 && result.items.upserted == 2, "\(result.items)")
        for id in ["number", "object"] { #expect(try await context.table("t").item(id: id) == nil, "\(id)") }
        #expect(try await context.table("t").item(id: "yes")?["title"] == "here before")
        #expect(try await context.table("t").item(id: "fine")?["version"] == "v2")
        #expect(try await context.table("t").item(id: "plain") != nil)
    }

    /// An item a server dated in the far future (its clock jumped, a bug stamped 9999) is pulled,
    /// but the saved delta token stays before it: the next incremental pull still brings what
    /// changed after. Before, the token moved to 9999 and the device never pulled again.
    @Test func anItemDatedInTheFarFutureDoesNotCarryTheDeltaTokenPastLaterChanges() async throws {
        final class Rows: RemoteTable, Sendable {
            let rows = Mutex<[JSONObject]>([
                ["id": "a", "updatedAt": "2026-01-01T00:00:00.000Z"],
                ["id": "future", "updatedAt": "9999-12-31T23:59:59.999Z"],
            ])
            func insert(_ item: JSONObject) async throws(RemoteError) -> JSONObject { item }
            func update(_ item: JSONObject, ifVersion version: String?) async throws(RemoteError) -> JSONObject { item }
            func delete(id: String, ifVersion version: String?) async throws(RemoteError) {}
            func item(id: String) async throws(RemoteError) -> JSONObject? { nil }
            func query(_ query: TableQuery) async throws(RemoteError) -> RemotePage {
                let all = rows.withLock { $0 }
                do {
                    return RemotePage(items: try QueryEvaluator().evaluate(query, over: all).items)
                } catch {
                    throw RemoteError(.badRequest, "\(error)")
                }
            }
        }
        let rows = Rows()
        let context = SyncContext(store: try TestStore(.memory).store) { _ in rows }
        let first = try await context.table("t").pull(queryID: "q", options: PullOptions(pageSize: 1))
        #expect(first.items.upserted == 2 && first.pages == 2)
        // A change the server makes now, dated now.
        rows.rows.withLock { $0.append(["id": "b", "updatedAt": "2026-01-02T00:00:00.000Z"]) }
        let second = try await context.table("t").pull(queryID: "q")
        #expect(try await context.table("t").item(id: "b") != nil, "the change after the future item was never pulled")
        #expect(second.items.received == 2, "b, and the future item again")
    }

    @Test(arguments: StoreKind.allCases)
    func aStoredNewerCopyIsNotReplacedByAnOlderPage(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let device = try Device(kind: kind, server: server)
        server.seed("todo", [["id": "a", "title": "old"]])
        try await device.store.upsert("todo", [["id": "a", "title": "newer", "updatedAt": "2099-01-01T00:00:00.000Z"]])
        let result = try await device.table().pull()
        #expect(result.items.skipped == 1)
        #expect(try await device.table().item(id: "a")?["title"] == "newer")
    }

    @Test(arguments: StoreKind.allCases)
    func cancellingAPullKeepsTheAppliedPages(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let device = try Device(kind: kind, server: server)
        server.seed("todo", Self.rows(9))
        // The request for the second page (sent while the first is applied) waits until released.
        let gate = AsyncStream<Void>.makeStream()
        server.inject(.hook { nil }, on: .query)
        server.inject(
            .hook {
                for await _ in gate.stream {}
                return nil
            }, on: .query)
        let todos = device.table()
        let pull = Task { try await todos.pull(queryID: "q", options: PullOptions(pageSize: 3)) }
        for _ in 0..<500 where try await todos.query().items.count < 3 {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(try await todos.query().items.count == 3)
        pull.cancel()
        gate.continuation.finish()
        await expectSyncError(.cancelled) { _ = try await pull.value }
        // The page that arrived after the cancellation was not applied; the next pull starts after page 1.
        #expect(try await todos.query().items.count == 3)
        let rest = try await todos.pull(queryID: "q", options: PullOptions(pageSize: 3))
        #expect(rest.items.received == 6)
        #expect(try await todos.query().items.count == 9)
    }
}
