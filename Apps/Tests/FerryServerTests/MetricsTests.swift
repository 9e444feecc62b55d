import FerryServer
import Foundation
import Prometheus
import ServerStorageCore
import ServerStorageSQLite
import ServerTestSupport
import SyncCore
import Synchronization
import Testing
import Transport

/// Issue 31: the server's metrics through swift-metrics into a Prometheus registry of each server's
/// own, scraped over HTTP at `/metrics` after known traffic.
@Suite("Metrics (GET /metrics)", .timeLimit(.minutes(5)))
struct MetricsTests {
    /// Starts a server on in-memory SQLite with its own registry.
    static func start(
        _ configure: (inout ServerConfiguration) -> Void = { _ in }, storage: (any ServerStorage)? = nil
    ) async throws -> (live: LiveServer, registry: PrometheusCollectorRegistry) {
        let registry = PrometheusCollectorRegistry()
        var configuration = ServerConfiguration(
            host: "127.0.0.1", port: 0, tables: [TableSettings(name: "todo")], logger: .quietTest)
        configuration.metrics.backend = .prometheus(registry)
        configure(&configuration)
        let server = try await ReferenceServer.start(
            configuration, storage: try storage ?? sqliteStorage(.memory, logger: .quietTest),
            ownsStorage: storage == nil)
        return (LiveServer(server: server), registry)
    }

    /// The samples `/metrics` answers now, over HTTP.
    static func scrape(port: Int) async throws -> Samples {
        let response = try await LoopbackHTTP.send(
            port: port, method: "GET", target: "/metrics", headers: [], body: nil)
        #expect(response.status == 200)
        #expect(response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8")
        return try Samples(parsing: String(decoding: response.body, as: UTF8.self))
    }

    /// Scrapes until `condition` holds (the server closes a finished connection just after the
    /// client read its answer), at most 10 s.
    static func scrape(port: Int, until condition: (Samples) -> Bool) async throws -> Samples {
        var samples = try await scrape(port: port)
        for _ in 0..<200 where !condition(samples) {
            try await Task.sleep(for: .milliseconds(50))
            samples = try await scrape(port: port)
        }
        return samples
    }

    static let requests = "ferry_http_requests_total"
    static let durations = "ferry_http_request_duration_seconds_count"

    static func request(_ route: String, _ method: String, _ status: Int, table: String = "") -> [String: String] {
        ["route": route, "method": method, "status": String(status), "table": table]
    }

    @Test func knownTrafficGivesExactCounts() async throws {
        let (live, registry) = try await Self.start()
        #expect(live.server.metricsRegistry === registry)
        let port = live.server.port
        let inserts = 3
        for index in 0..<inserts {
            let reply = try await live.send("POST", "/tables/todo", json: ["id": .string("i\(index)")])
            #expect(reply.status == 201, "\(reply.text)")
        }
        #expect(try await live.send("GET", "/no/such/thing").status == 404)
        #expect(try await live.send("GET", "/tables/todo/i0").status == 200)
        // A batch of 4 (the requests in it are not HTTP requests of their own).
        let batch: JSONValue = [
            "requests": .array(
                (0..<4).map { index in
                    ["id": .string("\(index)"), "method": "POST", "url": "todo", "body": ["id": .string("b\(index)")]]
                })
        ]
        #expect(try await live.send("POST", "/tables/$batch", json: batch).status == 200)
        // The same write twice with one key: applied once, replayed once.
        let key = [("Idempotency-Key", "metrics-key-1")]
        let first = try await live.send("POST", "/tables/todo", headers: key, json: ["id": "k"])
        let again = try await live.send("POST", "/tables/todo", headers: key, json: ["id": "k"])
        #expect(first.status == 201 && again.status == 201)
        #expect(again.header("Idempotency-Replayed") == "true")
        // A table created by a write gets a label of its own; one a client made up to read does not.
        #expect(try await live.send("POST", "/tables/notes", json: ["id": "n"]).status == 201)
        #expect(try await live.send("GET", "/tables/madeup").status == 200)

        let samples = try await Self.scrape(port: port) {
            $0["ferry_http_open_connections"] == 1
        }
        let insert = Self.request("/tables/{table}", "POST", 201, table: "todo")
        #expect(samples[Self.requests, insert] == Double(inserts + 2))
        #expect(samples[Self.durations, insert] == Double(inserts + 2))
        #expect(samples[Self.requests, Self.request("/tables/{table}/{id}", "GET", 200, table: "todo")] == 1)
        #expect(samples[Self.requests, Self.request("unmatched", "GET", 404)] == 1)
        #expect(samples[Self.requests, Self.request("/tables/$batch", "POST", 200)] == 1)
        #expect(samples[Self.requests, Self.request("/tables/{table}", "POST", 201, table: "notes")] == 1)
        #expect(samples[Self.requests, Self.request("/tables/{table}", "GET", 200, table: "_other")] == 1)
        // The scrapes that waited for the connections to close were counted too.
        #expect(samples.total(Self.requests) - samples.scrapes == Double(inserts + 2 + 5), "\(samples.text)")
        #expect(samples["ferry_batch_requests_count"] == 1)
        #expect(samples["ferry_batch_requests_sum"] == 4)
        #expect(samples["ferry_batch_requests_bucket", ["le": "2.0"]] == 0)
        #expect(samples["ferry_batch_requests_bucket", ["le": "5.0"]] == 1)
        #expect(samples["ferry_idempotent_replays_total"] == 1)
        #expect(samples["ferry_open_change_feeds"] == 0)
        #expect(samples.total("ferry_http_connections_shed_total") == 0)
        #expect(samples.total("ferry_storage_errors_total") == 0)
        // Every write waited for SQLite's writer (none gave up).
        let writerWaits = try #require(samples["ferry_storage_wait_seconds_count", ["resource": "writer"]])
        // (Each insert, the batch's transaction, each idempotent write's transaction, the insert into
        // notes; reads of a memory database wait for it too.)
        #expect(writerWaits >= Double(inserts + 1 + 2 + 1))
        #expect(samples["ferry_storage_wait_timeouts_total", ["resource": "writer"]] == 0)
        // The first scrape was counted once it was answered.
        let second = try await Self.scrape(port: port)
        #expect(second[Self.requests, Self.request("/metrics", "GET", 200)] == Double(samples.scrapes + 1))
        try await live.stop()
    }

