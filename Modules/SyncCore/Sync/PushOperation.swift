/// Pushing one operation: check an attempt whose outcome is unknown, send, record the answer,
/// resolve a conflict.
extension SyncContext {
    enum PushOutcome: Sendable {
        case pushed(QueuedOperation)
        /// Its conflict was settled by the handler (and, unless the server won, sent again).
        case resolved(QueuedOperation, ConflictResolution)
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
    /// and a failure that stops the push (network, cancellation, 401, no table endpoint) is thrown.
    func handle(_ error: RemoteError, of attempt: PushSteps.Attempt, round: Int) async throws -> PushOutcome {
        let operation = attempt.operation
        let remote = remote.table(operation.table)
        let place = "push of \(operation.kind) \(operation.table)/\(operation.itemID)"
        if error.isUnavailable {
            // The server cannot take requests for now: the push stops and keeps the operation,
            // pending when the answer says it was not applied, in flight when it may have been.
            if !error.unavailableAfterArrival {
                try await write("push") { tx in try PushSteps.markNotApplied(operationID: operation.id, in: tx) }
            }
            throw SyncError.wrapping(error, place)
        }
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
        case .unauthorized, .noEndpoint:
            try await write("push") { tx in try PushSteps.markNotApplied(operationID: operation.id, in: tx) }
            throw SyncError.wrapping(error, place)
        case .notFound:
            switch operation.kind {
            case .delete:
                return try await complete(operation, serverItem: nil)  // already gone: the goal is reached
            case .update:
                // An update queued for an item this device does not hold from the server (no base,
                // no version), and the server keeps no deletion of it: it never had the item,
                // which is no deletion to give in to (a conflict settled for the server removed
                // the local item). It fails and stays. An update of an item a pull removed, since
                // deleted on the server, is the server's deletion: a conflict (it failed at every
                // push, saying "never inserted", without asking the handler).
                let unversioned = operation.baseItem == nil && (attempt.body["version"] ?? .null) == .null
                let tombstone = unversioned && error.status != 410 ? await self.tombstone(of: operation) : nil
                if unversioned, error.status != 410, tombstone == nil {
                    return try await failure(
                        operation,
                        RemoteError(
                            .notFound, status: error.status ?? 404,
                            "\(place): the server has no item '\(operation.itemID)' to update: it was never inserted "
                                + "there (resolve the error with an insert)"))
                }
                return try await conflict(
                    operation, clientItem: attempt.body, serverItem: tombstone, status: error.status ?? 404,
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

    /// The server's tombstone of the item of an update it answered 404 (2.0 answers it for deleted
    /// items too): a read of the item with the deleted ones (soft delete). `nil` from a server that
    /// keeps none, or when the read fails.
    private func tombstone(of operation: QueuedOperation) async -> JSONObject? {
        let query = TableQuery(filter: .field("id").eq(operation.itemID), top: 1, includeDeleted: true)
        let found = try? await remote.table(operation.table).query(query).items
        return found?.first { $0.id.map(ItemID.Key.init) == ItemID.Key(operation.itemID) && $0.isDeleted }
    }

    private func complete(_ operation: QueuedOperation, serverItem: JSONObject?) async throws -> PushOutcome {
        try await write("push") { try PushSteps.complete(operation, serverItem: serverItem, in: $0) }
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
            // The server's deletion won: the item is gone here, and its files go with it.
            if live == nil { pushPlan.removed(operation) }
            return .resolved(operation, .useServer)
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
            switch try await pushOperation(id: operation.id, round: round + 1) {
            case .pushed(let sent): return .resolved(sent, resolution)
            case let other: return other
            }
        }
    }
}
