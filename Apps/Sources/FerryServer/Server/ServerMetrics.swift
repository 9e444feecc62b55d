import CoreMetrics
import Metrics
import Prometheus
import ServerStorageCore
import Synchronization

/// The metrics of one server, recorded through the factory its configuration chose (never the
/// process-wide `MetricsSystem`). Every name and label set is listed in docs/server.md; labels take
/// only bounded values: route templates, a fixed set of methods, status codes, declared tables and
/// at most ``MetricsSettings/maximumDynamicTableLabels`` others.
final class ServerMetrics: Sendable {
    /// The registry `/metrics` renders; `nil` for another backend.
    let registry: PrometheusCollectorRegistry?
    let factory: any MetricsFactory

    /// Open connections (`ferry_http_open_connections`).
    let connections: Meter
    /// Connections closed to make room (`reason="evicted"`) or refused (`reason="refused"`).
    let evicted: CoreMetrics.Counter
    let refused: CoreMetrics.Counter
    /// Open change feeds (`ferry_open_change_feeds`).
    let feeds: Meter
    /// `change` events handed to change feeds' connections.
    let feedEvents: CoreMetrics.Counter
    /// From a storage's announcement to its `change` event going out on a feed.
    let fanOut: CoreMetrics.Timer
    /// Requests per batch.
    let batchSizes: Recorder
    /// Writes answered from an idempotency record.
    let replays: CoreMetrics.Counter

    private let declaredTables: Set<String>
    private let maximumDynamicTableLabels: Int
    private let dynamicTables = Mutex<Set<String>>([])
    private let series = Mutex<[SeriesKey: (count: CoreMetrics.Counter, duration: CoreMetrics.Timer)]>([:])
    private let storageErrors = Mutex<[String: CoreMetrics.Counter]>([:])
    let storage: StorageWaitMetrics

    static let requestsTotal = "ferry_http_requests_total"
    static let requestDuration = "ferry_http_request_duration_seconds"
    static let openConnections = "ferry_http_open_connections"
    static let shedConnections = "ferry_http_connections_shed_total"
    static let openFeeds = "ferry_open_change_feeds"
    static let feedEventsTotal = "ferry_change_feed_events_total"
    static let fanOutDuration = "ferry_change_feed_fanout_seconds"
    static let batchRequests = "ferry_batch_requests"
    static let replaysTotal = "ferry_idempotent_replays_total"
    static let storageWait = "ferry_storage_wait_seconds"
    static let storageWaitTimeouts = "ferry_storage_wait_timeouts_total"
    static let storageErrorsTotal = "ferry_storage_errors_total"

    /// The `# HELP` text of each metric (one line; docs/server.md says more).
    static let help: [String: String] = [
        requestsTotal: "HTTP requests answered, by route template, method, status and table.",
        requestDuration:
            "Seconds from a request's head reaching the handler to its answer being ready (a change feed: to its opening).",
        openConnections: "Connections open on the server's port.",
        shedConnections:
            "Connections closed at the connection limit: idle ones evicted to make room, new ones refused.",
        openFeeds: "Change feeds open.",
        feedEventsTotal: "Change events handed to change feeds' connections.",
        fanOutDuration: "Seconds from a storage announcing a write to its change event going out on a feed.",
        batchRequests: "Requests per batch (POST /tables/$batch).",
        replaysTotal: "Writes answered from an idempotency record (Idempotency-Replayed: true).",
        storageWait: "Seconds storage work waited for a shared resource of the storage, timed-out waits included.",
        storageWaitTimeouts: "Waits for a storage resource that gave up: each is a 503 busy.",
        storageErrorsTotal: "Storage failures answered with a 5xx or 507, by storage error code.",
    ]

    /// The label of a request to a table that has none of its own.
    static let otherTable = "_other"

    /// The metrics `settings` ask for, or `nil` when they are off; storage waits are exported for
    /// `waitResources` (the storage's own) only.
    static func make(
        _ settings: MetricsSettings, declaredTables: [String], waitResources: [StorageWait.Resource] = []
    ) -> ServerMetrics? {
        switch settings.backend {
        case .off:
            return nil
        case .factory(let factory):
            return ServerMetrics(
                factory: factory, registry: nil, declaredTables: declaredTables,
                maximumDynamicTableLabels: settings.maximumDynamicTableLabels, waitResources: waitResources)
        case .prometheus(let registry):
            let registry = registry ?? PrometheusCollectorRegistry()
            let milliseconds: [Double] = [1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000]
            let factory = PrometheusHelpFactory(
                registry: registry, help: help,
                durationBuckets: [
                    requestDuration: milliseconds.map { .microseconds(Int64($0 * 1000)) },
                    storageWait: ([0.1, 0.5] + milliseconds.dropLast()).map { .microseconds(Int64($0 * 1000)) },
                    fanOutDuration: milliseconds.dropLast().map { .microseconds(Int64($0 * 1000)) },
                ],
                valueBuckets: [batchRequests: [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000]])
            return ServerMetrics(
                factory: factory, registry: registry, declaredTables: declaredTables,
                maximumDynamicTableLabels: settings.maximumDynamicTableLabels, waitResources: waitResources)
        }
    }

