/// What a push did.
public struct PushResult: Sendable, Hashable {
    /// Operations the server accepted, or whose conflict the handler resolved.
    public var pushed: Int = 0
    /// Operations that failed during this push; their errors are in the errors table
    /// (``SyncContext/operationErrors(table:)``) and they stay queued.
    public var failed: [OperationErrorRecord] = []
    /// The longest wait the server asked for (`Retry-After`) when it failed operations for now
    /// (503, 429): a retry should not come sooner.
    public var retryAfter: Duration?

    public init(pushed: Int = 0, failed: [OperationErrorRecord] = []) {
        self.pushed = pushed
        self.failed = failed
    }

    /// Whether every operation went through.
    public var isComplete: Bool { failed.isEmpty }
}

extension SyncContext {
    /// The most times one operation is sent again after its conflict was resolved, in one push.
    static let maximumConflictRounds = 3

    /// Sends the queued operations of every table to the server, in queue order.
    ///
    /// Operations that the server refuses (a conflict the handler keeps, a 4xx, a 5xx) are recorded
    /// in the errors table and stay queued; the push goes on with the next one and returns them in
    /// ``PushResult/failed``. A network failure, a 401 or a cancellation stops the push: it throws a
    /// ``SyncError`` (`.network`, `.unauthorized`, `.cancelled`) and the operation stays queued; an
    /// operation whose request may have reached the server is checked against the server before it
    /// is sent again, so it is never applied twice.
    ///
    /// ```swift
    /// let result = try await context.push()
    /// for failure in result.failed { print(failure.message) }
    /// ```
    @discardableResult
    public func push() async throws(SyncError) -> PushResult {
        try checkCancellation("push")
        do {
            let result = try await holding([Self.pushGate]) {
                // One pusher per store across processes (PushLease.swift); an empty queue needs none.
                guard try await read("push", { try $0.operationCount(table: nil) }) > 0 else {
                    return try await pushHoldingGate()
                }
                return try await holdingPushLease { try await self.pushHoldingGate() }
            }
            if result.pushed > 0 && result.isComplete { try await recordSync() }
            return result
        } catch {
            throw SyncError.wrapping(error, "push")
        }
    }

    /// The most operations read from the queue, prepared and completed together.
    static let pushBatchLimit = 500

    func pushHoldingGate() async throws -> PushResult {
        var result = PushResult()
        do {
            let total = try await read("push") { try $0.operationCount(table: nil) }
            hub.emit(.pushStarted(operations: total))
            pushPlan = PushPlan(capabilities: total == 0 ? .none : await remote.writeCapabilities())
            if pushPlan.capabilities.honoursIdempotencyKeys { pushPlan.keyPrefix = try await idempotencyKeyPrefix() }
            try await pushQueue(into: &result)
        } catch {
            let error = SyncError.wrapping(error, "push stopped after \(result.pushed) operations")
            hub.emit(.pushFinished(result, stoppedBy: error.description))
            throw error
        }
        hub.emit(.pushFinished(result, stoppedBy: nil))
        return result
    }

