import CoreMetrics
import Foundation
import ServerStorageCore
import Synchronization
@_spi(StoreSupport) import SyncCore

/// `POST /tables/$batch`, an extension of Ferry's server that legacy clients never send: many table
/// requests in one HTTP request, in the JSON batch format of OData 4.01.
///
/// ```json
/// {"requests": [
///   {"id": "1", "method": "POST", "url": "todo", "headers": {"Idempotency-Key": "…"}, "body": {"id": "a"}},
///   {"id": "2", "method": "DELETE", "url": "todo/b", "headers": {"If-Match": "\"7\""}}
/// ]}
/// ```
///
/// answers `200` with `{"responses": [{"id": "1", "status": 201, "headers": {…}, "body": {…}}, …]}`,
/// one response per request in the same order. Each request is handled exactly as it would be alone
/// (routing, version negotiation, authentication, preconditions, conflicts, per-user rows,
/// idempotency keys) with the batch's own headers (the protocol version and the token) under its
/// own, in the batch's protocol version (a request naming another is answered 400
/// `versionMismatch`); requests apply in order and one failing does not stop the next (OData's
/// `continue-on-error`). A request's `url` is relative to `/tables/` (`todo`, `todo/a`), an
/// absolute path (`/tables/todo/a`), or an absolute URL of this server; it must address a table or
/// an item, decided on the parsed route (`/tables/%24batch/` is the batch endpoint too). Not
/// supported, and refused with 400: `atomicityGroup`, `dependsOn`, and a batch, the capabilities or
/// the change feed inside a batch.
///
/// ## Bounds
///
/// Consecutive writes run in one storage transaction (one durable commit) for at most
/// ``RequestLimits/batchWriteSlice``, and consecutive inserts in it as sets (BatchInsertSets.swift: one claim of
/// their keys, one insert statement or a few, one recording of their outcomes); then it commits and the next slice waits its turn behind other writers, so a
/// long batch never holds the writer for long. Reads run outside any transaction and see every
/// write before them. A batch runs for at most ``RequestLimits/maximumBatchDuration``: requests it
/// had no time for are answered 503 with `Retry-After` (not applied). Its answer holds at most
/// ``RequestLimits/maximumBatchAnswerSize`` bytes of reads: a read that would pass it is answered
/// 413 instead (writes always get their answer, which is bounded by the batch's own size), and each
/// read's answer takes its room in the server's budget for answers not yet read (``HeldRoom``): a
/// read that finds none is answered 503 `busy` instead.
extension TableService {
    static let batchSegment = "$batch"
    static let capabilitiesSegment = "$capabilities"

