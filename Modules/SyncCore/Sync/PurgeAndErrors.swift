/// What to do with a failed operation or a kept conflict, given to ``SyncContext/resolveError(_:_:)``.
///
/// `useServer`, `useClient` and `useMerged(_:)` are the decisions of ``ConflictResolution`` under the
/// same names; `discardLocalChange` and `changeOperation(_:item:)` exist only here.
public enum ErrorResolution: Sendable, Hashable {
    /// Forget the local change: the operation is dropped and the local item goes back to the server's
    /// copy (the error's server item, else the copy the change started from; removed if there is none).
    case discardLocalChange
    /// Take the server's item from the error (or remove the local item when the server deleted it),
    /// and drop the operation.
    case useServer
    /// Keep the local change and push it again against the server's version from the error (so the
    /// client wins). An insert whose id exists becomes an update.
    case useClient
    /// Like ``useClient``, with `item` (typically a merge of both sides) replacing the local change.
    case useMerged(JSONObject)
    /// Change what the operation does (for example a failed update into an insert), with `item` as the
    /// local item when one is given.
    case changeOperation(OperationKind, item: JSONObject? = nil)
}

extension SyncContext {
    /// The recorded operation errors, oldest first, for one table or all. They stay until resolved,
    /// or until their operation succeeds on a later push, and survive restarts.
    public nonisolated func operationErrors(table: String? = nil) async throws(SyncError) -> [OperationErrorRecord] {
        try await read("list the operation errors") { try $0.operationErrors(table: table) }
    }

    /// Resolves a recorded error; it works at any time, including after a restart (all it needs is in
    /// the store).
    ///
    /// ```swift
    /// for error in try await context.operationErrors() {
    ///     if error.statusCode == 412 { try await context.resolveError(error.id, .useClient) }  // keep mine
    ///     else { try await context.resolveError(error.id, .discardLocalChange) }
    /// }
    /// try await context.push()
    /// ```
    ///
    /// **Deletions win**, as in a conflict handler: a server item that was deleted cannot be brought
    /// back through the protocol, so ``ErrorResolution/useClient`` and ``ErrorResolution/useMerged(_:)``
    /// of an insert or update act as ``ErrorResolution/useServer`` when the server deleted the item
    /// (the local item is removed), and the resolution returned says so. (Sending the local item
    /// again would meet the same refusal at every push.)
    ///
    /// Throws ``SyncError/Code/notFound`` when the error or its operation no longer exists (the stale
    /// error is then removed), ``SyncError/Code/invalidResolution`` when the resolution needs a server
    /// item the error does not have or would insert an id the server keeps for a deleted item, and
    /// ``SyncError/Code/invalidItem`` for an item with another id.
    ///
    /// - Returns: The resolution applied: `resolution`, or ``ErrorResolution/useServer`` where the
    ///   server's deletion won.
    @discardableResult
    public func resolveError(_ errorID: String, _ resolution: ErrorResolution) async throws(SyncError)
        -> ErrorResolution
    {
        try checkCancellation("resolve error '\(errorID)'")
        let applied: ErrorResolution?
        do {
            applied = try await holding([Self.pushGate]) {
                let (applied, gone) = try await write("resolve error '\(errorID)'") {
                    tx -> (ErrorResolution?, OperationErrorRecord?) in
                    let record = try tx.operationError(id: errorID)
                    let applied = try ErrorSteps.resolve(errorID: errorID, resolution, in: tx)
                    // An item the resolution took off the device (the server's deletion won, a
                    // local insert discarded): the files of its synced attachments go too.
                    guard applied != nil, let record, try tx.item(record.table, id: record.itemID) == nil else {
                        return (applied, nil)
                    }
                    return (applied, record)
                }
                if let gone { await freeAttachmentFiles(of: [gone.itemID], table: gone.table) }
                return applied
            }
        } catch {
            throw SyncError.wrapping(error, "resolve error '\(errorID)'")
        }
        guard let applied else {
            throw SyncError(
                .notFound, "the operation of error '\(errorID)' is no longer queued (the error was removed)")
        }
        return applied
    }