    @Test func changeFeedsAreCountedOpenAndTheirEventsDelivered() async throws {
        let (live, _) = try await Self.start()
        let port = live.server.port
        let remote = ChangeFeedTests.remote(port)
        #expect(await remote.offersChangeFeed())
        let feed = FeedReader(try await remote.changeFeed(tables: nil, after: nil))
        _ = try await feed.first(1)  // ready
        var samples = try await Self.scrape(port: port) { $0["ferry_open_change_feeds"] == 1 }
        #expect(samples["ferry_open_change_feeds"] == 1)
        #expect(samples[Self.requests, Self.request("/tables/$changes", "GET", 200)] == 1)
        #expect(samples["ferry_change_feed_events_total"] == 0)
        // Two writes, one event each (after the first arrived, so none is folded into the other).
        #expect(try await live.send("POST", "/tables/todo", json: ["id": "a"]).status == 201)
        _ = try await feed.first(2)
        #expect(try await live.send("POST", "/tables/todo", json: ["id": "b"]).status == 201)
        _ = try await feed.first(3)
        samples = try await Self.scrape(port: port)
        #expect(samples["ferry_change_feed_events_total"] == 2)
        #expect(samples["ferry_change_feed_fanout_seconds_count"] == 2)
        feed.stop()
        samples = try await Self.scrape(port: port) { $0["ferry_open_change_feeds"] == 0 }
        #expect(samples["ferry_open_change_feeds"] == 0)
        try await live.stop()
    }

    @Test func madeUpTableNamesShareOneLabel() async throws {
        let (live, _) = try await Self.start { $0.metrics.maximumDynamicTableLabels = 2 }
        for index in 0..<20 {
            #expect(try await live.send("GET", "/tables/guess\(index)").status == 200)
        }
        for name in ["one", "two", "three", "four"] {
            #expect(try await live.send("POST", "/tables/\(name)", json: ["id": "x"]).status == 201)
        }
        let samples = try await Self.scrape(port: live.server.port)
        let tables = Set(samples.values(of: "table", in: Self.requests))
        #expect(tables == ["_other", "one", "two"], "\(tables)")
        #expect(samples[Self.requests, Self.request("/tables/{table}", "GET", 200, table: "_other")] == 20)
        #expect(samples[Self.requests, Self.request("/tables/{table}", "POST", 201, table: "_other")] == 2)
        // Methods are a fixed set too.
        #expect(try await live.send("TRACE", "/tables/todo").status == 405)
        let traced = try await Self.scrape(port: live.server.port)
        #expect(traced[Self.requests, Self.request("/tables/{table}", "OTHER", 405, table: "todo")] == 1)
        try await live.stop()
    }

