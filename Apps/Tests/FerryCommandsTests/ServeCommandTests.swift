import ArgumentParser
import FerryServer
import Foundation
import Logging
import ServerStoragePostgreSQL
import ServerTestSupport
import SyncCore
import Synchronization
import Testing

@testable import FerryCommands

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

@Suite("ferry serve", .timeLimit(.minutes(10)))
struct ServeCommandTests {
    @Test func parsesServeAndItsOptions() throws {
        let command = try FerryCommand.parseAsRoot([
            "serve", "--port", "0", "--host", "0.0.0.0", "--db", "memory", "--tables", "t.json", "--auth-secret", "s",
        ])
        #expect(command is ServeCommand)
        #expect(throws: (any Error).self) { try FerryCommand.parseAsRoot(["serve", "--port", "eighty"]) }
        #expect(throws: (any Error).self) { try FerryCommand.parseAsRoot(["serve", "--bogus"]) }
        #expect(FerryCommand.helpMessage(for: ServeCommand.self).contains("--auth-secret"))
    }

    @Test func theDatabaseOptionNamesSQLiteMemoryOrPostgreSQL() throws {
        #expect(throws: ConfigurationError.self) { try ServerDatabase(parsing: "postgres://x") }
        #expect(throws: ConfigurationError.self) { try ServerDatabase(parsing: "mysql://u@h/db") }
        let postgres = try ServerDatabase(parsing: "postgres://ferry:s%40cret@db.internal:6543/app?sslmode=require")
        #expect(postgres.description == "postgres://ferry@db.internal:6543/app?sslmode=require")
        #expect(!postgres.description.contains("cret"))
        guard case .postgreSQL(let url) = postgres else {
            Issue.record("not PostgreSQL: \(postgres)")
            return
        }
        #expect(url.password == "s@cret")
        #expect(url.tlsMode == .require)
        #expect(
            try ServerDatabase(parsing: "postgresql://ferry@[::1]/ferry").description
                == "postgres://ferry@[::1]:5432/ferry")
        #expect(try ServerDatabase(parsing: "memory") == .memory)
        #expect(try ServerDatabase(parsing: "sqlite:a.db") == .sqlite(path: "a.db"))
        #expect(try ServerDatabase(parsing: "sqlite:a.db").description == "sqlite:a.db")
    }

    /// The built `ferry` executable, when the package was built.
    static var executable: String? {
        let apps = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        for configuration in ["debug", "release"] {
            let path = apps.appendingPathComponent(".build/\(configuration)/ferry").path
            if FileManager.default.isExecutableFile(atPath: path) { return path }
        }
        return nil
    }

    /// Runs `ferry serve --port 0 --db memory`, reads the line that says where it listens, asks for
    /// `/health`, then stops it with `signal` and expects a clean exit.
    func serveAndStop(with signal: Int32) async throws {
        guard let executable = Self.executable else {
            Issue.record("the ferry executable is not built; run swift build first")
            return
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = ["serve", "--port", "0", "--db", "memory", "--log-level", "warning"]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let line = try await Self.firstLine(of: output.fileHandleForReading, from: process)
        #expect(line.hasPrefix("ferry serve: listening on http://127.0.0.1:"), "\(line)")
        let url = try #require(line.split(separator: " ").first { $0.hasPrefix("http://") }.map(String.init))
        let (data, response) = try await URLSession.shared.data(from: URL(string: url + "/health")!)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(String(decoding: data, as: UTF8.self).contains("\"status\":\"ok\""))
        kill(process.processIdentifier, signal)
        try await offThePool { process.waitUntilExit() }
        #expect(process.terminationReason == .exit)
        #expect(process.terminationStatus == 0)
    }

    /// The first line `process` writes, or an error after 30 seconds (the process is then killed,
    /// which also ends the blocked read).
    static func firstLine(of handle: FileHandle, from process: Process) async throws -> String {
        // The reads block: on a thread of their own, with a watchdog thread of its own too.
        let done = ProcessWatch()
        Thread.detachNewThread {
            Thread.sleep(forTimeInterval: 30)
            if !done.isDone { process.terminate() }
        }
        defer { done.finish() }
        return try await offThePool {
            var bytes: [UInt8] = []
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                bytes += chunk
                if bytes.contains(UInt8(ascii: "\n")) { break }
            }
            return String(decoding: bytes.prefix { $0 != UInt8(ascii: "\n") }, as: UTF8.self)
        }
    }

    @Test func stopsCleanlyOnSIGTERM() async throws { try await serveAndStop(with: SIGTERM) }

    @Test func stopsCleanlyOnSIGINT() async throws { try await serveAndStop(with: SIGINT) }
}

