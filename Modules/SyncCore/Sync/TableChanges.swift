import Synchronization

/// What one committed transaction of a context changed.
struct CommittedChange: Sendable, Hashable {
    /// The tables whose items changed.
    var tables: Set<String> = []
    /// Whether the queue of operations changed.
    var queue = false

    var isEmpty: Bool { tables.isEmpty && !queue }
}

/// Tells subscribers which tables changed, after each commit of a context (local writes, pulled
/// pages, pushes, purges). A subscriber names its tables and is woken only for those; signals that
/// arrive while it is busy fold into one (its stream keeps the newest signal only).
final class TableChangeHub: Sendable {
    private struct Subscriber {
        /// `nil` for every table.
        var tables: Set<String>?
        /// Woken by queue changes too.
        var queue: Bool
        var continuation: AsyncStream<Void>.Continuation
    }

    private let state = Mutex<(next: Int, subscribers: [Int: Subscriber])>((0, [:]))

    /// A stream that yields after each commit that changed one of `tables` (every table when `nil`)
    /// or, with `queue`, the queue.
    func subscribe(tables: Set<String>?, queue: Bool = false) -> AsyncStream<Void> {
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let id = state.withLock { state in
            state.next += 1
            state.subscribers[state.next] = Subscriber(tables: tables, queue: queue, continuation: continuation)
            return state.next
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.subscribers.removeValue(forKey: id) }
        }
        return stream
    }

    func publish(_ change: CommittedChange) {
        guard !change.isEmpty else { return }
        let woken = state.withLock { state in
            state.subscribers.values.filter { subscriber in
                (change.queue && subscriber.queue)
                    || (!change.tables.isEmpty && subscriber.tables.map { !$0.isDisjoint(with: change.tables) } ?? true)
            }.map(\.continuation)
        }
        for continuation in woken { continuation.yield() }
    }

    /// How many subscribers there are (for tests).
    var subscriberCount: Int { state.withLock { $0.subscribers.count } }

    deinit {
        for subscriber in state.withLock({ $0.subscribers.values }) { subscriber.continuation.finish() }
    }
}

/// A store transaction that records what it changed: the context publishes it once the
/// transaction commits. Every call goes to the store's own transaction.
final class TrackedTransaction: StoreTransaction {
    let inner: any StoreTransaction
    private(set) var change = CommittedChange()

    init(_ inner: any StoreTransaction) { self.inner = inner }

    // MARK: StoreReader

    func item(_ table: String, id: String) throws -> JSONObject? { try inner.item(table, id: id) }
    func query(_ table: String, _ query: TableQuery) throws -> QueryResult { try inner.query(table, query) }
    func count(_ table: String) throws -> Int { try inner.count(table) }
    func tableNames() throws -> [String] { try inner.tableNames() }
    func definition(of table: String) throws -> TableDefinition? { try inner.definition(of: table) }
    func operations(after afterID: Int64?, table: String?, limit: Int?) throws -> [QueuedOperation] {
        try inner.operations(after: afterID, table: table, limit: limit)
    }
    func operations(table: String, itemID: String) throws -> [QueuedOperation] {
        try inner.operations(table: table, itemID: itemID)
    }
    func operation(id: Int64) throws -> QueuedOperation? { try inner.operation(id: id) }
    func operationCount(table: String?) throws -> Int { try inner.operationCount(table: table) }
    func operationErrors(table: String?) throws -> [OperationErrorRecord] { try inner.operationErrors(table: table) }
    func operationError(id: String) throws -> OperationErrorRecord? { try inner.operationError(id: id) }
    func deltaToken(table: String, queryID: String) throws -> String? {
        try inner.deltaToken(table: table, queryID: queryID)
    }
    func deltaTokens(table: String) throws -> [String: String] { try inner.deltaTokens(table: table) }

    // MARK: StoreTransaction

    func define(_ definition: TableDefinition) throws { try inner.define(definition) }

    func upsert(_ table: String, _ items: [JSONObject]) throws {
        try inner.upsert(table, items)
        if !items.isEmpty { change.tables.insert(table) }
    }

    func delete(_ table: String, ids: [String]) throws -> Int {
        let deleted = try inner.delete(table, ids: ids)
        if deleted > 0 { change.tables.insert(table) }
        return deleted
    }

    func delete(_ table: String, matching query: TableQuery) throws -> Int {
        let deleted = try inner.delete(table, matching: query)
        if deleted > 0 { change.tables.insert(table) }
        return deleted
    }

    func appendOperation(_ draft: OperationDraft) throws -> QueuedOperation {
        change.queue = true
        return try inner.appendOperation(draft)
    }

    func appendOperations(_ drafts: [OperationDraft]) throws -> [QueuedOperation] {
        if !drafts.isEmpty { change.queue = true }
        return try inner.appendOperations(drafts)
    }

    func updateOperation(_ operation: QueuedOperation) throws {
        change.queue = true
        try inner.updateOperation(operation)
    }

    func deleteOperations(ids: [Int64]) throws {
        if !ids.isEmpty { change.queue = true }
        try inner.deleteOperations(ids: ids)
    }

    func saveOperationError(_ error: OperationErrorRecord) throws {
        change.queue = true
        try inner.saveOperationError(error)
    }

    func deleteOperationErrors(ids: [String]) throws {
        if !ids.isEmpty { change.queue = true }
        try inner.deleteOperationErrors(ids: ids)
    }

    func setDeltaToken(table: String, queryID: String, value: String?) throws {
        try inner.setDeltaToken(table: table, queryID: queryID, value: value)
    }
}