    /// Each backend reports its waits: SQLite for its writer, PostgreSQL for a pooled connection
    /// and for an insert's turn in its table's group commit.
    @Test(arguments: ServerBackend.allCases)
    func storagesReportTheirWaits(_ backend: ServerBackend) async throws {
        let live = try await LiveServer.start(tables: [TableSettings(name: "todo")], backend: backend)
        for id in ["a", "b", "c"] {
            #expect(try await live.send("POST", "/tables/todo", json: ["id": .string(id)]).status == 201)
        }
        let samples = try await Self.scrape(port: live.server.port)
        // A resource the storage does not have is not exported (-1 here).
        let waits = { (resource: String) in samples["ferry_storage_wait_seconds_count", ["resource": resource]] ?? -1 }
        switch backend {
        case .sqlite:
            #expect(waits("writer") >= 3)
            #expect(waits("connection") == -1 && waits("insert_queue") == -1)
        case .postgreSQL:
            #expect(waits("writer") == -1)
            #expect(waits("connection") >= 3)
            #expect(waits("insert_queue") == 3)
        }
        #expect(samples.total("ferry_storage_wait_timeouts_total") == 0)
        try await live.stop()
    }

    /// A write that waits past SQLite's busy timeout: one wait timed out, one storage error.
    @Test func aWriterTimeoutIsAWaitTimeoutAndAStorageError() async throws {
        let storage = try HeldWriter.storageQuicklyBusy()
        let (live, _) = try await Self.start(storage: storage)
        let held = await HeldWriter.hold(storage)
        let reply = try await live.send("POST", "/tables/todo", json: ["id": "late"])
        #expect(reply.status == 503, "\(reply.text)")
        try await held.release()
        let samples = try await Self.scrape(port: live.server.port)
        #expect(samples["ferry_storage_wait_timeouts_total", ["resource": "writer"]] == 1)
        #expect(samples["ferry_storage_errors_total", ["code": "busy"]] == 1)
        #expect(samples[Self.requests, Self.request("/tables/{table}", "POST", 503, table: "todo")] == 1)
        try await live.stop()
        try await storage.close()
    }

    @Test func aMetricsPortOfItsOwnTakesMetricsOffTheServersPort() async throws {
        let (live, _) = try await Self.start { $0.metrics.endpoint = .separate(host: "127.0.0.1", port: 0) }
        let metricsPort = try #require(live.server.metricsPort)
        #expect(metricsPort != live.server.port)
        #expect(try await live.send("POST", "/tables/todo", json: ["id": "a"]).status == 201)
        #expect(try await live.send("GET", "/metrics").status == 404)
        let samples = try await Self.scrape(port: metricsPort)
        #expect(samples[Self.requests, Self.request("/tables/{table}", "POST", 201, table: "todo")] == 1)
        #expect(samples[Self.requests, Self.request("/metrics", "GET", 404)] == 1)
        func status(_ method: String, _ target: String) async throws -> Int {
            try await LoopbackHTTP.send(port: metricsPort, method: method, target: target, headers: [], body: nil)
                .status
        }
        #expect(try await status("GET", "/tables/todo") == 404)
        #expect(try await status("POST", "/metrics") == 405)
        try await live.stop()
        // It stops with the server.
        await #expect(throws: (any Error).self) { try await status("GET", "/metrics") }
    }