    func batch(_ request: TableRequest) async throws -> TableResponse {
        guard request.method == "POST" else {
            throw ProtocolError.methodNotAllowed("a batch is sent with POST", allow: ["POST"])
        }
        if request.headers[IdempotencyLedger.header] != nil {
            // A key on the batch would be taken for a promise the server does not keep (the batch
            // replayed whole): each write of a batch carries its own.
            throw ProtocolError.badRequest(
                "an Idempotency-Key goes on each request of a batch (in its \"headers\"), not on the batch",
                code: "invalidIdempotencyKey")
        }
        // As a single request's body: a batch sent as text/plain or in Latin-1 was applied.
        try Self.requireJSON(request)
        let limits = configuration.limits
        let requests = try Self.batchRequests(request.body)
        guard requests.count <= limits.maximumBatchRequests else {
            throw ProtocolError(
                413, "batchTooLarge",
                "the batch holds \(requests.count) requests; the limit is \(limits.maximumBatchRequests)")
        }
        /// The ids taken, by the request that took it and whether it gave it (or got its position's).
        var seen: [String: (index: Int, given: Bool)] = [:]
        var inner: [(id: JSONValue, request: TableRequest)] = []
        let inherited = Self.inheritedHeaders(request)
        for (index, entry) in requests.enumerated() {
            let parsed = try parseBatchEntry(entry, index: index, outer: request, inherited: inherited)
            let given = requests[index].objectValue?["id"] != nil
            if case .string(let id) = parsed.id {
                if let earlier = seen[id] {
                    let message =
                        if !given {
                            "requests[\(index)] has no id, and the id of its position, '\(id)', is another request's"
                        } else if !earlier.given {
                            "requests[\(index)]: the id '\(id)' is the one requests[\(earlier.index)] got for its "
                                + "position (it has no id)"
                        } else {
                            "requests[\(index)]: the id '\(id)' is used twice"
                        }
                    throw ProtocolError.badRequest(
                        message + (given && earlier.given ? "" : "; give every request an id of its own"),
                        code: "invalidBatch")
                }
                seen[id] = (index, given)
            }
            inner.append(parsed)
        }
        let parsed = inner
        metrics?.batchSizes.record(parsed.count)
        let deadline = ContinuousClock.now + limits.maximumBatchDuration
        var responses: [(id: JSONValue, response: TableResponse)] = []
        responses.reserveCapacity(parsed.count)
        var readBytes = 0
        var index = 0
        while index < parsed.count {
            if ContinuousClock.now >= deadline {
                for (id, _) in parsed[index...] { responses.append((id, Self.notRunInTime(limits))) }
                break
            }
            let (id, innerRequest) = parsed[index]
            guard !Self.isRead(innerRequest.method) else {
                guard readBytes < limits.maximumBatchAnswerSize else {
                    responses.append((id, Self.answerTooLarge(limits)))
                    index += 1
                    continue
                }
                var response = await handleInBatch(innerRequest)
                if innerRequest.method == "HEAD" { response.body = nil }  // GET's answer without the body
                readBytes += response.body?.count ?? 0
                if readBytes > limits.maximumBatchAnswerSize {
                    response = Self.answerTooLarge(limits)
                } else if let room = request.room, let bytes = response.body?.count, !room.grow(by: bytes) {
                    // Held until the batch's answer is written (HeldRoom): none left for it now.
                    response = Self.noRoomForAnswer()
                }
                responses.append((id, response))
                index += 1
                continue
            }
            let end = parsed[index...].firstIndex { Self.isRead($0.request.method) } ?? parsed.endIndex
            let writes = Array(parsed[index..<end])
            let done = await writeSlice(writes, deadline: deadline)
            responses += done
            index += done.count
        }
        var answer = TableResponse(
            status: 200, headers: [("Content-Type", "application/json; charset=utf-8")],
            body: Self.batchResponseBody(responses))
        answer.logDetail = Self.serverFailures(responses)
        return answer
    }

    /// Whether a request of a batch only reads (it runs alone, not in a slice of writes).
    static func isRead(_ method: String) -> Bool { method == "GET" || method == "HEAD" }

    /// For the batch's log line: how many of its requests the server failed (5xx), and the first
    /// of them in words; `nil` when none.
    static func serverFailures(_ responses: [(id: JSONValue, response: TableResponse)]) -> String? {
        let failed = responses.enumerated().filter { $0.element.response.status >= 500 }
        guard let (index, (_, first)) = failed.first else { return nil }
        let reason = first.body.flatMap { try? JSONValue(parsingUTF8: $0) }?["error"]?.stringValue ?? ""
        return "\(failed.count) of \(responses.count) requests failed; requests[\(index)] \(first.status): \(reason)"
            + (first.logDetail.map { " (\($0))" } ?? "")
    }

    /// Runs writes of a batch in one storage transaction until they are done, ``RequestLimits/batchWriteSlice`` has
    /// passed or the batch's time is up (at least one runs); returns the answers of those that ran.
    /// When the transaction cannot commit, none of them is applied and each is answered with the
    /// storage's error.
    private func writeSlice(_ writes: [(id: JSONValue, request: TableRequest)], deadline: ContinuousClock.Instant)
        async -> [(id: JSONValue, response: TableResponse)]
    {
        let sliceEnd = min(deadline, ContinuousClock.now + configuration.limits.batchWriteSlice)
        let ran = Mutex(0)
        do {
            return try await storage.transaction { [self] in
                var done: [(id: JSONValue, response: TableResponse)] = []
                while done.count < writes.count {
                    if !done.isEmpty && ContinuousClock.now >= sliceEnd { break }
                    // Consecutive inserts go as a set (BatchInsertSets.swift).
                    let run = writes[done.count...].prefix(Self.maximumInsertSet).prefix { Self.mayGoInSet($0.request) }
                    if run.count > 1 {
                        let answers = await insertRun(run.map { $0.request })
                        done += zip(run, answers).map { ($0.id, $1) }
                    } else {
                        let (id, request) = writes[done.count]
                        done.append((id, await handleInBatch(request)))
                    }
                    ran.withLock { $0 = done.count }
                }
                return done
            }
        } catch {
            // Nothing of the slice was kept: say so for each request that ran in it (503 for a
            // database that is busy or unreachable, which a client retries), or for the first one
            // when the transaction could not even start, so that the batch moves on.
            let failure = await answering { throw error }
            return writes.prefix(max(1, ran.withLock { $0 })).map { ($0.id, failure) }
        }
    }