extension ServeCommandTests {
    /// Runs `ferry serve` with `arguments` (and `environment`, when given) until it exits, as a
    /// start-up that fails does: its exit status and what it wrote on stderr.
    static func serveUntilExit(_ arguments: [String], environment: [String: String]? = nil) async throws -> (
        status: Int32, errors: String
    ) {
        let executable = try #require(Self.executable, "the ferry executable is not built")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = ["serve"] + arguments
        if let environment { process.environment = environment }
        let errors = Pipe()
        process.standardOutput = FileHandle.nullDevice
        process.standardError = errors
        try process.run()
        let text = try await offThePool {
            let text = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            return text
        }
        return (process.terminationStatus, text)
    }

    @Test func anUnreachablePostgreSQLIsOneLineWithoutThePasswordAndExitStatus1() async throws {
        let (status, text) = try await Self.serveUntilExit(
            ["--port", "0", "--log-level", "critical"],
            environment: ProcessInfo.processInfo.environment.merging([
                "FERRY_DATABASE_URL": "postgres://ferry:hunter2secret@127.0.0.1:1/ferry"
            ]) { $1 })
        #expect(status == 1)
        let lines = text.split(separator: "\n")
        #expect(lines.count == 1, "\(text)")
        #expect(text.hasPrefix("error: cannot open the database: "), "\(text)")
        #expect(text.contains("postgres://ferry@127.0.0.1:1/ferry"), "\(text)")
        #expect(!text.contains("hunter2"))
        // The reason in words, not SwiftNIO's error dump (issue 31).
        #expect(text.contains("the connection was refused"), "\(text)")
        #expect(!text.contains("SingleConnectionFailure") && !text.contains("errno"), "\(text)")
    }

    /// Issue 31: a tables file that cannot be read gave Foundation's message and exit 1; docs/server.md
    /// promises 64 for every bad setting.
    @Test func aTablesFileItCannotReadIsOneLineAndExitStatus64() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "ferry-tables-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let bad = directory.appendingPathComponent("bad.json")
        try "{bad".write(to: bad, atomically: true, encoding: .utf8)
        for (file, expected) in [
            ("/nonexistent/tables.json", "cannot read the tables file '/nonexistent/tables.json': no such file"),
            (directory.path, "it is a directory"), (bad.path, "invalid JSON"),
        ] {
            let result = try await FerryBinaryTests.run(["serve", "--port", "0", "--db", "memory", "--tables", file])
            #expect(result.status == 64, "\(file): \(result.errors)")
            #expect(result.errors.hasPrefix("error: invalid server configuration: "), "\(result.errors)")
            #expect(result.errors.contains(expected), "\(result.errors)")
            #expect(result.errors.split(separator: "\n").count == 1, "\(result.errors)")
        }
    }

    @Test func aDatabaseItCannotReadIsOneLineAndExitStatus64() async throws {
        for (argument, expected) in [
            ("mysql://u@h/db", "unknown database 'mysql://u@h/db'"),
            ("postgres://ferry:pw@h/db?sslmode=bogus", "unknown sslmode 'bogus'"),
            ("postgress://ferry:pw@h/db", "unknown database 'postgress://ferry:…@h/db'"),
        ] {
            let (status, text) = try await Self.serveUntilExit(["--port", "0", "--db", argument])
            #expect(status == 64, "\(argument): \(text)")
            #expect(text.hasPrefix("error: invalid server configuration: --db: \(expected)"), "\(text)")
            #expect(text.split(separator: "\n").count == 1 && !text.contains("pw@"), "\(text)")
        }
    }
}

/// Whether a wait is over, for a watchdog thread.
final class ProcessWatch: Sendable {
    private let state = Mutex(false)
    var isDone: Bool { state.withLock { $0 } }
    func finish() { state.withLock { $0 = true } }

    /// `--log-format json`: one JSON object per line, the metadata as fields (issue 31).
    @Test func jsonLogLinesAreOneObjectEach() throws {
        let line = JSONLogHandler.line(
            level: .info, label: "ferry.server", message: "POST /tables/todo 400: invalid JSON",
            metadata: [
                "request.id": "abc", "ferry.status": "400", "nested": ["a": "1"], "ferry.ms": .stringConvertible(1.25),
                "count": .stringConvertible(3),
            ], source: "FerryServer",
            time: Date(timeIntervalSince1970: 1_764_166_122.348))
        #expect(!line.contains("\n"))
        let object = try #require(try JSONValue(parsing: line).objectValue)
        #expect(object["level"] == "info" && object["label"] == "ferry.server" && object["source"] == "FerryServer")
        #expect(object["message"] == "POST /tables/todo 400: invalid JSON")
        #expect(object["request.id"] == "abc" && object["nested"] == ["a": "1"])
        #expect(object["ferry.ms"] == .double(1.25) && object["count"] == .int(3), "numbers stay numbers: \(line)")
        #expect(object["time"] == "2025-11-26T14:08:42.348Z", "\(String(describing: object["time"]))")
    }

