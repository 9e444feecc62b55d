import FerryConsole
import Foundation
import Logging
import SyncCore

/// Log lines as JSON, one object per line on standard error (`ferry serve --log-format json`), for
/// log collectors: `{"time":"…","level":"info","label":"ferry.server","message":"…",…metadata}`.
///
/// swift-log ships only a text handler; this one is the executable's, given to the server's
/// `Logger` (the libraries log through the logger they are given, never bootstrap).
///
/// ```swift
/// let logger = Logger(label: "ferry.server") { JSONLogHandler(label: $0) }
/// ```
struct JSONLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level = .info
    var metadata: Logger.Metadata = [:]

    init(label: String) { self.label = label }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var fields = metadata.merging(event.metadata ?? [:]) { $1 }
        if let error = event.error { fields["error"] = "\(error)" }
        StandardStreams.writeError(
            Self.line(
                level: event.level, label: label, message: "\(event.message)", metadata: fields, source: event.source,
                time: Date()) + "\n")
    }

    /// One line: the time (ISO 8601, milliseconds, UTC), the level, the label, the source module,
    /// the message, then each metadata key (nested metadata as JSON objects and arrays).
    static func line(
        level: Logger.Level, label: String, message: String, metadata: Logger.Metadata, source: String, time: Date
    ) -> String {
        var object: JSONObject = [
            "time": .string(Timestamp(millisecondsSince1970: Int64(time.timeIntervalSince1970 * 1000)).iso8601),
            "level": .string(level.rawValue), "label": .string(label), "source": .string(source),
            "message": .string(message),
        ]
        for (key, value) in metadata where object[key] == nil { object[key] = json(value) }
        return JSONValue.object(object).serialized()
    }

    static func json(_ value: Logger.MetadataValue) -> JSONValue {
        switch value {
        case .string(let text): .string(text)
        // Numbers stay numbers (`ferry.ms`), for a collector's queries; they were strings.
        case .stringConvertible(let number as Double) where number.isFinite: .double(number)
        case .stringConvertible(let number as Int): .int(Int64(number))
        case .stringConvertible(let convertible): .string(convertible.description)
        case .array(let values): .array(values.map(json))
        case .dictionary(let entries): .object(entries.mapValues(json))
        }
    }
}
