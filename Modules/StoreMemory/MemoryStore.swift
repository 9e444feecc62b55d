public import SyncCore

/// A complete `LocalStore` in memory.
///
/// It keeps nothing across launches, so it suits tests, previews and caches; it is also the
/// deterministic reference the other stores are compared with. Queries run on `QueryEvaluator`.
/// Transactions keep an undo log, so a failed one costs only what it changed.
///
/// ```swift
/// import SyncCore
/// import StoreMemory
///
/// let store = MemoryStore()
/// try await store.upsert("todo", [["id": "1", "title": "Milk"]])
/// let item = try await store.item("todo", id: "1")
/// ```
public actor MemoryStore: LocalStore {
    private var state = MemoryState()
    private var isClosed = false

    public init() {}

    public nonisolated var capabilities: StoreCapabilities { [] }

    /// Every committed write, announced once it is in place (only this store writes its state).
    public nonisolated let commits = StoreCommits()

    public func read<Result: Sendable>(_ body: @Sendable (any StoreReader) throws -> Result) async throws -> Result {
        try checkOpen()
        return try body(MemoryReader(state: state))
    }

    public func write<Result: Sendable>(
        _ body: @Sendable (any StoreTransaction) throws -> Result
    ) async throws -> Result {
        try checkOpen()
        let transaction = MemoryTransaction(state: state)
        // Drop our reference so the transaction's copy is unique and mutates in place.
        state = MemoryState()
        defer { transaction.isFinished = true }
        do {
            let (result, commit) = try StoreCommits.tracking(transaction, body)
            state = transaction.state
            commits.publish(commit)
            return result
        } catch {
            transaction.rollBack()
            state = transaction.state
            throw error
        }
    }

    public func close() async throws {
        isClosed = true
        state = MemoryState()
    }

    private func checkOpen() throws(StoreError) {
        if isClosed { throw StoreError(.closed, "the memory store is closed") }
    }
}

extension LocalStore where Self == MemoryStore {
    /// A new, empty in-memory store: `SyncContext(store: .memory, …)`.
    public static var memory: MemoryStore { MemoryStore() }
}

struct MemoryState {
    /// Items by table and id; ids compare by their bytes (``ItemID/Key``), as in the other
    /// stores: "café" in two Unicode forms is two items.
    var tables: [String: [ItemID.Key: JSONObject]] = [:]
    var definitions: [String: TableDefinition] = [:]
    /// Sorted by id. Changed only through the methods below, which keep ``operationIDsByItem``.
    ///
    /// A slice, so that taking the oldest operation off is O(1): a push removes operations from the
    /// front, and an array moved the whole queue for each (a drain of 40,000 took 1 s, of 10,000
    /// 0.12 s). Its indices are the slice's, not from 0.
    private(set) var operations: ArraySlice<QueuedOperation> = []
    /// The ids of each item's queued operations, ascending: the queue's collapse rules ask for an
    /// item's operations at every write, and a scan of the whole queue made an import of 25,000
    /// items take 84 s (1.2 s on SQLite, which has an index).
    private var operationIDsByItem: [ItemKey: [Int64]] = [:]
    var lastOperationID: Int64 = 0
    /// Oldest first.
    var errors: [OperationErrorRecord] = []
    var tokens: [String: [String: String]] = [:]

    struct ItemKey: Hashable {
        var table: String
        var itemID: ItemID.Key

        init(_ operation: QueuedOperation) {
            self.init(table: operation.table, itemID: operation.itemID)
        }

        init(table: String, itemID: String) {
            self.table = table
            self.itemID = ItemID.Key(itemID)
        }
    }

    /// The queued operations of one item, oldest first.
    func operations(table: String, itemID: String) -> [QueuedOperation] {
        (operationIDsByItem[ItemKey(table: table, itemID: itemID)] ?? []).compactMap { id in
            operationIndex(of: id).map { operations[$0] }
        }
    }

    /// Adds `operation` in id order (at the end, unless an undo puts an older one back).
    mutating func insertOperation(_ operation: QueuedOperation) {
        if let last = operations.last, last.id > operation.id {
            let position = operations.firstIndex { $0.id > operation.id } ?? operations.endIndex
            operations.insert(operation, at: position)
        } else {
            operations.append(operation)
        }
        var ids = operationIDsByItem[ItemKey(operation), default: []]
        if let last = ids.last, last > operation.id {
            ids.insert(operation.id, at: ids.firstIndex { $0 > operation.id } ?? ids.endIndex)
        } else {
            ids.append(operation.id)
        }
        operationIDsByItem[ItemKey(operation)] = ids
    }

