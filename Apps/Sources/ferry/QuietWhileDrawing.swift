import FerryConsole
import Logging

/// Standard error's log handler, holding back lines below `error` while a view is redrawn in
/// place on the terminal (``TerminalView/isDrawing``).
struct QuietWhileDrawing: LogHandler {
    var base: StreamLogHandler

    var logLevel: Logger.Level {
        get { base.logLevel }
        set { base.logLevel = newValue }
    }

    var metadata: Logger.Metadata {
        get { base.metadata }
        set { base.metadata = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { base[metadataKey: key] }
        set { base[metadataKey: key] = newValue }
    }

    func log(event: LogEvent) {
        if event.level < .error, TerminalView.isDrawing { return }
        base.log(event: event)
    }
}
