import ServerStorageCore
import Synchronization

/// The tables writes have created, counted against ``RequestLimits/maximumDynamicTables``.
///
/// Why a bound: dynamic tables are on by default and any caller may create one with its first
/// insert; each is a database table with its indexes, which every connection parses when it
/// opens. 10,000 of them, created by anonymous inserts in under a minute, made a server take 4.4 s
/// to start and hold 290 MB (0.2 s and 52 MB without them).
///
/// The names are read from the storage once, then kept. A name is counted when its first insert
/// is admitted, before that insert commits, so that a batch of inserts into a thousand new tables
/// cannot pass the bound by being checked before any of them exists. When the bound is reached,
/// the names are read again (at most once a second): that forgets names whose first insert
/// failed, and sees tables other instances created.
final class DynamicTables: Sendable {
    private struct State {
        var names: Set<String> = []
        /// The names by their lower case; of names that differ only in case, the first in order.
        var byLowerCase: [String: String] = [:]
        var loaded = false
        var readAt: ContinuousClock.Instant?
        /// The table each name an insert named was claimed as (``claimed(_:storage:)``).
        var claimed: [String: String] = [:]
    }

    private let state = Mutex(State())
    /// Tables not counted: the declared ones and the storage's own.
    private let uncounted: Set<String>
    let limit: Int

    init(declared: some Sequence<String>, limit: Int) {
        uncounted = Set(declared).union([StorageTable.attachmentsTableName])
        self.limit = limit
    }

    /// Whether an insert into `name` may go ahead: the table is declared, exists, or fits in the
    /// bound (it is then counted).
    func admit(_ name: String, storage: any ServerStorage) async throws -> Bool {
        if uncounted.contains(name) { return true }
        let now = ContinuousClock.now
        let known: Bool? = state.withLock { state in
            guard state.loaded else { return nil }
            if Self.admit(name, into: &state, limit: limit) { return true }
            // Full: read the names again, unless they were read within the last second.
            if let readAt = state.readAt, now - readAt < .seconds(1) { return false }
            return nil
        }
        if let known { return known }
        try await reload(storage, at: now)
        return state.withLock { Self.admit(name, into: &$0, limit: limit) }
    }

    /// The table that is `name` but for the case of its letters (`TodoItem` for `todoitem`), or
    /// `nil` when `name` itself is a table, or no table matches: then `name` is what it is.
    ///
    /// A name not known is looked for in the storage again at most once a second, so a table
    /// another instance created is found within a second.
    func storedName(matching name: String, storage: any ServerStorage) async throws -> String? {
        if uncounted.contains(name) { return nil }
        let now = ContinuousClock.now
        let lowered = name.lowercased()
        let known: String?? = state.withLock { state in
            guard state.loaded else { return .none }
            if state.names.contains(name) { return .some(nil) }
            if let match = state.byLowerCase[lowered] { return .some(match) }
            if let readAt = state.readAt, now - readAt < .seconds(1) { return .some(nil) }
            return .none
        }
        if let known { return known }
        try await reload(storage, at: now)
        return state.withLock { state in
            state.names.contains(name) ? nil : state.byLowerCase[lowered]
        }
    }

    /// The table an admitted insert into `name` writes to: the storage's claim of the name
    /// (``ServerStorage/claimTable(_:)``), asked once per name and remembered. Resolving a name by
    /// the names read before left a window: inserts racing into a new table as `RACE0X` and
    /// `race0x` made two tables, and rows acknowledged in one could not be read through the other.
    func claimed(_ name: String, storage: any ServerStorage) async throws -> String {
        if uncounted.contains(name) { return name }
        if let known = state.withLock({ $0.claimed[name] }) { return known }
        let table = try await storage.claimTable(name)
        state.withLock { state in
            state.claimed[name] = table
            state.names.insert(table)
            if table != name {
                // `name` is no table (its admission counted it): reads of it reach `table`.
                state.names.remove(name)
                state.byLowerCase[name.lowercased()] = table
            }
        }
        return table
    }

    private func reload(_ storage: any ServerStorage, at now: ContinuousClock.Instant) async throws {
        let stored = try await storage.tableNames().filter { !uncounted.contains($0) }.sorted()
        state.withLock { state in
            state.names = Set(stored)
            state.byLowerCase = Dictionary(
                stored.map { ($0.lowercased(), $0) }, uniquingKeysWith: { first, _ in first })
            state.loaded = true
            state.readAt = now
        }
    }

    private static func admit(_ name: String, into state: inout State, limit: Int) -> Bool {
        if state.names.contains(name) { return true }
        guard state.names.count < limit else { return false }
        state.names.insert(name)
        if state.byLowerCase[name.lowercased()] == nil { state.byLowerCase[name.lowercased()] = name }
        return true
    }
}