    /// Removes the operation at `index` and returns it.
    @discardableResult
    mutating func removeOperation(at index: Int) -> QueuedOperation {
        let operation: QueuedOperation
        if index == operations.startIndex {
            operation = operations.removeFirst()
            // The removed ones stay in the slice's storage: copied out once they outnumber the rest.
            if operations.startIndex > 1_024 && operations.startIndex > operations.count {
                operations = ArraySlice(Array(operations))
            }
        } else {
            operation = operations.remove(at: index)
        }
        let key = ItemKey(operation)
        operationIDsByItem[key]?.removeAll { $0 == operation.id }
        if operationIDsByItem[key]?.isEmpty == true { operationIDsByItem[key] = nil }
        return operation
    }

    /// Puts `operation` in the place of the one with its id.
    mutating func replaceOperation(at index: Int, with operation: QueuedOperation) {
        // The same operation of the same item (an update of its state, say): in place.
        if operations[index].id == operation.id && ItemKey(operations[index]) == ItemKey(operation) {
            operations[index] = operation
        } else {
            removeOperation(at: index)
            insertOperation(operation)
        }
    }

    /// The index of operation `id` in ``operations``, found by binary search.
    func operationIndex(of id: Int64) -> Int? {
        let low = firstOperationIndex(notBefore: id)
        return low < operations.endIndex && operations[low].id == id ? low : nil
    }

    /// The index of the first operation whose id is greater than `id` (the end when none is).
    func firstOperationIndex(after id: Int64) -> Int {
        id == .max ? operations.endIndex : firstOperationIndex(notBefore: id + 1)
    }

    /// The index of the first operation whose id is at least `id`, by binary search.
    private func firstOperationIndex(notBefore id: Int64) -> Int {
        var low = operations.startIndex
        var high = operations.endIndex
        while low < high {
            let middle = low + (high - low) / 2
            if operations[middle].id < id { low = middle + 1 } else { high = middle }
        }
        return low
    }
}

struct MemoryReader: StoreReader {
    let state: MemoryState

    func item(_ table: String, id: String) throws -> JSONObject? {
        state.tables[table]?[ItemID.Key(id)]
    }

    func query(_ table: String, _ query: TableQuery) throws -> QueryResult {
        let schema = state.definitions[table]?.schema ?? .schemaless
        try StoreValidation.validate(query, schema: schema)
        do {
            return try QueryEvaluator(schema: schema).evaluate(query, over: (state.tables[table] ?? [:]).values)
        } catch {
            throw StoreError(.invalidQuery, error.description, underlying: error)
        }
    }

    func count(_ table: String) throws -> Int {
        state.tables[table]?.count ?? 0
    }

    func tableNames() throws -> [String] {
        Set(state.tables.filter { !$0.value.isEmpty }.keys).union(state.definitions.keys).sorted()
    }

    func definition(of table: String) throws -> TableDefinition? {
        state.definitions[table]
    }

    func operations(after afterID: Int64?, table: String?, limit: Int?) throws -> [QueuedOperation] {
        var result: [QueuedOperation] = []
        let start = afterID.map { state.firstOperationIndex(after: $0) } ?? state.operations.startIndex
        for operation in state.operations[start...] {
            if let table, operation.table != table { continue }
            if let limit, result.count >= limit { break }
            result.append(operation)
        }
        return result
    }

    func operations(table: String, itemID: String) throws -> [QueuedOperation] {
        state.operations(table: table, itemID: itemID)
    }

    func operation(id: Int64) throws -> QueuedOperation? {
        state.operationIndex(of: id).map { state.operations[$0] }
    }

    func operationCount(table: String?) throws -> Int {
        guard let table else { return state.operations.count }
        return state.operations.lazy.filter { $0.table == table }.count
    }

    func operationErrors(table: String?) throws -> [OperationErrorRecord] {
        guard let table else { return state.errors }
        return state.errors.filter { $0.table == table }
    }

    func operationError(id: String) throws -> OperationErrorRecord? {
        state.errors.first { $0.id == id }
    }

    func deltaToken(table: String, queryID: String) throws -> String? {
        state.tokens[table]?[queryID]
    }

    func deltaTokens(table: String) throws -> [String: String] {
        state.tokens[table] ?? [:]
    }
}

/// A write transaction over the store's state, with an undo log.
final class MemoryTransaction: StoreTransaction {
    var state: MemoryState
    var isFinished = false
    private var undo: [(inout MemoryState) -> Void] = []

    init(state: MemoryState) {
        self.state = state
    }

    func rollBack() {
        for step in undo.reversed() { step(&state) }
        undo.removeAll()
    }

    private func checkActive() throws(StoreError) {
        if isFinished {
            throw StoreError(.closed, "a transaction handle was used after its transaction ended")
        }
    }

    private var reader: MemoryReader { MemoryReader(state: state) }

    // MARK: Reads

    func item(_ table: String, id: String) throws -> JSONObject? {
        try checkActive()
        return state.tables[table]?[ItemID.Key(id)]
    }

    func query(_ table: String, _ query: TableQuery) throws -> QueryResult {
        try checkActive()
        return try reader.query(table, query)
    }

