public import Logging
import Synchronization

/// Whether something owns the terminal that library log lines would garble: a view redrawn in
/// place (`ferry watch`), or the REPL's prompt while automatic sync runs. ``HoldingBackLogHandler``
/// then holds back lines below `error`; the view's status line, or the REPL's `auto`, says what
/// they would have said ("server unreachable: …").
///
/// ```swift
/// TerminalView.holdsBackLogs = true
/// defer { TerminalView.holdsBackLogs = false }
/// ```
public enum TerminalView: Sendable {
    private static let holding = Atomic<Bool>(false)

    /// Whether library log lines below `error` are held back now.
    public static var holdsBackLogs: Bool {
        get { holding.load(ordering: .relaxed) }
        set { holding.store(newValue, ordering: .relaxed) }
    }
}

/// A log handler that forwards to `base`, except lines below `error` while
/// ``TerminalView/holdsBackLogs``: the `ferry` executable's handler.
///
/// ```swift
/// LoggingSystem.bootstrap { HoldingBackLogHandler(StreamLogHandler.standardError(label: $0)) }
/// ```
public struct HoldingBackLogHandler<Base: LogHandler>: LogHandler {
    /// Where the lines that pass go.
    public var base: Base

    /// A handler forwarding to `base`.
    public init(_ base: Base) { self.base = base }

    public var logLevel: Logger.Level {
        get { base.logLevel }
        set { base.logLevel = newValue }
    }

    public var metadata: Logger.Metadata {
        get { base.metadata }
        set { base.metadata = newValue }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { base[metadataKey: key] }
        set { base[metadataKey: key] = newValue }
    }

    public func log(event: LogEvent) {
        if event.level < .error, TerminalView.holdsBackLogs { return }
        base.log(event: event)
    }
}
