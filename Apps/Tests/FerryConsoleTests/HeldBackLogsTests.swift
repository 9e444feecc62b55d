import FerryConsole
import Logging
import ServerTestSupport
import Synchronization
import Testing

/// While something owns the terminal (a live view, the REPL's prompt with automatic sync), library
/// lines below `error` are held back; errors and every line at other times pass.
@Suite("Held-back log lines", .serialized)
struct HeldBackLogsTests {
    @Test func linesBelowErrorWaitWhileTheTerminalIsHeld() {
        let captured = CapturedLog()
        let logger = Logger(label: "test") { _ in
            HoldingBackLogHandler(CapturingLogHandler(captured: captured, logLevel: .trace))
        }
        logger.warning("before")
        TerminalView.holdsBackLogs = true
        logger.warning("during")
        logger.info("during")
        logger.error("during")
        TerminalView.holdsBackLogs = false
        logger.warning("after")
        #expect(captured.entries.withLock { $0.map(\.level) } == [.warning, .error, .warning])
    }
}
