/// The handle an app uses for one table of JSON items: local reads and writes, pull and purge.
///
/// Writes go to the local store at once and work offline; each one commits in one transaction
/// together with the operation it queues for the next push. Reads see only the local store.
///
/// ```swift
/// let todos = context.table("todo")
/// var item = try await todos.insert(["title": "Milk", "done": false])  // gets a UUIDv7 id
/// item["done"] = true
/// try await todos.update(item)
/// let open = try await todos.query(TableQuery().filter(.field("done").eq(false))).items
/// try await todos.delete(id: item.id!)
/// ```
///
/// Every method throws only ``SyncError``.
public struct SyncTable: Sendable {
    /// The table's name.
    public let name: String
    /// The context the table belongs to.
    public let context: SyncContext

    init(name: String, context: SyncContext) {
        self.name = name
        self.context = context
    }

    /// Inserts an item and queues its insert; an item without an `id` gets one (``ItemID/generate()``).
    /// The server-owned properties (`createdAt`, `updatedAt`, `version`, `deleted`) are not stored.
    /// Returns the item as stored.
    ///
    /// Throws ``SyncError/Code/itemExists`` when the id is already stored locally.
    @discardableResult
    public func insert(_ item: JSONObject) async throws(SyncError) -> JSONObject {
        let name = name
        try validateName()
        return try await context.write("insert into '\(name)'") { tx in
            try QueuedEdits.insert(item, table: name, in: tx)
        }
    }

    /// Replaces the fields of the stored item with `item`'s (matched by `id`) and queues an update. The
    /// server-owned properties stay those of the stored item. Returns the item as stored.
    @discardableResult
    public func update(_ item: JSONObject) async throws(SyncError) -> JSONObject {
        let name = name
        try validateName()
        return try await context.write("update in '\(name)'") { tx in
            try QueuedEdits.update(item, table: name, in: tx)
        }
    }

    /// ``update(_:)`` of what `prepare` makes of the stored item with `item`'s id (`nil` when none
    /// is stored), read in the same transaction.
    func update(
        _ item: JSONObject, preparing prepare: @escaping @Sendable (JSONObject?) -> JSONObject
    ) async throws(SyncError) -> JSONObject {
        let name = name
        try validateName()
        return try await context.write("update in '\(name)'") { tx in
            let id = try QueuedEdits.requireID(item, table: name)
            return try QueuedEdits.update(prepare(try tx.item(name, id: id)), table: name, in: tx)
        }
    }

    /// Deletes the item with `item`'s id and queues a delete. When the item is not stored locally, the
    /// delete is queued with `item` (its `version`, if any, is the precondition).
    public func delete(_ item: JSONObject) async throws(SyncError) {
        let name = name
        try validateName()
        _ = try await context.write("delete from '\(name)'") { tx in
            let id = try QueuedEdits.requireID(item, table: name)
            try QueuedEdits.delete(id: id, given: item, table: name, in: tx)
        }
    }

    /// Deletes the stored item with `id` and queues a delete. Deleting an item whose delete is already
    /// queued does nothing; deleting an unknown id throws ``SyncError/Code/itemNotFound``.
    public func delete(id: String) async throws(SyncError) {
        let name = name
        try validateName()
        _ = try await context.write("delete from '\(name)'") { tx in
            try QueuedEdits.delete(id: id, given: nil, table: name, in: tx)
        }
    }

    /// The local item with `id`, or `nil`.
    public func item(id: String) async throws(SyncError) -> JSONObject? {
        let name = name
        try validateName()
        return try await context.read("read from '\(name)'") { try $0.item(name, id: id) }
    }

    /// Runs a query on the local items.
    public func query(_ query: TableQuery = TableQuery()) async throws(SyncError) -> QueryResult {
        let name = name
        try validateName()
        try query.validateShape("query '\(name)'")
        return try await context.read("query '\(name)'") { try $0.query(name, query) }
    }

