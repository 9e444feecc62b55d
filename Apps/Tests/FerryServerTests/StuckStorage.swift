import Foundation
import ServerStorageCore
import Synchronization
import SyncCore

/// A storage whose inserts into the table `stuck` never return, and ignore cancellation: the
/// worst a database driver can do (postgres-nio once lost the wake-up of a statement written to a
/// closing connection). Inserts into `slow` wait until ``proceed()``, then go through. Everything
/// else goes to an in-memory SQLite storage. Queries of the tables given to ``holdQueries(of:)``
/// wait until ``proceed()`` too.
final class StuckStorage: ServerStorage {
    let inner: any ServerStorage
    /// The continuations of stuck inserts, kept so that they are never released unresumed.
    private let stuck = Mutex<[CheckedContinuation<Void, Never>]>([])
    private let slow = Mutex<[CheckedContinuation<Void, Never>]>([])
    private let heldTables = Mutex<Set<String>>([])

    init(_ inner: any ServerStorage) { self.inner = inner }

    /// How many inserts into `cancellable` began (they wait until cancelled).
    var cancellableCount: Int { cancellable.withLock { $0 } }
    private let cancellable = Mutex(0)

    /// How many inserts are stuck now.
    var stuckCount: Int { stuck.withLock { $0.count } }

    /// How many inserts into `slow` wait now.
    var slowCount: Int { slow.withLock { $0.count } }

    /// From now on, queries of `table` wait until ``proceed()`` (counted in ``slowCount``).
    func holdQueries(of table: String) {
        heldTables.withLock { _ = $0.insert(table) }
    }

    /// Lets the waiting inserts into `slow` and held queries go through (queries are held no more).
    func proceed() {
        heldTables.withLock { $0 = [] }
        for continuation in slow.withLock({ state in
            defer { state = [] }
            return state
        }) { continuation.resume() }
    }

    /// Lets the stuck inserts fail at last (at the end of a test).
    func release() {
        for continuation in stuck.withLock({ state in
            defer { state = [] }
            return state
        }) { continuation.resume() }
    }

    var location: String { "stuck:" + inner.location }
    func prepare(_ tables: [StorageTable]) async throws { try await inner.prepare(tables) }
    func tableNames() async throws -> [String] { try await inner.tableNames() }
    func tableExists(_ table: String) async throws -> Bool { try await inner.tableExists(table) }
    func claimTable(_ name: String) async throws -> String { try await inner.claimTable(name) }
    func tableStamps(named names: Set<String>?, changedSince: Int64?) async throws -> [StorageChange] {
        try await inner.tableStamps(named: names, changedSince: changedSince)
    }
    func item(in table: StorageTable, id: String, owner: OwnerScope) async throws -> StoredItem? {
        try await inner.item(in: table, id: id, owner: owner)
    }
    func query(_ table: StorageTable, _ query: StorageQuery) async throws -> StoragePage {
        if heldTables.withLock({ $0.contains(table.name) }) {
            await withCheckedContinuation { continuation in slow.withLock { $0.append(continuation) } }
        }
        return try await inner.query(table, query)
    }
    func insert(into table: StorageTable, id: String, content: JSONObject, owner: String?) async throws -> StoredItem {
        if table.name == "stuck" {
            await withCheckedContinuation { continuation in stuck.withLock { $0.append(continuation) } }
            throw StorageError(.unavailable, "released")
        }
        if table.name == "slow" {
            await withCheckedContinuation { continuation in slow.withLock { $0.append(continuation) } }
        }
        if table.name == "cancellable" {
            // Waits until cancelled, as a storage call waiting for a lock does.
            cancellable.withLock { $0 += 1 }
            try await Task.sleep(for: .seconds(600))
        }
        return try await inner.insert(into: table, id: id, content: content, owner: owner)
    }
    func replace(
        in table: StorageTable, id: String, expectedVersion: Int64, content: JSONObject, deleted: Bool,
        owner: OwnerScope
    ) async throws -> StoredItem {
        try await inner.replace(
            in: table, id: id, expectedVersion: expectedVersion, content: content, deleted: deleted, owner: owner)
    }
    func delete(from table: StorageTable, id: String, expectedVersion: Int64, owner: OwnerScope) async throws {
        try await inner.delete(from: table, id: id, expectedVersion: expectedVersion, owner: owner)
    }
    func changes() -> AsyncStream<StorageChange> { inner.changes() }
    func recordedOutcome(scope: String, key: String) async throws -> RecordedOutcome? {
        try await inner.recordedOutcome(scope: scope, key: key)
    }
    func claimOutcome(scope: String, key: String) async throws -> RecordedOutcome? {
        try await inner.claimOutcome(scope: scope, key: key)
    }
    func recordOutcome(_ outcome: RecordedOutcome) async throws -> RecordedOutcome {
        try await inner.recordOutcome(outcome)
    }
    func forgetOutcomes(recordedBefore milliseconds: Int64) async throws -> Int {
        try await inner.forgetOutcomes(recordedBefore: milliseconds)
    }
    func transaction<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
        try await inner.transaction(body)
    }
    func close() async throws { try await inner.close() }
}
