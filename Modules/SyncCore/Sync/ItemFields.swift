/// Helpers on items: the body sent to a server, the system properties kept locally, and content
/// comparison for lost-response detection.
enum ItemFields {
    /// The server-owned system properties (everything but `id`).
    static let serverOwned = ["createdAt", "updatedAt", "version", "deleted"]

    /// The local copy of a live server item, under `id` when given (a pull's items carry theirs):
    /// local items are never deleted ones, so the `deleted` flag is not stored (a copy that kept it
    /// matched `deleted eq false` on one device and not on another that pulled the same item).
    static func localCopy(of server: JSONObject, id: String? = nil) -> JSONObject {
        var stored = server
        if let id { stored["id"] = .string(id) }
        stored.removeValue(forKey: "deleted")
        return stored
    }

    /// Whether `field` is a server-owned system property (case-insensitive, as the servers read them).
    static func isServerOwned(_ field: String) -> Bool {
        field != "id" && SystemProperty.isSystemProperty(field)
    }

    /// The item without its server-owned system properties: what a push sends.
    static func body(_ item: JSONObject) -> JSONObject {
        item.filter { !isServerOwned($0.key) }
    }

    /// `item`'s own fields with the server-owned system properties of `source` (`deleted` excluded).
    static func body(_ item: JSONObject, withSystemPropertiesOf source: JSONObject?) -> JSONObject {
        var result = body(item)
        guard let source else { return result }
        for (field, value) in source where isServerOwned(field) && field != "deleted" {
            result[field] = value
        }
        return result
    }

    /// Whether the server's item holds what the client sent: every sent field has the same value
    /// (integers and floating-point numbers compare by value; a missing field is `null`). Fields the
    /// client did not send may have any value: a 2.0 update is a `PATCH`, which the server merges
    /// into the item, so the item the client's write produced can hold more fields than it sent.
    static func sameContent(_ server: JSONObject, _ sent: JSONObject) -> Bool {
        for (field, value) in sent where !isServerOwned(field) {
            guard let other = server[field] else {
                if value == .null { continue }
                return false
            }
            if !sameValue(other, value) { return false }
        }
        return true
    }

    static func sameValue(_ lhs: JSONValue, _ rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.int(let a), .double(let b)), (.double(let b), .int(let a)): return Double(a) == b
        case (.array(let a), .array(let b)):
            return a.count == b.count && zip(a, b).allSatisfy { sameValue($0, $1) }
        case (.object(let a), .object(let b)):
            return a.count == b.count && a.allSatisfy { key, value in b[key].map { sameValue(value, $0) } ?? false }
        default: return lhs == rhs
        }
    }

    /// The current time, for operation and error timestamps.
    static func now() -> Timestamp {
        Timestamp(millisecondsSince1970: Int64(currentMilliseconds()))
    }
}