    /// Pushes the queue in order, in groups of operations of distinct items.
    ///
    /// With batches, the push is a pipeline: while one batch is on its way, the answer of the one
    /// before is completed in the store and the next group is prepared, so that the store's work
    /// and the server's overlap. A group never holds an item of the batch in flight (an item's
    /// operations go out one after the other), and an attempt whose outcome is unknown from an
    /// earlier push is sent alone, with nothing in flight.
    private func pushQueue(into result: inout PushResult) async throws {
        var feed = PushFeed()
        /// Prepared attempts, marked in flight, whose requests go out next.
        var sending: [PushSteps.Attempt] = []
        /// A batch answered but not yet completed in the store.
        var answered: [(PushSteps.Attempt, Result<JSONObject?, RemoteError>)] = []
        while true {
            if Task.isCancelled {
                try await settle(answered, into: &result)
                if !sending.isEmpty {
                    let ids = sending.map(\.operation.id)
                    try await write("push") { tx in
                        for id in ids { try PushSteps.markNotApplied(operationID: id, in: tx) }
                    }
                }
                throw SyncError(.cancelled, "push cancelled after \(result.pushed) operations")
            }
            if sending.isEmpty {
                // Nothing in flight.
                try await settle(answered, into: &result)
                answered = []
                guard let head = try await peek(&feed) else { return }
                if head.state == .inFlight {
                    feed.dropFirst()
                    record(try await pushOperation(id: head.id, round: 0), into: &result)
                    continue
                }
                sending = try await prepare(try await takeGroup(&feed, excluding: []), into: &result)
                continue
            }
            let count =
                pushPlan.capabilities.batches ? max(1, Self.batchChunk(sending[...], pushPlan.capabilities)) : 0
            guard count > 1 else {
                // One request after the other (no batches, or an attempt too big to share one).
                let slice = count == 1 ? [sending[0]] : sending
                let rest = Array(sending.dropFirst(slice.count))
                try await settle(answered, into: &result)
                answered = []
                let outcomes = try await send(slice, remaining: rest, batchAnswer: nil)
                try await settle(Array(zip(slice, outcomes)), into: &result)
                sending = rest
                continue
            }
            let batch = Array(sending.prefix(count))
            var next = Array(sending.dropFirst(count))
            let writes = batch.map(remoteWrite)
            async let answer = Self.sendBatch(writes, to: remote)
            // While the batch is on its way: complete the one before, and prepare what comes next.
            try await settle(answered, into: &result)
            answered = []
            if next.isEmpty {
                let inFlight = Set(batch.map { ItemKey(table: $0.operation.table, itemID: $0.operation.itemID) })
                next = try await prepare(try await takeGroup(&feed, excluding: inFlight), into: &result)
            }
            let response = await answer
            if case .success(let results) = response {
                answered = Array(zip(batch, results))
            } else {
                let outcomes = try await send(batch, remaining: next, batchAnswer: response)
                try await settle(Array(zip(batch, outcomes)), into: &result)
            }
            sending = next
        }
    }

    private struct ItemKey: Hashable {
        var table: String
        var itemID: String
    }

    /// What this push may use of the backend.
    struct PushPlan: Sendable {
        var capabilities: RemoteWriteCapabilities
        /// `ferry-<device>-`: the keys of this store's attempts, when the backend honours keys.
        var keyPrefix: String?

        func key(_ operation: QueuedOperation) -> String? {
            keyPrefix.map { "\($0)\(operation.id)-\(operation.attempts)" }
        }
    }

    private func record(_ outcome: PushOutcome, into result: inout PushResult) {
        switch outcome {
        case .pushed(let operation):
            result.pushed += 1
            hub.emit(.operationPushed(table: operation.table, itemID: operation.itemID, kind: operation.kind))
        case .failed(let record, let retryAfter):
            result.failed.append(record)
            if let retryAfter { result.retryAfter = max(result.retryAfter ?? .zero, retryAfter) }
            hub.emit(.operationFailed(record))
        case .gone:
            break
        }
    }

    /// The queue as a push reads it: operations read ahead, in queue order, not yet pushed.
    /// Operations appended while the push runs are pushed too (they come later in the queue).
    private struct PushFeed {
        var cursor: Int64?
        /// Read and not yet taken, the next one last.
        var ahead: [QueuedOperation] = []

        mutating func dropFirst() { _ = ahead.popLast() }
    }

    /// The next operation of the queue, read ahead when needed; `nil` at the end.
    private func peek(_ feed: inout PushFeed) async throws -> QueuedOperation? {
        if let next = feed.ahead.last { return next }
        let after = feed.cursor
        let read = try await read("push") { try $0.operations(after: after, table: nil, limit: Self.pushBatchLimit) }
        guard let last = read.last else { return nil }
        feed.cursor = last.id
        feed.ahead = read.reversed()
        return feed.ahead.last
    }

    /// Takes up to ``pushBatchLimit`` operations of distinct items from the front of the queue. It
    /// stops before an attempt whose outcome is unknown (it goes alone), a second operation of an
    /// item of the group (it needs the first one's answer) and an operation of an item in
    /// `excluding` (in flight).
    private func takeGroup(_ feed: inout PushFeed, excluding: Set<ItemKey>) async throws -> [QueuedOperation] {
        var group: [QueuedOperation] = []
        var items: Set<ItemKey> = []
        while group.count < Self.pushBatchLimit, let operation = try await peek(&feed) {
            let key = ItemKey(table: operation.table, itemID: operation.itemID)
            if operation.state == .inFlight || items.contains(key) || excluding.contains(key) { break }
            feed.dropFirst()
            group.append(operation)
            items.insert(key)
        }
        return group
    }