    private init(
        factory: any MetricsFactory, registry: PrometheusCollectorRegistry?, declaredTables: [String],
        maximumDynamicTableLabels: Int, waitResources: [StorageWait.Resource]
    ) {
        self.factory = factory
        self.registry = registry
        self.declaredTables = Set(declaredTables)
        self.maximumDynamicTableLabels = maximumDynamicTableLabels
        connections = Meter(label: Self.openConnections, factory: factory)
        evicted = CoreMetrics.Counter(
            label: Self.shedConnections, dimensions: [("reason", "evicted")], factory: factory)
        refused = CoreMetrics.Counter(
            label: Self.shedConnections, dimensions: [("reason", "refused")], factory: factory)
        feeds = Meter(label: Self.openFeeds, factory: factory)
        feedEvents = CoreMetrics.Counter(label: Self.feedEventsTotal, factory: factory)
        fanOut = CoreMetrics.Timer(label: Self.fanOutDuration, factory: factory)
        batchSizes = Recorder(label: Self.batchRequests, aggregate: true, factory: factory)
        replays = CoreMetrics.Counter(label: Self.replaysTotal, factory: factory)
        storage = StorageWaitMetrics(factory: factory, resources: waitResources)
        // Present from the start (at zero), so that a dashboard and an alert see them before the
        // first event.
        connections.set(0)
        feeds.set(0)
    }

    // MARK: - Requests

    private struct SeriesKey: Hashable {
        var route: String
        var method: String
        var status: Int
        var table: String
    }

    /// Counts a request and records how long it took to answer (for a change feed: to open).
    func request(route: TableRoute, path: String, method: String, status: Int, duration: Duration) {
        let key = SeriesKey(
            route: Self.template(route, path: path), method: Self.methodLabel(method), status: status,
            table: tableLabel(route, method: method, status: status))
        let handles = series.withLock { series in
            if let known = series[key] { return known }
            let dimensions = [
                ("route", key.route), ("method", key.method), ("status", String(key.status)), ("table", key.table),
            ]
            let made = (
                count: CoreMetrics.Counter(label: Self.requestsTotal, dimensions: dimensions, factory: factory),
                duration: CoreMetrics.Timer(label: Self.requestDuration, dimensions: dimensions, factory: factory)
            )
            series[key] = made
            return made
        }
        handles.count.increment()
        handles.duration.record(duration: duration)
    }

    /// The route template of a request: its path with the table and the id left out, so that the
    /// label takes a handful of values whatever clients send.
    static func template(_ route: TableRoute, path: String) -> String {
        if route == .health, TableRequest.segments(of: path)?.count == 2 { return "/health/ready" }
        return route.template ?? "unmatched"
    }

    /// The method, or `OTHER` for one the protocol does not use (methods are any token a client sends).
    static func methodLabel(_ method: String) -> String {
        switch method {
        case "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS": method
        default: "OTHER"
        }
    }

    /// The `table` label: a declared table's name; the name of a table created by writes once a
    /// write to it succeeded, for the first ``MetricsSettings/maximumDynamicTableLabels`` of them;
    /// else `_other` (a made-up name a client only reads gets no label of its own); empty for
    /// routes that are not a table's.
    func tableLabel(_ route: TableRoute, method: String, status: Int) -> String {
        let name: String
        switch route {
        case .table(let table), .item(let table, _): name = table
        default: return ""
        }
        if declaredTables.contains(name) { return name }
        let isWrite = method != "GET" && method != "HEAD"
        let admitted = dynamicTables.withLock { admitted in
            if admitted.contains(name) { return true }
            guard isWrite, (200..<300).contains(status), admitted.count < maximumDynamicTableLabels else {
                return false
            }
            admitted.insert(name)
            return true
        }
        return admitted ? name : Self.otherTable
    }

    // MARK: - Storage

    /// Counts a storage failure the server answered 5xx (busy, unavailable, closed, full, …).
    func storageFailed(_ code: StorageError.Code) {
        let name = code.description
        let counter = storageErrors.withLock { counters in
            if let known = counters[name] { return known }
            let made = CoreMetrics.Counter(
                label: Self.storageErrorsTotal, dimensions: [("code", name)], factory: factory)
            counters[name] = made
            return made
        }
        counter.increment()
    }

    /// The text `/metrics` answers, in the Prometheus text format (version 0.0.4).
    func exposition() -> [UInt8]? { registry?.emitToBuffer() }

    /// The `Content-Type` of ``exposition()``.
    static let expositionType = "text/plain; version=0.0.4; charset=utf-8"
}

/// Storages' waits as `ferry_storage_wait_seconds` and `ferry_storage_wait_timeouts_total`, both
/// labelled by `resource` (`writer`, `connection`, `insert_queue`): the resources the storage has
/// only (a server on PostgreSQL exported SQLite's `writer`, always at zero).
struct StorageWaitMetrics: StorageObserver {
    private let waits: [StorageWait.Resource: (duration: CoreMetrics.Timer, timeouts: CoreMetrics.Counter)]

    init(factory: any MetricsFactory, resources: [StorageWait.Resource]) {
        var waits: [StorageWait.Resource: (duration: CoreMetrics.Timer, timeouts: CoreMetrics.Counter)] = [:]
        for resource in resources {
            let dimensions = [("resource", resource.description)]
            waits[resource] = (
                CoreMetrics.Timer(label: ServerMetrics.storageWait, dimensions: dimensions, factory: factory),
                CoreMetrics.Counter(label: ServerMetrics.storageWaitTimeouts, dimensions: dimensions, factory: factory)
            )
        }
        self.waits = waits
    }

    func waitEnded(_ wait: StorageWait) {
        guard let metrics = waits[wait.resource] else { return }
        switch wait.outcome {
        case .acquired:
            metrics.duration.record(duration: wait.duration)
        case .timedOut:
            metrics.duration.record(duration: wait.duration)
            metrics.timeouts.increment()
        case .cancelled:
            break
        }
    }
}
