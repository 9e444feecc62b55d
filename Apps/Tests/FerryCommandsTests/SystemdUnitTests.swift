import Foundation
import ServerTestSupport
import SyncCore
import Testing

@testable import FerryCommands

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The systemd unit of docs/deploy: systemd accepts it, and what it runs (its command, environment
/// file, working directory and stop signal) starts, serves and stops as the unit expects (issue 31).
///
/// The sandbox has no systemd as process 1, so the unit is not started by systemd itself: it is
/// checked by `systemd-analyze verify`, and its lines are run by the test.
@Suite("systemd unit", .timeLimit(.minutes(5)))
struct SystemdUnitTests {
    static let deploy = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("docs/deploy")

    /// The `[Service]` (or another `section`'s) lines of the unit, by key (a key given twice keeps
    /// the last).
    static func serviceLines(section wanted: String = "[Service]") throws -> [String: String] {
        let text = try String(contentsOf: deploy.appendingPathComponent("ferry.service"), encoding: .utf8)
        var lines: [String: String] = [:]
        var section = ""
        for line in text.split(separator: "\n").map({ $0.trimmingCharacters(in: .whitespaces) }) {
            if line.hasPrefix("#") || line.isEmpty { continue }
            if line.hasPrefix("[") {
                section = line
                continue
            }
            guard section == wanted, let equals = line.firstIndex(of: "=") else { continue }
            lines[String(line[..<equals])] = String(line[line.index(after: equals)...])
        }
        return lines
    }

    /// A database that is down when the server starts is retried for as long as it is down: each
    /// start fails in well under a second, so systemd's default start limit (5 starts in 10 s)
    /// would give up after about 8 s of `RestartSec=2`.
    @Test func aFailingStartIsRetriedWithoutALimit() throws {
        let service = try Self.serviceLines()
        #expect(service["Restart"] == "on-failure")
        #expect(try Self.serviceLines(section: "[Unit]")["StartLimitIntervalSec"] == "0")
    }

    static let systemdAnalyze = ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }

    /// systemd reads every line of the unit without a warning (an unknown key is only a warning).
    @Test(.enabled(if: systemdAnalyze != nil, "systemd-analyze is not installed"))
    func systemdAcceptsTheUnit() async throws {
        let ferry = try #require(FerryBinaryTests.ferryURL(), "the ferry executable is not built")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-unit-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        // verify checks that the program exists: the unit with the built one in its place.
        let unit = try String(contentsOf: Self.deploy.appendingPathComponent("ferry.service"), encoding: .utf8)
            .replacingOccurrences(of: "ExecStart=/usr/local/bin/ferry", with: "ExecStart=\(ferry.path)")
        let path = directory.appendingPathComponent("ferry.service")
        try Data(unit.utf8).write(to: path)
        let result = try await Self.run(Self.systemdAnalyze!, ["verify", path.path])
        #expect(result.status == 0, "\(result.output)")
        #expect(result.output.isEmpty, "systemd-analyze had something to say: \(result.output)")
    }

    /// Starts what the unit starts, with its environment file and the example settings (on a free
    /// loopback port), asks for readiness, stops it with the unit's signal and expects exit status
    /// 0 within the unit's stop timeout; a bad setting exits with the status the unit does not
    /// restart on.
    @Test func theUnitsCommandServesAndStopsAsTheUnitExpects() async throws {
        let ferry = try #require(FerryBinaryTests.ferryURL(), "the ferry executable is not built")
        let lines = try Self.serviceLines()
        let command = try #require(lines["ExecStart"]).split(separator: " ").map(String.init)
        #expect(command.first == "/usr/local/bin/ferry" && command.dropFirst().first == "serve")
        let stopSeconds = try #require(lines["TimeoutStopSec"].flatMap(Double.init))
        #expect(lines["KillSignal"] == "SIGTERM")

        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-unit-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        // The example settings, on loopback and a free port, with the example tables file.
        var settings = try #require(
            try JSONValue(
                parsing: String(contentsOf: Self.deploy.appendingPathComponent("ferry.json"), encoding: .utf8)
            )
            .objectValue)
        let shutdownSeconds = settings["shutdownTimeout"]?.doubleValue ?? 10
        let flushSeconds = Double(ServeTracing.flushLimit.components.seconds)
        #expect(
            stopSeconds > shutdownSeconds + flushSeconds + 3,
            "TimeoutStopSec must cover the grace period, the spans' flush and 3 s more")
        settings["host"] = "127.0.0.1"
        settings["port"] = 0
        settings["tables"] = .string(Self.deploy.appendingPathComponent("tables.json").path)
        let config = directory.appendingPathComponent("ferry.json")
        try Data(JSONValue.object(settings).serialized().utf8).write(to: config)
        var arguments = Array(command.dropFirst())
        let configIndex = try #require(arguments.firstIndex(of: "--config")) + 1
        arguments[configIndex] = config.path

        // The environment file, with the database a SQLite file in the working directory.
        var environment = try Self.environmentFile(lines["EnvironmentFile"])
        #expect(environment["FERRY_AUTH_SECRET"] != nil && environment["FERRY_DATABASE_URL"] != nil)
        environment["FERRY_DATABASE_URL"] = "sqlite:ferry.sqlite"

        let process = Process()
        process.executableURL = ferry
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        process.currentDirectoryURL = directory
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let line = try await ServeCommandTests.firstLine(of: output.fileHandleForReading, from: process)
        #expect(line.hasPrefix("ferry serve: listening on http://127.0.0.1:") && line.contains("1 declared table,"))
        let url = try #require(line.split(separator: " ").first { $0.hasPrefix("http://") }.map(String.init))
        let (_, response) = try await URLSession.shared.data(from: URL(string: url + "/health/ready")!)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(FileManager.default.fileExists(atPath: directory.appendingPathComponent("ferry.sqlite").path))

        kill(process.processIdentifier, SIGTERM)
        let stopped = try await Self.exit(of: process, within: stopSeconds)
        #expect(stopped, "ferry serve did not stop within TimeoutStopSec (\(stopSeconds) s); systemd would kill it")
        #expect(process.terminationReason == .exit && process.terminationStatus == 0)

        // A bad setting: the status the unit does not restart on.
        let bad = try await FerryBinaryTests.run(
            arguments, environment: environment.merging(["FERRY_MAX_CONNECTIONS": "none"]) { $1 })
        #expect("\(bad.status)" == lines["RestartPreventExitStatus"], "\(bad.errors)")
    }

    /// The variables of the unit's environment file (the example beside the unit).
    static func environmentFile(_ line: String?) throws -> [String: String] {
        let path = try #require(line).trimmingCharacters(in: CharacterSet(charactersIn: "-"))
        let example = deploy.appendingPathComponent(URL(fileURLWithPath: path).lastPathComponent)
        var variables: [String: String] = [:]
        for line in try String(contentsOf: example, encoding: .utf8).split(separator: "\n")
        where !line.hasPrefix("#") {
            guard let equals = line.firstIndex(of: "=") else { continue }
            variables[String(line[..<equals])] = String(line[line.index(after: equals)...])
        }
        return variables
    }

    /// Whether `process` exits within `seconds` (it is killed if not).
    static func exit(of process: Process, within seconds: Double) async throws -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while process.isRunning && Date() < deadline { try await Task.sleep(for: .milliseconds(20)) }
        if process.isRunning {
            process.terminate()
            return false
        }
        return true
    }

    static func run(_ executable: String, _ arguments: [String]) async throws -> (status: Int32, output: String) {
        try await offThePool {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = arguments
            let pipe = Pipe()
            process.standardOutput = pipe
            process.standardError = pipe
            try process.run()
            let data = pipe.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return (process.terminationStatus, String(decoding: data, as: UTF8.self))
        }
    }
}