    /// The items a query selects now, then again after every commit that changes them.
    ///
    /// The first element is the current result. After that the query runs again whenever a commit
    /// changed this table's items (a local write through this context, a pulled page, a push that
    /// stored the server's version, a purge), and its result is yielded when it differs from the last
    /// one. The query runs at most once per `interval`: the first commit after a quiet moment runs
    /// it at once, and the commits of a burst fold into one run at the end of the interval. Commits
    /// to other tables cost nothing. A reader that falls behind gets the newest result (the stream
    /// keeps one). The sequence ends when the consumer stops reading (or its task is cancelled),
    /// and throws the ``SyncError`` of a query that fails.
    ///
    /// ```swift
    /// for try await open in todos.observe(TableQuery().filter(.field("done").eq(false))) {
    ///     print("\(open.count) open")
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - query: What to observe (`select`, `top`, `orderBy` apply as in ``query(_:)``).
    ///   - interval: The shortest time between two runs of the query (16 ms: a screen frame).
    public func observe(_ query: TableQuery = TableQuery(), interval: Duration = .milliseconds(16))
        -> AsyncThrowingStream<[JSONObject], any Error>
    {
        // Subscribed before the first run: a commit during it is not missed.
        let signals = context.store.commits.subscribe(tables: [name])
        let table = self
        // A reader that falls behind gets the newest result, not every one in between.
        return AsyncThrowingStream(bufferingPolicy: .bufferingNewest(1)) { continuation in
            let runner = Task {
                var last: [JSONObject]?
                var iterator = signals.makeAsyncIterator()
                var lastRun: ContinuousClock.Instant?
                do {
                    repeat {
                        if let lastRun, case let wait = lastRun + interval - .now, wait > .zero {
                            try await Task.sleep(for: wait)
                        }
                        lastRun = .now
                        let items = try await table.query(query).items
                        if items != last {
                            last = items
                            continuation.yield(items)
                        }
                    } while await iterator.next() != nil && !Task.isCancelled
                    continuation.finish()
                } catch is CancellationError {
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in runner.cancel() }
        }
    }

    /// Pulls the server's items into the store.
    ///
    /// Without a `queryID` the whole query is downloaded; with one, the pull is incremental: it
    /// resumes after the last item the previous pull with that id applied (a delta token: a keyset
    /// position on `(updatedAt, id)`, saved with each page in the page's transaction). Deleted items are removed
    /// locally, and items with queued local operations are left alone. Queued operations of this
    /// table are pushed first (``PullOptions/pushesFirst``).
    ///
    /// Rejected queries (``SyncError/Code/invalidQuery``): `select` and `includeTotalCount` always;
    /// `orderBy`, `skip` and `top` with a query id. Without a query id, `top` limits the number of
    /// items pulled and `skip` starts later.
    ///
    /// ```swift
    /// try await todos.pull(TableQuery().filter(.field("done").eq(false)), queryID: "open")
    /// ```
    @discardableResult
    public func pull(
        _ query: TableQuery = TableQuery(), queryID: String? = nil, options: PullOptions = PullOptions()
    ) async throws(SyncError) -> PullResult {
        try await engine("pull of '\(name)'") {
            try await context.pull(name, query: query, queryID: queryID, options: options)
        }
    }

    /// Removes local items (all of them by default) without telling the server. Returns how many.
    ///
    /// Refuses with ``SyncError/Code/queuedOperations`` while the table has queued operations, unless
    /// `force` is set: then the queued operations (and their errors) of the purged items are dropped
    /// too; a forced purge of the whole table (no filter, `top` or `skip`) drops all of the table's
    /// operations, errors and delta tokens. A purge resets the delta tokens whose query selects a
    /// purged item, so a later pull brings them back. The files of the purged items' synced
    /// attachments are removed from the device too (their rows stay, and the files download again
    /// when the items come back).
    ///
    /// ```swift
    /// // Drops the done items and their unpushed edits; other items keep theirs.
    /// try await todos.purge(TableQuery().filter(.field("done").eq(true)), force: true)
    /// ```
    @discardableResult
    public func purge(_ query: TableQuery = TableQuery(), force: Bool = false) async throws(SyncError) -> Int {
        try await engine("purge of '\(name)'") { try await context.purge(name, query: query, force: force) }
    }

    /// The number of queued operations of this table.
    public func queuedOperationCount() async throws(SyncError) -> Int {
        try await engine("count the queued operations") { try await context.queuedOperationCount(table: name) }
    }

    /// Runs engine work that throws untyped, as a ``SyncError``.
    private func engine<Result>(_ what: String, _ body: () async throws -> Result) async throws(SyncError) -> Result {
        do {
            return try await body()
        } catch {
            throw SyncError.wrapping(error, what)
        }
    }

    private func validateName() throws(SyncError) {
        do {
            try StoreValidation.validateTableName(name)
        } catch {
            throw SyncError.invalidTableName(error)
        }
    }
}