    /// Marks a group's operations in flight, in one store transaction, and answers what to send.
    private func prepare(
        _ operations: [QueuedOperation], into result: inout PushResult
    ) async throws -> [PushSteps.Attempt] {
        guard !operations.isEmpty else { return [] }
        let ids = operations.map(\.id)
        let prepared = try await write("push") { tx in
            try ids.map { try PushSteps.prepare(operationID: $0, in: tx) }
        }
        var attempts: [PushSteps.Attempt] = []
        for step in prepared {
            switch step {
            case .gone: break
            case .verify(let operation, _):
                // Cannot happen (in-flight operations are pushed alone); handled like one anyway.
                record(try await pushOperation(id: operation.id, round: 0), into: &result)
            case .send(let attempt): attempts.append(attempt)
            }
        }
        return attempts
    }

    /// Completes the accepted attempts in one store transaction, then reports every outcome in
    /// queue order (refusals go to the conflict handler or the errors table).
    private func settle(
        _ outcomes: [(PushSteps.Attempt, Result<JSONObject?, RemoteError>)], into result: inout PushResult
    ) async throws {
        guard !outcomes.isEmpty else { return }
        let accepted = Self.accepted(outcomes)
        if !accepted.isEmpty {
            try await write("push") { tx in
                for (id, server) in accepted { try PushSteps.complete(operationID: id, serverItem: server, in: tx) }
            }
        }
        for (attempt, outcome) in outcomes {
            switch outcome {
            case .success: record(.pushed(attempt.operation), into: &result)
            case .failure(let error): record(try await handle(error, of: attempt, round: 0), into: &result)
            }
        }
    }

    /// Sends writes as one batch: one result per write, or why the batch as a whole failed.
    private static func sendBatch(
        _ writes: [RemoteWrite], to remote: any RemoteService
    ) async -> Result<[Result<JSONObject?, RemoteError>], RemoteError> {
        do throws(RemoteError) {
            let results = try await remote.sendBatch(writes)
            guard results.count == writes.count else {
                throw RemoteError(
                    .invalidResponse, "the batch answered \(results.count) results for \(writes.count) writes")
            }
            return .success(results)
        } catch {
            return .failure(error)
        }
    }

    /// How many of `attempts` fit in one batch.
    static func batchChunk(_ attempts: ArraySlice<PushSteps.Attempt>, _ capabilities: RemoteWriteCapabilities) -> Int {
        var count = 0
        var bytes = 0
        for attempt in attempts {
            bytes += JSONValue.object(attempt.body).serializedUTF8().count + 256
            if count >= capabilities.maximumBatchSize || (count > 0 && bytes > capabilities.maximumBatchBytes / 2) {
                break
            }
            count += 1
        }
        return count
    }

    /// Sends prepared attempts (a batch, or one by one) and answers one outcome each. A failure that
    /// stops the push settles the store first: what was accepted is completed, what was never sent
    /// is pending again (`remaining` too), and an attempt whose outcome is unknown stays in flight.
    ///
    /// `batchAnswer` is the answer of a batch of `attempts` sent already (a pipelined push).
    private func send(
        _ attempts: [PushSteps.Attempt], remaining: [PushSteps.Attempt],
        batchAnswer: Result<[Result<JSONObject?, RemoteError>], RemoteError>?
    ) async throws -> [Result<JSONObject?, RemoteError>] {
        let writes = attempts.map(remoteWrite)
        if writes.count > 1, pushPlan.capabilities.batches {
            let answer: Result<[Result<JSONObject?, RemoteError>], RemoteError>
            if let batchAnswer {
                answer = batchAnswer
            } else {
                answer = await Self.sendBatch(writes, to: remote)
            }
            switch answer {
            case .success(let results):
                return results
            case .failure(let error):
                try await stopIfFatal(error, attempts: attempts, sent: [], remaining: remaining, unknown: true)
                // The batch itself was refused or garbled: send its writes one by one, with the same
                // keys (a write the server did apply is recognised), and no more batches this push.
                pushPlan.capabilities.maximumBatchSize = 0
            }
        }
        var results: [Result<JSONObject?, RemoteError>] = []
        for (index, write) in writes.enumerated() {
            if Task.isCancelled {
                let error = RemoteError(.cancelled, "push cancelled", wasNotSent: true)
                try await stopIfFatal(
                    error, attempts: Array(attempts[index...]), sent: Array(zip(attempts, results)),
                    remaining: remaining, unknown: false)
            }
            let result: Result<JSONObject?, RemoteError>
            do throws(RemoteError) {
                result = .success(try await remote.send(write))
            } catch {
                result = .failure(error)
            }
            if case .failure(let error) = result {
                try await stopIfFatal(
                    error, attempts: Array(attempts[index...]), sent: Array(zip(attempts, results)),
                    remaining: remaining, unknown: false)
            }
            results.append(result)
        }
        return results
    }

