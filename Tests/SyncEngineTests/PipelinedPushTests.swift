import SyncCore
import SyncTesting
import Synchronization
import Testing

/// The model server behind a backend that takes batches and honours idempotency keys (as Ferry's
/// server does), with scripted failures of whole batches.
final class BatchingRemote: RemoteService, Sendable {
    enum BatchFault: Sendable {
        /// The batch never reaches the server.
        case lostBeforeServer
        /// The server applies every write, then the answer is lost.
        case lostAnswer
        /// The server refuses the batch as a whole (400): nothing is applied.
        case refused
        /// No connection could be made: the batch surely did not leave.
        case notSent
        /// The server cannot take requests for now (503): nothing is applied.
        case unavailable
        /// The write at this index is answered 401 and not applied; the others are.
        case unauthorizedEntry(Int)
    }

    let inner: any RemoteService
    private let state = Mutex<(batches: Int, faults: [Int: BatchFault], recorded: [String: JSONObject?])>((0, [:], [:]))
    /// The writes of each batch, and the writes sent alone.
    private let sent = Mutex<(batchSizes: [Int], alone: Int)>(([], 0))
    /// Batches on their way now, and the most there were at once.
    private let onTheirWay = Mutex<(now: Int, most: Int)>((0, 0))
    /// Runs while batch `n` (from 1) is on its way, before the server applies it.
    private let hooks = Mutex<[Int: @Sendable () async -> Void]>([:])

    /// Whether the backend says it honours idempotency keys.
    let honoursKeys: Bool

    init(_ server: ModelServer, device: String = "device", honoursKeys: Bool = true) {
        inner = server.remote(device: device)
        self.honoursKeys = honoursKeys
    }

    func fail(batch number: Int, with fault: BatchFault) { state.withLock { $0.faults[number] = fault } }
    func whileSending(batch number: Int, _ hook: @escaping @Sendable () async -> Void) {
        hooks.withLock { $0[number] = hook }
    }
    var batchCount: Int { state.withLock { $0.batches } }
    var batchSizes: [Int] { sent.withLock { $0.batchSizes } }
    var writesSentAlone: Int { sent.withLock { $0.alone } }
    var mostBatchesAtOnce: Int { onTheirWay.withLock { $0.most } }

    func table(_ name: String) -> any RemoteTable { inner.table(name) }

    func writeCapabilities() async -> RemoteWriteCapabilities {
        RemoteWriteCapabilities(
            maximumBatchSize: 1_000, maximumBatchBytes: 16 << 20, honoursIdempotencyKeys: honoursKeys)
    }

    func send(_ write: RemoteWrite) async throws(RemoteError) -> JSONObject? {
        sent.withLock { $0.alone += 1 }
        return try await apply(write)
    }

    private func apply(_ write: RemoteWrite) async throws(RemoteError) -> JSONObject? {
        if let key = write.idempotencyKey, let recorded = state.withLock({ $0.recorded[key] }) { return recorded }
        let answer = try await inner.send(write)
        if let key = write.idempotencyKey { state.withLock { $0.recorded[key] = answer } }
        return answer
    }

    func sendBatch(_ writes: [RemoteWrite]) async throws(RemoteError) -> [Result<JSONObject?, RemoteError>] {
        let (number, fault) = state.withLock { state in
            state.batches += 1
            return (state.batches, state.faults[state.batches])
        }
        sent.withLock { $0.batchSizes.append(writes.count) }
        onTheirWay.withLock {
            $0.now += 1
            $0.most = max($0.most, $0.now)
        }
        defer { onTheirWay.withLock { $0.now -= 1 } }
        if let hook = hooks.withLock({ $0[number] }) { await hook() }
        switch fault {
        case .lostBeforeServer?: throw RemoteError(.network, "batch \(number) lost on its way")
        case .refused?: throw RemoteError(.badRequest, status: 400, "batch \(number) refused")
        case .notSent?: throw RemoteError(.network, "batch \(number): no connection", wasNotSent: true)
        case .unavailable?: throw RemoteError(status: 503, "batch \(number): the database cannot be reached")
        case .lostAnswer?, .unauthorizedEntry?, nil: break
        }
        var results: [Result<JSONObject?, RemoteError>] = []
        for (index, write) in writes.enumerated() {
            if case .unauthorizedEntry(index)? = fault {
                results.append(.failure(RemoteError(.unauthorized, status: 401, "the token expired")))
                continue
            }
            do throws(RemoteError) {
                results.append(.success(try await apply(write)))
            } catch {
                results.append(.failure(error))
            }
        }
        if case .lostAnswer? = fault { throw RemoteError(.network, "the answer of batch \(number) was lost") }
        return results
    }
}

