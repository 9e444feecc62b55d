import FerryServer
import Foundation
import Logging
import ServerTestSupport
import SyncCore
import Synchronization
import Testing

/// Issue 31: every request was logged at `info`. Now a request that went well is a `debug` line, a
/// client's error one `info` line with its reason, a server's error one `error` line, each with the
/// request id; Hummingbird's own start-up line no longer doubles the host's.
@Suite("The server's request log", .timeLimit(.minutes(10)))
struct RequestLogTests {
    @Test func successesAreDebugErrorsAreOneLineWithTheRequestID() async throws {
        let captured = CapturedLog()
        var logger = Logger(label: "test.server") { _ in CapturingLogHandler(captured: captured) }
        logger.logLevel = .info
        let server = try await LiveServer.start(tables: [TableSettings(name: "todo")], logger: logger)
        #expect(try await server.send("GET", "/tables/todo").status == 200)
        #expect(try await server.send("GET", "/tables/todo/nosuch").status == 404)
        try await server.stop()
        let entries = captured.entries.withLock { $0 }
        let messages = entries.map(\.message)
        #expect(!messages.contains { $0.hasPrefix("GET /tables/todo 200") }, "\(messages)")
        #expect(!messages.contains { $0.contains("Server started and listening") }, "\(messages)")
        let error = try #require(entries.first { $0.message.hasPrefix("GET /tables/todo/nosuch 404") })
        #expect(error.level == .info)
        #expect(error.message.contains(": "), "the reason follows: \(error.message)")
        #expect(error.metadata["request.id"] != nil, "\(error.metadata)")
        #expect(error.metadata["ferry.status"] == "404")
        // A number, which a JSON log writes as one.
        if case .stringConvertible(let milliseconds)? = error.metadata["ferry.ms"] {
            #expect(milliseconds is Double, "\(milliseconds)")
        } else {
            Issue.record("ferry.ms is not a number: \(error.metadata)")
        }

        // At debug, the successes are there too.
        let verbose = CapturedLog()
        var debugLogger = Logger(label: "test.server") { _ in CapturingLogHandler(captured: verbose) }
        debugLogger.logLevel = .debug
        let second = try await LiveServer.start(tables: [TableSettings(name: "todo")], logger: debugLogger)
        #expect(try await second.send("GET", "/tables/todo").status == 200)
        try await second.stop()
        let success = verbose.entries.withLock { $0 }.first { $0.message == "GET /tables/todo 200" }
        #expect(success?.level == .debug)
    }

    /// The hostile probe: a table name decoded from the path went into the text log as it was, so
    /// `%0a` forged a log line of the attacker's choosing and `%00` wrote a NUL. Control characters
    /// of request text are logged as escapes.
    @Test func requestTextCannotForgeALogLine() async throws {
        let captured = CapturedLog()
        var logger = Logger(label: "test.server") { _ in CapturingLogHandler(captured: captured) }
        logger.logLevel = .info
        let server = try await LiveServer.start(tables: [TableSettings(name: "todo")], logger: logger)
        let forged = "/tables/x%0a2026-11-27T20:00:00+0000%20error%20FORGED"
        #expect(try await server.send("GET", forged).status >= 400)
        #expect(try await server.send("GET", "/tables/%00").status >= 400)
        #expect(try await server.send("POST", "/tables/a%0d%0bb", json: .object([:])).status >= 400)
        try await server.stop()
        let entries = captured.entries.withLock { $0 }
        let texts = entries.flatMap { entry in [entry.message] + entry.metadata.values.map { "\($0)" } }
        let controls = texts.filter { text in text.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F } }
        #expect(controls.isEmpty, "\(controls)")
        #expect(texts.contains { $0.contains("x\\n2026-11-27T20:00:00+0000 error FORGED") }, "\(texts)")
        #expect(texts.contains { $0.contains("\\u{0}") }, "\(texts)")
    }
}