    /// Returns when `error` concerns only its own write; otherwise settles the store and throws.
    ///
    /// `attempts` starts with the one that failed (or, for a batch, holds every write of it), `sent`
    /// are those answered before it, `remaining` those never sent. `unknown` says that every one of
    /// `attempts` may have reached the server (a batch).
    private func stopIfFatal(
        _ error: RemoteError, attempts: [PushSteps.Attempt],
        sent: [(PushSteps.Attempt, Result<JSONObject?, RemoteError>)],
        remaining: [PushSteps.Attempt], unknown: Bool
    ) async throws {
        guard error.code == .network || error.code == .cancelled || error.code == .unauthorized else { return }
        let place =
            "push of \(attempts.first.map { "\($0.operation.kind) \($0.operation.table)/\($0.operation.itemID)" } ?? "")"
        let failedOneMayHaveArrived = error.code != .unauthorized && !error.wasNotSent
        var notSent = remaining.map(\.operation.id)
        if unknown {
            if !failedOneMayHaveArrived { notSent += attempts.map(\.operation.id) }
        } else {
            notSent += attempts.dropFirst().map(\.operation.id)
            if !failedOneMayHaveArrived, let first = attempts.first { notSent.append(first.operation.id) }
        }
        let accepted = Self.accepted(sent)
        try await write("push") { [notSent] tx in
            for (id, server) in accepted { try PushSteps.complete(operationID: id, serverItem: server, in: tx) }
            for id in notSent { try PushSteps.markNotApplied(operationID: id, in: tx) }
        }
        for (attempt, outcome) in sent {
            if case .success = outcome {
                hub.emit(
                    .operationPushed(
                        table: attempt.operation.table, itemID: attempt.operation.itemID, kind: attempt.operation.kind))
            }
        }
        throw SyncError.wrapping(error, place)
    }

    /// The operation ids and server items of the accepted attempts.
    static func accepted(_ outcomes: [(PushSteps.Attempt, Result<JSONObject?, RemoteError>)]) -> [(Int64, JSONObject?)]
    {
        outcomes.compactMap { attempt, outcome in
            if case .success(let server) = outcome { return (attempt.operation.id, server) }
            return nil
        }
    }

    /// What is sent for `attempt`, with its key when the backend honours keys.
    func remoteWrite(_ attempt: PushSteps.Attempt) -> RemoteWrite {
        RemoteWrite(
            table: attempt.operation.table, kind: attempt.operation.kind, itemID: attempt.operation.itemID,
            body: attempt.body, ifVersion: attempt.precondition, idempotencyKey: pushPlan.key(attempt.operation))
    }

    /// `ferry-<device>-`: this store's device id, made once and kept in the store.
    func idempotencyKeyPrefix() async throws -> String {
        if let deviceIdentifier { return "ferry-\(deviceIdentifier)-" }
        let made = try await write("push") { tx in
            if let kept = try tx.deltaToken(table: Self.engineSlot, queryID: "deviceID") { return kept }
            let id = ItemID.generate()
            try tx.setDeltaToken(table: Self.engineSlot, queryID: "deviceID", value: id)
            return id
        }
        deviceIdentifier = made
        return "ferry-\(made)-"
    }

    /// Where the engine keeps its own values in a store's delta-token slots (no table has this name).
    static let engineSlot = "$ferry"

