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
                // One pusher per store across processes (PushLease.swift). An empty queue needs no
                // lease, and is not read again: an operation queued meanwhile waits for a push that
                // holds the lease.
                guard try await read("push", { try $0.operationCount(table: nil) }) > 0 else {
                    hub.emit(.pushStarted(operations: 0))
                    hub.emit(.pushFinished(PushResult(), stoppedBy: nil))
                    // Attachments of items the server already has (AttachmentSync.swift).
                    var result = PushResult()
                    try await pushAttachments(into: &result)
                    return result
                }
                var result = try await holdingPushLease { try await self.pushHoldingGate() }
                // Uploads and deletes after the operations: an upload never precedes its item's insert.
                do {
                    try await pushAttachments(into: &result)
                } catch {
                    throw Self.afterOperations(result, error, doing: "push of attachments")
                }
                return result
            }
            // Operations (or files) reached the server even when others failed: the store did sync.
            if result.pushed > 0 || result.attachmentsTransferred > 0 { try await recordSync() }
            return result
        } catch {
            let error = SyncError.wrapping(error, "push")
            // Stopped after some operations went through: the device did sync, in part.
            if error.operationsPushed > 0 { try? await recordSync() }
            throw error
        }
    }

    /// A failure after operations went through (the server went away midway, an attachment
    /// transfer failed): its message says they did (`13,000 operations pushed; then POST … failed`,
    /// `3 operations pushed; then uploading 'scan.pdf' of notes/a1 failed: …`), so that nobody
    /// takes the push for one that sent nothing.
    static func afterOperations(_ result: PushResult, _ error: any Error, doing: String) -> SyncError {
        let error = SyncError.wrapping(error, doing)
        // A cancellation says already how many went (`push cancelled after 3 operations`).
        guard result.pushed > 0, error.operationsPushed == 0, error.code != .cancelled else { return error }
        var stopped = SyncError(
            error.code, SyncError.pushedPrefix(result.pushed) + error.message, underlying: error.underlying)
        stopped.operationsPushed = result.pushed
        return stopped
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
            if total > 0 {
                pushPlan.erroredOperations = try await read("push") {
                    Set(try $0.operationErrors(table: nil).map(\.operationID))
                }
            }
            try await pushQueue(into: &result)
            await freeFilesOfDeletedItems()
        } catch {
            await freeFilesOfDeletedItems()
            var failure: any Error = error
            if let stopped = error as? PushStopped {
                result.pushed += stopped.completed
                failure = stopped.error
            }
            let error = Self.afterOperations(result, failure, doing: "push")
            hub.emit(.pushFinished(result, stoppedBy: error.description))
            throw error
        }
        hub.emit(.pushFinished(result, stoppedBy: nil))
        return result
    }

    /// How many batches a push keeps on their way at once.
    static let batchesInFlight = 2

    /// A batch's answer: one result per write, or why the batch as a whole failed.
    typealias BatchAnswer = Result<[Result<JSONObject?, RemoteError>], RemoteError>

    /// Pushes the queue in order, in groups of operations of distinct items.
    ///
    /// With batches, the push is a pipeline: up to ``batchesInFlight`` batches are on their way
    /// while the answer of the one before is completed in the store and the next group is
    /// prepared, so that the store's work, the requests' and the server's overlap. The batches on
    /// their way and the group prepared behind them never share an item (an item's operations go
    /// out one after the other). An attempt whose outcome is unknown from an earlier push is sent
    /// again in a batch with its key when the backend takes keyed batches, and otherwise alone,
    /// with nothing in flight.
    ///
    /// One batch at a time left the server idle while the client read each answer and wrote the
    /// next request, and the client idle while the server worked: two on their way took the push
    /// from about 19,000 to 22,000-26,000 operations/s (docs/server.md).
    private func pushQueue(into result: inout PushResult) async throws {
        var feed = PushFeed()
        /// Prepared attempts, marked in flight, whose requests go out next.
        var sending: [PushSteps.Attempt] = []
        /// A batch answered but not yet completed in the store.
        var answered: [(PushSteps.Attempt, Result<JSONObject?, RemoteError>)] = []
        try await withThrowingTaskGroup(of: (Int, BatchAnswer).self) { group in
            /// The batches on their way, oldest first, by number.
            var onTheirWay: [(number: Int, batch: [PushSteps.Attempt])] = []
            /// Answers that came back before an older batch's.
            var early: [Int: BatchAnswer] = [:]
            var started = 0
            func key(_ attempt: PushSteps.Attempt) -> ItemKey {
                ItemKey(table: attempt.operation.table, itemID: attempt.operation.itemID)
            }
            while true {
                if Task.isCancelled {
                    // The batches on their way end with the push (their requests are cancelled):
                    // what they got done is completed, what never left is pending again, and an
                    // attempt whose outcome is unknown stays in flight.
                    var notSent = Self.pendingAgain(sending)
                    while !onTheirWay.isEmpty {
                        let (batch, answer) = try await Self.oldest(&onTheirWay, &early, &group)
                        switch answer {
                        case .success(let results): answered += zip(batch, results)
                        case .failure(let error) where error.wasNotSent: notSent += Self.pendingAgain(batch)
                        case .failure: break
                        }
                    }
                    try await settle(answered, into: &result)
                    if !notSent.isEmpty {
                        try await write("push") { [notSent] tx in
                            for id in notSent { try PushSteps.markNotApplied(operationID: id, in: tx) }
                        }
                    }
                    throw SyncError(.cancelled, "push cancelled after \(result.pushed) operations")
                }
                if onTheirWay.isEmpty && sending.isEmpty {
                    // Nothing in flight.
                    try await settle(answered, into: &result)
                    answered = []
                    switch try await takeGroup(&feed, excluding: []) {
                    case .end:
                        return
                    case .alone(let operation):
                        record(try await pushOperation(id: operation.id, round: 0), into: &result)
                    case .group(let prepared):
                        sending = try await attempts(prepared, into: &result)
                    }
                    continue
                }
                // Send batches while fewer than `batchesInFlight` are on their way.
                while onTheirWay.count < Self.batchesInFlight, let count = batchCount(sending) {
                    let batch = Array(sending.prefix(count))
                    sending.removeFirst(count)
                    let writes = batch.map(remoteWrite)
                    let (number, remote) = (started, remote)
                    started += 1
                    group.addTask { (number, await Self.sendBatch(writes, to: remote)) }
                    onTheirWay.append((number, batch))
                }
                if onTheirWay.isEmpty {
                    // One request after the other (no batches, or an attempt too big to share one).
                    let count = pushPlan.capabilities.batches ? 1 : sending.count
                    let slice = Array(sending.prefix(count))
                    let rest = Array(sending.dropFirst(count))
                    try await settle(answered, into: &result)
                    answered = []
                    let outcomes = try await send(slice, remaining: rest, batchAnswer: nil)
                    try await settle(Array(zip(slice, outcomes)), into: &result)
                    sending = rest
                    continue
                }
                // While batches are on their way: complete the one answered, and prepare what comes next.
                try await settle(answered, into: &result)
                answered = []
                if sending.isEmpty {
                    let busy = Set(onTheirWay.flatMap { $0.batch.map(key) })
                    if case .group(let prepared) = try await takeGroup(&feed, excluding: busy) {
                        sending = try await attempts(prepared, into: &result)
                    }
                    // Room for another batch: send it before waiting.
                    if onTheirWay.count < Self.batchesInFlight, batchCount(sending) != nil { continue }
                }
                let (batch, answer) = try await Self.oldest(&onTheirWay, &early, &group)
                if case .success(let results) = answer {
                    answered = Array(zip(batch, results))
                    continue
                }
                // The batch failed as a whole. The younger ones on their way are answered first: what
                // they got done is completed (a failed one is settled after this one).
                var failed = [(batch, answer)]
                while !onTheirWay.isEmpty {
                    let (younger, answer) = try await Self.oldest(&onTheirWay, &early, &group)
                    if case .success(let results) = answer {
                        answered += zip(younger, results)
                    } else {
                        failed.append((younger, answer))
                    }
                }
                try await settle(answered, into: &result)
                answered = []
                for (index, (batch, answer)) in failed.enumerated() {
                    // A younger batch that never left is pending again if this one stops the push.
                    let neverSent = failed[(index + 1)...].filter {
                        if case .failure(let error) = $0.1 { error.wasNotSent } else { false }
                    }
                    let outcomes = try await send(
                        batch, remaining: neverSent.flatMap(\.0) + sending, batchAnswer: answer)
                    try await settle(Array(zip(batch, outcomes)), into: &result)
                }
            }
        }
    }

    /// How many of `attempts` go in the next batch, or `nil` when none goes in a batch (no
    /// attempts, no batches, or the first one too big to share one).
    private func batchCount(_ attempts: [PushSteps.Attempt]) -> Int? {
        guard !attempts.isEmpty, pushPlan.capabilities.batches else { return nil }
        let count = Self.batchChunk(attempts[...], pushPlan.capabilities)
        return count > 1 ? count : nil
    }

    /// Waits for the answer of the oldest batch on its way and takes it off the list.
    private static func oldest(
        _ onTheirWay: inout [(number: Int, batch: [PushSteps.Attempt])], _ early: inout [Int: BatchAnswer],
        _ group: inout ThrowingTaskGroup<(Int, BatchAnswer), any Error>
    ) async throws -> ([PushSteps.Attempt], BatchAnswer) {
        let (number, batch) = onTheirWay.removeFirst()
        while early[number] == nil, let (answered, answer) = try await group.next() {
            early[answered] = answer
        }
        guard let answer = early.removeValue(forKey: number) else {
            throw SyncError(.cancelled, "the answer of a batch was lost")  // cannot happen: every batch answers
        }
        return (batch, answer)
    }

    func record(_ outcome: PushOutcome, into result: inout PushResult) {
        switch outcome {
        case .pushed(let operation):
            result.pushed += 1
            pushPlan.applied(operation)
            hub.emit(.operationPushed(table: operation.table, itemID: operation.itemID, kind: operation.kind))
        case .resolved(let operation, let resolution):
            result.pushed += 1
            if resolution == .useClient { pushPlan.applied(operation) }
            result.resolvedConflicts.append(
                ResolvedConflict(
                    table: operation.table, itemID: operation.itemID, kind: operation.kind, resolution: resolution))
            hub.emit(.operationPushed(table: operation.table, itemID: operation.itemID, kind: operation.kind))
        case .failed(let record, let retryAfter):
            pushPlan.erroredOperations.insert(record.operationID)
            result.failed.append(record)
            if let retryAfter { result.retryAfter = max(result.retryAfter ?? .zero, retryAfter) }
            hub.emit(.operationFailed(record))
        case .gone:
            break
        }
    }

    /// Completes the accepted attempts in one store transaction, then reports every outcome in
    /// queue order (refusals go to the conflict handler or the errors table).
    private func settle(
        _ outcomes: [(PushSteps.Attempt, Result<JSONObject?, RemoteError>)], into result: inout PushResult
    ) async throws {
        guard !outcomes.isEmpty else { return }
        let accepted = Self.accepted(outcomes)
        if !accepted.isEmpty {
            let errored = pushPlan.erroredOperations
            try await write("push") { tx in try PushSteps.complete(accepted, errored: errored, in: tx) }
        }
        // An answer that stops the push (a 401, the server unable to take requests for now) stops it
        // once the others of these outcomes are recorded: the writes after it in the batch were
        // completed above, and were neither counted nor told when the push stopped at once.
        var stop: (any Error)?
        for (attempt, outcome) in outcomes {
            switch outcome {
            case .success: record(.pushed(attempt.operation), into: &result)
            case .failure(let error):
                do {
                    record(try await handle(error, of: attempt, round: 0), into: &result)
                } catch {
                    stop = stop ?? error
                }
            }
        }
        if let stop { throw stop }
    }

    /// Sends writes as one batch: one result per write, or why the batch as a whole failed.
    private static func sendBatch(_ writes: [RemoteWrite], to remote: any RemoteService) async -> BatchAnswer {
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
            bytes += JSONTextBuffer.count(ofJSON: .object(attempt.body)) + 256
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
        // A batch sent already is answered by its own answer, even when an older batch's failure
        // has turned batches off meanwhile (its writes may have been applied).
        if batchAnswer != nil || (writes.count > 1 && pushPlan.capabilities.batches) {
            let answer: BatchAnswer
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
        guard [.network, .cancelled, .unauthorized, .noEndpoint].contains(error.code) || error.isUnavailable else {
            return
        }
        let place =
            "push of \(attempts.first.map { "\($0.operation.kind) \($0.operation.table)/\($0.operation.itemID)" } ?? "")"
        let failedOneMayHaveArrived =
            error.isUnavailable
            ? error.unavailableAfterArrival
            : error.code != .unauthorized && error.code != .noEndpoint && !error.wasNotSent
        var notSent = Self.pendingAgain(remaining)
        if unknown {
            if !failedOneMayHaveArrived { notSent += Self.pendingAgain(attempts) }
        } else {
            notSent += Self.pendingAgain(attempts.dropFirst())
            if !failedOneMayHaveArrived, let first = attempts.first { notSent += Self.pendingAgain([first]) }
        }
        let accepted = Self.accepted(sent)
        let errored = pushPlan.erroredOperations
        try await write("push") { [notSent] tx in
            try PushSteps.complete(accepted, errored: errored, in: tx)
            for id in notSent { try PushSteps.markNotApplied(operationID: id, in: tx) }
        }
        for (attempt, outcome) in sent {
            if case .success = outcome {
                pushPlan.applied(attempt.operation)
                hub.emit(
                    .operationPushed(
                        table: attempt.operation.table, itemID: attempt.operation.itemID, kind: attempt.operation.kind))
            }
        }
        throw PushStopped(error: SyncError.wrapping(error, place), completed: accepted.count)
    }

    /// A push stopped by a failure, with the operations it completed on its way out (to be counted
    /// as pushed: the failure's message says how many went through).
    struct PushStopped: Error {
        var error: SyncError
        var completed: Int
    }

    /// The operations of attempts that did not reach the server and become pending again: all but
    /// replays, whose earlier attempt may have been applied (they stay in flight, for the next push
    /// to send again with their key).
    static func pendingAgain(_ attempts: some Sequence<PushSteps.Attempt>) -> [Int64] {
        attempts.filter { !$0.isReplay }.map(\.operation.id)
    }

    /// The operations and server items of the accepted attempts.
    static func accepted(_ outcomes: [(PushSteps.Attempt, Result<JSONObject?, RemoteError>)]) -> [(
        QueuedOperation, JSONObject?
    )] {
        outcomes.compactMap { attempt, outcome in
            if case .success(let server) = outcome { return (attempt.operation, server) }
            return nil
        }
    }
}
