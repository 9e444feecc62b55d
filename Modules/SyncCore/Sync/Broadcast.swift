import Synchronization

/// Hands each element to every stream open at the time: SyncCore's one fan-out. It is behind
/// ``SyncContext/events(bufferingNewest:)`` and ``SyncContext/undecodableItemReports(bufferingNewest:)``,
/// `WatchedValue` (the sync status, hand-set connectivity) and ``StoreCommits`` (a store's commits,
/// each subscriber filtering the tables it watches).
///
/// Each stream keeps the newest `limit` elements its reader has not taken yet. A stream leaves the
/// broadcast when its reader drops it (or its task is cancelled); every stream finishes when the
/// broadcast goes away.
final class Broadcast<Element: Sendable>: Sendable {
    /// One open stream, whatever it yields.
    private struct Subscriber: Sendable {
        /// Yields what the stream makes of an element (maybe nothing).
        let yield: @Sendable (Element) -> Void
        let finish: @Sendable () -> Void
    }

    private struct Subscribers {
        var nextID = 0
        var open: [Int: Subscriber] = [:]
    }

    private let subscribers = Mutex(Subscribers())

    init() {}

    /// A new stream of the elements yielded from now on.
    func stream(bufferingNewest limit: Int) -> AsyncStream<Element> {
        stream(bufferingNewest: limit) { $0 }
    }

    /// A new stream of what `transform` makes of each element yielded from now on; an element it
    /// maps to `nil` is not for this stream. `first`, when given, is the stream's first element: it
    /// is yielded before any element the broadcast yields after the stream opened.
    func stream<Output: Sendable>(
        bufferingNewest limit: Int, startingWith first: Output? = nil,
        _ transform: @escaping @Sendable (Element) -> Output?
    ) -> AsyncStream<Output> {
        let (stream, continuation) = AsyncStream<Output>.makeStream(bufferingPolicy: .bufferingNewest(limit))
        let subscriber = Subscriber(
            yield: { element in
                if let output = transform(element) { continuation.yield(output) }
            },
            finish: { continuation.finish() })
        let id = subscribers.withLock { state in
            state.nextID += 1
            state.open[state.nextID] = subscriber
            if let first { continuation.yield(first) }
            return state.nextID
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.subscribers.withLock { $0.open.removeValue(forKey: id) }
        }
        return stream
    }

    /// Hands `element` to every open stream.
    func yield(_ element: Element) {
        let open = subscribers.withLock { Array($0.open.values) }
        for subscriber in open { subscriber.yield(element) }
    }

    /// How many streams are open.
    var subscriberCount: Int { subscribers.withLock { $0.open.count } }

    /// Finishes every open stream.
    func finish() {
        let open = subscribers.withLock { state in
            defer { state.open = [:] }
            return Array(state.open.values)
        }
        for subscriber in open { subscriber.finish() }
    }

    deinit { finish() }
}

/// A value and whoever watches it: a watcher gets the value now, then each new one (the newest
/// only when it falls behind), until it drops its stream. A ``Broadcast`` that starts each stream
/// with the current value.
final class WatchedValue<Value: Sendable & Equatable>: Sendable {
    private let current: Mutex<Value>
    private let watchers = Broadcast<Value>()

    init(_ value: Value) { current = Mutex(value) }

    var value: Value { current.withLock { $0 } }

    /// Changes the value, and tells the watchers when it changed; whether it did.
    @discardableResult
    func update(_ change: (inout Value) -> Void) -> Bool {
        current.withLock { value in
            var next = value
            change(&next)
            guard next != value else { return false }
            value = next
            // Told under the lock: updates reach a watcher in their order, so the newest comes last.
            watchers.yield(next)
            return true
        }
    }

    /// The value now, then each change; a reader that falls behind gets the newest `limit` values
    /// it has not taken (the newest alone by default; tests keep every one).
    func watch(bufferingNewest limit: Int = 1) -> AsyncStream<Value> {
        // Opened under the lock: no update falls between the value a watcher starts with and the
        // updates it is told of.
        current.withLock { value in watchers.stream(bufferingNewest: limit, startingWith: value) { $0 } }
    }
}
