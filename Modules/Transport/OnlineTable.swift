import Foundation
public import SyncCore

/// A table on the server, used directly: every call is one request (or a few, when following
/// pages), with no local store. This is what the legacy SDK calls `MSTable`; it is also the
/// `RemoteTable` the sync engine pushes to and pulls from.
///
/// ```swift
/// let movies = remote.onlineTable("movies")
/// let inserted = try await movies.insert(["id": "m1", "title": "Amélie", "year": 2001])
/// let updated = try await movies.update(["id": "m1", "title": "Amélie", "year": 2002],
///                                       ifVersion: inserted.version)
/// let page = try await movies.query(TableQuery().filter(.field("year").ge(2000)).includingTotalCount())
/// print(page.totalCount ?? 0, page.items.count)
/// try await movies.delete(id: "m1", ifVersion: updated.version)
/// ```
///
/// Errors are `RemoteError`s: `.conflict` (409/412, with `RemoteError.serverItem`), `.notFound`,
/// `.unauthorized`, `.badRequest`, `.server`, `.network`, `.cancelled`, `.invalidResponse`.
public struct OnlineTable: RemoteTable {
    /// The table's name on the server.
    public let name: String
    let client: HTTPClient

    // MARK: RemoteTable

    /// Inserts `item` (`POST /tables/<name>`) and returns the server's item.
    public func insert(_ item: JSONObject) async throws(RemoteError) -> JSONObject {
        try await sendForItem(RemoteWrite(table: name, kind: .insert, itemID: item.id ?? "", body: item))
    }

    /// Updates the item (3.0: `PUT` of the whole item; 2.0: `PATCH`), only if the server's version
    /// is `version` when one is given (`If-Match`).
    public func update(_ item: JSONObject, ifVersion version: String?) async throws(RemoteError) -> JSONObject {
        guard let id = item.id else { throw RemoteError(.badRequest, "an item to update needs an 'id'") }
        return try await sendForItem(
            RemoteWrite(table: name, kind: .update, itemID: id, body: item, ifVersion: version))
    }

    /// Deletes the item, only if the server's version is `version` when one is given.
    public func delete(id: String, ifVersion version: String?) async throws(RemoteError) {
        _ = try await send(RemoteWrite(table: name, kind: .delete, itemID: id, body: [:], ifVersion: version))
    }

    /// The server's live item, or `nil` when it does not exist or is soft-deleted.
    public func item(id: String) async throws(RemoteError) -> JSONObject? {
        try await item(id: id, includeDeleted: false)
    }

    // MARK: Keyed writes

    /// The method, URL and headers of one write: what ``insert(_:)``, ``update(_:ifVersion:)`` and
    /// ``delete(id:ifVersion:)`` send, with the write's `Idempotency-Key`.
    func request(for write: RemoteWrite) throws(RemoteError) -> (method: String, url: URL, headers: [String: String]) {
        let (method, headers) = methodAndHeaders(for: write)
        return (method, try client.url(table: name, id: write.kind == .insert ? nil : write.itemID), headers)
    }

    /// The method and headers of `write`'s request.
    func methodAndHeaders(for write: RemoteWrite) -> (method: String, headers: [String: String]) {
        var headers = write.kind == .insert ? [:] : Self.ifMatch(write.ifVersion)
        if let key = write.idempotencyKey { headers["Idempotency-Key"] = key }
        switch write.kind {
        case .insert: return ("POST", headers)
        case .update: return (client.configuration.protocolVersion == .v2 ? "PATCH" : "PUT", headers)
        case .delete: return ("DELETE", headers)
        }
    }

    /// `write`'s URL relative to the tables path, `<table>[/<id>]` percent-encoded as path
    /// segments (a batch's entry; no URL is made for it).
    func relativePath(for write: RemoteWrite) -> String {
        let table = PercentEncoding.pathSegment(name)
        return write.kind == .insert ? table : table + "/" + PercentEncoding.pathSegment(write.itemID)
    }

    /// What the answer to `write` means: the stored item, `nil` for a delete, or the error.
    func outcome(of write: RemoteWrite, _ response: HTTPResponse) throws(RemoteError) -> JSONObject? {
        switch write.kind {
        case .insert:
            // The table's URL itself answered 404: no such endpoint (for an update or a delete, a
            // 404 is about the item).
            if let missing = noTableEndpoint(response, action: "inserting into '\(name)'") { throw missing }
            return try expectItem(response, id: write.itemID, "inserting into '\(name)'")
        case .update:
            return try expectItem(response, id: write.itemID, "updating '\(write.itemID)' in '\(name)'")
        case .delete:
            guard (200..<300).contains(response.status) else {
                throw failure(response, id: write.itemID, "deleting '\(write.itemID)' from '\(name)'")
            }
            return nil
        }
    }

