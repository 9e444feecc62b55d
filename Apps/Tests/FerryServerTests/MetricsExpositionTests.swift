import FerryServer
import Foundation
import Prometheus
import ServerStorageCore
import ServerTestSupport
import SyncCore
import Testing

/// The operator probe on `/metrics`: no `# HELP` lines, the SQLite-only `resource="writer"` series
/// exported (always zero) by a server on PostgreSQL, and `CONNECT` answered 405 but not counted.
@Suite("What /metrics exports", .timeLimit(.minutes(5)))
struct MetricsExpositionTests {
    /// The `# HELP` and `# TYPE` lines of `text`: name to help text, and the names with a type.
    static func described(_ text: String) -> (help: [String: String], typed: Set<String>) {
        var help: [String: String] = [:]
        var typed: Set<String> = []
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: " ", maxSplits: 3, omittingEmptySubsequences: false).map(String.init)
            guard parts.count >= 3, parts[0] == "#" else { continue }
            if parts[1] == "HELP" { help[parts[2]] = parts.count > 3 ? parts[3] : "" }
            if parts[1] == "TYPE" { typed.insert(parts[2]) }
        }
        return (help, typed)
    }

    /// Every metric the server exports has a one-line help text, and docs/server.md lists each.
    @Test func everyMetricHasAHelpLine() async throws {
        let (live, _) = try await MetricsTests.start()
        // Traffic that makes every family appear: requests, a batch, a key replayed, a feed event.
        #expect(try await live.send("POST", "/tables/todo", json: ["id": "a"]).status == 201)
        let key = [("Idempotency-Key", "help-key")]
        _ = try await live.send("POST", "/tables/todo", headers: key, json: ["id": "k"])
        _ = try await live.send("POST", "/tables/todo", headers: key, json: ["id": "k"])
        let batch: JSONValue = ["requests": [["method": "POST", "url": "todo", "body": ["id": "b"]]]]
        #expect(try await live.send("POST", "/tables/$batch", json: batch).status == 200)
        let response = try await LoopbackHTTP.send(
            port: live.server.port, method: "GET", target: "/metrics", headers: [], body: nil)
        try await live.stop()
        let text = String(decoding: response.body, as: UTF8.self)
        let (help, typed) = Self.described(text)
        #expect(typed.count >= 8, "\(text)")
        let docs = try String(contentsOfFile: Self.serverDocs, encoding: .utf8)
        for name in typed.sorted() {
            let line = help[name] ?? ""
            #expect(line.count >= 10, "\(name) has no help text: \(text)")
            #expect(!line.contains("\n"))
            #expect(docs.contains("`\(name)`"), "docs/server.md does not list \(name)")
        }
    }

    /// docs/server.md, from this file's place in the repository.
    static var serverDocs: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("docs/server.md").path
    }

    /// Each storage's wait series, and only those: SQLite has a writer, PostgreSQL a pool and an
    /// insert queue.
    @Test(arguments: ServerBackend.allCases)
    func onlyTheWaitsTheStorageHasAreExported(_ backend: ServerBackend) async throws {
        let live = try await LiveServer.start(tables: [TableSettings(name: "todo")], backend: backend)
        let samples = try await MetricsTests.scrape(port: live.server.port)
        try await live.stop()
        let resources = Set(samples.values(of: "resource", in: "ferry_storage_wait_seconds_count"))
        let timeouts = Set(samples.values(of: "resource", in: "ferry_storage_wait_timeouts_total"))
        let expected: Set<String> = backend == .sqlite ? ["writer"] : ["connection", "insert_queue"]
        #expect(resources == expected, "\(samples.text)")
        #expect(timeouts == expected, "\(samples.text)")
    }

    /// `CONNECT` is answered beneath Hummingbird (RefusedConnect); it is counted like any request.
    @Test func connectIsCounted() async throws {
        let (live, _) = try await MetricsTests.start { $0.connections.idleTimeout = .seconds(600) }
        let (text, _) = try await HardeningTests.exchangeRaw(
            live.server.port, "CONNECT a:80 HTTP/1.1\r\nHost: a\r\n\r\n")
        #expect(text.hasPrefix("HTTP/1.1 405 "), "\(text)")
        let samples = try await MetricsTests.scrape(port: live.server.port)
        try await live.stop()
        let connect = MetricsTests.request("unmatched", "OTHER", 405)
        #expect(samples[MetricsTests.requests, connect] == 1, "\(samples.text)")
        #expect(samples[MetricsTests.durations, connect] == 1, "\(samples.text)")
    }

    /// A keyed insert of a batch answered from its record is counted as a replay, as one sent
    /// alone is (a push resent after a lost answer showed `ferry_idempotent_replays_total 0`).
    @Test func aReplayInABatchIsCounted() async throws {
        let (live, _) = try await MetricsTests.start()
        let batch: JSONValue = [
            "requests": .array(
                ["r1", "r2"].map { id in
                    [
                        "method": "POST", "url": "todo", "headers": ["Idempotency-Key": .string("batch-\(id)")],
                        "body": ["id": .string(id)],
                    ]
                })
        ]
        for _ in 0..<2 { #expect(try await live.send("POST", "/tables/$batch", json: batch).status == 200) }
        let samples = try await MetricsTests.scrape(port: live.server.port)
        try await live.stop()
        #expect(samples["ferry_idempotent_replays_total"] == 2, "\(samples.text)")
    }
}