@Suite("Push: pipelined batches")
struct PipelinedPushTests {
    /// A device whose queue holds an insert of each of `ids` (title `title`), before a model server
    /// behind a ``BatchingRemote``.
    struct Queued {
        let server = ModelServer()
        let remote: BatchingRemote
        let context: SyncContext
        let storage: TestStore

        init(_ ids: [String], kind: StoreKind = .sqliteMemory, title: String = "v1", honoursKeys: Bool = true)
            async throws
        {
            remote = BatchingRemote(server, honoursKeys: honoursKeys)
            storage = try TestStore(kind)
            context = SyncContext(store: storage.store, remote: remote)
            try await context.write { writes in
                try writes.insert(contentsOf: ids.map { ["id": .string($0), "title": .string(title)] }, into: "todo")
            }
        }

        /// Holds batch 1 (at most 5 s) until batch 2 is on its way too.
        func holdTheFirstBatchUntilTheSecondLeaves() {
            remote.whileSending(batch: 1) { [remote] in
                for _ in 0..<500 where remote.batchCount < 2 { try? await Task.sleep(for: .milliseconds(10)) }
            }
        }
    }

    /// Pushes until a push goes through (at most `atMost` pushes), each without a failed
    /// operation; answers how many were stopped by a network failure (`afterStop` runs after each).
    static func pushUntilDone(
        _ context: SyncContext, atMost: Int, afterStop: () async throws -> Void = {}
    ) async throws -> Int {
        var stopped = 0
        for _ in 0..<atMost {
            do {
                #expect(try await context.push().failed.isEmpty)
                return stopped
            } catch {
                // (`catch where` on a typed throw crashes Swift 6.3.1's SILGen here.)
                guard error.code == .network else { throw error }
                stopped += 1
                try await afterStop()
            }
        }
        Issue.record("\(atMost) pushes did not empty the queue")
        return stopped
    }

    /// The server's rows and the device's items are the same, and every item was inserted once.
    static func expectConverged(_ context: SyncContext, _ server: ModelServer, items: Int) async throws {
        #expect(try await context.queuedOperations().isEmpty)
        #expect(try await context.operationErrors().isEmpty)
        let local = try await context.table("todo").query(TableQuery().top(100_000)).items
        let rows = server.rows("todo")
        #expect(rows.count == items)
        #expect(local.count == items)
        let serverTitles = Dictionary(uniqueKeysWithValues: rows.map { ($0.id!, $0["title"]) })
        for item in local where serverTitles[item.id!] != item["title"] {
            Issue.record(
                "item \(item.id!): \(String(describing: item["title"])) here, \(String(describing: serverTitles[item.id!])) on the server"
            )
        }
        let inserts = server.commits.filter { $0.kind == .insert }.map(\.itemID)
        #expect(inserts.count == Set(inserts).count, "an item was inserted twice")
    }

