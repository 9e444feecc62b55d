import Logging
import ServerStorageCore
import ServerTestSupport
import Synchronization
import Testing

/// The operator probe: through a PostgreSQL outage the server logged about 34 lines a minute (the
/// change listener's retry every 2 s, the pool's failed connections). Each kind of line is logged
/// once, then counted in one line at most once a minute, and the end of the outage is one line.
/// On a fake clock: no waiting.
@Suite("Outage log lines")
struct OutageLogTests {
    final class FakeClock: Sendable {
        let instant = Mutex(ContinuousClock.now)
        func advance(_ duration: Duration) { instant.withLock { $0 += duration } }
        var now: ContinuousClock.Instant { instant.withLock { $0 } }
    }

    @Test func aTenMinuteOutageIsAboutOneLineAMinutePerKind() throws {
        let clock = FakeClock()
        let lines = RepeatedLogLines(now: { clock.now })
        let listener = "the change listener cannot connect; retrying"
        let pool = "Connection creation failed"
        var logged: [RepeatedLogLines.Verdict] = []
        #expect(lines.ended() == nil, "no outage yet")
        // Ten minutes: the listener every 2 s, the pool every 15 s.
        for second in stride(from: 0, to: 600, by: 2) {
            let verdict = lines.occurred(listener)
            if verdict != .quiet { logged.append(verdict) }
            if second % 15 == 0, lines.occurred(pool) != .quiet { logged.append(.log) }
            clock.advance(.seconds(2))
        }
        // The first of each, then one summary a minute of each (9 after the first minute).
        #expect(logged.count <= 2 + 2 * 10, "\(logged.count) lines: \(logged)")
        #expect(logged.first == .log)
        let summaries = logged.compactMap { verdict -> Int? in
            if case .summary(let repeats, let over) = verdict, over >= .seconds(60) { return repeats }
            return nil
        }
        #expect(summaries.contains(30), "a minute of retries every 2 s is 30 more: \(summaries)")
        let outage = try #require(lines.ended())
        #expect(outage.lines == 300 + 20)
        #expect(outage.lasted == .seconds(600))
        #expect(lines.ended() == nil, "said once")
        // The next outage starts with its first line again.
        #expect(lines.occurred(listener) == .log)
    }

    @Test func theHandlerLetsTheFirstLineAndTheSummariesThrough() {
        let clock = FakeClock()
        let lines = RepeatedLogLines(now: { clock.now })
        let captured = CapturedLog()
        let logger = Logger(label: "pool") { _ in
            RepeatLimitedLogHandler(CapturingLogHandler(captured: captured, logLevel: .debug), lines: lines)
        }
        for _ in 0..<31 {
            logger.info("Connection creation failed")
            logger.debug("Creating new connection")
            clock.advance(.seconds(2))
        }
        let messages = captured.entries.withLock { $0 }.map(\.message)
        let failures = messages.filter { $0.hasPrefix("Connection creation failed") }
        #expect(failures == ["Connection creation failed", "Connection creation failed (30 more in the last 60 s)"])
        #expect(messages.filter { $0 == "Creating new connection" }.count == 31, "debug lines are not limited")
    }
}