    @Test func metricsOffOrThroughAnotherBackendServeNothing() async throws {
        let (off, _) = try await Self.start { $0.metrics = .off }
        #expect(off.server.metricsRegistry == nil)
        #expect(try await off.send("GET", "/metrics").status == 404)
        try await off.stop()

        // Any swift-metrics factory: recorded there, nothing served.
        let elsewhere = PrometheusCollectorRegistry()
        let (other, _) = try await Self.start {
            $0.metrics.backend = .factory(PrometheusMetricsFactory(registry: elsewhere))
        }
        #expect(other.server.metricsRegistry == nil)
        #expect(try await other.send("GET", "/metrics").status == 404)
        let samples = try Samples(parsing: elsewhere.emitToString())
        #expect(samples[Self.requests, Self.request("/metrics", "GET", 404)] == 1)
        try await other.stop()

        // Two servers keep apart: each its own registry by default.
        var configuration = ServerConfiguration(host: "127.0.0.1", port: 0, logger: .quietTest)
        configuration.tables = [TableSettings(name: "todo")]
        let one = try await ReferenceServer.startInMemory(configuration)
        let two = try await ReferenceServer.startInMemory(configuration)
        #expect(try await LiveServer(server: one).send("POST", "/tables/todo", json: ["id": "a"]).status == 201)
        let counted = try await Self.scrape(port: one.port)
        let untouched = try await Self.scrape(port: two.port)
        #expect(counted[Self.requests, Self.request("/tables/{table}", "POST", 201, table: "todo")] == 1)
        #expect(untouched.total(Self.requests) == 0)
        let registries = (try #require(one.metricsRegistry), try #require(two.metricsRegistry))
        #expect(registries.0 !== registries.1)
        try await one.shutdown()
        try await two.shutdown()
    }

    @Test func badMetricsSettingsAreRefused() async throws {
        for (settings, message) in [
            (MetricsSettings(endpoint: .separate(host: "127.0.0.1", port: 70_000)), "the metrics port 70000"),
            (MetricsSettings(endpoint: .separate(host: "", port: 9464)), "the metrics host"),
            (MetricsSettings(backend: .off, endpoint: .separate(host: "127.0.0.1", port: 0)), "the metrics port"),
            (MetricsSettings(maximumDynamicTableLabels: -1), "maximumDynamicTableLabels"),
        ] {
            var configuration = ServerConfiguration(host: "127.0.0.1", port: 0, logger: .quietTest)
            configuration.metrics = settings
            let error = #expect(throws: ConfigurationError.self) { try configuration.validate() }
            #expect(error?.message.hasPrefix(message) == true, "\(String(describing: error))")
        }
    }
}

/// The samples of a Prometheus text exposition: name, labels and value of each line.
struct Samples {
    struct Sample {
        var name: String
        var labels: [String: String]
        var value: Double
    }

    let samples: [Sample]
    let text: String

    init(parsing text: String) throws {
        self.text = text
        var samples: [Sample] = []
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            samples.append(try Self.sample(Substring(line)))
        }
        self.samples = samples
    }

    struct Malformed: Error, CustomStringConvertible {
        var description: String
    }

    /// `name{label="value",…} 12` (label values may hold braces, commas and escaped quotes).
    static func sample(_ line: Substring) throws -> Sample {
        var rest = line[...]
        let name = String(rest.prefix { $0 != "{" && $0 != " " })
        rest = rest.dropFirst(name.count)
        var labels: [String: String] = [:]
        if rest.first == "{" {
            rest = rest.dropFirst()
            while rest.first != "}" {
                let key = String(rest.prefix { $0 != "=" })
                rest = rest.dropFirst(key.count)
                guard rest.hasPrefix("=\"") else { throw Malformed(description: String(line)) }
                rest = rest.dropFirst(2)
                var value = ""
                while let character = rest.first, character != "\"" {
                    rest = rest.dropFirst()
                    if character == "\\", let escaped = rest.first {
                        rest = rest.dropFirst()
                        value.append(escaped == "n" ? "\n" : escaped)
                    } else {
                        value.append(character)
                    }
                }
                guard !rest.isEmpty else { throw Malformed(description: String(line)) }
                rest = rest.dropFirst()
                labels[key] = value
                if rest.first == "," { rest = rest.dropFirst() }
                guard !rest.isEmpty else { throw Malformed(description: String(line)) }
            }
            rest = rest.dropFirst()
        }
        guard let value = Double(rest.trimmingCharacters(in: .whitespaces)) else {
            throw Malformed(description: String(line))
        }
        return Sample(name: name, labels: labels, value: value)
    }

    /// The value of the one series of `name` with exactly `labels`, or `nil`.
    subscript(_ name: String, _ labels: [String: String] = [:]) -> Double? {
        samples.first { $0.name == name && $0.labels == labels }?.value
    }

    /// The sum of every series of `name`.
    func total(_ name: String) -> Double {
        samples.filter { $0.name == name }.reduce(0) { $0 + $1.value }
    }

    /// The values `label` takes in the series of `name`.
    func values(of label: String, in name: String) -> [String] {
        samples.filter { $0.name == name }.compactMap { $0.labels[label] }
    }

    /// The scrapes of `/metrics` counted so far.
    var scrapes: Double {
        samples.filter { $0.name == MetricsTests.requests && $0.labels["route"] == "/metrics" }.reduce(0) {
            $0 + $1.value
        }
    }
}