    /// One request of a batch, as if alone (a body over the size limit is refused).
    private func handleInBatch(_ request: TableRequest) async -> TableResponse {
        let limits = configuration.limits
        if let size = request.body?.count, size > limits.maximumBodySize {
            return Self.errorResponse(
                ProtocolError(413, "bodyTooLarge", "the body is \(size) bytes; the limit is \(limits.maximumBodySize)"))
        }
        return await handle(request)
    }

    static func notRunInTime(_ limits: RequestLimits) -> TableResponse {
        var error = ProtocolError(
            503, "batchTimeout",
            "not run: the batch took longer than \(limits.maximumBatchDuration); send this request again")
        error.retryAfter = 1
        return errorResponse(error)
    }

    /// The 503 for a read whose answer finds no room among those not yet read (``HeldRoom``).
    static func noRoomForAnswer() -> TableResponse {
        var error = ProtocolError(
            503, "busy",
            "not returned: other answers take the room this server gives answers not yet read; read it again")
        error.retryAfter = 1
        return errorResponse(error)
    }

    static func answerTooLarge(_ limits: RequestLimits) -> TableResponse {
        errorResponse(
            ProtocolError(
                413, "batchAnswerTooLarge",
                "not returned: the batch's reads reached \(limits.maximumBatchAnswerSize) bytes; read this page alone"))
    }

    static func batchRequests(_ body: [UInt8]?) throws -> [JSONValue] {
        guard let body, !body.isEmpty else {
            throw ProtocolError.badRequest("a batch needs a body: {\"requests\": [...]}", code: "invalidBatch")
        }
        let value: JSONValue
        do {
            value = try JSONValue(parsingUTF8: body)
        } catch {
            throw ProtocolError.badRequest("the batch is not valid JSON: \(error)", code: "invalidBatch")
        }
        guard case .object(let object) = value, case .array(let requests)? = object["requests"] else {
            throw ProtocolError.badRequest("a batch is {\"requests\": [...]}", code: "invalidBatch")
        }
        return requests
    }

    /// The batch's headers its requests take (under their own of the same name), with their names
    /// in lower case: found once per batch, not once per request (lower-casing every header of
    /// the batch again for each of its 500 requests).
    static func inheritedHeaders(_ outer: TableRequest) -> [(field: (name: String, value: String), lowered: String)] {
        outer.headers.all.compactMap { field in
            let lowered = field.name.lowercased()
            if lowered == "content-length" || lowered == "content-type" || lowered == IdempotencyLedger.header {
                return nil
            }
            return (field, lowered)
        }
    }

