import ServerStorageSQLite
import Synchronization

/// SQLite's writer held in a transaction until released: a storage made busy on purpose.
///
/// ```swift
/// let storage = try HeldWriter.storageQuicklyBusy()
/// let held = await HeldWriter.hold(storage)
/// // a write now waits 0.2 s for the writer, then fails `busy`
/// try await held.release()
/// ```
struct HeldWriter {
    private let state = HolderState()
    private let task: Task<Void, any Error>

    private init(_ storage: SQLiteServerStorage) {
        let state = state
        task = Task {
            try await storage.transaction {
                state.update { $0.entered = true }
                while !state.read(\.released) { try? await Task.sleep(for: .milliseconds(5)) }
            }
        }
    }

    /// Returns once `storage`'s writer is held.
    static func hold(_ storage: SQLiteServerStorage) async -> HeldWriter {
        let held = HeldWriter(storage)
        while !held.state.read(\.entered) { try? await Task.sleep(for: .milliseconds(5)) }
        return held
    }

    /// Ends the transaction that holds the writer, and waits for it.
    func release() async throws {
        state.update { $0.released = true }
        try await task.value
    }

    /// An in-memory storage whose writes give up after 0.2 s of waiting for the writer.
    static func storageQuicklyBusy() throws -> SQLiteServerStorage {
        var configuration = SQLiteServerStorage.Configuration()
        configuration.busyTimeout = 0.2
        return try SQLiteServerStorage(location: .memory, configuration: configuration)
    }
}

private final class HolderState: Sendable {
    private let state = Mutex<(entered: Bool, released: Bool)>((false, false))

    func update(_ change: (inout (entered: Bool, released: Bool)) -> Void) { state.withLock { change(&$0) } }
    func read(_ part: KeyPath<(entered: Bool, released: Bool), Bool>) -> Bool { state.withLock { $0[keyPath: part] } }
}