    /// ``send(_:)`` of an insert or update: the item the server stored.
    private func sendForItem(_ write: RemoteWrite) async throws(RemoteError) -> JSONObject {
        guard let item = try await send(write) else {
            throw RemoteError(.invalidResponse, "the server's answer holds no item")
        }
        return item
    }

    func send(_ write: RemoteWrite) async throws(RemoteError) -> JSONObject? {
        let (method, url, headers) = try request(for: write)
        let body: JSONValue? = write.kind == .delete ? nil : .object(write.body)
        let response = try await client.send(
            method, url, body: body, headers: headers, idempotent: write.idempotencyKey != nil)
        return try outcome(of: write, response)
    }

    // MARK: Online extras

    /// The item with `id`; with `includeDeleted`, a soft-deleted item too.
    public func item(id: String, includeDeleted: Bool) async throws(RemoteError) -> JSONObject? {
        let query = includeDeleted ? includeDeletedParameter : nil
        let response = try await client.send("GET", try client.url(table: name, id: id, query: query))
        if response.status == 404 || response.status == 410 { return nil }
        return try expectItem(response, id: id, "reading '\(id)' from '\(name)'")
    }

    /// One page of `query`, with the total count when the query asked for it (the sync engine's
    /// `RemoteTable.query(_:)`).
    ///
    /// A table that exists but has no rows is a page with no items (Ferry's server answers so for
    /// a dynamic table nobody has written to yet). A 404 is not: it means there is no table endpoint
    /// at that URL (a wrong server URL, or a server that does not speak the table protocol), and it
    /// throws `notFound` with a message that names the table and the URL (`noEndpoint` when the
    /// answer is plainly not a table endpoint's: a web page, or Ferry's `noSuchResource`). A 200 whose body is not
    /// a page of the protocol spoken (3.0.0: `{"items": […]}`; 2.0.0: an array or `{"results": […]}`)
    /// throws `invalidResponse`.
    public func query(_ query: TableQuery) async throws(RemoteError) -> RemotePage {
        var text = query.odataQueryString(protocolVersion: client.configuration.protocolVersion)
        if client.configuration.protocolVersion == .v2 {
            // The 2.0 node server reads this one parameter case-sensitively.
            text = text.replacingOccurrences(of: "__includedeleted=", with: "__includeDeleted=")
        }
        let response = try await client.send("GET", try client.url(table: name, query: text))
        let endpoint = client.displayURL(table: name)
        if let missing = noTableEndpoint(response) { throw missing }
        guard response.status == 200 else { throw failure(response, "querying '\(name)'") }
        return try PageDecoding.decode(
            response, protocolVersion: client.configuration.protocolVersion, table: name, endpoint: endpoint)
    }

    /// Every item `query` matches, following the server's pages (at most `limit` items).
    ///
    /// ```swift
    /// let unfinished = try await todos.all(TableQuery().filter(.field("done").eq(false)))
    /// ```
    ///
    /// - Throws: `RemoteError` of the requests; `invalidResponse` when a next-page link leads back to
    ///   a page already read (a server whose links do not advance would be followed forever).
    public func all(_ query: TableQuery, limit: Int = 1_000_000) async throws(RemoteError) -> [JSONObject] {
        var items: [JSONObject] = []
        var next: TableQuery? = query
        var read: Set<TableQuery> = []
        while let current = next, items.count < limit {
            guard read.insert(current).inserted else {
                throw RemoteError(
                    .invalidResponse,
                    "querying '\(name)': the server's next-page link leads back to a page already read "
                        + "(\(current.odataQueryString(protocolVersion: client.configuration.protocolVersion).prefix(200))); "
                        + "stopped after \(items.count) items")
            }
            let page = try await self.query(current)
            items += page.items
            next = page.items.isEmpty ? nil : page.nextPage
        }
        return Array(items.prefix(limit))
    }

    /// Brings back a soft-deleted item (2.0: `POST /tables/<name>/<id>`; 3.0: `PUT` of the item with
    /// `deleted: false` and `__includedeleted=true`).
    public func undelete(id: String, ifVersion version: String? = nil) async throws(RemoteError) -> JSONObject {
        let url: URL
        let response: HTTPResponse
        switch client.configuration.protocolVersion {
        case .v2:
            url = try client.url(table: name, id: id)
            response = try await client.send("POST", url, headers: Self.ifMatch(version))
        case .v3:
            guard var item = try await item(id: id, includeDeleted: true) else {
                throw RemoteError(.notFound, status: 404, "item '\(id)' does not exist in '\(name)'")
            }
            let expected = version ?? item.version
            item["deleted"] = false
            url = try client.url(table: name, id: id, query: includeDeletedParameter)
            response = try await client.send("PUT", url, body: .object(item), headers: Self.ifMatch(expected))
        }
        return try expectItem(response, id: id, "undeleting '\(id)' in '\(name)'")
    }