    /// Removes local items of a table. See ``SyncTable/purge(_:force:)``.
    @discardableResult
    public func purge(_ table: String, query: TableQuery = TableQuery(), force: Bool = false) async throws(SyncError)
        -> Int
    {
        do {
            try StoreValidation.validateTableName(table)
        } catch {
            throw SyncError.invalidTableName(error)
        }
        try query.validateShape("purge of '\(table)'")
        try checkCancellation("purge of '\(table)'")
        do {
            return try await holding([Self.tableGate(table), Self.pushGate]) {
                try checkCancellation("purge of '\(table)'")
                let (removed, ids) = try await write("purge of '\(table)'") { tx in
                    try PurgeSteps.purge(table: table, query: query, force: force, in: tx)
                }
                // The files of the purged items' synced attachments go too (they stayed until the
                // cache evicted them); their rows stay `remote`, for a pull that brings the items back.
                await freeAttachmentFiles(ofMany: ids, table: table)
                hub.emit(.purged(table: table, items: removed, forced: force))
                return removed
            }
        } catch {
            throw SyncError.wrapping(error, "purge of '\(table)'")
        }
    }
}

enum PurgeSteps {
    /// Answers how many items it removed, and their ids.
    static func purge(table: String, query: TableQuery, force: Bool, in tx: any StoreTransaction) throws -> (
        Int, ids: [String]
    ) {
        let pending = try tx.operationCount(table: table)
        if pending > 0, !force {
            throw SyncError(
                .queuedOperations,
                "purge of '\(table)': the table has \(pending) queued operation\(pending == 1 ? "" : "s") not pushed yet"
            )
        }
        var selection = query
        selection.select = nil
        selection.includeTotalCount = false
        selection.includeDeleted = true
        let items = try tx.query(table, selection).items
        // A forced purge of some items drops their queued operations only: it dropped the table's,
        // and an item it kept then never reached the server while the status said everything synced.
        let narrowed = query.filter != nil || query.top != nil || (query.skip ?? 0) > 0
        if force && narrowed {
            let purged = items.compactMap(\.id).itemKeys
            for operation in try tx.operations(after: nil, table: table, limit: nil)
            where purged.contains(ItemID.Key(operation.itemID)) {
                try QueuedEdits.dropOperation(operation, in: tx)
            }
        }
        if force && !narrowed {
            for operation in try tx.operations(after: nil, table: table, limit: nil) {
                try QueuedEdits.dropOperation(operation, in: tx)
            }
            let errors = try tx.operationErrors(table: table).map(\.id)
            if !errors.isEmpty { try tx.deleteOperationErrors(ids: errors) }
            for queryID in try tx.deltaTokens(table: table).keys {
                try tx.setDeltaToken(table: table, queryID: queryID, value: nil)
            }
        } else if !items.isEmpty {
            // A delta token that moved past purged items would never bring them back: reset the tokens
            // whose filter selects any purged item.
            for (queryID, token) in try tx.deltaTokens(table: table) {
                let filter = DeltaToken(stored: token)?.filter ?? ""
                if items.contains(where: { DeltaToken.filterMatches(filter, $0) }) {
                    try tx.setDeltaToken(table: table, queryID: queryID, value: nil)
                }
            }
        }
        let ids = items.compactMap(\.id)
        return (ids.isEmpty ? 0 : try tx.delete(table, ids: ids), ids)
    }
}

