// Local edits as the queue records them: each insert, update or delete writes the item and queues
// its operation, collapsing it with the item's pending or failed operation by the rules below. The
// public faces are `SyncTable`'s CRUD and `LocalWrites` (`SyncContext.write`).
//
// Every function here runs inside one store transaction, so a local edit and the queue change
// that records it commit together (legacy bug #5).
//
// Collapse table (existing pending or failed operation ↓, new local change →):
//
//              insert              update              delete
//   (none)     queue insert        queue update        queue delete
//   insert     itemExists          keep insert         drop the insert (nothing reaches the server)
//   update     itemExists          keep update         becomes delete
//   delete     becomes update      invalidOperation    no change
//
// An operation in flight (state .inFlight: being sent, or sent with an unknown outcome) is never
// collapsed: the new change is queued after it, and the two are reconciled when the outcome is known
// (`PushCompletion`).

/// Local edits and their queued operations (the collapse rules above).
enum QueuedEdits {
    /// Inserts `item` (an id is generated when it has none) and queues the insert.
    static func insert(_ item: JSONObject, table: String, in tx: any StoreTransaction) throws -> JSONObject {
        let (item, id) = try newItem(item, table: table)
        if try tx.item(table, id: id) != nil {
            throw SyncError(.itemExists, "table '\(table)': an item with id '\(id)' already exists")
        }
        let operations = try tx.operations(table: table, itemID: id)
        guard let last = operations.last, last.state != .inFlight else {
            try tx.upsert(table, [item])
            _ = try tx.appendOperation(
                OperationDraft(table: table, itemID: id, kind: .insert, createdAt: ItemFields.now()))
            return item
        }
        switch last.kind {
        case .delete:
            // Delete + insert = update: the server still has the item, so it gets the new fields
            // against the version the delete would have checked.
            let restored = ItemFields.body(item, withSystemPropertiesOf: last.item)
            try tx.upsert(table, [restored])
            var changed = last
            changed.kind = .update
            changed.item = nil
            try tx.updateOperation(changed)
            return restored
        case .insert, .update:
            // The queue says the item exists but the store does not have it: recreate it locally and
            // keep the queued operation.
            try tx.upsert(table, [item])
            return item
        }
    }

    /// The item an insert stores (without server-owned properties, with an id: generated when it has
    /// none) and its id.
    static func newItem(_ original: JSONObject, table: String) throws -> (item: JSONObject, id: String) {
        var item = ItemFields.body(original)
        let id: String
        switch item["id"] {
        case nil, .null?:
            id = ItemID.generate()
            item["id"] = .string(id)
        case .string(let value)?:
            id = value
        case let other?:
            throw SyncError(.invalidItem, "table '\(table)': the item's id must be a string, not \(other)")
        }
        try validate(id, table: table)
        return (item, id)
    }

    /// Inserts `items` as one ``insert(_:table:in:)`` each would, in order; when none of them has a
    /// queued operation (the case of an import), in one upsert and one append of operations.
    static func insertMany(_ items: [JSONObject], table: String, in tx: any StoreTransaction) throws
        -> [JSONObject]
    {
        var prepared: [JSONObject] = []
        prepared.reserveCapacity(items.count)
        var ids = Set<ItemID.Key>()
        ids.reserveCapacity(items.count)
        var plain = true
        // An import into a table with no items and no queued operations (a first import) meets
        // nothing stored: only the ids of `items` themselves can collide.
        let fresh =
            try tx.query(table, TableQuery(top: 1)).items.isEmpty
            && tx.operations(after: nil, table: table, limit: 1).isEmpty
        for original in items {
            let (item, id) = try newItem(original, table: table)
            let stored = fresh ? nil : try tx.item(table, id: id)
            guard ids.insert(ItemID.Key(id)).inserted, stored == nil else {
                throw SyncError(.itemExists, "table '\(table)': an item with id '\(id)' already exists")
            }
            if plain, !fresh, let last = try tx.operations(table: table, itemID: id).last, last.state != .inFlight {
                plain = false
            }
            prepared.append(item)
        }
        guard plain else { return try items.map { try insert($0, table: table, in: tx) } }
        try tx.upsert(table, prepared)
        let now = ItemFields.now()
        _ = try tx.appendOperations(
            prepared.map { OperationDraft(table: table, itemID: $0.id ?? "", kind: .insert, createdAt: now) })
        return prepared
    }