    // MARK: Answers

    private var includeDeletedParameter: String {
        client.configuration.protocolVersion == .v2 ? "__includeDeleted=true" : "__includedeleted=true"
    }

    static func ifMatch(_ version: String?) -> [String: String] {
        guard let version, !version.isEmpty else { return [:] }
        return ["If-Match": "\"" + version + "\""]
    }

    /// The item of an accepted answer about the item `id` (empty: an insert that lets the server
    /// choose the id). `action` (for messages) is made only for
    /// a failure: a push reads thousands of answers. An answer whose item has another id is not
    /// about this one (a server that chose its own id, a proxy's cache): taking it would store
    /// another item's fields under this id, or call a write done that the server holds elsewhere.
    func expectItem(_ response: HTTPResponse, id: String, _ action: @autoclosure () -> String) throws(RemoteError)
        -> JSONObject
    {
        guard (200..<300).contains(response.status) else { throw failure(response, id: id, action()) }
        guard let item = try response.item() else {
            throw RemoteError(
                .invalidResponse, status: response.status, "\(action()): the server's answer holds no item")
        }
        // An insert without an id (`id` empty) takes the id the server chose.
        if let answered = item.id, !id.isEmpty, !Self.sameID(answered, id) {
            throw RemoteError(
                .invalidResponse, status: response.status,
                "\(action()): the server answered with the item '\(answered.prefix(100))' instead")
        }
        return item
    }

    /// Whether the id a server answered is the one asked about: equal, or equal but for letter case
    /// (a SQL Server backend compares ids without case and may answer its stored spelling).
    static func sameID(_ answered: String, _ asked: String) -> Bool {
        answered == asked || answered.lowercased() == asked.lowercased()
    }

    /// The error of a refused request about the item `id`; a 409 or 412 carries the server's item
    /// only when the body is that item (another item's fields must not be taken for its own).
    /// A 404 from the table's own URL (a query, an insert) means there is no table endpoint there
    /// (a wrong server URL, or a server that does not speak the table protocol): `notFound` naming
    /// the table and the URL. Ferry's server says `invalidTableName` for a name it refuses.
    func noTableEndpoint(_ response: HTTPResponse, action: String? = nil) -> RemoteError? {
        guard response.status == 404, response.errorBodyCode != "invalidTableName" else { return nil }
        // What is sure first, what the server said last: its words may hold parentheses of their own.
        let said = response.errorBodyMessage.map { "; the server says: \($0)" } ?? ""
        let noEndpoint = Self.isNoEndpoint(response)
        return RemoteError(
            noEndpoint ? .noEndpoint : .notFound, status: 404,
            (action.map { $0 + ": " } ?? "")
                + "there is no table endpoint at \(client.displayURL(table: name)): "
                + (noEndpoint ? "" : "the server has no table '\(name)', or ")
                + "the server URL is not the base URL of a table-protocol server\(said)")
    }

    /// Whether a 404 comes from something that is no table endpoint: Ferry's server names a path
    /// it has no resource at (`noSuchResource`), and a web server answers with an HTML page. A
    /// table endpoint's 404 is about the table or the item.
    static func isNoEndpoint(_ response: HTTPResponse) -> Bool {
        response.status == 404 && (response.errorBodyCode == "noSuchResource" || response.isHTML)
    }

    func failure(_ response: HTTPResponse, id: String? = nil, _ action: String) -> RemoteError {
        let serverItem: JSONObject? =
            if [409, 412].contains(response.status), let item = try? response.item(), let answered = item.id,
                id.map({ Self.sameID(answered, $0) }) ?? true
            {
                item
            } else {
                nil
            }
        if response.status == 404, response.errorBodyCode == "invalidTableName" {
            return RemoteError(.invalidTableName, status: 404, "\(action): \(response.errorMessage)")
        }
        if Self.isNoEndpoint(response), let missing = noTableEndpoint(response, action: action) { return missing }
        if response.status == 501 {
            // No server of the protocol leaves its table routes' methods unimplemented: this is
            // another kind of server (`python3 -m http.server` answers 501 to a POST). Taken for a
            // refusal of the write, the push recorded the operation as failed.
            return RemoteError(
                .noEndpoint, status: 501,
                "\(action): there is no table endpoint at \(client.displayURL(table: name)) (it answered "
                    + "501 Not Implemented): the server URL is not the base URL of a table-protocol server")
        }
        return response.failure(action, serverItem: serverItem)
    }
}

