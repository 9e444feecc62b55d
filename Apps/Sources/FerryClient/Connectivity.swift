import SyncCore
import Synchronization
import Transport

/// A remote that can be switched off, to try offline work on purpose.
final class Connectivity: RemoteService {
    let inner: (any RemoteService)?
    let online = Mutex(true)

    init(_ inner: (any RemoteService)?) { self.inner = inner }

    func table(_ name: String) -> any RemoteTable { GatedTable(name: name, connectivity: self) }

    // The push extensions pass through too: a wrapper that left them to the defaults would push one
    // request per operation, without keys, whatever the server offers.
    func writeCapabilities() async -> RemoteWriteCapabilities {
        guard let inner = try? check() else { return .none }
        return await inner.writeCapabilities()
    }

    func send(_ write: RemoteWrite) async throws(RemoteError) -> JSONObject? {
        try await check().send(write)
    }

    func sendBatch(_ writes: [RemoteWrite]) async throws(RemoteError) -> [Result<JSONObject?, RemoteError>] {
        try await check().sendBatch(writes)
    }

    // So does the change feed.
    func offersChangeFeed() async -> Bool {
        guard let inner = try? check() else { return false }
        return await inner.offersChangeFeed()
    }

    func changeFeed(tables: [String]?, after position: String?) async throws(RemoteError)
        -> AsyncThrowingStream<RemoteChangeEvent, any Error>
    {
        try await check().changeFeed(tables: tables, after: position)
    }

    func check() throws(RemoteError) -> any RemoteService {
        // Nothing leaves the device: the engine puts an operation it tried back to pending.
        guard online.withLock({ $0 }) else {
            throw RemoteError(.network, "the device is offline", underlying: Gate.offline, wasNotSent: true)
        }
        guard let inner else {
            throw RemoteError(.network, "no server is configured", underlying: Gate.noServer, wasNotSent: true)
        }
        return inner
    }

    /// Why ``check()`` let nothing through (or, `noAttachments`, why the server refused a file);
    /// ``ClientError/from(_:)`` picks its hint from it.
    enum Gate: Error, Sendable {
        case offline
        case noServer
        case noAttachments
    }
}

struct GatedTable: RemoteTable {
    let name: String
    let connectivity: Connectivity

    func insert(_ item: JSONObject) async throws(RemoteError) -> JSONObject {
        try await connectivity.check().table(name).insert(item)
    }
    func update(_ item: JSONObject, ifVersion version: String?) async throws(RemoteError) -> JSONObject {
        try await connectivity.check().table(name).update(item, ifVersion: version)
    }
    func delete(id: String, ifVersion version: String?) async throws(RemoteError) {
        try await connectivity.check().table(name).delete(id: id, ifVersion: version)
    }
    func item(id: String) async throws(RemoteError) -> JSONObject? {
        try await connectivity.check().table(name).item(id: id)
    }
    func query(_ query: TableQuery) async throws(RemoteError) -> RemotePage {
        try await connectivity.check().table(name).query(query)
    }
}
