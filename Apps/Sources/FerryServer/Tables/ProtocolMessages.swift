import SyncCore

/// One HTTP request as the table protocol sees it, independent of the HTTP framework.
struct TableRequest: Sendable {
    /// The method in upper case.
    var method: String
    /// The path exactly as received (percent-encoded), without the query.
    let path: String
    /// The query string as received (percent-encoded), without the `?`.
    var rawQuery: String
    var headers: RequestHeaders
    var body: [UInt8]?
    /// `scheme://host[:port]` of the request, for absolute links.
    var origin: String
    /// `body` already parsed, when it came inside a batch (the batch's JSON held it).
    var parsedBody: JSONValue?
    /// Whether `body` is `parsedBody` serialized (``JSONValue/serializedUTF8()``, keys sorted): a
    /// request of a batch. The idempotency fingerprint then hashes it as it is.
    var bodyIsCanonical = false
    /// The answer to a request of a batch that is refused as it stands (it names a protocol
    /// version other than the batch's): it is routed no further.
    var refusal: ProtocolError?
    /// The room the request holds in the server's budget (``HeldRoom``): a batch's reads take theirs
    /// in it as they are answered. `nil` where nothing is counted (tests, requests of a batch).
    var room: HeldRoom?

    /// The percent-decoded path segments (`/tables/todo/1` gives `["tables", "todo", "1"]`), or
    /// `nil` when a segment is not valid percent-encoded UTF-8. Decoded once: routing, the
    /// idempotency fingerprint and the handlers all read them (a batch of 500 inserts decoded each
    /// path four times, 7% of the server's time in a batched push).
    let segments: [String]?

    init(
        method: String, path: String, rawQuery: String, headers: RequestHeaders, body: [UInt8]?, origin: String,
        parsedBody: JSONValue? = nil
    ) {
        self.init(
            method: method, path: path, segments: Self.segments(of: path), rawQuery: rawQuery, headers: headers,
            body: body, origin: origin, parsedBody: parsedBody)
    }

    /// A request whose path was decoded already (`segments` are ``segments(of:)`` of `path`).
    init(
        method: String, path: String, segments: [String]?, rawQuery: String, headers: RequestHeaders,
        body: [UInt8]?, origin: String, parsedBody: JSONValue? = nil
    ) {
        self.method = method
        self.path = path
        self.segments = segments
        self.rawQuery = rawQuery
        self.headers = headers
        self.body = body
        self.origin = origin
        self.parsedBody = parsedBody
    }

    /// The path under which a proxy serves the server (`/sync`), the part of ``origin`` after its
    /// host: what a root-relative link (an upload's `Location`) starts with. Empty when there is none.
    var pathPrefix: Substring {
        guard let scheme = origin.firstRange(of: "://") else { return "" }
        let rest = origin[scheme.upperBound...]
        return rest[(rest.firstIndex(of: "/") ?? rest.endIndex)...]
    }

    /// What the path addresses, decided on the percent-decoded segments (so `/tables/%24batch/`
    /// is the batch endpoint as much as `/tables/$batch` is).
    var route: TableRoute { segments.map(TableRoute.init(segments:)) ?? .invalidPath }

    static func segments(of path: String) -> [String]? {
        var result: [String] = []
        for part in path.split(separator: "/", omittingEmptySubsequences: true) {
            guard let decoded = Self.percentDecoded(part) else { return nil }
            result.append(decoded)
        }
        return result
    }

