package import SyncCore
package import Tracing

/// A storage whose every call is a span: `storage.query`, `storage.insert`, `storage.transaction`
/// … (the method's name), a child of the task's current span, with the Ferry table it works on
/// (`ferry.table`) and, for a query, the rows it returned (`ferry.storage.rows`). The backend's
/// statements, when it traces them (its configuration's `tracer`), are children of that span.
///
/// The reference server wraps its storage in one when its configuration has a tracer. Calls are
/// passed on unchanged: the wrapped storage still sees its own transactions (they are task-local).
///
/// ```swift
/// let traced = TracedServerStorage(storage, tracer: tracer)
/// _ = try await traced.insert(into: todo, id: "1", content: [:], owner: nil)   // span storage.insert
/// ```
package struct TracedServerStorage: ServerStorage {
    /// The storage that does the work.
    package let base: any ServerStorage
    package let tracer: any Tracer

    package init(_ base: any ServerStorage, tracer: any Tracer) {
        self.base = base
        self.tracer = tracer
    }

    private func span<T>(
        _ name: String, table: String? = nil, _ body: (any Span) async throws -> T
    ) async throws -> T {
        try await StorageSpans.run(tracer, "storage." + name) { span in
            if let table { span.attributes["ferry.table"] = table }
            return try await body(span)
        }
    }

    package var location: String { base.location }

    package func prepare(_ tables: [StorageTable]) async throws {
        try await span("prepare") { _ in try await base.prepare(tables) }
    }

    package func tableNames() async throws -> [String] {
        try await span("tableNames") { _ in try await base.tableNames() }
    }

    package func claimTable(_ name: String) async throws -> String {
        try await span("claimTable", table: name) { _ in try await base.claimTable(name) }
    }

    package func tableExists(_ table: String) async throws -> Bool {
        try await span("tableExists", table: table) { _ in try await base.tableExists(table) }
    }

    package func tableStamps(named names: Set<String>?, changedSince: Int64?) async throws -> [StorageChange] {
        try await span("tableStamps") { _ in try await base.tableStamps(named: names, changedSince: changedSince) }
    }

    package func item(in table: StorageTable, id: String, owner: OwnerScope) async throws -> StoredItem? {
        try await span("item", table: table.name) { _ in try await base.item(in: table, id: id, owner: owner) }
    }

    package func query(_ table: StorageTable, _ query: StorageQuery) async throws -> StoragePage {
        try await span("query", table: table.name) { span in
            let page = try await base.query(table, query)
            span.attributes["ferry.storage.rows"] = page.items.count
            return page
        }
    }

    package func insert(into table: StorageTable, id: String, content: JSONObject, owner: String?) async throws
        -> StoredItem
    {
        try await span("insert", table: table.name) { _ in
            try await base.insert(into: table, id: id, content: content, owner: owner)
        }
    }

    /// One span, `storage.insertSet`, for the whole set: its rows (`ferry.storage.rows`) and the
    /// rows refused with a conflict (`ferry.storage.conflicts`, an outcome, not a fault).
    package func insert(into table: StorageTable, _ rows: [StorageInsert]) async throws
        -> [Result<StoredItem, StorageError>]
    {
        try await span("insertSet", table: table.name) { span in
            span.attributes["ferry.storage.rows"] = rows.count
            let results = try await base.insert(into: table, rows)
            var conflicts = 0
            for case .failure(let error) in results where error.code == .conflict { conflicts += 1 }
            span.attributes["ferry.storage.conflicts"] = conflicts
            return results
        }
    }

    package func replace(
        in table: StorageTable, id: String, expectedVersion: Int64, content: JSONObject, deleted: Bool,
        owner: OwnerScope
    ) async throws -> StoredItem {
        try await span("replace", table: table.name) { _ in
            try await base.replace(
                in: table, id: id, expectedVersion: expectedVersion, content: content, deleted: deleted, owner: owner)
        }
    }

    package func delete(from table: StorageTable, id: String, expectedVersion: Int64, owner: OwnerScope)
        async throws
    {
        try await span("delete", table: table.name) { _ in
            try await base.delete(from: table, id: id, expectedVersion: expectedVersion, owner: owner)
        }
    }

    package func changes() -> AsyncStream<StorageChange> { base.changes() }

    package func recordedOutcome(scope: String, key: String) async throws -> RecordedOutcome? {
        try await span("recordedOutcome") { _ in try await base.recordedOutcome(scope: scope, key: key) }
    }

    package func lockTables(_ tables: [String]) async throws {
        try await span("lockTables") { _ in try await base.lockTables(tables) }
    }

    package func claimOutcome(scope: String, key: String) async throws -> RecordedOutcome? {
        try await span("claimOutcome") { _ in try await base.claimOutcome(scope: scope, key: key) }
    }

    package func claimOutcomes(scope: String, keys: [String]) async throws -> [String: RecordedOutcome] {
        try await span("claimOutcomes") { _ in try await base.claimOutcomes(scope: scope, keys: keys) }
    }

    package func recordOutcomes(_ outcomes: [RecordedOutcome]) async throws -> [RecordedOutcome] {
        try await span("recordOutcomes") { _ in try await base.recordOutcomes(outcomes) }
    }

    @discardableResult
    package func recordOutcome(_ outcome: RecordedOutcome) async throws -> RecordedOutcome {
        try await span("recordOutcome") { _ in try await base.recordOutcome(outcome) }
    }

    @discardableResult
    package func forgetOutcomes(recordedBefore milliseconds: Int64) async throws -> Int {
        try await span("forgetOutcomes") { _ in try await base.forgetOutcomes(recordedBefore: milliseconds) }
    }

    package func transaction<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
        try await span("transaction") { _ in try await base.transaction(body) }
    }

    package func exclusiveTransaction<T: Sendable>(
        _ lock: StorageLock, _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        try await span("exclusiveTransaction") { _ in try await base.exclusiveTransaction(lock, body) }
    }

    package func close() async throws { try await base.close() }
}