    func parseBatchEntry(
        _ entry: JSONValue, index: Int, outer: TableRequest,
        inherited: [(field: (name: String, value: String), lowered: String)]
    ) throws -> (
        id: JSONValue, request: TableRequest
    ) {
        func invalid(_ message: String) -> ProtocolError {
            .badRequest("requests[\(index)]: \(message)", code: "invalidBatch")
        }
        guard case .object(let fields) = entry else { throw invalid("a request is a JSON object") }
        for unsupported in ["atomicityGroup", "dependsOn"] where fields[unsupported] != nil {
            throw invalid("\(unsupported) is not supported: requests apply in order, each on its own")
        }
        let id = fields["id"] ?? .string(String(index + 1))
        guard case .string = id else { throw invalid("the id is a string") }
        guard case .string(let method)? = fields["method"], !method.isEmpty else {
            throw invalid("the method is a string such as \"POST\"")
        }
        guard case .string(let url)? = fields["url"], !url.isEmpty else {
            throw invalid("the url is a string such as \"todo\" or \"todo/<id>\"")
        }
        var path = url
        var rawQuery = ""
        if let mark = path.firstIndex(of: "?") {
            rawQuery = String(path[path.index(after: mark)...])
            path = String(path[..<mark])
        }
        if path.utf8.containsASCII("://"), let scheme = path.firstRange(of: "://") {
            // An absolute URL: this server's only (under its prefix, when a proxy serves it under
            // a path), and its path.
            let rest = path[scheme.upperBound...]
            let authorityEnd = rest.firstIndex(of: "/") ?? rest.endIndex
            let origin = path[..<authorityEnd]
            let prefix = outer.pathPrefix
            let base = outer.origin.dropLast(prefix.count)
            let below = rest[authorityEnd...]
            guard !outer.origin.isEmpty, origin.lowercased() == base.lowercased(),
                below.hasPrefix(prefix), below.dropFirst(prefix.count).first ?? "/" == "/"
            else {
                throw invalid(
                    "an absolute url must be this server's (\(outer.origin.isEmpty ? "not known here" : outer.origin)); send a relative one such as \"todo/<id>\""
                )
            }
            let own = below.dropFirst(prefix.count)
            path = own.isEmpty ? "/" : String(own)
        }
        if !path.hasPrefix("/") { path = "/tables/" + path }
        let segments = TableRequest.segments(of: path)
        guard segments.map(TableRoute.init(segments:))?.isTableData == true else {
            throw invalid(
                "a request in a batch addresses a table or an item (tables/{name} or tables/{name}/{id}), not \(url)")
        }
        // The batch's headers (protocol version, token, …) under the request's own; a request carries
        // no token of its own.
        var headers: [(name: String, value: String)] = []
        var own: Set<String> = []
        if let value = fields["headers"] {
            guard case .object(let given) = value else { throw invalid("the headers are an object of strings") }
            for (name, value) in given.sorted(by: { $0.key < $1.key }) {
                guard case .string(let text) = value else { throw invalid("the header \(name) is not a string") }
                let lowered = name.lowercased()
                if lowered == "authorization" || lowered == "x-zumo-auth" || lowered == "content-length" { continue }
                headers.append((name, text))
                own.insert(lowered)
            }
        }
        for (field, lowered) in inherited where !own.contains(lowered) {
            headers.append(field)
        }
        var body: [UInt8]?
        var parsedBody: JSONValue?
        switch fields["body"] {
        case nil, .null?: body = nil
        case .string(let text)?:
            body = Array(text.utf8)
        case let value?:
            body = value.serializedUTF8()
            parsedBody = value
        }
        if body != nil && !own.contains("content-type") { headers.append(("Content-Type", "application/json")) }
        // The batch's version is its requests' (a version in the batch's query string too).
        let named =
            (rawQuery.isEmpty ? nil : ODataParameters(parsing: rawQuery).value(for: "zumo-api-version"))
            ?? (own.contains("zumo-api-version")
                ? headers.first { $0.name.lowercased() == "zumo-api-version" }?.value : nil)
        if named == nil, !outer.rawQuery.isEmpty,
            let batchVersion = ODataParameters(parsing: outer.rawQuery).value(for: "zumo-api-version")
        {
            headers.append(("ZUMO-API-VERSION", batchVersion))
        }
        var request = TableRequest(
            method: method.uppercased(), path: path, segments: segments, rawQuery: rawQuery,
            headers: RequestHeaders(headers), body: body, origin: outer.origin, parsedBody: parsedBody)
        request.bodyIsCanonical = parsedBody != nil
        if let named {
            // One that names another is refused (alone: the batch goes on), never served in a
            // version the batch did not ask for.
            let batchVersion = try? Self.protocolVersion(outer)
            let version = try? Self.protocolVersion(request)
            if version == nil || version != batchVersion {
                request.refusal = .badRequest(
                    "requests[\(index)] names ZUMO-API-VERSION '\(named.prefix(40))', not the batch's "
                        + "\(batchVersion?.rawValue ?? "(invalid)"): the requests of a batch take the batch's version",
                    code: "versionMismatch")
            }
        }
        return (id, request)
    }

