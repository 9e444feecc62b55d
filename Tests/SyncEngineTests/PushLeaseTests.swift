import StoreMemory
import SyncTesting
import Testing

@testable import SyncCore

/// Issue 29: one pusher per store, across processes and contexts (the store's push lease).
@Suite("The push lease")
struct PushLeaseTests {
    /// A remote table whose inserts take `delay`: pushes long enough to overlap.
    struct SlowTable: RemoteTable {
        let inner: any RemoteTable
        let delay: Duration

        func insert(_ item: JSONObject) async throws(RemoteError) -> JSONObject {
            try? await Task.sleep(for: delay)
            return try await inner.insert(item)
        }
        func update(_ item: JSONObject, ifVersion version: String?) async throws(RemoteError) -> JSONObject {
            try await inner.update(item, ifVersion: version)
        }
        func delete(id: String, ifVersion version: String?) async throws(RemoteError) {
            try await inner.delete(id: id, ifVersion: version)
        }
        func item(id: String) async throws(RemoteError) -> JSONObject? { try await inner.item(id: id) }
        func query(_ query: TableQuery) async throws(RemoteError) -> RemotePage { try await inner.query(query) }
    }

    static func context(
        _ store: any LocalStore, _ server: ModelServer, delay: Duration = .zero, lifetime: Duration = .seconds(10)
    ) -> SyncContext {
        SyncContext(
            store: store,
            remote: RemoteTableFactory(make: { SlowTable(inner: server.table($0), delay: delay) }),
            pushLeaseLifetime: lifetime)
    }

    static func queue(_ count: Int, on context: SyncContext) async throws {
        for index in 0..<count { _ = try await context.table("todo").insert(["id": .string("i\(index)")]) }
    }

    static func attempt(_ context: SyncContext) async -> Result<PushResult, SyncError> {
        do {
            return .success(try await context.push())
        } catch {
            return .failure(error)
        }
    }

    static func lease(in store: any LocalStore) async throws -> PushLease? {
        try await store.read { try $0.deltaToken(table: SyncContext.engineSlot, queryID: PushLease.slot) }
            .flatMap(PushLease.init)
    }

    @Test func aLeaseHeldElsewhereStopsAPushUntilItEnds() async throws {
        let store = MemoryStore()
        let server = ModelServer()
        let context = Self.context(store, server)
        try await Self.queue(3, on: context)
        // A pusher that died a moment ago, in another process: its lease runs for 3 s more.
        let ends = ItemFields.now().millisecondsSince1970 + 3_000
        try await store.write { tx in
            try tx.setDeltaToken(
                table: SyncContext.engineSlot, queryID: PushLease.slot,
                value: PushLease(holder: "dead", endsAt: ends).text)
        }
        await #expect(throws: SyncError.self) { try await context.push() }
        do {
            _ = try await context.push()
        } catch {
            #expect(error.code == .pushInProgress, "\(error)")
            #expect(error.message.contains("another process is pushing this store"), "\(error.message)")
        }
        #expect(server.rows("todo").isEmpty, "a push went on beside another pusher's lease")
        #expect(try await context.queuedOperationCount(table: "todo") == 3)
        // Once it has ended, the next push takes the store.
        while ItemFields.now().millisecondsSince1970 <= ends { try await Task.sleep(for: .milliseconds(100)) }
        #expect(try await context.push().pushed == 3)
        #expect(server.rows("todo").count == 3)
        #expect(try await Self.lease(in: store) == nil, "the lease was not given back")
    }

    @Test func twoContextsPushingOneStoreNeverSendAnOperationTwice() async throws {
        let store = MemoryStore()
        let server = ModelServer()
        let first = Self.context(store, server, delay: .milliseconds(30))
        let second = Self.context(store, server, delay: .milliseconds(30))
        try await Self.queue(10, on: first)
        async let a = Self.attempt(first)
        async let b = Self.attempt(second)
        let outcomes = await [a, b]
        let pushed = outcomes.compactMap { try? $0.get().pushed }.reduce(0, +)
        #expect(pushed == 10, "\(outcomes)")
        for case .failure(let error) in outcomes { #expect(error.code == .pushInProgress, "\(error)") }
        let inserts = server.requests.filter { $0.kind == .insert }
        #expect(inserts.count == 10, "\(inserts.count) inserts for 10 operations")
        #expect(server.rows("todo").count == 10)
    }

    @Test func aLongPushRenewsItsLeaseAndKeepsTheStore() async throws {
        let store = MemoryStore()
        let server = ModelServer()
        // Eight inserts of 700 ms each: more than two lifetimes of 2.4 s (renewed every 800 ms,
        // which leaves a loaded machine 1.6 s of slack: 600 ms was too little for a CI run of the
        // suites side by side on two cores, where a renewal came late and the other pusher took
        // the lease).
        let long = Self.context(store, server, delay: .milliseconds(700), lifetime: .milliseconds(2_400))
        let other = Self.context(store, server, lifetime: .milliseconds(2_400))
        try await Self.queue(8, on: long)
        let pushing = Task { try await long.push() }
        try await Task.sleep(for: .milliseconds(3_000))
        do {
            let result = try await other.push()
            // Only when the long push had already ended (a very slow machine) may this one run.
            #expect(result.pushed == 0, "a second pusher ran beside a push that renews its lease")
        } catch {
            #expect(error.code == .pushInProgress, "\(error)")
        }
        #expect(try await pushing.value.pushed == 8)
        #expect(server.requests.filter { $0.kind == .insert }.count == 8)
    }

    /// A push whose lease another pusher took (this process was stopped past its end) stops at its
    /// next step, keeps the rest queued, and sends nothing twice.
    @Test func aPushThatLostItsLeaseStopsAndKeepsTheRestQueued() async throws {
        let store = MemoryStore()
        let server = ModelServer()
        let context = Self.context(store, server, delay: .milliseconds(100), lifetime: .milliseconds(300))
        try await Self.queue(10, on: context)
        let pushing = Task { await Self.attempt(context) }
        try await Task.sleep(for: .milliseconds(250))
        // Another process finds the lease ended and takes it.
        let thief = PushLease(holder: "thief", endsAt: ItemFields.now().millisecondsSince1970 + 60_000)
        try await store.write { tx in
            try tx.setDeltaToken(table: SyncContext.engineSlot, queryID: PushLease.slot, value: thief.text)
        }
        guard case .failure(let error) = await pushing.value else {
            Issue.record("the push went on without its lease")
            return
        }
        #expect(error.code == .pushInProgress || error.code == .cancelled, "\(error)")
        let sent = server.rows("todo").count
        #expect(sent < 10, "the push sent everything after losing its lease")
        #expect(try await context.queuedOperationCount(table: "todo") == 10 - sent)
        #expect(try await Self.lease(in: store) == thief, "the lease of the new holder was given back")
        // Once the other holder is done, the rest goes, each operation once.
        try await store.write { tx in
            try tx.setDeltaToken(table: SyncContext.engineSlot, queryID: PushLease.slot, value: nil)
        }
        #expect(try await context.push().pushed == 10 - sent)
        #expect(server.requests.filter { $0.kind == .insert }.count == 10)
    }
}
