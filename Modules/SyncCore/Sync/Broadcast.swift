import Synchronization

/// Hands each element to every stream open at the time: the fan-out behind
/// ``SyncContext/events(bufferingNewest:)`` and ``SyncContext/undecodableItemReports(bufferingNewest:)``.
/// Each stream keeps the newest `limit` elements its reader has not taken yet; the streams finish
/// when the broadcast goes away.
final class Broadcast<Element: Sendable>: Sendable {
    private struct Subscribers {
        var nextID = 0
        var continuations: [Int: AsyncStream<Element>.Continuation] = [:]
    }

    private let subscribers = Mutex(Subscribers())

    init() {}

    /// A new stream of the elements yielded from now on.
    func stream(bufferingNewest limit: Int) -> AsyncStream<Element> {
        let (stream, continuation) = AsyncStream<Element>.makeStream(bufferingPolicy: .bufferingNewest(limit))
        let id = subscribers.withLock { state in
            state.nextID += 1
            state.continuations[state.nextID] = continuation
            return state.nextID
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.subscribers.withLock { $0.continuations.removeValue(forKey: id) }
        }
        return stream
    }

    func yield(_ element: Element) {
        let continuations = subscribers.withLock { Array($0.continuations.values) }
        for continuation in continuations { continuation.yield(element) }
    }

    /// Finishes every open stream.
    func finish() {
        let continuations = subscribers.withLock { state in
            defer { state.continuations = [:] }
            return Array(state.continuations.values)
        }
        for continuation in continuations { continuation.finish() }
    }

    deinit { finish() }
}