    /// `{"responses": [{"id": …, "status": …, "headers": {…}, "body": …}, …]}`. A JSON body goes in
    /// as the handler wrote it (it is JSON text already); any other body as a string.
    static func batchResponseBody(_ responses: [(id: JSONValue, response: TableResponse)]) -> [UInt8] {
        var buffer = JSONTextBuffer(capacity: 64 + responses.reduce(0) { $0 + 160 + ($1.response.body?.count ?? 0) })
        buffer.append("{\"responses\":[")
        for (index, (id, response)) in responses.enumerated() {
            if index > 0 { buffer.append(UInt8(ascii: ",")) }
            buffer.append("{\"id\":")
            _ = buffer.appendJSON(id)
            buffer.append(",\"status\":")
            buffer.appendInteger(Int64(response.status))
            // The headers written straight, names in lower case, a repeated name once (its last
            // value), as a JSON object of them would be; no object is built for each answer.
            buffer.append(",\"headers\":{")
            var isJSON = false
            let named = response.headers.map { (name: $0.name.lowercased(), value: $0.value) }
            var written = 0
            for (index, header) in named.enumerated() where header.name != "content-length" {
                if named[(index + 1)...].contains(where: { $0.name == header.name }) { continue }
                if header.name == "content-type" {
                    isJSON = header.value.utf8.containsASCII("json")
                }
                if written > 0 { buffer.append(UInt8(ascii: ",")) }
                buffer.appendJSONString(header.name)
                buffer.append(UInt8(ascii: ":"))
                buffer.appendJSONString(header.value)
                written += 1
            }
            buffer.append(UInt8(ascii: "}"))
            if let body = response.body, !body.isEmpty {
                buffer.append(",\"body\":")
                if isJSON {
                    body.withUnsafeBytes { buffer.append($0) }
                } else {
                    buffer.appendJSONString(String(decoding: body, as: UTF8.self))
                }
            }
            buffer.append(UInt8(ascii: "}"))
        }
        buffer.append("]}")
        return buffer.array
    }

    /// `GET /tables/$capabilities`, an extension of Ferry's server: what this server offers beyond the
    /// protocol, so that a client can use it when offered and fall back otherwise (servers of the
    /// protocol family answer 404). Open to anyone: it says nothing about data.
    func capabilities() -> TableResponse {
        let limits = configuration.limits
        var answer: JSONObject = [
            "server": .string(Self.serverVersion),
            "protocols": ["2.0.0", "3.0.0"],
            "batch": [
                "url": .string(Self.batchSegment), "format": "odata-json-batch",
                "maxRequests": .int(Int64(limits.maximumBatchRequests)),
                "maxBytes": .int(Int64(limits.maximumBatchBodySize)),
            ],
            "idempotency": [
                "header": "Idempotency-Key",
                "retentionSeconds": .int(limits.idempotencyRetention.components.seconds),
            ],
        ]
        // A server whose feeds are turned off (`maximumChangeFeeds` 0) does not offer one: its
        // clients poll from the start rather than meet a 429 on every attempt.
        if limits.maximumChangeFeeds > 0 {
            answer["changes"] = [
                "url": .string(Self.changesSegment), "format": "text/event-stream",
                "heartbeatSeconds": .int(max(1, limits.changeFeedHeartbeat.components.seconds)),
            ]
        }
        // Attachments only when the server stores their content: a key more, which clients that
        // do not know it ignore.
        if let attachments = configuration.attachments, configuration.blobStorage != nil {
            answer["attachments"] = [
                "uploads": .string(Self.uploadsSegment), "protocol": "draft-ietf-httpbis-resumable-upload",
                "maxFileSize": .int(attachments.maximumFileSize), "maxItemSize": .int(attachments.maximumItemSize),
                "maxUserSize": .int(attachments.maximumUserSize),
            ]
        }
        return .json(200, .object(answer))
    }
}

extension String.UTF8View {
    /// Whether `needle` (lower-case ASCII) occurs in the text, ASCII letters compared without case.
    /// On bytes: the generic `firstRange(of:)` (and a lower-cased copy) took 7% of the server's time
    /// in a batch of inserts.
    func containsASCII(_ needle: StaticString) -> Bool {
        let pattern = UnsafeBufferPointer(start: needle.utf8Start, count: needle.utf8CodeUnitCount)
        let search = { (text: UnsafeBufferPointer<UInt8>) -> Bool in
            guard text.count >= pattern.count else { return false }
            for start in 0...(text.count - pattern.count) {
                var index = 0
                while index < pattern.count {
                    var byte = text[start + index]
                    if byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") { byte += 32 }
                    if byte != pattern[index] { break }
                    index += 1
                }
                if index == pattern.count { return true }
            }
            return false
        }
        return withContiguousStorageIfAvailable(search) ?? Array(self).withUnsafeBufferPointer(search)
    }
}