    enum PushOutcome: Sendable {
        case pushed(QueuedOperation)
        /// Failed, with the wait the server asked for, if any.
        case failed(OperationErrorRecord, retryAfter: Duration? = nil)
        /// The operation disappeared (its item was removed, or it collapsed away).
        case gone
    }

    /// Pushes one operation: checks a previous attempt whose outcome is unknown, sends it, and
    /// records the outcome.
    func pushOperation(id: Int64, round: Int) async throws -> PushOutcome {
        let replaying = pushPlan.keyPrefix != nil
        let prepared = try await write("push") {
            try PushSteps.prepare(operationID: id, replayingKeyed: replaying, in: $0)
        }
        switch prepared {
        case .gone:
            return .gone
        case .verify(let operation, let body):
            return try await verify(operation, body: body, round: round)
        case .send(let attempt):
            return try await send(attempt, round: round)
        }
    }

    /// Finds out whether an earlier attempt that may have reached the server was applied.
    private func verify(_ operation: QueuedOperation, body: JSONObject, round: Int) async throws -> PushOutcome {
        let remote = remote.table(operation.table)
        let server: JSONObject?
        do throws(RemoteError) {
            server = try await remote.item(id: operation.itemID)
        } catch {
            if error.code == .network || error.code == .cancelled || error.code == .unauthorized {
                throw SyncError.wrapping(error, "push of \(operation.table)/\(operation.itemID)")
            }
            let record = try await write("push") { tx in
                try PushSteps.recordFailure(
                    operationID: operation.id, status: error.status,
                    message: "could not check an earlier attempt: \(error)", serverItem: nil, keepInFlight: true,
                    in: tx)
            }
            return record.map { .failed($0, retryAfter: error.retryAfter) } ?? .gone
        }
        let previous = operation.item ?? body
        if let server, ItemFields.sameContent(server, previous) || ItemFields.sameContent(server, body) {
            // The earlier attempt was applied.
            if ItemFields.sameContent(server, body) {
                return try await complete(operation, serverItem: server)
            }
            try await write("push") {
                try PushSteps.rebase(operationID: operation.id, onto: server, merged: nil, in: $0)
            }
            return try await pushOperation(id: operation.id, round: round)
        }
        switch operation.kind {
        case .insert:
            if let server {
                // Someone else's item has this id (or ours, changed since by someone else).
                return try await conflict(
                    operation, clientItem: body, serverItem: server, status: 409, message: "the id already exists",
                    round: round)
            }
        case .update:
            if server == nil {
                return try await conflict(
                    operation, clientItem: body, serverItem: nil, status: 404,
                    message: "the item was deleted on the server", round: round)
            }
        case .delete:
            break
        }
        // Not applied: send it as a new attempt.
        try await write("push") { tx in try PushSteps.markNotApplied(operationID: operation.id, in: tx) }
        return try await pushOperation(id: operation.id, round: round)
    }

    /// Sends one attempt and handles the answer.
    private func send(_ attempt: PushSteps.Attempt, round: Int) async throws -> PushOutcome {
        let server: JSONObject?
        do throws(RemoteError) {
            server = try await remote.send(remoteWrite(attempt))
        } catch {
            return try await handle(error, of: attempt, round: round)
        }
        return try await complete(attempt.operation, serverItem: server)
    }