/// Reads query answers of both protocol versions, strictly: a body that is not a page of the
/// protocol spoken is an `invalidResponse` that says what it is instead, not an empty page.
enum PageDecoding {
    static func decode(
        _ response: HTTPResponse, protocolVersion: ProtocolVersion, table: String, endpoint: String
    ) throws(RemoteError) -> RemotePage {
        func invalid(_ what: String) -> RemoteError {
            let (version, shape) =
                switch protocolVersion {
                case .v3: ("3.0.0", #"{"items": [...]}"#)
                case .v2: ("2.0.0", #"an array or {"results": [...]}"#)
                }
            return RemoteError(
                .invalidResponse, status: response.status,
                "querying '\(table)': \(endpoint) answered \(what), not a page of the table protocol \(version) "
                    + "(\(shape)); check that the server URL leads to a table-protocol server")
        }
        let json: JSONValue
        if response.body.isEmpty { throw invalid("an empty body") }
        if response.isHTML { throw invalid("an HTML page") }
        do {
            json = try JSONValue(parsingUTF8: response.body)
        } catch {
            throw invalid("text that is not JSON")
        }
        let key = protocolVersion == .v3 ? "items" : "results"
        var items: [JSONValue]
        var count: Int?
        var nextLink: String?
        switch json {
        case .array(let array) where protocolVersion == .v2:
            items = array
        case .object(let object):
            // 3.0: {"items", "count", "nextLink"}; 2.0 with $inlinecount: {"results", "count"}.
            guard let value = object[key] else {
                throw invalid("a JSON object with no '\(key)'\(keyList(object))")
            }
            guard case .array(let array) = value else { throw invalid("a JSON object whose '\(key)' is not an array") }
            items = array
            switch object["count"] {
            case .int(let number)?: count = Int(number)
            case nil, .null?: break
            default: throw invalid("a page whose 'count' is not an integer")
            }
            switch object["nextLink"] {
            case .string(let link)?: nextLink = link
            case nil, .null?: break
            default: throw invalid("a page whose 'nextLink' is not a string")
            }
        default:
            throw invalid(describe(json))
        }
        if nextLink == nil, let link = response.header("Link") { nextLink = nextFromLinkHeader(link) }
        let objects = try items.map { value throws(RemoteError) -> JSONObject in
            guard case .object(let item) = value else { throw invalid("a page with an item that is not an object") }
            return item
        }
        var nextPage: TableQuery?
        if let nextLink, !nextLink.isEmpty {
            do {
                nextPage = try TableQuery(odata: queryPart(of: nextLink), protocolVersion: protocolVersion)
            } catch {
                throw RemoteError(
                    .invalidResponse, status: response.status,
                    "the next-page link of '\(table)' is not a query this client reads: \(error)")
            }
        }
        return RemotePage(items: objects, totalCount: count, nextPage: nextPage)
    }

    /// What a JSON value that is not a page is, for a message: `a JSON array`, `JSON null` …
    static func describe(_ value: JSONValue) -> String {
        switch value {
        case .null: "JSON null"
        case .bool: "a JSON boolean"
        case .int, .double: "a JSON number"
        case .string: "a JSON string"
        case .array: "a JSON array"
        case .object(let object): "a JSON object" + keyList(object)
        }
    }

    /// ` (keys: a, b, c …)`: the first few keys of an object that is not a page, for a message.
    static func keyList(_ object: [String: JSONValue]) -> String {
        if object.isEmpty { return "" }
        let keys = object.keys.sorted().prefix(4).map { HTTPResponse.displayLine(String($0.prefix(40))) ?? "?" }
        return " (keys: " + keys.joined(separator: ", ") + (object.count > 4 ? " …)" : ")")
    }

    /// The URL of a 2.0 `Link` header's `rel=next` part (`http://host/tables/t?$skip=50; rel=next`,
    /// with or without angle brackets).
    static func nextFromLinkHeader(_ header: String) -> String? {
        for part in header.split(separator: ",") {
            let pieces = part.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
            guard let target = pieces.first,
                pieces.dropFirst().contains(where: {
                    $0.replacingOccurrences(of: " ", with: "").lowercased() == "rel=next"
                        || $0.replacingOccurrences(of: " ", with: "").lowercased() == "rel=\"next\""
                })
            else { continue }
            var url = target
            if url.hasPrefix("<"), url.hasSuffix(">") { url = String(url.dropFirst().dropLast()) }
            return url
        }
        return nil
    }

    /// The query component of a link: after the `?` of a URL or path, or the link itself when it is
    /// a bare query string (3.0 CommunityToolkit).
    static func queryPart(of link: String) -> String {
        if let mark = link.firstIndex(of: "?") { return String(link[link.index(after: mark)...]) }
        return link
    }
}
