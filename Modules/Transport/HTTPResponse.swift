import Foundation
import SyncCore

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// One HTTP exchange's answer.
struct HTTPResponse: Sendable {
    var status: Int
    var headers: [String: String]
    var body: Data
    /// The body as JSON when it was parsed already (an answer inside a batch's answer): ``json()``
    /// answers it instead of parsing `body`.
    var parsedBody: JSONValue?

    /// A header, by case-insensitive name: the name as given first, then any spelling (ASCII
    /// letters compared without case, no string made per header).
    func header(_ name: String) -> String? {
        if let exact = headers[name] { return exact }
        return headers.first { Self.sameName($0.key, name) }?.value
    }

    /// Whether two header names are equal ignoring the case of ASCII letters.
    static func sameName(_ a: String, _ b: String) -> Bool {
        guard a.utf8.count == b.utf8.count else { return false }
        return zip(a.utf8, b.utf8).allSatisfy { x, y in
            x == y || (x | 0x20 == y | 0x20 && (x | 0x20) >= UInt8(ascii: "a") && (x | 0x20) <= UInt8(ascii: "z"))
        }
    }

    /// The body as JSON, or `nil` when it is empty.
    func json() throws(RemoteError) -> JSONValue? {
        if let parsedBody { return parsedBody }
        if body.isEmpty { return nil }
        do {
            return try JSONValue(parsingUTF8: body)
        } catch {
            throw RemoteError(
                .invalidResponse, status: status, "the server answered HTTP \(status) with a body that is not JSON")
        }
    }

    /// The version the `ETag` header carries (`"<version>"`; a weak tag's too), or `nil`.
    var etagVersion: String? {
        // On UTF-8 bytes: with Foundation's trimming and Character comparisons, reading the tag of
        // each answer of a batch took 3% of a push's client time.
        guard let header = header("ETag") else { return nil }
        var tag = Substring(header).utf8[...]
        let blank = { (byte: UInt8) in byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
        while let first = tag.first, blank(first) { tag = tag.dropFirst() }
        while let last = tag.last, blank(last) { tag = tag.dropLast() }
        if tag.starts(with: "W/".utf8) { tag = tag.dropFirst(2) }
        if tag.count >= 2, tag.first == UInt8(ascii: "\""), tag.last == UInt8(ascii: "\"") {
            tag = tag.dropFirst().dropLast()
        }
        return tag.isEmpty ? nil : String(Substring(tag))
    }

    /// The item in the body, with the `ETag`'s version when there is one.
    func item() throws(RemoteError) -> JSONObject? {
        guard case .object(var item)? = try json() else { return nil }
        // Only when they differ: assigning copies the whole item (the parsed answer holds it too).
        if let version = etagVersion, item["version"]?.stringValue != version { item["version"] = .string(version) }
        return item
    }

    /// How long the server asked to wait before trying again: `Retry-After` as seconds or as an
    /// HTTP date (RFC 9110 §10.2.3), or `nil` when absent or unreadable.
    var retryAfter: Duration? {
        guard let text = header("Retry-After")?.trimmingCharacters(in: .whitespaces), !text.isEmpty else { return nil }
        if let seconds = Int64(text) { return seconds >= 0 ? .seconds(seconds) : nil }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: text) else { return nil }
        return .milliseconds(max(0, Int64(date.timeIntervalSinceNow * 1000)))
    }

    /// The error for this answer (a status of 400 or more), with `action` in its message and the
    /// wait the server asked for.
    func failure(_ action: String, serverItem: JSONObject? = nil) -> RemoteError {
        RemoteError(status: status, "\(action): \(errorMessage)", serverItem: serverItem, retryAfter: retryAfter)
    }

    /// The one-line message of an error answer, for people.
    ///
    /// The body of a 409 or 412 is the server's item (both protocols), which is the user's data, so
    /// their message is a fixed description of the status. Other statuses give the message of an
    /// error body (``errorBodyMessage``), or the status when the body is not one.
    var errorMessage: String {
        switch status {
        case 409: return "the server holds another version of the item (409 Conflict)"
        case 412: return "the server's item changed since the version this change is based on (412 Precondition Failed)"
        default: return errorBodyMessage ?? statusDescription
        }
    }

    /// `the server answered HTTP 502 (bad gateway)`.
    var statusDescription: String {
        "the server answered HTTP \(status) (\(HTTPURLResponse.localizedString(forStatusCode: status)))"
    }

    /// The message of the body when it is an error body, as one line of at most
    /// ``maximumMessageLength`` characters with no control characters; otherwise `nil`.
    ///
    /// An error body is a JSON string (CommunityToolkit); a JSON object that is not an item (it has
    /// no `id`) with an `error` (node, Ferry's server; or OData's `{"error": {"message": …}}`),
    /// `message`, `detail` or `title` (ASP.NET's problem details); or short plain text. An HTML page
    /// (a proxy's, a web server's) is not one.
    var errorBodyMessage: String? {
        if body.isEmpty { return nil }
        if let json = try? JSONValue(parsingUTF8: body) {
            switch json {
            case .string(let text):
                return Self.displayLine(text)
            case .object(let object) where object["id"] == nil:
                if case .object(let error)? = object["error"], let text = error["message"]?.stringValue,
                    let line = Self.displayLine(text)
                {
                    return line
                }
                for key in ["error", "message", "detail", "title"] {
                    if let text = object[key]?.stringValue, let line = Self.displayLine(text) { return line }
                }
                return nil
            default:
                return nil
            }
        }
        guard !isHTML, body.count <= 2048, let text = String(data: body, encoding: .utf8) else { return nil }
        return Self.displayLine(text)
    }

    /// The `code` of a JSON error body (Ferry's server sends one), or `nil`.
    var errorBodyCode: String? {
        guard !body.isEmpty, case .object(let object)? = try? JSONValue(parsingUTF8: body), object["id"] == nil else {
            return nil
        }
        return object["code"]?.stringValue
    }

    /// Whether the body is an HTML page (by its `Content-Type`, or a body that starts with `<`).
    var isHTML: Bool {
        if let type = header("Content-Type")?.lowercased(), type.contains("html") { return true }
        let first = body.first {
            ![UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\r"), UInt8(ascii: "\n")].contains($0)
        }
        return first == UInt8(ascii: "<")
    }

    /// The longest server text a message shows.
    static let maximumMessageLength = 300

    /// `text` as one line for people: line breaks and tabs become spaces, other control characters
    /// (and bidirectional overrides) go, runs of spaces become one, and at most
    /// ``maximumMessageLength`` characters remain (the last one `…` when cut). `nil` when nothing
    /// is left.
    static func displayLine(_ text: String) -> String? {
        var line = String.UnicodeScalarView()
        var pendingSpace = false
        for scalar in text.unicodeScalars {
            if scalar.properties.isWhitespace {
                pendingSpace = !line.isEmpty
                continue
            }
            let category = scalar.properties.generalCategory
            if category == .control || scalar.properties.isBidiControl { continue }
            if pendingSpace {
                line.append(" ")
                pendingSpace = false
            }
            line.append(scalar)
        }
        let result = String(line)
        if result.isEmpty { return nil }
        if result.count <= maximumMessageLength { return result }
        return String(result.prefix(maximumMessageLength - 1)) + "…"
    }
}