enum ErrorSteps {
    /// Applies a resolution; returns the one applied (see ``SyncContext/resolveError(_:_:)``), or
    /// `nil` when the error was stale (its operation is gone) and was removed instead.
    static func resolve(errorID: String, _ resolution: ErrorResolution, in tx: any StoreTransaction) throws
        -> ErrorResolution?
    {
        guard let record = try tx.operationError(id: errorID) else {
            throw SyncError(.notFound, "no operation error with id '\(errorID)'")
        }
        guard var operation = try tx.operation(id: record.operationID) else {
            try tx.deleteOperationErrors(ids: [errorID])
            return nil
        }
        let table = operation.table
        let id = JSONValue.string(operation.itemID)
        let server = record.serverItem.flatMap { $0.isDeleted ? nil : $0 }
        let serverGone =
            record.serverItem?.isDeleted == true || record.statusCode == 404 || record.statusCode == 410
        // Deleted there, not merely never sent there: a 404 of an update without a base or a
        // version is an item the server never had (2.0 answers 404 for a deleted item too).
        let deletedOnServer =
            record.serverItem?.isDeleted == true || record.statusCode == 410
            || (record.statusCode == 404 && (operation.baseItem != nil || operation.kind == .delete))
        var resolution = resolution
        switch resolution {
        case .useClient, .useMerged:
            if deletedOnServer && operation.kind != .delete { resolution = .useServer }
        case .changeOperation(.insert, _) where deletedOnServer:
            throw SyncError(
                .invalidResolution,
                "the server deleted '\(operation.itemID)' and keeps its id: an insert of it would be refused (409); "
                    + "insert the item under a new id, or take the server's deletion")
        case .changeOperation(.update, _) where deletedOnServer:
            // It was accepted, then failed with 410 at every push.
            throw SyncError(
                .invalidResolution,
                "the server deleted '\(operation.itemID)': an update of it can never apply (410); "
                    + "insert the item under a new id, or take the server's deletion")
        default:
            break
        }
        let local = try tx.item(table, id: operation.itemID)
        func checked(_ item: JSONObject?) throws -> JSONObject? {
            guard let item else { return nil }
            if let given = item["id"], given != id {
                throw SyncError(.invalidItem, "the item's id \(given) is not the failed operation's id \(id)")
            }
            var checked = item
            checked["id"] = id
            return checked
        }
        func store(_ item: JSONObject?) throws {
            if var item {
                item["id"] = id
                item.removeValue(forKey: "deleted")
                try tx.upsert(table, [item])
            } else {
                try tx.delete(table, ids: [operation.itemID])
            }
        }

        switch resolution {
        case .discardLocalChange:
            for queued in try tx.operations(table: table, itemID: operation.itemID) {
                try QueuedEdits.dropOperation(queued, in: tx)
            }
            if serverGone {
                try store(nil)
            } else if let server {
                try store(server)
            } else {
                switch operation.kind {
                case .insert: try store(nil)
                case .update: try store(operation.baseItem)
                case .delete: try store(operation.baseItem ?? operation.item)
                }
            }
            return resolution
        case .useServer:
            guard server != nil || serverGone else {
                throw SyncError(
                    .invalidResolution,
                    "operation error '\(errorID)' carries no server item to take (the server refused the change and sent no"
                        + " version of its own): discard the local change, or send it again")
            }
            for queued in try tx.operations(table: table, itemID: operation.itemID) {
                try QueuedEdits.dropOperation(queued, in: tx)
            }
            try store(server)
            return resolution
        case .useClient, .useMerged:
            var merged: JSONObject?
            if case .useMerged(let item) = resolution { merged = item }
            let given = try checked(merged)
            switch operation.kind {
            case .insert, .update:
                guard let current = given ?? local ?? record.clientItem else {
                    throw SyncError(.invalidResolution, "error '\(errorID)': there is no local item to push again")
                }
                try store(ItemFields.body(current, withSystemPropertiesOf: server ?? local))
                if let server {
                    operation.kind = .update
                    operation.baseItem = server
                } else if record.statusCode == 404 {
                    // The server never had it (a deletion there went the other way above): mine
                    // gets there as an insert.
                    operation.kind = .insert
                }
            case .delete:
                let deleted = given ?? operation.item ?? ["id": id]
                operation.item = ItemFields.body(deleted, withSystemPropertiesOf: server ?? operation.item)
            }
        case .changeOperation(let kind, let item):
            let current = try checked(item) ?? local ?? record.clientItem ?? operation.item
            switch kind {
            case .delete:
                try store(nil)
                operation.item = ItemFields.body(current ?? ["id": id], withSystemPropertiesOf: server ?? current)
            case .update:
                guard let current else {
                    throw SyncError(.invalidResolution, "error '\(errorID)': an update needs an item")
                }
                try store(ItemFields.body(current, withSystemPropertiesOf: server ?? current))
                if let server { operation.baseItem = server }
            case .insert:
                guard let current else {
                    throw SyncError(.invalidResolution, "error '\(errorID)': an insert needs an item")
                }
                try store(ItemFields.body(current))
                operation.baseItem = nil
            }
            operation.kind = kind
        }
        operation.state = .pending
        if operation.kind != .delete { operation.item = nil }
        try QueuedEdits.deleteErrors(of: operation.id, table: table, in: tx)
        try tx.updateOperation(operation)
        return resolution
    }
}
