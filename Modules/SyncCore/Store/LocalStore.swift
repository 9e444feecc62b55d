/// A local store: where an app's items and Ferry's sync bookkeeping live on the device.
///
/// A store holds schemaless **tables of items** (JSON objects keyed by their string `id`) and, in the
/// same store, three **sync system tables**: the operation queue, the errors of
/// operations that failed, and the delta tokens of incremental pulls. Because they share one store,
/// a local edit and the operation that queues it commit in one transaction: together or not at all.
///
/// Ferry ships three implementations: `MemoryStore` (module StoreMemory), `SQLiteStore` and
/// `LMDBStore`. Pick one:
///
/// ```swift
/// import SyncCore
/// import StoreMemory
///
/// let store = MemoryStore()
/// try await store.write { tx in
///     try tx.upsert("todo", [["id": "1", "title": "Milk", "done": false]])
///     _ = try tx.appendOperation(OperationDraft(table: "todo", itemID: "1", kind: .insert))
/// }
/// let open = try await store.query("todo", TableQuery().filter(.field("done").eq(false)))
/// ```
///
/// ## Implementing a store
///
/// A third-party store (an encrypted one, say) conforms to `LocalStore` and passes the shared
/// conformance suite in `Tests/StoreConformance`. The contract:
/// - ``read(_:)`` runs its body against a consistent snapshot; it may run beside a writer and must
///   never see a transaction's partial effects.
/// - ``write(_:)`` runs its body in one transaction, writers one at a time. If the body throws, every
///   change it made is undone and the error is rethrown unchanged. The transaction handle must not
///   be used after the body returns.
/// - Queries return what ``QueryEvaluator`` returns for the same items and ``TableDefinition``
///   (stores may compile queries to their own language, but results must be identical).
/// - Items round-trip exactly as ``JSONValue`` (integers stay integers). `upsert` replaces the whole
///   item. Ids are case-sensitive and must pass ``ItemID/validate(_:)``.
/// - Operation ids increase strictly and are never reused while the store exists, even after the
///   queue drains.
/// - Errors are ``StoreError``s with a ``StoreError/Code`` (a native error goes in `underlying`).
/// - Every committed ``write(_:)`` is published on ``commits`` with the tables and queue it
///   changed, after the commit and never for a rolled-back one (``StoreCommits/tracking(_:_:)``
///   records it); a store that other connections or processes can write also publishes
///   ``StoreCommit/external`` within a second of their commits, at least while someone subscribes.
public protocol LocalStore: Sendable {
    /// What this store supports beyond the required contract.
    var capabilities: StoreCapabilities { get }

    /// Runs `body` with read access to a consistent snapshot of the store.
    func read<Result: Sendable>(_ body: @Sendable (any StoreReader) throws -> Result) async throws -> Result

    /// Runs `body` in one write transaction: all of its changes commit, or none do.
    func write<Result: Sendable>(_ body: @Sendable (any StoreTransaction) throws -> Result) async throws -> Result

    /// Where the store announces each committed write, whoever made it: observations and
    /// automatic sync listen here.
    ///
    /// ```swift
    /// for await _ in store.commits.subscribe(tables: ["todo"]) { print("todo changed") }
    /// ```
    var commits: StoreCommits { get }

    /// Releases the store's resources. Later calls fail with ``StoreError/Code/closed``.
    func close() async throws

    /// The item with `id` in `table`, or `nil`: the same as reading it in ``read(_:)``, which the
    /// default implementation does. A store may answer point reads faster (the SQLite store reads
    /// without leaving the caller's thread).
    func item(_ table: String, id: String) async throws -> JSONObject?
}

/// Read access to a store, inside ``LocalStore/read(_:)`` or ``LocalStore/write(_:)``.
public protocol StoreReader {
    /// The item with `id` in `table`, or `nil`.
    func item(_ table: String, id: String) throws -> JSONObject?

    /// The items of `table` with these ids, by id; an id without an item is left out. The default
    /// reads them one by one (``item(_:id:)``); a store that can read them together implements it
    /// (a push reads the local copies of every item of a batch it completes).
    ///
    /// The keys are ``ItemID/Key``s: ids equal as Swift `String`s but not byte for byte ("café" in
    /// two Unicode forms) are two items.
    ///
    /// ```swift
    /// let found = try await store.read { try $0.items("todo", ids: ["a1", "b2"]) }
    /// print(found[ItemID.Key("a1")]?["title"] as Any)
    /// ```
    func items(_ table: String, ids: [String]) throws -> [ItemID.Key: JSONObject]

