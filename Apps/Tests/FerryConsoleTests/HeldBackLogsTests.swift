import FerryConsole
import Logging
import Synchronization
import Testing

/// While something owns the terminal (a live view, the REPL's prompt with automatic sync), library
/// lines below `error` are held back; errors and every line at other times pass.
@Suite("Held-back log lines", .serialized)
struct HeldBackLogsTests {
    final class Recorder: Sendable {
        let levels = Mutex<[Logger.Level]>([])
    }

    struct Recording: LogHandler {
        let recorder: Recorder
        var logLevel: Logger.Level = .trace
        var metadata: Logger.Metadata = [:]
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) { recorder.levels.withLock { $0.append(event.level) } }
    }

    @Test func linesBelowErrorWaitWhileTheTerminalIsHeld() {
        let recorder = Recorder()
        let logger = Logger(label: "test") { _ in HoldingBackLogHandler(Recording(recorder: recorder)) }
        logger.warning("before")
        TerminalView.holdsBackLogs = true
        logger.warning("during")
        logger.info("during")
        logger.error("during")
        TerminalView.holdsBackLogs = false
        logger.warning("after")
        #expect(recorder.levels.withLock { $0 } == [.warning, .error, .warning])
    }
}
