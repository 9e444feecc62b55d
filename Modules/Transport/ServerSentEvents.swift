/// One Server-Sent Event (the `text/event-stream` format of the HTML standard).
struct ServerSentEvent: Sendable, Hashable {
    /// `event:`; `message` when the event names none.
    var name: String = "message"
    /// The `data:` lines, joined with line breaks.
    var data: String = ""
    /// The last `id:` seen so far in the stream (it carries over to later events).
    var id: String?
}

/// Turns the bytes of an event stream into events, whatever pieces they arrive in.
///
/// ```swift
/// var parser = ServerSentEventParser()
/// let events = parser.parse(Array("event: change\nid: 7\ndata: {}\n\n".utf8))   // one event
/// ```
struct ServerSentEventParser: Sendable {
    private var line: [UInt8] = []
    /// A `\r` ended the last line: a `\n` right after it belongs to the same line break.
    private var afterCarriageReturn = false
    private var name = ""
    private var data: [String] = []
    /// The bytes read since the last blank line: the event being read, its comments included.
    private var eventBytes = 0
    private var lastID: String?
    /// The reconnection time the server set (`retry:`, in milliseconds), if it did.
    private(set) var reconnectionTime: Duration?
    /// The most bytes one event may take, its lines and comments, up to the blank line that ends
    /// it. A feed that goes past it is not one this client can follow: the parse fails. Cut and
    /// read on, a server that never ended a line (or an event) kept a core busy reading gigabytes,
    /// and the device waited for events that never came.
    static let maximumEventSize = 1 << 20

    /// A feed that sent more than ``maximumEventSize`` bytes without ending an event.
    struct EventTooLarge: Error, CustomStringConvertible {
        var description: String {
            "the server sent more than \(ServerSentEventParser.maximumEventSize) bytes without ending an event"
        }
    }

    /// The events completed by `bytes`.
    ///
    /// - Throws: ``EventTooLarge`` when an event goes past ``maximumEventSize``.
    mutating func parse(_ bytes: [UInt8]) throws(EventTooLarge) -> [ServerSentEvent] {
        var events: [ServerSentEvent] = []
        for byte in bytes {
            eventBytes += 1
            if afterCarriageReturn {
                afterCarriageReturn = false
                if byte == UInt8(ascii: "\n") { continue }
            }
            switch byte {
            case UInt8(ascii: "\r"):
                afterCarriageReturn = true
                if let event = endLine() { events.append(event) }
            case UInt8(ascii: "\n"):
                if let event = endLine() { events.append(event) }
            default:
                guard eventBytes <= Self.maximumEventSize else { throw EventTooLarge() }
                line.append(byte)
            }
        }
        return events
    }

    private mutating func endLine() -> ServerSentEvent? {
        defer { line.removeAll(keepingCapacity: true) }
        if line.isEmpty {
            // A blank line dispatches the event, if it has data.
            defer {
                name = ""
                data = []
                eventBytes = 0
            }
            guard !data.isEmpty else { return nil }
            return ServerSentEvent(
                name: name.isEmpty ? "message" : name, data: data.joined(separator: "\n"), id: lastID)
        }
        if line.first == UInt8(ascii: ":") { return nil }  // a comment (a heartbeat)
        let text = String(decoding: line, as: UTF8.self)
        let field: Substring
        var value: Substring
        if let colon = text.firstIndex(of: ":") {
            field = text[..<colon]
            value = text[text.index(after: colon)...]
            if value.first == " " { value = value.dropFirst() }
        } else {
            field = text[...]
            value = ""
        }
        switch field {
        case "event": name = String(value)
        case "data": data.append(String(value))
        case "id" where !value.contains("\u{0}"): lastID = String(value)
        case "retry"
        where !value.isEmpty && value.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }):
            // ASCII digits only, as the format says; anything else is ignored.
            if let milliseconds = Int64(value) { reconnectionTime = .milliseconds(milliseconds) }
        default: break  // fields the format ignores
        }
        return nil
    }
}