    /// The items of `table` that a query selects, with the total count when asked for.
    func query(_ table: String, _ query: TableQuery) throws -> QueryResult

    /// The number of items in `table`.
    func count(_ table: String) throws -> Int

    /// The names of the tables that hold items or were defined, sorted.
    func tableNames() throws -> [String]

    /// The definition of `table`, if one was stored with ``StoreTransaction/define(_:)``.
    func definition(of table: String) throws -> TableDefinition?

    /// Pending operations in queue order: those with an id greater than `afterID` (all when `nil`),
    /// optionally only for one table, at most `limit` of them.
    func operations(after afterID: Int64?, table: String?, limit: Int?) throws -> [QueuedOperation]

    /// The queued operations of one item, in queue order.
    func operations(table: String, itemID: String) throws -> [QueuedOperation]

    /// The queued operations of these items of `table`, in queue order. The default asks item by
    /// item (``operations(table:itemID:)``); a store that can read them together implements it.
    func operations(table: String, itemIDs: [String]) throws -> [QueuedOperation]

    /// The operation with `id`, or `nil`.
    func operation(id: Int64) throws -> QueuedOperation?

    /// The number of queued operations, for one table or all.
    func operationCount(table: String?) throws -> Int

    /// Recorded operation errors, oldest first, optionally for one table.
    func operationErrors(table: String?) throws -> [OperationErrorRecord]

    /// The recorded errors of one operation of `table`, oldest first. The default reads the table's
    /// errors (``operationErrors(table:)``) and keeps that operation's; a store that can find them
    /// without reading the others implements it (a push looks up the errors of every operation it
    /// completes after a failure, so with many errors the default grows with their square).
    func operationErrors(table: String, operationID: Int64) throws -> [OperationErrorRecord]

    /// The recorded error with `id`, or `nil`.
    func operationError(id: String) throws -> OperationErrorRecord?

    /// The delta token stored for a table and query id, or `nil`.
    func deltaToken(table: String, queryID: String) throws -> String?

    /// Every delta token of a table, by query id.
    func deltaTokens(table: String) throws -> [String: String]
}

/// Read and write access inside ``LocalStore/write(_:)``.
public protocol StoreTransaction: StoreReader {
    /// Stores a table's definition (schema and indexes). Items already stored are kept.
    func define(_ definition: TableDefinition) throws

    /// Inserts or replaces items by `id`. Every item needs a valid string `id`.
    func upsert(_ table: String, _ items: [JSONObject]) throws

    /// Deletes items by id; ids that are absent are not an error. Returns how many were deleted.
    @discardableResult
    func delete(_ table: String, ids: [String]) throws -> Int

    /// Deletes every item a query's filter selects (skip, top and order apply too). Returns how many.
    /// The default runs the query for its ids and deletes those (``delete(_:ids:)``); a store that can
    /// delete in one statement implements it itself.
    @discardableResult
    func delete(_ table: String, matching query: TableQuery) throws -> Int

    /// Appends an operation to the queue with the next id, and returns it.
    func appendOperation(_ draft: OperationDraft) throws -> QueuedOperation

    /// Appends operations in order, exactly as one ``appendOperation(_:)`` each would (the default
    /// implementation); a store may do it in fewer steps.
    func appendOperations(_ drafts: [OperationDraft]) throws -> [QueuedOperation]

    /// Replaces a queued operation (matched by id). Throws ``StoreError/Code/notFound`` if absent.
    func updateOperation(_ operation: QueuedOperation) throws

    /// Removes operations by id; absent ids are not an error.
    func deleteOperations(ids: [Int64]) throws

    /// Removes one operation by id, and answers whether it was queued. The default reads it
    /// (``StoreReader/operation(id:)``) and removes it (``deleteOperations(ids:)``); a store that
    /// can tell from the removal itself implements it (a push removes every operation it completes
    /// this way).
    func deleteOperation(id: Int64) throws -> Bool

    /// Records (or replaces, by id) an operation error.
    func saveOperationError(_ error: OperationErrorRecord) throws

    /// Removes recorded errors by id; absent ids are not an error.
    func deleteOperationErrors(ids: [String]) throws

