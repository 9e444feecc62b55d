import Foundation
import ServerStorageCore
import SyncCore

// Request bodies: the media type and charset, JSON that the storage can hold exactly, and the rules an item's
// fields follow (system properties, declared fields).
extension TableService {
    static func mediaType(_ request: TableRequest) -> String? {
        guard let header = request.headers["content-type"] else { return nil }
        if header == "application/json" { return header }  // nearly every request
        let type = header.split(separator: ";", maxSplits: 1).first.map {
            $0.trimmingCharacters(in: .whitespaces).lowercased()
        }
        return type?.isEmpty == false ? type : nil
    }

    /// The `charset` parameter of `Content-Type`, lowercased and unquoted, when there is one.
    static func charset(_ request: TableRequest) -> String? {
        guard let header = request.headers["content-type"] else { return nil }
        for parameter in header.split(separator: ";").dropFirst() {
            let pair = parameter.split(separator: "=", maxSplits: 1)
            guard pair.count == 2, pair[0].trimmingCharacters(in: .whitespaces).lowercased() == "charset" else {
                continue
            }
            var value = pair[1].trimmingCharacters(in: .whitespaces)
            if value.count >= 2, value.hasPrefix("\""), value.hasSuffix("\"") {
                value = String(value.dropFirst().dropLast())
            }
            return value.lowercased()
        }
        return nil
    }

    /// Parses the body as JSON. A missing or empty `Content-Type` counts as JSON (as the Node server
    /// did); other types than JSON ones answer 415.
    func parseJSON(_ request: TableRequest, allowing types: Set<String> = []) throws -> JSONValue {
        try Self.requireJSON(request, allowing: types)
        guard let bytes = request.body, !bytes.isEmpty else {
            throw ProtocolError.badRequest("the request has no body", code: "invalidBody")
        }
        let value: JSONValue
        if let parsed = request.parsedBody {
            value = parsed
        } else {
            do {
                value = try JSONValue(parsingUTF8: bytes)
            } catch {
                throw ProtocolError.badRequest(error.description, code: "invalidJSON")
            }
        }
        try rejectUnstorable(value)
        return value
    }

    /// 415 unless the body's `Content-Type` is a JSON one in UTF-8 (or none, as the Node server took).
    static func requireJSON(_ request: TableRequest, allowing types: Set<String> = []) throws {
        if let type = Self.mediaType(request) {
            let accepted =
                type == "application/json" || type == "text/json" || type == "application/merge-patch+json"
                || types.contains(type)
            guard accepted else {
                throw ProtocolError(
                    415, "unsupportedMediaType", "the body must be JSON (Content-Type application/json), not \(type)")
            }
            if let header = request.headers["content-type"], header.utf8.contains(UInt8(ascii: ";")),
                let charset = Self.charset(request),
                charset != "utf-8", charset != "utf8"
            {
                throw ProtocolError(
                    415, "unsupportedMediaType", "the body must be UTF-8 JSON, not charset '\(charset.prefix(40))'")
            }
        }
    }

    func readObject(_ request: TableRequest) throws -> JSONObject {
        guard case .object(let object) = try parseJSON(request) else {
            throw ProtocolError.badRequest("the body must be a JSON object", code: "invalidBody")
        }
        return object
    }