    /// Handles a refused or failed attempt: conflicts go to the handler, other refusals are recorded,
    /// and a failure that stops the push (network, cancellation, 401) is thrown.
    private func handle(_ error: RemoteError, of attempt: PushSteps.Attempt, round: Int) async throws -> PushOutcome {
        let operation = attempt.operation
        let remote = remote.table(operation.table)
        let place = "push of \(operation.kind) \(operation.table)/\(operation.itemID)"
        switch error.code {
        case .network where error.wasNotSent && !attempt.isReplay:
            // No connection was made: the operation is pending again (later edits collapse into it)
            // and the next push sends it without asking the server first.
            try await write("push") { tx in try PushSteps.markNotApplied(operationID: operation.id, in: tx) }
            throw SyncError.wrapping(error, place)
        case .network, .cancelled:
            // The outcome is unknown: the operation stays in flight with the body it sent, and the
            // next push checks the server before sending it again.
            throw SyncError.wrapping(error, place)
        case .unauthorized:
            try await write("push") { tx in try PushSteps.markNotApplied(operationID: operation.id, in: tx) }
            throw SyncError.wrapping(error, place)
        case .notFound:
            switch operation.kind {
            case .delete:
                return try await complete(operation, serverItem: nil)  // already gone: the goal is reached
            case .update:
                return try await conflict(
                    operation, clientItem: attempt.body, serverItem: nil, status: error.status ?? 404,
                    message: "the item was deleted on the server", round: round)
            case .insert:
                return try await failure(operation, error)
            }
        case .conflict:
            var serverItem = error.serverItem
            if serverItem == nil || serverItem?.isEmpty == true {
                // Some servers send a 409 without the item (legacy bug #9): read it.
                serverItem = try? await remote.item(id: operation.itemID)
            }
            if operation.kind == .delete {
                if serverItem == nil || serverItem?.isDeleted == true {
                    return try await complete(operation, serverItem: nil)
                }
            } else if let server = serverItem, !server.isDeleted, ItemFields.sameContent(server, attempt.body) {
                // The server already holds exactly what we sent (a retried write whose answer was lost).
                return try await complete(operation, serverItem: server)
            }
            return try await conflict(
                operation, clientItem: operation.kind == .delete ? operation.item : attempt.body,
                serverItem: serverItem, status: error.status ?? 409, message: error.message, round: round)
        default:
            return try await failure(operation, error)
        }
    }

    private func complete(_ operation: QueuedOperation, serverItem: JSONObject?) async throws -> PushOutcome {
        try await write("push") { try PushSteps.complete(operationID: operation.id, serverItem: serverItem, in: $0) }
        return .pushed(operation)
    }

    private func failure(_ operation: QueuedOperation, _ error: RemoteError) async throws -> PushOutcome {
        let record = try await write("push") { tx in
            try PushSteps.recordFailure(
                operationID: operation.id, status: error.status, message: error.description,
                serverItem: error.serverItem, keepInFlight: false, in: tx)
        }
        return record.map { .failed($0, retryAfter: error.retryAfter) } ?? .gone
    }

    /// Asks the conflict handler and applies its decision.
    private func conflict(
        _ operation: QueuedOperation, clientItem: JSONObject?, serverItem: JSONObject?, status: Int, message: String,
        round: Int
    ) async throws -> PushOutcome {
        let conflict = SyncConflict(
            table: operation.table, itemID: operation.itemID, kind: operation.kind, clientItem: clientItem,
            serverItem: serverItem, baseItem: operation.baseItem, status: status)
        var resolution: ConflictResolution
        do {
            resolution = try await conflictHandler.resolve(conflict)
        } catch {
            resolution = .keep
        }
        let live = serverItem.flatMap { $0.isDeleted ? nil : $0 }
        if live == nil, resolution != .keep {
            // A deleted server item cannot be revived through the protocol: the deletion wins.
            resolution = .useServer
        }
        switch resolution {
        case .useServer:
            try await write("push") { tx in
                try PushSteps.takeServer(operationID: operation.id, serverItem: live, in: tx)
            }
            return .pushed(operation)
        case .keep:
            let record = try await write("push") { tx in
                try PushSteps.recordFailure(
                    operationID: operation.id, status: status, message: "conflict: \(message)", serverItem: serverItem,
                    keepInFlight: false, in: tx)
            }
            return record.map { .failed($0) } ?? .gone
        case .useClient, .useMerged:
            guard let live, round < Self.maximumConflictRounds else {
                let record = try await write("push") { tx in
                    try PushSteps.recordFailure(
                        operationID: operation.id, status: status,
                        message: "conflict: the server's item kept changing (\(round) resolutions)",
                        serverItem: serverItem, keepInFlight: false, in: tx)
                }
                return record.map { .failed($0) } ?? .gone
            }
            var merged: JSONObject?
            if case .useMerged(let item) = resolution { merged = item }
            try await write("push") { [merged] tx in
                try PushSteps.rebase(operationID: operation.id, onto: live, merged: merged, in: tx)
            }
            return try await pushOperation(id: operation.id, round: round + 1)
        }
    }
}

