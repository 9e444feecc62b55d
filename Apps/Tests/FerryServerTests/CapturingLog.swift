import Logging
import Synchronization

/// Keeps what was logged.
final class CapturedLog: Sendable {
    struct Entry: Sendable {
        var level: Logger.Level
        var message: String
        var metadata: Logger.Metadata
    }
    let entries = Mutex<[Entry]>([])
}

struct CapturingLogHandler: LogHandler {
    let captured: CapturedLog
    var logLevel: Logger.Level = .info
    var metadata: Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let entry = CapturedLog.Entry(
            level: event.level, message: "\(event.message)",
            metadata: metadata.merging(event.metadata ?? [:]) { $1 })
        captured.entries.withLock { $0.append(entry) }
    }
}

extension CapturedLog {
    /// Whether a message containing `text` was logged.
    func contains(_ text: String) -> Bool { entries.withLock { $0.contains { $0.message.contains(text) } } }
}
