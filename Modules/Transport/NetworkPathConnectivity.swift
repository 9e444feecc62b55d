#if canImport(Network)
    import Dispatch
    import Network
    public import SyncCore

    /// The device's connectivity as `NWPathMonitor` reports it (Apple platforms), for automatic sync.
    ///
    /// ```swift
    /// await context.startAutomaticSync(
    ///     [SyncSubscription(table: "todo")], connectivity: NetworkPathConnectivity())
    /// ```
    public final class NetworkPathConnectivity: ConnectivityMonitor {
        public init() {}

        public func paths() -> AsyncStream<Bool> {
            AsyncStream(bufferingPolicy: .bufferingNewest(1)) { continuation in
                nonisolated(unsafe) let monitor = NWPathMonitor()
                monitor.pathUpdateHandler = { path in continuation.yield(path.status == .satisfied) }
                continuation.onTermination = { _ in monitor.cancel() }
                monitor.start(queue: DispatchQueue(label: "ferry.network-path"))
            }
        }
    }
#endif