/// The store transactions of a push.
enum PushSteps {
    struct Attempt: Sendable {
        /// The operation as marked in flight.
        var operation: QueuedOperation
        /// What is sent: the local item without server-owned properties (insert, update).
        var body: JSONObject
        /// The version the server must still have (update, delete).
        var precondition: String?
        /// Whether this resends an earlier attempt (same key) whose outcome is unknown.
        var isReplay = false
    }

    enum Prepared: Sendable {
        case gone
        /// An earlier attempt's outcome is unknown; `body` is what would be sent now.
        case verify(QueuedOperation, body: JSONObject)
        case send(Attempt)
    }

    /// Reads an operation and its item, and marks it in flight with the body it is about to send.
    ///
    /// With `replayingKeyed` (the backend honours idempotency keys), an attempt whose outcome is
    /// unknown is sent again as it was, with its key, instead of being checked against the server.
    static func prepare(operationID: Int64, replayingKeyed: Bool = false, in tx: any StoreTransaction) throws
        -> Prepared
    {
        guard var operation = try tx.operation(id: operationID) else { return .gone }
        var body: JSONObject = ["id": .string(operation.itemID)]
        var precondition: String?
        switch operation.kind {
        case .insert, .update:
            guard let local = try tx.item(operation.table, id: operation.itemID) else {
                if operation.state == .inFlight, let sent = operation.item {
                    // The item was deleted locally after this operation was sent with an unknown outcome
                    // (the delete is queued after it): find out what the server did, so the delete
                    // carries the right version.
                    return .verify(operation, body: sent)
                }
                // Nothing left to send (the item was removed behind the queue's back).
                try LocalChanges.dropOperation(operation, in: tx)
                return .gone
            }
            body = ItemFields.body(local)
            if operation.state == .inFlight {
                if replayingKeyed, let sent = operation.item {
                    let precondition = operation.kind == .update ? local.version : nil
                    return .send(Attempt(operation: operation, body: sent, precondition: precondition, isReplay: true))
                }
                return .verify(operation, body: body)
            }
            if operation.kind == .update { precondition = local.version }
            operation.item = body
        case .delete:
            precondition = operation.item?.version
        }
        operation.state = .inFlight
        operation.attempts += 1
        try tx.updateOperation(operation)
        return .send(Attempt(operation: operation, body: body, precondition: precondition))
    }

    /// The operation did not reach the server: back to pending, and later local edits collapse into it.
    static func markNotApplied(operationID: Int64, in tx: any StoreTransaction) throws {
        guard var operation = try tx.operation(id: operationID) else { return }
        operation.state = .pending
        if operation.kind != .delete { operation.item = nil }
        try tx.updateOperation(operation)
        try collapseFollowUps(into: operation, in: tx)
    }

    /// The server applied the operation: drop it, store the server's item, and hand the server's new
    /// version to an operation queued for the item meanwhile (so it does not meet a false 412).
    static func complete(operationID: Int64, serverItem: JSONObject?, in tx: any StoreTransaction) throws {
        guard let operation = try tx.operation(id: operationID) else { return }
        try LocalChanges.dropOperation(operation, in: tx)
        guard operation.kind != .delete, let server = serverItem else { return }
        let followUps = try tx.operations(table: operation.table, itemID: operation.itemID)
        let local = try tx.item(operation.table, id: operation.itemID)
        guard var next = followUps.first else {
            if let local, let localTime = local.updatedAt, let serverTime = server.updatedAt, localTime > serverTime {
                return  // a pull stored a newer copy meanwhile
            }
            var stored = server
            stored["id"] = .string(operation.itemID)
            stored.removeValue(forKey: "deleted")
            try tx.upsert(operation.table, [stored])
            return
        }
        if let local {
            try tx.upsert(operation.table, [ItemFields.body(local, withSystemPropertiesOf: server)])
        }
        next.baseItem = server
        if next.kind == .delete {
            let deleted = next.item ?? local ?? ["id": .string(operation.itemID)]
            next.item = ItemFields.body(deleted, withSystemPropertiesOf: server)
        }
        try tx.updateOperation(next)
    }

