import Foundation
import StoreMemory
import StoreConformance
import StoreSQLite
import SyncCore
import SyncTesting
import Synchronization
import Testing

/// The stores every engine test runs on.
enum StoreKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case memory
    case sqliteMemory
    case sqliteFile

    var testDescription: String { rawValue }
}

/// A store for one test, with a way to "restart the app" on the same data.
final class TestStore: Sendable {
    let kind: StoreKind
    let directory: TemporaryDirectory?
    private let current: Mutex<any LocalStore>

    init(_ kind: StoreKind) throws {
        self.kind = kind
        switch kind {
        case .memory:
            directory = nil
            current = Mutex(MemoryStore())
        case .sqliteMemory:
            directory = nil
            current = Mutex(try SQLiteStore.inMemory())
        case .sqliteFile:
            let directory = try TemporaryDirectory()
            self.directory = directory
            current = Mutex(try SQLiteStore(path: directory.path + "/store.ferry"))
        }
    }

    var store: any LocalStore { current.withLock { $0 } }

    /// The store a restarted app would open: the same file reopened, or the same in-memory store
    /// (everything the engine knows lives in the store, so a new context on it is a restart).
    func restart() async throws -> any LocalStore {
        guard let directory else { return store }
        try await store.close()
        let reopened = try SQLiteStore(path: directory.path + "/store.ferry")
        current.withLock { $0 = reopened }
        return reopened
    }

    deinit {
        directory?.remove()
    }
}

/// A device: a store and a context talking to a model server.
struct Device {
    let name: String
    let storage: TestStore
    var context: SyncContext
    let server: ModelServer
    let handler: any ConflictHandler

    init(
        _ name: String = "device", kind: StoreKind, server: ModelServer,
        handler: some ConflictHandler = KeepingConflictHandler()
    ) throws {
        self.name = name
        self.storage = try TestStore(kind)
        self.server = server
        self.handler = handler
        self.context = SyncContext(
            store: storage.store, remote: server.remote(device: name), conflictHandler: handler)
    }

    var store: any LocalStore { storage.store }

    func table(_ name: String = "todo") -> SyncTable { context.table(name) }

    /// A new context on the same store (after reopening it), as after an app restart.
    mutating func restart() async throws {
        let store = try await storage.restart()
        context = SyncContext(store: store, remote: server.remote(device: name), conflictHandler: handler)
    }

    func operations(_ table: String? = nil) async throws -> [QueuedOperation] {
        try await context.queuedOperations(table: table)
    }
}

/// A conflict handler that records what it saw and answers from a script.
final class RecordingConflictHandler: ConflictHandler, Sendable {
    private let state: Mutex<(seen: [SyncConflict], answers: [ConflictResolution])>
    let fallback: ConflictResolution

    init(answers: [ConflictResolution] = [], fallback: ConflictResolution = .keep) {
        state = Mutex(([], answers))
        self.fallback = fallback
    }

    var seen: [SyncConflict] { state.withLock { $0.seen } }

    func resolve(_ conflict: SyncConflict) async throws -> ConflictResolution {
        state.withLock { state in
            state.seen.append(conflict)
            return state.answers.isEmpty ? fallback : state.answers.removeFirst()
        }
    }
}

/// Reads events from `stream` until one satisfies `last` (which is included).
func collect(_ stream: AsyncStream<SyncEvent>, until last: (SyncEvent) -> Bool) async -> [SyncEvent] {
    var events: [SyncEvent] = []
    for await event in stream {
        events.append(event)
        if last(event) { break }
    }
    return events
}

extension JSONObject {
    /// The item without server-owned properties.
    var userFields: JSONObject { filter { !["createdAt", "updatedAt", "version", "deleted"].contains($0.key) } }
}

/// Expects `body` to throw a ``SyncError`` with `code`, and returns it.
@discardableResult
func expectSyncError(
    _ code: SyncError.Code, _ comment: Comment? = nil, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () async throws -> Void
) async -> SyncError? {
    do {
        try await body()
        Issue.record("expected SyncError.\(code)\(comment.map { ": \($0)" } ?? "")", sourceLocation: sourceLocation)
        return nil
    } catch let error as SyncError {
        #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
        return error
    } catch {
        Issue.record("expected SyncError.\(code), got \(error)", sourceLocation: sourceLocation)
        return nil
    }
}

/// A remote table whose every query answers `page` (writes echo, reads find nothing): a server
/// that answers pages some peer would not.
struct FixedPages: RemoteTable {
    let page: @Sendable (TableQuery) -> RemotePage

    func insert(_ item: JSONObject) async throws(RemoteError) -> JSONObject { item }
    func update(_ item: JSONObject, ifVersion version: String?) async throws(RemoteError) -> JSONObject { item }
    func delete(id: String, ifVersion version: String?) async throws(RemoteError) {}
    func item(id: String) async throws(RemoteError) -> JSONObject? { nil }
    func query(_ query: TableQuery) async throws(RemoteError) -> RemotePage { page(query) }
}