    /// Every bad value of `serve` is one line naming the flag, and exit 64 (issue 31).
    @Test func everyBadValueNamesItsFlag() async throws {
        for (arguments, named) in [
            (["--port", "abc"], "--port"), (["--max-connections", "0"], "--max-connections"),
            (["--max-batch-requests", "0"], "--max-batch-requests"), (["--idle-timeout", "0"], "--idle-timeout"),
            (["--write-timeout", "0"], "--write-timeout"),
            (["--public-url", "ftp://x"], "--public-url"), (["--auth-secret", "short"], "--auth-secret"),
            (["--log-level", "loud"], "log level"), (["--log-format", "xml"], "log format"),
            (["--db", "nosuch:x"], "unknown database"), (["--max-feeds=-1"], "--max-feeds must"),
            (["--max-feeds-per-user=-1"], "--max-feeds-per-user must"),
            (["--max-anonymous-feeds=-1"], "--max-anonymous-feeds must"),
            (["--max-dynamic-tables=-1"], "--max-dynamic-tables must"),
        ] {
            let result = try await FerryBinaryTests.run(["serve", "--port", "0", "--db", "memory"] + arguments)
            #expect(result.status == 64, "\(arguments): \(result.errors)")
            #expect(
                result.errors.hasPrefix("error: ") && result.errors.contains(named), "\(arguments): \(result.errors)")
            #expect(result.errors.split(separator: "\n").count == 1, "\(arguments): \(result.errors)")
        }
    }

    /// The feed limits are settings of `serve`, with the library's defaults, sized for 10,000 feeds
    /// (issue 31).
    @Test func theFeedLimitsAreSettingsWithDefaultsSizedForTenThousandFeeds() async throws {
        let defaults = try await ServeSettingsTests.configuration([])
        #expect(defaults.limits.maximumChangeFeeds == 10_000)
        #expect(defaults.limits.maximumChangeFeedsPerUser == RequestLimits().maximumChangeFeedsPerUser)
        #expect(defaults.limits.maximumAnonymousChangeFeeds == RequestLimits().maximumAnonymousChangeFeeds)
        #expect(
            defaults.connections.maximumConnections > defaults.limits.maximumChangeFeeds,
            "every feed holds a connection, and requests need more")
        let set = try await ServeSettingsTests.configuration([
            "--max-feeds", "20000", "--max-feeds-per-user", "3", "--max-anonymous-feeds", "0",
        ])
        #expect(set.limits.maximumChangeFeeds == 20_000 && set.limits.maximumChangeFeedsPerUser == 3)
        #expect(set.limits.maximumAnonymousChangeFeeds == 0)
        #expect(defaults.limits.maximumDynamicTables == 1_000)
        let tables = try await ServeSettingsTests.configuration(["--max-dynamic-tables", "50"])
        #expect(tables.limits.maximumDynamicTables == 50)
        for flag in ["--max-feeds", "--max-feeds-per-user", "--max-anonymous-feeds", "--max-dynamic-tables"] {
            #expect(FerryCommand.helpMessage(for: ServeCommand.self).contains(flag))
        }
        // A setting whose name begins with another's is named by its own flag.
        let error = await #expect(throws: ConfigurationError.self) {
            try await ServeSettingsTests.configuration(["--max-feeds-per-user=-1"])
        }
        #expect(error?.message == "--max-feeds-per-user must be 0 (no feed) or more")
    }

    /// `serve` takes the open files the system allows, and says in one line when they are fewer than
    /// its connections need.
    @Test func theOpenFileLimitIsRaisedAndAShortfallIsOneLine() throws {
        let limit = try #require(OpenFileLimit.raise())
        #expect(limit >= 256)
        #expect(OpenFileLimit.raise() == limit, "raising again changes nothing")
        let line = try #require(OpenFileLimit.shortfall(limit: 1_024, connections: 16_384))
        #expect(line.contains("1024") && line.contains("16512") && line.contains("--max-connections 16384"), "\(line)")
        #expect(line.contains("LimitNOFILE") && !line.contains("\n"))
        #expect(OpenFileLimit.shortfall(limit: 20_000, connections: 16_384) == nil)
        #expect(OpenFileLimit.needed(connections: 100) == 100 + OpenFileLimit.reserve)
    }
}