    /// Records why the operation failed (one error per operation) and marks it failed.
    static func recordFailure(
        operationID: Int64, status: Int?, message: String, serverItem: JSONObject?, keepInFlight: Bool,
        in tx: any StoreTransaction
    ) throws -> OperationErrorRecord? {
        guard var operation = try tx.operation(id: operationID) else { return nil }
        try LocalChanges.deleteErrors(of: operation.id, table: operation.table, in: tx)
        let clientItem =
            operation.kind == .delete ? operation.item : try tx.item(operation.table, id: operation.itemID)
        let record = OperationErrorRecord(
            id: ItemID.generate(), operationID: operation.id, table: operation.table, itemID: operation.itemID,
            kind: operation.kind, statusCode: status, message: message, clientItem: clientItem,
            serverItem: serverItem, createdAt: ItemFields.now())
        try tx.saveOperationError(record)
        if keepInFlight { return record }
        operation.state = .failed
        if operation.kind != .delete { operation.item = nil }
        try tx.updateOperation(operation)
        try collapseFollowUps(into: operation, in: tx)
        return record
    }

    /// Post-flight collapse: once an operation is known not to have been applied, the operations queued
    /// for its item while it was in flight fold into it (one operation per item again).
    static func collapseFollowUps(into operation: QueuedOperation, in tx: any StoreTransaction) throws {
        var operation = operation
        let followUps = try tx.operations(table: operation.table, itemID: operation.itemID).filter {
            $0.id > operation.id && $0.state != .inFlight
        }
        guard !followUps.isEmpty else { return }
        for next in followUps {
            switch (operation.kind, next.kind) {
            case (.insert, .update), (.update, .update):
                break
            case (.insert, .delete):
                // The insert never reached the server: nothing is left to do.
                try LocalChanges.dropOperation(next, in: tx)
                try LocalChanges.dropOperation(operation, in: tx)
                return
            case (.update, .delete):
                operation.kind = .delete
                operation.item = next.item
            case (.delete, .insert), (.delete, .update):
                operation.kind = .update
                if let local = try tx.item(operation.table, id: operation.itemID), local.version == nil {
                    try tx.upsert(operation.table, [ItemFields.body(local, withSystemPropertiesOf: operation.item)])
                }
                operation.item = nil
            default:
                try tx.updateOperation(operation)
                return
            }
            try LocalChanges.dropOperation(next, in: tx)
        }
        try tx.updateOperation(operation)
    }

    /// Conflict resolved for the server: the local item becomes the server's (or goes away) and every
    /// queued operation of the item is dropped.
    static func takeServer(operationID: Int64, serverItem: JSONObject?, in tx: any StoreTransaction) throws {
        guard let operation = try tx.operation(id: operationID) else { return }
        for queued in try tx.operations(table: operation.table, itemID: operation.itemID) {
            try LocalChanges.dropOperation(queued, in: tx)
        }
        if var server = serverItem {
            server["id"] = .string(operation.itemID)
            try tx.upsert(operation.table, [server])
        } else {
            try tx.delete(operation.table, ids: [operation.itemID])
        }
    }

    /// Conflict resolved for the client (or merged): the operation is sent again against the server's
    /// current version. An insert whose id exists becomes an update.
    static func rebase(
        operationID: Int64, onto server: JSONObject, merged: JSONObject?, in tx: any StoreTransaction
    ) throws {
        // Edits queued while the operation was in flight fold into it first (it is sent again anyway).
        guard let original = try tx.operation(id: operationID) else { return }
        try collapseFollowUps(into: original, in: tx)
        guard var operation = try tx.operation(id: operationID) else { return }
        try LocalChanges.deleteErrors(of: operation.id, table: operation.table, in: tx)
        let id: JSONValue = .string(operation.itemID)
        let local = try tx.item(operation.table, id: operation.itemID)
        if let source = merged ?? (operation.kind == .delete ? nil : local) {
            var rebased = ItemFields.body(source, withSystemPropertiesOf: server)
            rebased["id"] = id
            try tx.upsert(operation.table, [rebased])
            operation.kind = .update
            operation.item = nil
        } else {
            // A delete (or an edit of an item deleted locally since): delete the server's version.
            operation.kind = .delete
            operation.item = ItemFields.body(operation.item ?? local ?? ["id": id], withSystemPropertiesOf: server)
        }
        operation.baseItem = server
        operation.state = .pending
        try tx.updateOperation(operation)
    }
}
