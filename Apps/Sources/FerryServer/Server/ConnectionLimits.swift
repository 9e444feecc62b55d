import CoreMetrics
import NIOCore
import Synchronization

/// Bounds on connections: how long a client may take to send a request, how long an idle
/// connection stays open, and how many connections the server holds at once.
///
/// ```swift
/// var configuration = ServerConfiguration(logger: logger)
/// configuration.connections.idleTimeout = .seconds(10)
/// configuration.connections.maximumConnections = 256
/// ```
///
/// A connection is idle when it has no request in progress and nothing left to write (just opened,
/// or kept alive after the last byte of a response went out); it is closed when no complete request
/// line and headers arrive within ``idleTimeout``, however slowly bytes trickle in. Once a request's
/// headers have arrived, its body must arrive within ``requestTimeout``. While a response is being
/// written, the client must take some of what the server holds for it every ``writeTimeout`` (a
/// reader that stops reading is closed within one to two write timeouts; a slow one that keeps
/// reading gets the whole response, however long it takes).
/// When ``maximumConnections`` are open, a new connection closes the one that has waited longest for
/// a request; only when every connection is busy with a request is the new one refused. So slow or
/// silent clients can hold a connection for a bounded time and cannot keep others out.
public struct ConnectionLimits: Sendable, Hashable {
    /// How long a connection may go without a complete request head: the idle time of a kept-alive
    /// connection, and the time to send a request line and headers (default 30 s).
    public var idleTimeout: Duration
    /// How long the body of a request may take to arrive once its headers have (default 60 s).
    public var requestTimeout: Duration
    /// How long a response may wait for the client to take any of what the server holds for it
    /// (default 60 s; checked every write timeout, so a reader that stopped is closed within one to
    /// two).
    public var writeTimeout: Duration
    /// The most connections open at once (default 16,384: room for the default 10,000 change feeds
    /// and the requests beside them). Each is a file descriptor: the process's open-file limit must
    /// be above it (docs/deploy.md).
    public var maximumConnections: Int

    public init(
        idleTimeout: Duration = .seconds(30), requestTimeout: Duration = .seconds(60),
        writeTimeout: Duration = .seconds(60), maximumConnections: Int = 16_384
    ) {
        self.idleTimeout = idleTimeout
        self.requestTimeout = requestTimeout
        self.writeTimeout = writeTimeout
        self.maximumConnections = maximumConnections
    }

    func validate() throws(ConfigurationError) {
        guard idleTimeout >= .milliseconds(10), requestTimeout >= .milliseconds(10), writeTimeout >= .milliseconds(10)
        else {
            throw ConfigurationError("the idle, request and write timeouts must be at least 10 ms")
        }
        guard maximumConnections >= 1 else { throw ConfigurationError("maximumConnections must be at least 1") }
    }
}

/// The open connections of one server, and which of them are waiting for a request.
final class ConnectionRegistry: Sendable {
    private struct Entry {
        let channel: any Channel
        /// When the connection started waiting for its next request; `nil` while it has one.
        var waitingSince: NIODeadline?
    }

    private struct State {
        var nextID = 0
        var entries: [Int: Entry] = [:]
    }

    let maximum: Int
    private let state = Mutex(State())
    /// The server's metrics (open connections, and those shed; requests answered beneath the HTTP
    /// handlers, such as `CONNECT`), when they are on.
    let metrics: ServerMetrics?

    init(maximum: Int, metrics: ServerMetrics? = nil) {
        self.maximum = maximum
        self.metrics = metrics
    }

    /// Registers a new connection. At the limit, the connection that has waited longest for a request
    /// makes room (it is returned, to be closed); when none is waiting, the new one is refused (`nil`).
    func open(_ channel: any Channel) -> (id: Int, evicted: (any Channel)?)? {
        state.withLock { state in
            var evicted: (any Channel)?
            if state.entries.count >= maximum {
                let oldest = state.entries.compactMap { key, entry in entry.waitingSince.map { (key, $0) } }
                    .min { $0.1 < $1.1 }
                guard let (key, _) = oldest else {
                    metrics?.refused.increment()
                    return nil
                }
                evicted = state.entries.removeValue(forKey: key)?.channel
                metrics?.evicted.increment()
            }
            let id = state.nextID
            state.nextID += 1
            state.entries[id] = Entry(channel: channel, waitingSince: .now())
            // Set under the lock, so that the gauge follows the registry in order.
            metrics?.connections.set(state.entries.count)
            return (id, evicted)
        }
    }

    func setWaiting(_ id: Int, since: NIODeadline?) {
        state.withLock { state in state.entries[id]?.waitingSince = since }
    }

    func close(_ id: Int) {
        state.withLock { state in
            guard state.entries.removeValue(forKey: id) != nil else { return }
            metrics?.connections.set(state.entries.count)
        }
    }
}