    /// Refuses what the storage could not hold exactly, naming where it is: strings or member names
    /// holding U+0000 (SQLite's text functions and PostgreSQL's `jsonb` cannot hold them faithfully),
    /// and numbers no double can hold (`1e400`, a 400-digit integer), which JSON text would turn into
    /// `null`.
    func rejectUnstorable(_ value: JSONValue) throws {
        var stack: [(value: JSONValue, path: String)] = [(value, "")]
        while let (next, path) = stack.popLast() {
            switch next {
            case .string(let text) where text.utf8.contains(0):
                throw ProtocolError.badRequest(
                    "\(Self.describe(path)) holds the NUL character (\\u0000), which strings may not contain",
                    code: "invalidItem")
            case .double(let number) where !number.isFinite:
                throw ProtocolError.badRequest(
                    "\(Self.describe(path)) is a number too large for a double (at most about 1.8e308)",
                    code: "invalidItem")
            case .array(let elements):
                for (index, element) in elements.enumerated() { stack.append((element, "\(path)[\(index)]")) }
            case .object(let object):
                for (key, element) in object {
                    if key.utf8.contains(0) {
                        throw ProtocolError.badRequest("member names must not contain NUL", code: "invalidItem")
                    }
                    stack.append((element, path.isEmpty ? key : "\(path).\(key)"))
                }
            default: break
            }
        }
    }

    /// `field 'a.b[2]'`, or `the body` for the top level, with the name cut to a readable length.
    static func describe(_ path: String) -> String {
        if path.isEmpty { return "the body" }
        let shown = path.count > 80 ? path.prefix(80) + "…" : Substring(path)
        return "field '\(shown)'"
    }

    /// The body's `id`: a valid string (an integer is taken as its decimal text, as the Node server
    /// stored it); absent or `null` gives `nil`.
    func bodyID(_ body: JSONObject) throws -> String? {
        switch body["id"] {
        case nil, .null?: return nil
        case .string(let text)?: return try validatedURLID(text)
        case .int(let number)?: return String(number)
        default: throw ProtocolError.badRequest("'id' must be a string", code: "invalidId")
        }
    }

    /// 2.0 refuses `createdAt`, `updatedAt` and `deleted` in any letter case (as the Node server
    /// did); both versions refuse other spellings of system properties (`ID`, `UpdatedAt`).
    func checkReservedProperties(_ body: JSONObject, _ context: RequestContext) throws {
        for key in body.keys.sorted() where SystemProperty.isSystemProperty(key) {
            let exact = SystemProperty(rawValue: key) != nil
            if !exact || (context.version == .v2 && ["createdAt", "updatedAt", "deleted"].contains(key)) {
                throw ProtocolError.badRequest(
                    "'\(key)' is a system property; the server sets it", code: "reservedProperty")
            }
        }
    }

    /// A 3.0 patch may repeat `id`, `createdAt`, `updatedAt` and `version` but not change them.
    /// (In a merge patch, `version` is a concurrency token instead: a stale one is a 409.)
    func checkUnchangedSystemProperties(_ object: JSONObject, _ current: StoredItem, includingVersion: Bool) throws {
        let rendered = Self.render(current, .v2)
        for key in ["id", "createdAt", "updatedAt", "version"] where includingVersion || key != "version" {
            guard let value = object[key] else { continue }
            let same: Bool
            if key == "createdAt" || key == "updatedAt", case .string(let text) = value {
                same = Timestamp(iso8601: text) == (key == "createdAt" ? current.createdAt : current.updatedAt)
            } else {
                same = value == rendered[key]
            }
            guard same else {
                throw ProtocolError.badRequest(
                    "'\(key)' is a system property and cannot be changed", code: "reservedProperty")
            }
        }
    }

    /// The body without system properties.
    static func userFields(_ body: JSONObject) -> JSONObject {
        var content = body
        for property in SystemProperty.allCases { content[property.rawValue] = nil }
        return content
    }

    func validateContent(_ content: JSONObject, _ table: TableSettings) throws {
        for field in table.fields.keys.sorted() {
            if let violation = table.fields[field]!.violation(of: content[field], field: field) {
                throw ProtocolError.badRequest(violation, code: "invalidItem")
            }
        }
        if !table.additionalFields {
            for key in content.keys.sorted()
            where table.fields[key] == nil && !(table.perUser && key == table.userIDField) {
                throw ProtocolError.badRequest("table '\(table.name)' has no field '\(key)'", code: "invalidItem")
            }
        }
    }

}