    static func percentDecoded(_ text: Substring) -> String? {
        // Most segments hold no escape: the text as it is (copying it into an array of bytes and
        // validating them again took a third of reading a batch entry).
        if !text.utf8.contains(UInt8(ascii: "%")) { return String(text) }
        var bytes: [UInt8] = []
        var iterator = Array(text.utf8)[...]
        while let byte = iterator.popFirst() {
            if byte == UInt8(ascii: "%") {
                guard iterator.count >= 2, let high = hex(iterator.popFirst()!), let low = hex(iterator.popFirst()!)
                else {
                    return nil
                }
                bytes.append(high << 4 | low)
            } else {
                bytes.append(byte)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    /// Whether a query string's percent-escapes make valid UTF-8. A `%` that starts no escape is
    /// itself, as the query's parser takes it (``ODataParameters``).
    static func decodesAsUTF8(_ query: String) -> Bool {
        guard query.utf8.contains(UInt8(ascii: "%")) else { return true }
        let bytes = Array(query.utf8)
        var decoded: [UInt8] = []
        decoded.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            if bytes[index] == UInt8(ascii: "%"), index + 2 < bytes.count, let high = hex(bytes[index + 1]),
                let low = hex(bytes[index + 2])
            {
                decoded.append(high << 4 | low)
                index += 3
            } else {
                decoded.append(bytes[index])
                index += 1
            }
        }
        return String(validating: decoded, as: UTF8.self) != nil
    }

    static func hex(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

/// What a request's path addresses: the one place routes are told apart, for requests and for the
/// requests inside a batch.
enum TableRoute: Equatable, Sendable {
    /// `GET /health` and `GET /health/ready`: readiness, the database answers.
    case health
    /// `GET /health/live`: liveness, the process serves requests (the database is not asked).
    case liveness
    /// `/tables`.
    case tableList
    /// `/tables/$batch`.
    case batch
    /// `/tables/$capabilities`.
    case capabilities
    /// `/tables/$changes`.
    case changes
    /// `/tables/{name}`.
    case table(String)
    /// `/tables/{name}/{id}`.
    case item(String, id: String)
    /// `/tables/{name}/{id}/$attachments`: an item's attachments.
    case attachments(String, id: String)
    /// `/tables/{name}/{id}/$attachments/{attachment}`: one attachment's content.
    case attachment(String, id: String, name: String)
    /// `/tables/$attachments/{name}`: a table's attachment rows, for incremental sync.
    case attachmentRows(String)
    /// `/tables/$uploads/{upload}`: an upload in progress.
    case upload(String)
    /// `/metrics`: the Prometheus metrics, when the server serves them on its own port.
    case metrics
    /// Anything else.
    case unknown
    /// A segment that is not valid percent-encoded UTF-8.
    case invalidPath

    /// The route of a percent-encoded path (without its query).
    init(path: String) {
        guard let segments = TableRequest.segments(of: path) else {
            self = .invalidPath
            return
        }
        self.init(segments: segments)
    }

    init(segments: [String]) {
        switch segments.count {
        case 1 where segments[0] == "health": self = .health
        case 2 where segments[0] == "health" && segments[1] == "ready": self = .health
        case 2 where segments[0] == "health" && segments[1] == "live": self = .liveness
        case 1 where segments[0] == "tables": self = .tableList
        case 1 where segments[0] == "metrics": self = .metrics
        case 2 where segments[0] == "tables":
            switch segments[1] {
            case TableService.batchSegment: self = .batch
            case TableService.capabilitiesSegment: self = .capabilities
            case TableService.changesSegment: self = .changes
            default: self = .table(segments[1])
            }
        case 3 where segments[0] == "tables" && segments[1] == TableService.attachmentsSegment:
            self = .attachmentRows(segments[2])
        case 3 where segments[0] == "tables" && segments[1] == TableService.uploadsSegment: self = .upload(segments[2])
        case 3 where segments[0] == "tables": self = .item(segments[1], id: segments[2])
        case 4 where segments[0] == "tables" && segments[3] == TableService.attachmentsSegment:
            self = .attachments(segments[1], id: segments[2])
        case 5 where segments[0] == "tables" && segments[3] == TableService.attachmentsSegment:
            self = .attachment(segments[1], id: segments[2], name: segments[4])
        default: self = .unknown
        }
    }

    /// Whether the route is a table or one of its items: what a request inside a batch may address.
    var isTableData: Bool {
        switch self {
        case .table, .item: true
        default: false
        }
    }
}

/// Request headers with names compared without regard to case.
struct RequestHeaders: Sendable {
    private var fields: [(name: String, value: String)] = []

    init(_ pairs: [(name: String, value: String)] = []) {
        fields = pairs.map { ($0.name.lowercased(), $0.value) }
    }

    /// The first value of `name`.
    subscript(_ name: String) -> String? {
        fields.first { Self.same($0.name, name) }?.value
    }

    /// Whether a stored name (lower case) is `name` in any ASCII case. Lowercasing `name` for each
    /// lookup allocated a string: 3% of the server's time in a batched push (about ten lookups per
    /// request of a batch).
    private static func same(_ stored: String, _ name: String) -> Bool {
        var stored = stored.utf8.makeIterator()
        for byte in name.utf8 {
            let lower = byte &- 0x41 < 26 ? byte | 0x20 : byte
            guard stored.next() == lower else { return false }
        }
        return stored.next() == nil
    }

    /// Every header, names in lower case, in the order received.
    var all: [(name: String, value: String)] { fields }

    /// The values of a list header (`If-Match`, `If-None-Match`) sent on one or several lines, as
    /// one comma-separated list (RFC 9110 § 5.3), or `nil` when it is absent.
    func list(_ name: String) -> String? {
        let values = values(name)
        return values.isEmpty ? nil : values.joined(separator: ", ")
    }

    /// Every value of `name`, comma-joined lists kept as sent.
    func values(_ name: String) -> [String] {
        fields.filter { Self.same($0.name, name) }.map(\.value)
    }
}

/// One response, before the HTTP framework writes it.
struct TableResponse: Sendable {
    var status: Int
    var headers: [(name: String, value: String)] = []
    var body: [UInt8]?
    /// What the request's log line says beyond the answer (a storage's own error, a batch's failed
    /// requests); never sent.
    var logDetail: String?

    static func json(_ status: Int, _ value: JSONValue, headers: [(name: String, value: String)] = []) -> TableResponse
    {
        TableResponse(
            status: status, headers: [("Content-Type", "application/json; charset=utf-8")] + headers,
            body: value.serializedUTF8())
    }
}

/// A request the protocol refuses: its status, a stable code and one line for people. It becomes
/// `{"error": message, "code": code}`, or, for conflicts, the server's item.
struct ProtocolError: Error, Sendable, CustomStringConvertible {
    var status: Int
    var code: String
    var message: String
    /// For 409 and 412: the item as the server holds it (already rendered), with its ETag.
    var item: JSONObject?
    var etag: String?
    var lastModified: String?
    /// For 503: the seconds a client should wait before retrying (`Retry-After`).
    var retryAfter: Int?
    /// Header fields the error's response carries besides its body's (`Accept-Encoding` on a 415,
    /// `Allow` on a 405).
    var headers: [(name: String, value: String)] = []
    /// What the server's log says of it beyond `message` (the storage's own error), in the
    /// request's one line (``TableResponse/logDetail``); never sent.
    var logDetail: String?

    init(_ status: Int, _ code: String, _ message: String) {
        self.status = status
        self.code = code
        self.message = message
    }

    var description: String { "\(status) \(code): \(message)" }

    /// 405 with `Allow`, the methods the resource serves (RFC 9110 §15.5.6: a 405 carries them).
    static func methodNotAllowed(_ message: String, allow: [String]) -> ProtocolError {
        var error = ProtocolError(405, "methodNotAllowed", message)
        error.headers = [("Allow", allow.joined(separator: ", "))]
        return error
    }

    static func badRequest(_ message: String, code: String = "badRequest") -> ProtocolError {
        ProtocolError(400, code, message)
    }

    static func notFound(_ message: String) -> ProtocolError { ProtocolError(404, "notFound", message) }
}
