/// The local changes of one ``SyncContext/write(_:)``: inserts, updates and deletes of items in any
/// tables, each with exactly the meaning of the ``SyncTable`` method of the same name, and all
/// committed together with their queued operations, or none of them.
///
/// A `LocalWrites` exists only while its `write` runs; do not keep it.
///
/// ```swift
/// let list = try await context.write { writes in
///     let list = try writes.insert(["title": "Groceries"], into: "lists")
///     for title in ["Milk", "Eggs"] {
///         try writes.insert(["title": .string(title), "list": list["id"] ?? .null], into: "todo")
///     }
///     return list
/// }
/// ```
public final class LocalWrites {
    let transaction: any StoreTransaction

    init(_ transaction: any StoreTransaction) {
        self.transaction = transaction
    }

    /// Inserts an item and queues its insert, as ``SyncTable/insert(_:)`` does; returns it as stored.
    ///
    /// - Parameters:
    ///   - item: The item; one without an `id` gets one.
    ///   - table: The table's name.
    @discardableResult
    public func insert(_ item: JSONObject, into table: String) throws(SyncError) -> JSONObject {
        try run(table) { try QueuedEdits.insert(item, table: table, in: transaction) }
    }

    /// Inserts items and queues their inserts, exactly as one ``insert(_:into:)`` each would, in
    /// fewer steps (an import); returns them as stored.
    ///
    /// - Parameters:
    ///   - items: The items; those without an `id` get one.
    ///   - table: The table's name.
    @discardableResult
    public func insert(contentsOf items: [JSONObject], into table: String) throws(SyncError) -> [JSONObject] {
        try run(table) { try QueuedEdits.insertMany(items, table: table, in: transaction) }
    }

    /// Replaces a stored item's fields and queues an update, as ``SyncTable/update(_:)`` does.
    ///
    /// - Parameters:
    ///   - item: The item, matched by its `id`.
    ///   - table: The table's name.
    @discardableResult
    public func update(_ item: JSONObject, in table: String) throws(SyncError) -> JSONObject {
        try run(table) { try QueuedEdits.update(item, table: table, in: transaction) }
    }

    /// Deletes a stored item and queues a delete, as ``SyncTable/delete(id:)`` does.
    ///
    /// - Parameters:
    ///   - id: The item's id.
    ///   - table: The table's name.
    public func delete(id: String, from table: String) throws(SyncError) {
        _ = try run(table) { try QueuedEdits.delete(id: id, given: nil, table: table, in: transaction) }
    }

    /// The item with `id` as this write sees it (its own changes included), or `nil`.
    ///
    /// - Parameters:
    ///   - table: The table's name.
    ///   - id: The item's id.
    public func item(_ table: String, id: String) throws(SyncError) -> JSONObject? {
        try run(table) { try transaction.item(table, id: id) }
    }

    func run<Result>(_ table: String, _ body: () throws -> Result) throws(SyncError) -> Result {
        do {
            try StoreValidation.validateTableName(table)
        } catch {
            throw SyncError.invalidTableName(error)
        }
        do {
            return try body()
        } catch {
            throw SyncError.wrapping(error, "writing to '\(table)'")
        }
    }
}

extension SyncContext {
    /// Runs `body` in one store transaction: every item it inserts, updates or deletes, and every
    /// operation those queue, commit together, or, when `body` throws, none do.
    ///
    /// ```swift
    /// try await context.write { writes in
    ///     try writes.update(["id": "milk", "title": "Oat milk"], in: "todo")
    ///     try writes.delete(id: "eggs", from: "todo")
    /// }
    /// ```
    ///
    /// - Parameter body: The changes. It runs synchronously inside the transaction (keep it short:
    ///   other writers wait), must not keep its `LocalWrites`, and may throw an error of its own to
    ///   roll everything back.
    /// - Returns: What `body` returns.
    /// - Throws: What `body` threw, unchanged (a ``SyncError`` from a change it made, or an error of
    ///   its own), or a ``SyncError`` when the store failed.
    @discardableResult
    public nonisolated func write<Result: Sendable>(_ body: @escaping @Sendable (LocalWrites) throws -> Result)
        async throws -> Result
    {
        let store = store
        do {
            return try await Task {
                try await store.write { transaction in
                    do {
                        return try body(LocalWrites(transaction))
                    } catch {
                        throw ThrownByBody(error: error)
                    }
                }
            }.value
        } catch let thrown as ThrownByBody {
            throw thrown.error
        } catch {
            throw SyncError.wrapping(error, "a local write")
        }
    }
}

/// An error `body` threw, carried through the store's transaction unchanged.
private struct ThrownByBody: Error {
    var error: any Error
}

/// A `LocalWrites` belongs to the transaction of its `write`.
@available(*, unavailable)
extension LocalWrites: Sendable {}
