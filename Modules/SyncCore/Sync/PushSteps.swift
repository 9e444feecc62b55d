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
        guard let operation = try tx.operation(id: operationID) else { return .gone }
        return try prepare(operation, replayingKeyed: replayingKeyed, in: tx)
    }

    /// ``prepare(operationID:replayingKeyed:in:)`` of an operation read in this transaction (a push
    /// reads a group of them at once, not each again by id). `locals`, when given, holds the local
    /// copies of the operation's table read for a whole group (an item absent from it has none).
    static func prepare(
        _ operation: QueuedOperation, replayingKeyed: Bool = false, locals: [ItemID.Key: JSONObject]? = nil,
        in tx: any StoreTransaction
    ) throws -> Prepared {
        var operation = operation
        var body: JSONObject = ["id": .string(operation.itemID)]
        var precondition: String?
        switch operation.kind {
        case .insert, .update:
            let local =
                try locals.map { $0[ItemID.Key(operation.itemID)] } ?? tx.item(operation.table, id: operation.itemID)
            guard let local else {
                if operation.state == .inFlight, let sent = operation.item {
                    // The item was deleted locally after this operation was sent with an unknown outcome
                    // (the delete is queued after it): find out what the server did, so the delete
                    // carries the right version.
                    return .verify(operation, body: sent)
                }
                // Nothing left to send (the item was removed behind the queue's back).
                try QueuedEdits.dropOperation(operation, in: tx)
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
    ///
    /// `operation` is the one sent: an operation in flight keeps its table, item and kind (edits
    /// meanwhile queue operations of their own), so it is not read again; nothing is done when it
    /// is no longer queued (its item was purged meanwhile). `mayHaveErrors: false` says that the
    /// caller knows it has no recorded error (a push reads the errors once for a whole batch).
    static func complete(
        _ operation: QueuedOperation, serverItem: JSONObject?, mayHaveErrors: Bool = true, in tx: any StoreTransaction
    ) throws {
        guard try tx.deleteOperation(id: operation.id) else { return }
        if mayHaveErrors { try QueuedEdits.deleteErrors(of: operation.id, table: operation.table, in: tx) }
        guard operation.kind != .delete, let server = serverItem else { return }
        let followUp = try tx.operations(table: operation.table, itemID: operation.itemID).first
        let local = try tx.item(operation.table, id: operation.itemID)
        if let stored = try settle(operation, server: server, followUp: followUp, local: local, in: tx) {
            try tx.upsert(operation.table, [stored])
        }
    }

    /// The rest of ``complete(_:serverItem:mayHaveErrors:in:)`` once the operation is gone, given
    /// the first operation queued for its item meanwhile and the local copy: hands the server's
    /// version to that operation, and answers the item to store (`nil`: keep the local one).
    private static func settle(
        _ operation: QueuedOperation, server: JSONObject, followUp: QueuedOperation?, local: JSONObject?,
        in tx: any StoreTransaction
    ) throws -> JSONObject? {
        guard var next = followUp else {
            if let local, let localTime = local.updatedAt, let serverTime = server.updatedAt, localTime > serverTime {
                return nil  // a pull stored a newer copy meanwhile
            }
            return ItemFields.localCopy(of: server, id: operation.itemID)
        }
        next.baseItem = server
        if next.kind == .delete {
            let deleted = next.item ?? local ?? ["id": .string(operation.itemID)]
            next.item = ItemFields.body(deleted, withSystemPropertiesOf: server)
        }
        try tx.updateOperation(next)
        return local.map { ItemFields.body($0, withSystemPropertiesOf: server) }
    }

    /// Completes accepted operations, removing the recorded errors of those in `errored` (the
    /// push's ``SyncContext/PushPlan/erroredOperations``), and reading the follow-ups and local
    /// copies of their items together, table by table, with one write of each table's items.
    /// Operations of one item (never in one batch) are completed one after the other.
    static func complete(
        _ accepted: [(QueuedOperation, JSONObject?)], errored: Set<Int64>, in tx: any StoreTransaction
    ) throws {
        guard !accepted.isEmpty else { return }
        let items = accepted.map { SyncContext.ItemKey(table: $0.0.table, itemID: $0.0.itemID) }
        guard Set(items).count == items.count else {
            for (operation, server) in accepted {
                try complete(operation, serverItem: server, mayHaveErrors: errored.contains(operation.id), in: tx)
            }
            return
        }
        var applied: [(operation: QueuedOperation, server: JSONObject)] = []
        for (operation, server) in accepted {
            guard try tx.deleteOperation(id: operation.id) else { continue }
            if errored.contains(operation.id) {
                try QueuedEdits.deleteErrors(of: operation.id, table: operation.table, in: tx)
            }
            if operation.kind != .delete, let server { applied.append((operation, server)) }
        }
        var tables: [String] = []
        var byTable: [String: [(operation: QueuedOperation, server: JSONObject)]] = [:]
        for entry in applied {
            if byTable[entry.operation.table] == nil { tables.append(entry.operation.table) }
            byTable[entry.operation.table, default: []].append(entry)
        }
        for table in tables {
            let entries = byTable[table] ?? []
            let ids = entries.map(\.operation.itemID)
            var followUps: [ItemID.Key: QueuedOperation] = [:]
            for queued in try tx.operations(table: table, itemIDs: ids)
            where followUps[ItemID.Key(queued.itemID)] == nil {
                followUps[ItemID.Key(queued.itemID)] = queued
            }
            let locals = try tx.items(table, ids: ids)
            var stored: [JSONObject] = []
            stored.reserveCapacity(entries.count)
            for (operation, server) in entries {
                let item = try settle(
                    operation, server: server, followUp: followUps[ItemID.Key(operation.itemID)],
                    local: locals[ItemID.Key(operation.itemID)], in: tx)
                if let item { stored.append(item) }
            }
            if !stored.isEmpty { try tx.upsert(table, stored) }
        }
    }

    /// Records why the operation failed (one error per operation) and marks it failed. An operation
    /// that failed before keeps its error: the same id and creation time, with this failure's details
    /// (an app or a person holding the id can still resolve it after the next push).
    static func recordFailure(
        operationID: Int64, status: Int?, message: String, serverItem: JSONObject?, keepInFlight: Bool,
        in tx: any StoreTransaction
    ) throws -> OperationErrorRecord? {
        guard var operation = try tx.operation(id: operationID) else { return nil }
        let earlier = try tx.operationErrors(table: operation.table, operationID: operation.id)
        if earlier.count > 1 { try tx.deleteOperationErrors(ids: earlier.dropFirst().map(\.id)) }
        let clientItem =
            operation.kind == .delete ? operation.item : try tx.item(operation.table, id: operation.itemID)
        let record = OperationErrorRecord(
            id: earlier.first?.id ?? ItemID.generate(), operationID: operation.id, table: operation.table,
            itemID: operation.itemID, kind: operation.kind, statusCode: status, message: message,
            clientItem: clientItem, serverItem: serverItem, createdAt: earlier.first?.createdAt ?? ItemFields.now())
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
                try QueuedEdits.dropOperation(next, in: tx)
                try QueuedEdits.dropOperation(operation, in: tx)
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
            try QueuedEdits.dropOperation(next, in: tx)
        }
        try tx.updateOperation(operation)
    }

    /// Conflict resolved for the server: the local item becomes the server's (or goes away) and every
    /// queued operation of the item is dropped.
    static func takeServer(operationID: Int64, serverItem: JSONObject?, in tx: any StoreTransaction) throws {
        guard let operation = try tx.operation(id: operationID) else { return }
        for queued in try tx.operations(table: operation.table, itemID: operation.itemID) {
            try QueuedEdits.dropOperation(queued, in: tx)
        }
        if let server = serverItem {
            try tx.upsert(operation.table, [ItemFields.localCopy(of: server, id: operation.itemID)])
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
        try QueuedEdits.deleteErrors(of: operation.id, table: operation.table, in: tx)
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