    /// Replaces the fields of an existing item and queues the update. The server-owned system
    /// properties stay those of the stored item (the engine owns `version`).
    static func update(_ item: JSONObject, table: String, in tx: any StoreTransaction) throws -> JSONObject {
        let id = try requireID(item, table: table)
        let stored = try tx.item(table, id: id)
        let last = try tx.operations(table: table, itemID: id).last
        guard let stored else {
            if let last, last.kind == .delete {
                throw SyncError(
                    .invalidOperation, "table '\(table)': item '\(id)' was deleted locally and cannot be updated")
            }
            // An update of an item that is not stored locally (legacy behaviour): it is stored as
            // given and the update carries the item's own version, if any.
            let created = item.filter { $0.key != "deleted" }
            try tx.upsert(table, [created])
            if last == nil || last?.state == .inFlight {
                _ = try tx.appendOperation(
                    OperationDraft(table: table, itemID: id, kind: .update, createdAt: ItemFields.now()))
            }
            return created
        }
        let updated = ItemFields.body(item, withSystemPropertiesOf: stored)
        try tx.upsert(table, [updated])
        guard let last, last.state != .inFlight else {
            _ = try tx.appendOperation(
                OperationDraft(
                    table: table, itemID: id, kind: .update, baseItem: stored, createdAt: ItemFields.now()))
            return updated
        }
        if last.kind == .delete {
            throw SyncError(
                .invalidOperation, "table '\(table)': item '\(id)' was deleted locally and cannot be updated")
        }
        // Insert + update = insert, update + update = update: the push sends the stored item.
        return updated
    }

    /// Deletes an item and queues the delete. Returns `false` when there was nothing to delete
    /// because a delete is already queued.
    @discardableResult
    static func delete(id: String, given: JSONObject?, table: String, in tx: any StoreTransaction) throws -> Bool {
        try validate(id, table: table)
        let stored = try tx.item(table, id: id)
        let last = try tx.operations(table: table, itemID: id).last
        guard let stored else {
            if let last, last.kind == .delete { return false }  // delete + delete: nothing more to do
            guard let given, last == nil || last?.state == .inFlight else {
                throw SyncError(.itemNotFound, "table '\(table)': no item with id '\(id)' to delete")
            }
            // A delete of an item that is not stored locally (legacy behaviour): the given item's
            // version, if any, is the precondition.
            _ = try tx.appendOperation(
                OperationDraft(table: table, itemID: id, kind: .delete, item: given, createdAt: ItemFields.now()))
            return true
        }
        try tx.delete(table, ids: [id])
        guard let last, last.state != .inFlight else {
            _ = try tx.appendOperation(
                OperationDraft(
                    table: table, itemID: id, kind: .delete, item: stored, baseItem: stored,
                    createdAt: ItemFields.now()))
            return true
        }
        switch last.kind {
        case .insert:
            // Insert + delete = nothing: the insert never reached the server (an insert whose outcome
            // is unknown is in flight and handled above).
            try dropOperation(last, in: tx)
        case .update:
            var changed = last
            changed.kind = .delete
            changed.item = stored
            try tx.updateOperation(changed)
        case .delete:
            break
        }
        return true
    }

    /// Removes an operation and its recorded errors.
    static func dropOperation(_ operation: QueuedOperation, in tx: any StoreTransaction) throws {
        try tx.deleteOperations(ids: [operation.id])
        try deleteErrors(of: operation.id, table: operation.table, in: tx)
    }

    static func deleteErrors(of operationID: Int64, table: String, in tx: any StoreTransaction) throws {
        let ids = try tx.operationErrors(table: table, operationID: operationID).map(\.id)
        if !ids.isEmpty { try tx.deleteOperationErrors(ids: ids) }
    }

    static func requireID(_ item: JSONObject, table: String) throws -> String {
        guard let raw = item["id"] else { throw SyncError(.invalidItem, "table '\(table)': the item has no id") }
        guard case .string(let id) = raw else {
            throw SyncError(.invalidItem, "table '\(table)': the item's id must be a string, not \(raw)")
        }
        try validate(id, table: table)
        return id
    }

    static func validate(_ id: String, table: String) throws {
        do {
            try ItemID.validate(id)
        } catch {
            throw SyncError(.invalidItem, "table '\(table)': \(error)", underlying: error)
        }
    }
}
