/// Taking groups of operations from the front of the queue for a push (Push.swift).
extension SyncContext {
    /// An item of a table, as a push tells items apart.
    struct ItemKey: Hashable {
        var table: String
        /// Compared by its bytes (``ItemID/Key``).
        var item: ItemID.Key

        init(table: String, itemID: String) {
            self.table = table
            self.item = ItemID.Key(itemID)
        }
    }

    /// Where a push is in the queue: the last operation it took. Operations appended while the
    /// push runs are pushed too (they come later in the queue).
    struct PushFeed {
        var cursor: Int64?
    }

    /// What the front of the queue offers a push.
    enum NextStep: Sendable {
        /// The end of the queue, or nothing that may go while a batch is in flight.
        case end
        /// An attempt whose outcome is unknown from an earlier push: it goes alone.
        case alone(QueuedOperation)
        /// A group, marked in flight.
        case group([PushSteps.Prepared])
    }

    /// Reads the front of the queue and marks a group of it in flight, in one store transaction: up
    /// to ``pushBatchLimit`` operations of distinct items. The group stops before a second
    /// operation of an item of the group (it needs the first one's answer), an operation of an item
    /// in `excluding` (in flight) and, unless the backend takes keyed batches, an attempt whose
    /// outcome is unknown (it goes alone, when nothing is in flight).
    ///
    /// Each operation is read once. (It was read ahead outside the transaction, then again by id
    /// inside it: decoding the operations twice took a sixth of a push's client time.)
    func takeGroup(_ feed: inout PushFeed, excluding: Set<ItemKey>) async throws -> NextStep {
        let after = feed.cursor
        // With keys and batches, an attempt whose outcome is unknown joins the group as a replay
        // (same body, same key: the server answers what it did, or applies it now), instead of
        // going alone: after a lost batch, the next push sent its operations one request each.
        let replaying = pushPlan.keyPrefix != nil && pushPlan.capabilities.batches
        let (step, last) = try await write("push") { tx -> (NextStep, Int64?) in
            let front = try tx.operations(after: after, table: nil, limit: Self.pushBatchLimit)
            var items: Set<ItemKey> = []
            var group: [QueuedOperation] = []
            for operation in front {
                let key = ItemKey(table: operation.table, itemID: operation.itemID)
                if operation.state == .inFlight && !replaying {
                    if group.isEmpty && excluding.isEmpty { return (.alone(operation), operation.id) }
                    break
                }
                if items.contains(key) || excluding.contains(key) { break }
                group.append(operation)
                items.insert(key)
            }
            guard let last = group.last?.id else { return (.end, nil) }
            // The local copies of the group's items, read together table by table.
            var locals: [String: [ItemID.Key: JSONObject]] = [:]
            for operation in group where operation.kind != .delete && locals[operation.table] == nil {
                let ids = group.filter { $0.table == operation.table && $0.kind != .delete }.map(\.itemID)
                locals[operation.table] = try tx.items(operation.table, ids: ids)
            }
            let prepared = try group.map {
                try PushSteps.prepare($0, replayingKeyed: replaying, locals: locals[$0.table] ?? [:], in: tx)
            }
            return (.group(prepared), last)
        }
        if let last { feed.cursor = last }
        return step
    }

    /// The attempts to send of a prepared group.
    func attempts(
        _ prepared: [PushSteps.Prepared], into result: inout PushResult
    ) async throws -> [PushSteps.Attempt] {
        var attempts: [PushSteps.Attempt] = []
        for step in prepared {
            switch step {
            case .gone: break
            case .verify(let operation, _):
                // An attempt whose outcome is unknown and that cannot be replayed (its item was
                // deleted here since): the server is asked what it did, for this item alone.
                record(try await pushOperation(id: operation.id, round: 0), into: &result)
            case .send(let attempt): attempts.append(attempt)
            }
        }
        return attempts
    }
}
