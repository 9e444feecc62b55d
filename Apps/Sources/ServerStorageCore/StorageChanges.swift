public import SyncCore
import Synchronization

/// One announcement of a storage's change stream: table ``table`` changed, and its newest write is
/// now ``version`` at ``updatedAt``.
///
/// ```swift
/// for await change in storage.changes() {
///     print("\(change.table) changed up to version \(change.version)")
/// }
/// ```
public struct StorageChange: Sendable, Hashable, CustomStringConvertible {
    /// The table's name.
    public var table: String
    /// The table's write sequence after the change (``StoredItem/version`` of the newest write).
    public var version: Int64
    /// The table's newest `updatedAt` after the change.
    public var updatedAt: Timestamp

    /// An announcement; see the properties.
    public init(table: String, version: Int64, updatedAt: Timestamp) {
        self.table = table
        self.version = version
        self.updatedAt = updatedAt
    }

    public var description: String { "\(table)@\(version)" }
}

/// The fan-out behind a storage's ``ServerStorage/changes()``: every subscriber gets every
/// announcement published after it subscribed, until ``finish()``.
///
/// ```swift
/// let changes = StorageChanges()
/// let stream = changes.subscribe()
/// changes.publish(StorageChange(table: "todo", version: 1, updatedAt: Timestamp(millisecondsSince1970: 0)))
/// changes.finish()
/// for await change in stream { print(change) }   // todo@1
/// ```
public final class StorageChanges: Sendable {
    /// The most announcements kept for one subscriber that does not read them.
    public static let bufferLimit = 10_000

    private struct State {
        var next = 0
        var subscribers: [Int: AsyncStream<StorageChange>.Continuation] = [:]
        var finished = false
    }

    private let state = Mutex(State())

    /// An empty fan-out.
    public init() {}

    /// A new subscriber's stream.
    public func subscribe() -> AsyncStream<StorageChange> {
        let (stream, continuation) = AsyncStream.makeStream(
            of: StorageChange.self, bufferingPolicy: .bufferingNewest(Self.bufferLimit))
        let key: Int? = state.withLock { state in
            if state.finished { return nil }
            defer { state.next += 1 }
            state.subscribers[state.next] = continuation
            return state.next
        }
        guard let key else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.subscribers.removeValue(forKey: key) }
        }
        return stream
    }

    /// Sends `change` to every subscriber.
    public func publish(_ change: StorageChange) {
        let subscribers = state.withLock { Array($0.subscribers.values) }
        for subscriber in subscribers { subscriber.yield(change) }
    }

    /// Ends every stream; later subscribers get an empty one.
    public func finish() {
        let subscribers = state.withLock { state in
            state.finished = true
            defer { state.subscribers = [:] }
            return Array(state.subscribers.values)
        }
        for subscriber in subscribers { subscriber.finish() }
    }
}