    func count(_ table: String) throws -> Int {
        try checkActive()
        return state.tables[table]?.count ?? 0
    }

    func tableNames() throws -> [String] {
        try checkActive()
        return try reader.tableNames()
    }

    func definition(of table: String) throws -> TableDefinition? {
        try checkActive()
        return state.definitions[table]
    }

    func operations(after afterID: Int64?, table: String?, limit: Int?) throws -> [QueuedOperation] {
        try checkActive()
        return try reader.operations(after: afterID, table: table, limit: limit)
    }

    func operations(table: String, itemID: String) throws -> [QueuedOperation] {
        try checkActive()
        return try reader.operations(table: table, itemID: itemID)
    }

    func operation(id: Int64) throws -> QueuedOperation? {
        try checkActive()
        return try reader.operation(id: id)
    }

    func operationCount(table: String?) throws -> Int {
        try checkActive()
        return try reader.operationCount(table: table)
    }

    func operationErrors(table: String?) throws -> [OperationErrorRecord] {
        try checkActive()
        return try reader.operationErrors(table: table)
    }

    func operationError(id: String) throws -> OperationErrorRecord? {
        try checkActive()
        return try reader.operationError(id: id)
    }

    func deltaToken(table: String, queryID: String) throws -> String? {
        try checkActive()
        return state.tokens[table]?[queryID]
    }

    func deltaTokens(table: String) throws -> [String: String] {
        try checkActive()
        return state.tokens[table] ?? [:]
    }

    // MARK: Writes

    func define(_ definition: TableDefinition) throws {
        try checkActive()
        try StoreValidation.validateStoredTableName(definition.name)
        let previous = state.definitions[definition.name]
        state.definitions[definition.name] = definition
        undo.append { $0.definitions[definition.name] = previous }
    }

    func upsert(_ table: String, _ items: [JSONObject]) throws {
        try checkActive()
        try StoreValidation.validateStoredTableName(table)
        // Validate everything first so that a bad item leaves nothing half-written.
        let ids = try items.map { item throws(StoreError) in try StoreValidation.validatedID(of: item, table: table) }
        if state.tables[table] == nil {
            state.tables[table] = [:]
            undo.append { $0.tables[table] = nil }
        }
        for (id, item) in zip(ids, items) {
            let key = ItemID.Key(id)
            let previous = state.tables[table]![key]
            state.tables[table]![key] = item
            undo.append { $0.tables[table]?[key] = previous }
        }
    }

    @discardableResult
    func delete(_ table: String, ids: [String]) throws -> Int {
        try checkActive()
        var deleted = 0
        for id in ids {
            guard let previous = state.tables[table]?.removeValue(forKey: ItemID.Key(id)) else { continue }
            deleted += 1
            undo.append { $0.tables[table]?[ItemID.Key(id)] = previous }
        }
        return deleted
    }

    func appendOperation(_ draft: OperationDraft) throws -> QueuedOperation {
        try checkActive()
        try StoreValidation.validateTableName(draft.table)
        let previousLast = state.lastOperationID
        state.lastOperationID += 1
        let operation = QueuedOperation(id: state.lastOperationID, draft: draft)
        state.insertOperation(operation)
        undo.append { state in
            state.lastOperationID = previousLast
            if let index = state.operationIndex(of: operation.id) { state.removeOperation(at: index) }
        }
        return operation
    }

    func updateOperation(_ operation: QueuedOperation) throws {
        try checkActive()
        guard let index = state.operationIndex(of: operation.id) else {
            throw StoreError(.notFound, "no queued operation with id \(operation.id)")
        }
        let previous = state.operations[index]
        state.replaceOperation(at: index, with: operation)
        undo.append { state in
            if let index = state.operationIndex(of: previous.id) { state.replaceOperation(at: index, with: previous) }
        }
    }

    func deleteOperations(ids: [Int64]) throws {
        try checkActive()
        for id in ids {
            guard let index = state.operationIndex(of: id) else { continue }
            let previous = state.removeOperation(at: index)
            undo.append { state in state.insertOperation(previous) }
        }
    }

    func saveOperationError(_ error: OperationErrorRecord) throws {
        try checkActive()
        let snapshot = state.errors
        if let index = state.errors.firstIndex(where: { $0.id == error.id }) {
            state.errors[index] = error
        } else {
            state.errors.append(error)
        }
        undo.append { $0.errors = snapshot }
    }

    func deleteOperationErrors(ids: [String]) throws {
        try checkActive()
        let remove = Set(ids)
        let snapshot = state.errors
        state.errors.removeAll { remove.contains($0.id) }
        undo.append { $0.errors = snapshot }
    }

    func setDeltaToken(table: String, queryID: String, value: String?) throws {
        try checkActive()
        let previous = state.tokens[table]?[queryID]
        state.tokens[table, default: [:]][queryID] = value
        undo.append { $0.tokens[table, default: [:]][queryID] = previous }
    }
}
