import Synchronization

/// What a storage tells about its waits for shared resources, for the server's metrics.
///
/// A protocol rather than a metrics API: the storage libraries stay free of any metrics backend,
/// and the reference server turns these reports into its `ferry_storage_wait_*` metrics. A server
/// attaches its observer with ``ServerStorage/observe(_:)`` when it starts.
///
/// ```swift
/// struct PrintingObserver: StorageObserver {
///     func waitEnded(_ wait: StorageWait) {
///         print(wait.resource, wait.duration, wait.outcome)   // writer 0.003 seconds acquired
///     }
/// }
/// storage.observe(PrintingObserver())
/// ```
///
/// Reports come from the tasks that waited, at the end of each wait: implementations must be cheap
/// and must not block.
public protocol StorageObserver: Sendable {
    /// A wait for a shared resource ended.
    func waitEnded(_ wait: StorageWait)
}

/// One wait of a storage for a shared resource: a pooled connection, the writer, a place in a
/// group commit.
public struct StorageWait: Sendable, Hashable {
    /// What a storage waits for; a small fixed set, so it can label a metric.
    public struct Resource: Sendable, Hashable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }

        /// The turn of the one writer (SQLite: every write, and on a memory database every read).
        public static let writer = Resource("writer")
        /// A connection of the pool (PostgreSQL).
        public static let connection = Resource("connection")
        /// The turn of an insert in its table's group commit (PostgreSQL).
        public static let insertQueue = Resource("insert_queue")

        public var description: String { name }
    }

    /// How a wait ended.
    public enum Outcome: String, Sendable, Hashable {
        /// The resource was obtained.
        case acquired
        /// The configured wait passed first: the caller failed with `StorageError.Code.busy`.
        case timedOut
        /// The caller was cancelled (its client went away, the server stopped) before it got it.
        case cancelled
    }

    /// What was waited for.
    public var resource: Resource
    /// How long the wait took (zero when the resource was free).
    public var duration: Duration
    /// How it ended.
    public var outcome: Outcome

    public init(resource: Resource, duration: Duration, outcome: Outcome) {
        self.resource = resource
        self.duration = duration
        self.outcome = outcome
    }
}

extension ServerStorage {
    /// Storages without waits to report ignore observers.
    public func observe(_ observer: (any StorageObserver)?) {}

    /// Storages without waits to report have no resources to wait for.
    public var waitResources: [StorageWait.Resource] { [] }
}

/// The observer a storage reports to, replaced by ``ServerStorage/observe(_:)``.
package final class StorageObserverSlot: Sendable {
    private let observer = Mutex<(any StorageObserver)?>(nil)

    package init() {}

    package func set(_ observer: (any StorageObserver)?) { self.observer.withLock { $0 = observer } }

    /// Whether someone listens (measuring a wait is then worth it).
    package var isObserved: Bool { observer.withLock { $0 != nil } }

    package func report(
        _ resource: StorageWait.Resource, since start: ContinuousClock.Instant, _ outcome: StorageWait.Outcome
    ) {
        guard let observer = observer.withLock({ $0 }) else { return }
        observer.waitEnded(StorageWait(resource: resource, duration: ContinuousClock.now - start, outcome: outcome))
    }
}
