import Foundation
@_spi(StoreSupport) public import SyncCore
import Synchronization

extension HTTPRemote {
    /// What the server offers for pushing, asked once (`GET <server>/tables/$capabilities`, an
    /// extension of Ferry's server) and remembered. A server that does not answer it (every server of
    /// the protocol family) offers nothing beyond the protocol; a network failure is not remembered,
    /// so the next push asks again.
    public func writeCapabilities() async -> RemoteWriteCapabilities {
        await extensions().writes
    }

    /// What the server offers beyond the protocol, asked once and remembered (see
    /// ``writeCapabilities()``).
    func extensions() async -> ServerExtensions { await knownExtensions() ?? .none }

    /// The server's extensions as it answered, or `nil` when it could not be asked (a network
    /// failure, a 5xx, a 401: asked again next time).
    func knownExtensions() async -> ServerExtensions? {
        if let known = capabilityCache.value.withLock({ $0 }) { return known }
        guard let url = try? client.tablesURL().appendingPathComponent("$capabilities") else { return nil }
        let response: HTTPResponse
        do {
            response = try await client.send("GET", url, retries: false)
        } catch {
            return nil
        }
        let offered: ServerExtensions
        switch response.status {
        case 200:
            offered = ServerExtensions(
                writes: Self.capabilities(from: response), changes: Self.changeFeed(from: response),
                attachments: (try? response.json())?.objectValue?["attachments"]?.objectValue != nil)
        case 400..<500 where response.status != 401 && response.status != 408 && response.status != 429:
            offered = .none
        default:
            return nil  // not an answer about capabilities (a 5xx, a 401): ask again next time
        }
        capabilityCache.value.withLock { $0 = offered }
        return offered
    }

    /// The change feed a capabilities document offers: its heartbeat, or `nil`.
    static func changeFeed(from response: HTTPResponse) -> ChangeFeedOffer? {
        guard case .object(let document)? = try? response.json(), case .object(let feed)? = document["changes"],
            feed["url"]?.stringValue == "$changes", feed["format"]?.stringValue == "text/event-stream"
        else { return nil }
        let heartbeat = feed["heartbeatSeconds"]?.intValue.map { Int(clamping: max(1, min($0, 3_600))) } ?? 15
        return ChangeFeedOffer(heartbeatSeconds: heartbeat)
    }

    static func capabilities(from response: HTTPResponse) -> RemoteWriteCapabilities {
        guard case .object(let document)? = try? response.json() else { return .none }
        var capabilities = RemoteWriteCapabilities()
        if case .object(let batch)? = document["batch"], batch["url"]?.stringValue == "$batch",
            batch["format"]?.stringValue == "odata-json-batch", let size = batch["maxRequests"]?.intValue
        {
            capabilities.maximumBatchSize = Int(clamping: size)
            if let bytes = batch["maxBytes"]?.intValue { capabilities.maximumBatchBytes = Int(clamping: max(1, bytes)) }
        }
        if case .object(let keys)? = document["idempotency"],
            keys["header"]?.stringValue?.lowercased() == "idempotency-key"
        {
            capabilities.honoursIdempotencyKeys = true
        }
        return capabilities
    }

    /// Sends one write, with its idempotency key.
    public func send(_ write: RemoteWrite) async throws(RemoteError) -> JSONObject? {
        try await onlineTable(write.table).send(write)
    }

    /// Sends writes as one OData JSON batch (`POST <server>/tables/$batch`) and answers one result
    /// per write, in order, each what ``send(_:)`` would give alone.
    public func sendBatch(_ writes: [RemoteWrite]) async throws(RemoteError) -> [Result<JSONObject?, RemoteError>] {
        guard !writes.isEmpty else { return [] }
        let tables = try client.tablesURL()
        // `{"requests": [{"id", "method", "url", "headers", "body"}, …]}` written straight as text:
        // building a dictionary per write to serialize it took a tenth of a push's client time. A
        // body's members go in dictionary order (the server's fingerprint of a body sorts them).
        var text = JSONTextBuffer(capacity: 64 + writes.count * 320)
        text.append("{\"requests\":[")
        for (index, write) in writes.enumerated() {
            let table = onlineTable(write.table)
            let (method, headers) = table.methodAndHeaders(for: write)
            let path = table.relativePath(for: write)
            if index > 0 { text.append(UInt8(ascii: ",")) }
            text.append("{\"id\":")
            text.appendJSONString(String(index))
            text.append(",\"method\":")
            text.appendJSONString(method)
            text.append(",\"url\":")
            text.appendJSONString(path)
            text.append(",\"headers\":")
            text.appendJSON(.object(headers.mapValues { .string($0) }), depth: 4)
            if write.kind != .delete {
                text.append(",\"body\":")
                text.appendJSON(.object(write.body), sortingKeys: false, depth: 4)
            }
            text.append(UInt8(ascii: "}"))
        }
        text.append("]}")
        // A batch whose every write is keyed may be sent again: the server replays what it applied.
        let response = try await client.send(
            "POST", tables.appendingPathComponent("$batch"), data: text.withBytes { Data($0) },
            headers: ["Content-Type": "application/json"], idempotent: writes.allSatisfy { $0.idempotencyKey != nil })
        guard response.status == 200 else {
            throw response.failure("sending a batch of \(writes.count)")
        }
        guard case .object(let document)? = try? response.json(), case .array(let answers)? = document["responses"]
        else {
            throw RemoteError(.invalidResponse, status: 200, "the batch's answer is not {\"responses\": [...]}")
        }
        var byID: [String: JSONObject] = [:]
        for case .object(let answer) in answers {
            if let id = answer["id"]?.stringValue { byID[id] = answer }
        }
        return try writes.enumerated().map { index, write throws(RemoteError) in
            guard let answer = byID[String(index)], let status = answer["status"]?.intValue else {
                throw RemoteError(.invalidResponse, status: 200, "the batch's answer has no response \(index)")
            }
            var headers: [String: String] = [:]
            if case .object(let given)? = answer["headers"] {
                for (name, value) in given { if let text = value.stringValue { headers[name] = text } }
            }
            var single = HTTPResponse(status: Int(status), headers: headers, body: Data())
            if (200..<300).contains(status), let body = answer["body"], body != .null {
                // An accepted write's item, parsed with the batch's answer: not serialized to be
                // parsed again (two passes over every item of a push).
                single.parsedBody = body
            } else if let body = answer["body"] {
                single.body = Data(body.serializedUTF8())
            }
            do throws(RemoteError) {
                return .success(try onlineTable(write.table).outcome(of: write, single))
            } catch {
                return .failure(error)
            }
        }
    }
}

/// The capabilities a remote learnt, shared by its copies.
final class CapabilityCache: Sendable {
    let value = Mutex<ServerExtensions?>(nil)
    /// The change feed's reconnection time, as the server last set it (SSE `retry:`): it outlives
    /// the connection that carried it, as the format says.
    let feedReconnectionTime = Mutex<Duration?>(nil)
}

/// What a server offers beyond the protocol (`GET /tables/$capabilities`).
struct ServerExtensions: Sendable, Hashable {
    var writes: RemoteWriteCapabilities
    var changes: ChangeFeedOffer?
    /// Whether the server takes attachments (`attachments` in the document).
    var attachments = false

    static let none = ServerExtensions(writes: .none, changes: nil)
}

/// A server's change feed.
struct ChangeFeedOffer: Sendable, Hashable {
    /// How often the server sends a heartbeat on an idle feed.
    var heartbeatSeconds: Int
}
