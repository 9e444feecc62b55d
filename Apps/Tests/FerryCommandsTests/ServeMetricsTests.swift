import FerryServer
import Foundation
import ServerTestSupport
import Testing

@testable import FerryCommands

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// `ferry serve --metrics on|off --metrics-port N --metrics-host ADDRESS` (issue 31), as a process.
@Suite("ferry serve: metrics", .timeLimit(.minutes(10)))
struct ServeMetricsTests {
    /// Runs `ferry serve --port 0 --db memory` with `arguments`, gives its first line to `body`,
    /// then stops it with SIGTERM and expects a clean exit.
    func serving(_ arguments: [String], _ body: (String) async throws -> Void) async throws {
        let executable = try #require(ServeCommandTests.executable, "the ferry executable is not built")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = ["serve", "--port", "0", "--db", "memory", "--log-level", "warning"] + arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let line = try await ServeCommandTests.firstLine(of: output.fileHandleForReading, from: process)
        do {
            try await body(line)
        } catch {
            process.terminate()
            throw error
        }
        kill(process.processIdentifier, SIGTERM)
        try await offThePool { process.waitUntilExit() }
        #expect(process.terminationReason == .exit && process.terminationStatus == 0)
    }

    /// The URLs of a `listening on` line: the server's, then the metrics' when shown.
    static func urls(_ line: String) -> [String] {
        line.split(whereSeparator: { $0 == " " || $0 == "," || $0 == ")" }).filter { $0.hasPrefix("http://") }
            .map(String.init)
    }

    static func get(_ url: String) async throws -> (status: Int, type: String?, text: String) {
        let (data, response) = try await URLSession.shared.data(from: URL(string: url)!)
        let http = response as? HTTPURLResponse
        return (
            http?.statusCode ?? 0, http?.value(forHTTPHeaderField: "Content-Type"),
            String(decoding: data, as: UTF8.self)
        )
    }

    @Test func byDefaultMetricsAreOnTheServersPort() async throws {
        try await serving([]) { line in
            let urls = Self.urls(line)
            #expect(urls.count == 2 && urls.last == (urls.first ?? "") + "/metrics", "\(line)")
            let metrics = try await Self.get(try #require(urls.last))
            #expect(metrics.status == 200)
            #expect(metrics.type == "text/plain; version=0.0.4; charset=utf-8")
            #expect(metrics.text.contains("ferry_http_open_connections 1.0\n"), "\(metrics.text)")
        }
    }

    @Test func aMetricsPortOfItsOwnOnLoopback() async throws {
        try await serving(["--metrics-port", "0"]) { line in
            let urls = Self.urls(line)
            #expect(urls.count == 2, "\(line)")
            let server = try #require(urls.first)
            let metrics = try #require(urls.last)
            #expect(
                metrics.hasPrefix("http://127.0.0.1:") && metrics.hasSuffix("/metrics")
                    && metrics != server + "/metrics")
            #expect(try await Self.get(server + "/metrics").status == 404)
            let scraped = try await Self.get(metrics)
            #expect(scraped.status == 200)
            // The 404 was counted; the scrape on the metrics port is not.
            let counted = scraped.text.split(separator: "\n").filter { $0.hasPrefix("ferry_http_requests_total{") }
            #expect(counted.count == 1 && counted.first?.contains(#"status="404""#) == true, "\(scraped.text)")
            #expect(counted.first?.hasSuffix(" 1") == true, "\(scraped.text)")
        }
    }

    @Test func metricsOff() async throws {
        try await serving(["--metrics", "off"]) { line in
            #expect(line.contains("metrics off"), "\(line)")
            let server = try #require(Self.urls(line).first)
            #expect(try await Self.get(server + "/metrics").status == 404)
        }
    }

    /// Every bad metrics setting is one line naming its flag, and exit 64.
    @Test func everyBadMetricsValueNamesItsFlag() async throws {
        for (arguments, named) in [
            (["--metrics", "maybe"], "--metrics"), (["--metrics-port", "70000"], "--metrics-port"),
            (["--metrics-port", "x"], "--metrics-port"),
            (["--metrics", "off", "--metrics-port", "0"], "--metrics-port"),
            (["--metrics-host", "127.0.0.1"], "--metrics-host"),
            (["--metrics-port", "0", "--metrics-host", ""], "--metrics-host"),
        ] {
            let result = try await FerryBinaryTests.run(["serve", "--port", "0", "--db", "memory"] + arguments)
            #expect(result.status == 64, "\(arguments): \(result.errors)")
            #expect(
                result.errors.hasPrefix("error: ") && result.errors.contains(named), "\(arguments): \(result.errors)")
            #expect(result.errors.split(separator: "\n").count == 1, "\(arguments): \(result.errors)")
        }
    }

    @Test func aBusyMetricsPortIsOneLineAndExitStatus1() async throws {
        let server = try await startServer()
        let busy = try await FerryBinaryTests.run([
            "serve", "--port", "0", "--db", "memory", "--metrics-port", "\(server.port)",
        ])
        #expect(busy.status == 1)
        #expect(
            busy.errors.hasPrefix(
                "error: cannot listen on 127.0.0.1:\(server.port) for the metrics: the address is already in use"),
            "\(busy.errors)")
        #expect(busy.errors.contains("--metrics-port"))
        #expect(busy.errors.split(separator: "\n").count == 1, "\(busy.errors)")
        try await server.shutdown()
    }
}