    /// Edits made while a batch is on its way to items of that batch and of the next group go out
    /// after the batch's answer, in order: no update reaches the server before its item's insert.
    @Test(arguments: StoreKind.allCases)
    func editsOfItemsInFlightFollowTheirBatch(_ kind: StoreKind) async throws {
        let ids = (0..<1_300).map { "i" + String(String($0 + 10_000).dropFirst()) }
        let device = try await Queued(ids, kind: kind, title: "first")
        let (server, remote, context) = (device.server, device.remote, device.context)
        // While the first batch (the first 500) is on its way and the second group has been
        // prepared behind it: edit items of both (they get follow-up updates) and one of the third
        // group (its edit folds into its insert, or follows it when that group was prepared too:
        // two batches may be on their way).
        let edited = ["i0003", "i0499", "i0500", "i0777", "i1299"]
        let deleted = ["i0250", "i0600"]
        remote.whileSending(batch: 1) {
            for _ in 0..<500 {
                let operations = (try? await context.queuedOperations()) ?? []
                if operations.first(where: { $0.itemID == "i0500" })?.state == .inFlight { break }
                try? await Task.sleep(for: .milliseconds(10))
            }
            for id in edited { _ = try? await context.table("todo").update(["id": .string(id), "title": "edited"]) }
            // And deletes: one of the batch in flight (its delete must carry the version the
            // insert's answer gives), one of the group behind it.
            for id in deleted { _ = try? await context.table("todo").delete(id: id) }
        }
        let result = try await context.push()
        #expect(result.failed.isEmpty)
        #expect(remote.batchCount >= 3)
        try await Self.expectConverged(context, server, items: ids.count - deleted.count)
        // Each delete carries the version its insert's answer gave.
        let deletes = server.requests.filter { $0.kind == .delete }
        #expect(deletes.compactMap(\.itemID).sorted() == deleted)
        #expect(deletes.allSatisfy { $0.ifVersion != nil })
        for id in deleted {
            #expect(server.row("todo", id: id)?.isDeleted ?? true, "\(id)")
            #expect(server.commits.filter { $0.itemID == id }.map(\.kind) == [.insert, .delete], "\(id)")
        }
        // Each update was prepared once its insert was answered: it carries the version to match.
        let updates = server.requests.filter { $0.kind == .update }
        let updated = Set(updates.compactMap(\.itemID))
        #expect(updated == ["i0003", "i0499", "i0500", "i0777"] || updated == Set(edited), "\(updated.sorted())")
        #expect(updates.count == updated.count, "an item was updated twice")
        #expect(
            updates.allSatisfy { $0.ifVersion != nil }, "\(updates.filter { $0.ifVersion == nil }.compactMap(\.itemID))"
        )
        for id in edited {
            #expect(server.row("todo", id: id)?["title"] == "edited", "\(id)")
            let kinds = server.commits.filter { $0.itemID == id }.map(\.kind)
            #expect(kinds.first == .insert, "\(id): \(kinds)")
        }
    }

    /// Batches lost on the way, answers lost after the server applied them, and a batch refused as
    /// a whole, in the middle of a long push: pushes again until the queue is empty; nothing is lost,
    /// nothing is applied twice, and there is no conflict.
    @Test(arguments: StoreKind.allCases)
    func lostAndRefusedBatchesLoseAndDuplicateNothing(_ kind: StoreKind) async throws {
        let count = 2_600
        let device = try await Queued((0..<count).map { "item-\($0)" }, kind: kind)
        let (server, remote, context) = (device.server, device.remote, device.context)
        remote.fail(batch: 2, with: .lostAnswer)
        remote.fail(batch: 4, with: .lostBeforeServer)
        remote.fail(batch: 6, with: .refused)
        let stopped = try await Self.pushUntilDone(context, atMost: 10) {
            // What the stop left: the batch whose answer was lost stays in flight, the group
            // prepared behind it is pending again.
            let states = Set(try await context.queuedOperations().map(\.state))
            #expect(states.isSubset(of: [.pending, .inFlight]))
        }
        // Batch 2 stops the first push, batch 4 the second; the third sends the rest one by one
        // after batch 6 was refused.
        #expect(stopped == 2)
        try await Self.expectConverged(context, server, items: count)
    }

    /// A batch whose second write is answered 401 stops the push, after the writes of the batch the
    /// server accepted are completed and counted, those after the 401 too: the last one was
    /// completed in the store but neither counted ("1 operation pushed; then …") nor told.
    @Test func aWriteAnswered401StopsThePushAfterEveryAcceptedWriteOfItsBatchIsCounted() async throws {
        let device = try await Queued(["a", "b", "c"])
        device.remote.fail(batch: 1, with: .unauthorizedEntry(1))
        let events = device.context.events()
        let told = Task {
            var pushed: [String] = []
            for await event in events {
                if case .operationPushed(_, let id, _) = event { pushed.append(id) }
                if case .pushFinished = event { break }
            }
            return pushed
        }
        do {
            _ = try await device.context.push()
            Issue.record("the push went on after a 401")
        } catch {
            #expect(error.code == .unauthorized, "\(error)")
            #expect(error.operationsPushed == 2, "\(error)")
            #expect(error.message.hasPrefix("2 operations pushed; then "), "\(error.message)")
        }
        #expect(try await device.context.queuedOperations().map(\.itemID) == ["b"])
        #expect(Set(device.server.rows("todo").compactMap(\.id)) == ["a", "c"])
        try await Task.sleep(for: .milliseconds(200))
        told.cancel()
        #expect(await told.value == ["a", "c"])
    }

    /// Two batches on their way at once, the younger sent before the older is answered, fail in
    /// every combination: pushes again until the queue is empty; nothing is lost, nothing is
    /// applied twice, and there is no conflict.
    @Test(
        arguments: [
            (nil, .lostAnswer), (nil, .lostBeforeServer), (nil, .refused),
            (.lostAnswer, nil), (.lostBeforeServer, nil), (.refused, nil),
            (.lostAnswer, .lostAnswer), (.lostAnswer, .lostBeforeServer), (.lostAnswer, .refused),
            (.lostBeforeServer, .lostAnswer), (.lostBeforeServer, .lostBeforeServer), (.lostBeforeServer, .refused),
            (.refused, .lostAnswer), (.refused, .lostBeforeServer), (.refused, .refused),
        ] as [(BatchingRemote.BatchFault?, BatchingRemote.BatchFault?)])
    func batchesOnTheirWayTogetherFailInAnyCombination(
        _ older: BatchingRemote.BatchFault?, _ younger: BatchingRemote.BatchFault?
    ) async throws {
        let count = 700
        let device = try await Queued((0..<count).map { "two-\($0)" })
        let (server, remote, context) = (device.server, device.remote, device.context)
        if let older { remote.fail(batch: 1, with: older) }
        if let younger { remote.fail(batch: 2, with: younger) }
        device.holdTheFirstBatchUntilTheSecondLeaves()
        let stopped = try await Self.pushUntilDone(context, atMost: 6)
        #expect(remote.mostBatchesAtOnce == 2)
        #expect(stopped <= 2, "\(stopped) pushes stopped")
        try await Self.expectConverged(context, server, items: count)
    }

    /// Without keys, a batch on its way when an older one is refused is still settled by its own
    /// answer: the refusal turns batches off for the push, but the younger batch's answer was lost
    /// and its writes may have been applied, so they are not sent again blind. The push stops, and
    /// the next one asks the server about each (it finds them applied, and sends nothing).
    @Test func withoutKeysABatchOnItsWayIsSettledByItsOwnAnswerAfterAnOlderOneTurnedBatchesOff() async throws {
        let count = 700
        let device = try await Queued((0..<count).map { "nk-\($0)" }, honoursKeys: false)
        let (server, remote, context) = (device.server, device.remote, device.context)
        remote.fail(batch: 1, with: .refused)
        remote.fail(batch: 2, with: .lostAnswer)
        device.holdTheFirstBatchUntilTheSecondLeaves()
        let stopped = try await Self.pushUntilDone(context, atMost: 4)
        #expect(remote.mostBatchesAtOnce == 2)
        #expect(stopped == 1, "\(stopped) pushes stopped")
        // Only the refused batch's writes were sent again, one by one.
        #expect(remote.batchSizes.count == 2)
        #expect(remote.writesSentAlone == remote.batchSizes.first, "\(remote.batchSizes)")
        try await Self.expectConverged(context, server, items: count)
        for id in (0..<count).map({ "nk-\($0)" }) {
            #expect(server.commits.filter { $0.itemID == id && $0.kind == .insert }.count == 1, "\(id)")
        }
    }

    /// Updates whose batch was applied but whose answer was lost are sent again by the next push in
    /// a batch with their keys; when that batch does not even leave, they stay in flight (their
    /// earlier attempt may have been applied) and the push after it replays them: each update is
    /// applied once, with no false conflict, even where another writer changed the item since.
    @Test func replaysThatNeverLeftStayInFlightWithTheirKeys() async throws {
        let ids = (0..<600).map { "r\($0)" }
        let device = try await Queued(ids)
        let (server, remote, context) = (device.server, device.remote, device.context)
        #expect(try await context.push().failed.isEmpty)
        try await context.write { writes in
            for id in ids { try writes.update(["id": .string(id), "title": "v2"], in: "todo") }
        }
        let before = remote.batchCount
        remote.fail(batch: before + 1, with: .lostAnswer)
        remote.fail(batch: before + 3, with: .notSent)
        remote.fail(batch: before + 4, with: .notSent)
        do {
            _ = try await context.push()
            Issue.record("the push whose answer was lost went through")
        } catch {
            #expect(error.code == .network)
        }
        // Another writer changes some items after our updates were applied: sent again as new
        // attempts (not replays), ours would now conflict with theirs.
        let changed = ["r1", "r250", "r599"]
        server.touch("todo", ids: changed, set: ["title": "theirs"], by: "other")
        let stops = try await Self.pushUntilDone(context, atMost: 6)
        #expect(stops >= 2)
        #expect(try await context.queuedOperations().isEmpty)
        #expect(try await context.operationErrors().isEmpty)
        for id in ids {
            #expect(server.row("todo", id: id)?["title"] == (changed.contains(id) ? "theirs" : "v2"), "\(id)")
            let ours = server.commits.filter { $0.itemID == id && $0.kind == .update && $0.device != "other" }
            #expect(ours.count == 1, "\(id)")
        }
    }

    /// A push cancelled while a batch is on its way stops; the next push finishes the work without
    /// sending anything twice.
    @Test(arguments: StoreKind.allCases)
    func aCancelledPipelineResumes(_ kind: StoreKind) async throws {
        let device = try await Queued((0..<1_800).map { "c\($0)" }, kind: kind, title: "x")
        let (server, remote, context) = (device.server, device.remote, device.context)
        let pushing = Mutex<Task<PushResult, any Error>?>(nil)
        remote.whileSending(batch: 2) { pushing.withLock { $0?.cancel() } }
        let task = Task { try await context.push() }
        pushing.withLock { $0 = task }
        do {
            _ = try await task.value
            Issue.record("the push was not cancelled")
        } catch let error as SyncError {
            #expect(error.code == .cancelled)
        }
        let result = try await context.push()
        #expect(result.failed.isEmpty)
        try await Self.expectConverged(context, server, items: 1_800)
    }
}
