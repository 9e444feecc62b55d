public import Logging
public import Synchronization

/// Keeps what was logged.
public final class CapturedLog: Sendable {
    public struct Entry: Sendable {
        public var level: Logger.Level
        public var message: String
        public var metadata: Logger.Metadata
    }
    public let entries = Mutex<[Entry]>([])

    public init() {}
}

/// A log handler that keeps every line in a ``CapturedLog``.
public struct CapturingLogHandler: LogHandler {
    public let captured: CapturedLog
    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]

    public init(captured: CapturedLog, logLevel: Logger.Level = .info) {
        self.captured = captured
        self.logLevel = logLevel
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        let entry = CapturedLog.Entry(
            level: event.level, message: "\(event.message)",
            metadata: metadata.merging(event.metadata ?? [:]) { $1 })
        captured.entries.withLock { $0.append(entry) }
    }
}

extension CapturedLog {
    /// Whether a message containing `text` was logged.
    public func contains(_ text: String) -> Bool { entries.withLock { $0.contains { $0.message.contains(text) } } }
}
