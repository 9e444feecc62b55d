import FerryServer
import Foundation
import ServerStorageCore
import StoreConformance
import SyncCore
import Testing

// The Node peer's step sequences: several requests in a row, each with its own checks.
extension PeerCrudHTTPTests.Runner {
    mutating func runSteps(_ peerCase: JSONObject) async throws -> String? {
        let steps = peerCase["request"]?["steps"]?.arrayValue ?? []
        var created: Set<String> = []
        for (index, stepValue) in steps.enumerated() {
            guard let step = stepValue.objectValue else { continue }
            let method = step["method"]?.stringValue ?? "GET"
            if method == "POST (x4)" {
                for (id, value, user) in [
                    ("1", "test1", "user1"), ("2", "test2", "user1"), ("3", "test1", "user2"),
                    ("4", "test2", "user2"),
                ] {
                    let reply = try await server.send(
                        "POST", "/tables/perUser", headers: versionHeader + userHeaders(user),
                        json: ["id": .string(id), "value": .string(value)])
                    guard reply.status == 201 else { return "step \(index): insert \(id) gave \(reply.status)" }
                }
                continue
            }
            let path = step["path"]?.stringValue ?? "/"
            let parts = path.split(separator: "/")
            // A read of an item no earlier step created (the peer test relied on a previous test).
            if method == "GET", parts.count == 3, step["expectStatus"]?.intValue == 200, !created.contains(path) {
                _ = try await server.send(
                    "POST", "/" + parts.prefix(2).joined(separator: "/"), headers: versionHeader,
                    json: ["id": .string(String(parts[2]))])
            }
            var headers: [(String, String)] = []
            var hasVersion = false
            for (key, value) in step["headers"]?.objectValue ?? [:] {
                guard var text = value.stringValue else { continue }
                if key.lowercased() == "zumo-api-version" { hasVersion = true }
                if text.hasPrefix("<version from POST") { text = lastBody["version"]?.stringValue ?? "" }
                headers.append((key, text))
            }
            let query = step["query"]?.stringValue ?? ""
            if !hasVersion && !query.lowercased().contains("zumo-api-version")
                && !name.hasPrefix("node.version: missing")
            {
                headers += versionHeader
            }
            headers += userHeaders(step["user"]?.stringValue)
            var body: [UInt8]?
            if let raw = step["rawBody"]?.stringValue {
                body = Array(raw.utf8)
            } else if let value = step["body"] {
                var json = substitute(value, before: nil)
                if case .object(var object) = json,
                    object["version"]?.stringValue?.hasPrefix("<version from POST") == true
                {
                    object["version"] = lastBody["version"] ?? .null
                    json = .object(object)
                }
                body = json.serializedUTF8()
                headers.append(("Content-Type", "application/json"))
            }
            let target = path + (query.isEmpty ? "" : "?" + encodedQuery(query))
            let reply = try await server.send(method, target, headers: headers, body: body)
            if method == "POST", reply.status == 201, let object = reply.json?.objectValue {
                lastBody = object
                if let id = object["id"]?.stringValue {
                    created.insert("/" + parts.prefix(2).joined(separator: "/") + "/" + id)
                }
            }
            let label = "step \(index + 1) (\(method) \(path))"
            if let expected = step["expectStatus"]?.intValue, reply.status != Int(expected) {
                return "\(label): status \(reply.status), expected \(expected): \(reply.text.prefix(160))"
            }
            for (header, value) in step["expectHeaders"]?.objectValue ?? [:] {
                let expected = value.stringValue ?? ""
                let actual = reply.header(header)
                if expected == "absent" {
                    if actual != nil { return "\(label): \(header) is present" }
                } else if expected.hasPrefix("contains ") {
                    let needle = String(expected.dropFirst("contains ".count).dropFirst().dropLast())
                    if actual?.contains(needle) != true {
                        return "\(label): \(header) \(actual ?? "absent") lacks \(needle)"
                    }
                } else if expected.contains("body.version") {
                    let version = reply.json?["version"]?.stringValue ?? "?"
                    if actual != "\"\(version)\"" {
                        return "\(label): ETag \(actual ?? "absent"), body version \(version)"
                    }
                } else if expected.contains("weak") {
                    if let actual, !actual.hasPrefix("W/") { return "\(label): a list carries a strong ETag" }
                } else if actual == nil {
                    return "\(label): no \(header)"
                }
            }
            if let problem = checkStepBody(step, reply) { return "\(label): \(problem)" }
            if let ids = step["expectIds"]?.arrayValue {
                let actual = reply.json?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? []
                if actual != ids.compactMap(\.stringValue) { return "\(label): ids \(actual), expected \(ids)" }
            }
        }
        return nil
    }

    func checkStepBody(_ step: JSONObject, _ reply: LiveServer.Reply) -> String? {
        guard let expected = step["expectBody"] else { return nil }
        let json = reply.json
        switch expected {
        case .array(let items) where items.isEmpty:
            return json == .array([]) ? nil : "body \(reply.text.prefix(80)), expected []"
        case .object(let object):
            guard let results = json?["results"]?.arrayValue, json?["count"] == object["count"] else {
                return "body \(reply.text.prefix(120))"
            }
            for (actual, wanted) in zip(results, object["results"]?.arrayValue ?? []) {
                for (key, value) in wanted.objectValue ?? [:] where actual[key] != value {
                    return "results[\(key)] is \(actual[key]?.serialized() ?? "absent")"
                }
            }
            return nil
        case .string(let prose):
            switch prose {
            case "[] (length 0)": return json?.arrayValue?.count == 0 ? nil : "expected an empty array"
            case "array length 1": return json?.arrayValue?.count == 1 ? nil : "expected one item"
            case "object (not array)": return json?.objectValue != nil ? nil : "expected an object"
            case "count == 1":
                return json?["count"] == 1 ? nil : "count \(json?["count"]?.serialized() ?? "absent")"
            case "userId == \"user1\"": return json?["userId"] == "user1" ? nil : "userId is not user1"
            case "1 item with id defined (uuid v4)":
                return json?.arrayValue?.count == 1 && json?.arrayValue?.first?["id"]?.stringValue != nil
                    ? nil : "expected one item with an id"
            case "[{id:\"1\",value:\"test\",...}]":
                let first = json?.arrayValue?.first
                return first?["id"] == "1" && first?["value"] == "test" ? nil : "expected item 1 with value test"
            default:
                if prose.hasPrefix("server item") || prose == "deleted item" || prose.hasPrefix("node returns")
                    || prose == "contains the sent fields"
                {
                    guard let object = json?.objectValue, object["id"] != nil else { return "no item in the body" }
                    if prose.contains("!= \\\"incorrect version\\\"") || prose.contains("!= \"incorrect version\""),
                        object["version"] == "incorrect version"
                    {
                        return "the body holds the sent version"
                    }
                    return nil
                }
                if prose.hasPrefix("{\"error\"") { return json?["error"] != nil ? nil : "no error message" }
                return "unknown body check '\(prose)'"
            }
        default:
            return "unknown body check"
        }
    }
}

/// HTTP dates for the conditional-request cases (the server's own formatter is internal).
enum HTTPDateText {
    static func format(_ timestamp: Timestamp) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: Date(timeIntervalSince1970: Double(timestamp.millisecondsSince1970) / 1000))
    }

    static func parse(_ text: String) -> Date? {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.date(from: text)
    }
}