    /// Stores a delta token, or removes it when `value` is `nil`.
    func setDeltaToken(table: String, queryID: String, value: String?) throws
}

/// Optional abilities a store declares; the conformance suite skips checks a store opts out of.
public struct StoreCapabilities: OptionSet, Sendable, Hashable, CustomStringConvertible {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    /// Data survives closing and reopening the store.
    public static let persistent = StoreCapabilities(rawValue: 1 << 0)
    /// Readers run in parallel with a writer (on snapshots) rather than waiting for it.
    public static let concurrentReaders = StoreCapabilities(rawValue: 1 << 1)
    /// Declared indexes in ``TableDefinition/indexes`` speed up queries.
    public static let declaredIndexes = StoreCapabilities(rawValue: 1 << 2)

    public var description: String {
        var names: [String] = []
        if contains(.persistent) { names.append("persistent") }
        if contains(.concurrentReaders) { names.append("concurrentReaders") }
        if contains(.declaredIndexes) { names.append("declaredIndexes") }
        return "[" + names.joined(separator: ", ") + "]"
    }
}

/// A table's declared schema and indexes. Tables need no definition: an undefined table is
/// schemaless and is created by its first write.
public struct TableDefinition: Sendable, Hashable {
    public var name: String
    public var schema: TableSchema
    /// Field lists to index, for fields an app filters or sorts on often.
    public var indexes: [[String]]

    public init(name: String, schema: TableSchema = .schemaless, indexes: [[String]] = []) {
        self.name = name
        self.schema = schema
        self.indexes = indexes
    }
}

extension LocalStore {
    /// The item with `id` in `table`, or `nil`, read in ``read(_:)``.
    public func item(_ table: String, id: String) async throws -> JSONObject? {
        try await read { try $0.item(table, id: id) }
    }

    /// The items of `table` that a query selects.
    public func query(_ table: String, _ query: TableQuery = TableQuery()) async throws -> QueryResult {
        try await read { try $0.query(table, query) }
    }

    /// Inserts or replaces items in one transaction.
    public func upsert(_ table: String, _ items: [JSONObject]) async throws {
        try await write { try $0.upsert(table, items) }
    }

    /// Deletes items by id in one transaction.
    @discardableResult
    public func delete(_ table: String, ids: [String]) async throws -> Int {
        try await write { try $0.delete(table, ids: ids) }
    }

    /// The number of queued operations, for one table or all.
    public func operationCount(table: String? = nil) async throws -> Int {
        try await read { try $0.operationCount(table: table) }
    }
}

extension StoreReader {
    public func items(_ table: String, ids: [String]) throws -> [ItemID.Key: JSONObject] {
        var found: [ItemID.Key: JSONObject] = [:]
        for id in ids where found[ItemID.Key(id)] == nil {
            if let item = try item(table, id: id) { found[ItemID.Key(id)] = item }
        }
        return found
    }

    public func operations(table: String, itemIDs: [String]) throws -> [QueuedOperation] {
        var operations: [QueuedOperation] = []
        for key in itemIDs.itemKeys { operations += try self.operations(table: table, itemID: key.id) }
        return operations.sorted { $0.id < $1.id }
    }

    /// Reads the table's errors (``operationErrors(table:)``) and keeps those of `operationID`.
    public func operationErrors(table: String, operationID: Int64) throws -> [OperationErrorRecord] {
        try operationErrors(table: table).filter { $0.operationID == operationID }
    }
}

extension StoreTransaction {
    /// One ``appendOperation(_:)`` per draft, in order.
    public func appendOperations(_ drafts: [OperationDraft]) throws -> [QueuedOperation] {
        try drafts.map { try appendOperation($0) }
    }

    /// Reads the operation (``StoreReader/operation(id:)``) and removes it when it is there.
    public func deleteOperation(id: Int64) throws -> Bool {
        guard try operation(id: id) != nil else { return false }
        try deleteOperations(ids: [id])
        return true
    }

    /// Runs `query` (without `$select` or a count) and deletes the items it selects by id.
    @discardableResult
    public func delete(_ table: String, matching query: TableQuery) throws -> Int {
        var selection = query
        selection.select = nil
        selection.includeTotalCount = false
        return try delete(table, ids: try self.query(table, selection).items.compactMap(\.id))
    }
}
