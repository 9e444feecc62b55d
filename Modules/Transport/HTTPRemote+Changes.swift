import Foundation
import Synchronization
public import SyncCore

extension HTTPRemote {
    /// Whether the server has a change feed (`GET /tables/$capabilities` says so; Ferry's server
    /// does, the servers of the protocol family do not). Asked once and remembered.
    public func offersChangeFeed() async -> Bool {
        await extensions().changes != nil
    }

    /// Opens the server's change feed, `GET <server>/tables/$changes` (an extension of Ferry's
    /// server): Server-Sent Events saying which tables changed, until the server or the network
    /// ends the connection, or the consumer stops reading. Resumes after `position` (the
    /// `Last-Event-ID` of the feed) when given. The longest wait between bytes is two and a half of
    /// the server's heartbeats: a connection that went silent (a server gone without a close, a
    /// network path that drops everything) fails with a network error.
    ///
    /// ```swift
    /// for try await event in try await remote.changeFeed(tables: ["todo"], after: nil) {
    ///     if case .changed(let table, let version, _) = event { print(table, version) }
    /// }
    /// ```
    ///
    /// - Throws: `RemoteError` — `notFound` when the server has no feed, the status of a refusal
    ///   (401, 429…), `network` when it cannot be reached. The stream throws `RemoteError` too.
    public func changeFeed(tables: [String]?, after position: String?) async throws(RemoteError)
        -> AsyncThrowingStream<RemoteChangeEvent, any Error>
    {
        let offer = await extensions().changes
        var url = try client.tablesURL().appendingPathComponent("$changes")
        if let tables {
            let list = tables.map(PercentEncoding.pathSegment).joined(separator: ",")
            guard let withQuery = URL(string: url.absoluteString + "?tables=" + list) else {
                throw RemoteError(.badRequest, "cannot form the change feed's URL for tables \(tables)")
            }
            url = withQuery
        }
        var headers = ["Accept": "text/event-stream"]
        if let position { headers["Last-Event-ID"] = position.filter { $0 != "\r" && $0 != "\n" } }
        // A feed that stays silent for two and a half heartbeats is dead (a server gone without a
        // close, a network path that black-holes): its read fails, and the caller reconnects.
        let heartbeat = Double(offer?.heartbeatSeconds ?? 15)
        let timeout = max(1, heartbeat * 2.5)
        let cache = capabilityCache
        /// A failure waits at least the reconnection time the server set, unless it says otherwise.
        @Sendable func withReconnectionTime(_ error: RemoteError) -> RemoteError {
            var error = error
            if error.retryAfter == nil { error.retryAfter = cache.feedReconnectionTime.withLock { $0 } }
            return error
        }
        let opened: (status: Int, headers: [String: String], body: AsyncThrowingStream<[UInt8], any Error>)
        do {
            opened = try await client.openStream(url, headers: headers, timeout: timeout)
        } catch {
            throw withReconnectionTime(error)
        }
        guard opened.status == 200 else {
            var text: [UInt8] = []
            do {
                for try await piece in opened.body {
                    text += piece
                    if text.count > 64 * 1024 { break }
                }
            } catch {}
            let response = HTTPResponse(status: opened.status, headers: opened.headers, body: Data(text))
            throw withReconnectionTime(response.failure("opening the change feed"))
        }
        // Events are parsed as the consumer asks for them, never ahead (FeedEvents).
        let events = FeedEvents(opened.body, cache: cache)
        return AsyncThrowingStream {
            do {
                return try await events.next()
            } catch let error as RemoteError {
                throw withReconnectionTime(error)
            } catch let error as URLError {
                let code: RemoteError.Code = error.code == .cancelled ? .cancelled : .network
                throw withReconnectionTime(
                    RemoteError(code, "the change feed ended: \(HTTPClient.describe(error))", underlying: error))
            } catch {
                throw withReconnectionTime(RemoteError(.network, "the change feed ended: \(error)", underlying: error))
            }
        }
    }

    /// A feed's events, parsed from its body as they are asked for: what the server sends ahead
    /// of the consumer waits in the connection, not in a queue of this process (an endless feed
    /// grew one by 14 MB/s while the device pulled). Read by one consumer at a time.
    private final class FeedEvents: @unchecked Sendable {
        private var body: AsyncThrowingStream<[UInt8], any Error>.AsyncIterator
        private var parser = ServerSentEventParser()
        /// Parsed and not yet taken, last first.
        private var ready: [RemoteChangeEvent] = []
        private let cache: CapabilityCache

        init(_ body: AsyncThrowingStream<[UInt8], any Error>, cache: CapabilityCache) {
            self.body = body.makeAsyncIterator()
            self.cache = cache
        }

        func next() async throws -> RemoteChangeEvent? {
            while ready.isEmpty {
                guard let piece = try await body.next() else { return nil }
                let events: [ServerSentEvent]
                do {
                    events = try parser.parse(piece)
                } catch {
                    throw RemoteError(.invalidResponse, "the change feed ended: \(error)")
                }
                ready = try events.compactMap(HTTPRemote.changeEvent).reversed()
                if let time = parser.reconnectionTime { cache.feedReconnectionTime.withLock { $0 = time } }
            }
            return ready.popLast()
        }
    }

    /// The feed event an SSE event is, or `nil` for one this client does not know.
    ///
    /// - Throws: ``RemoteError/Code/invalidResponse`` for a `ready`, `change` or `caught-up` event
    ///   that is not as the protocol says: ignored, a `ready` that cannot be read left the device
    ///   waiting for a feed that would never be ready.
    static func changeEvent(_ event: ServerSentEvent) throws(RemoteError) -> RemoteChangeEvent? {
        guard ["ready", "change", "caught-up"].contains(event.name) else { return nil }
        guard let position = event.id, case .object(let data)? = try? JSONValue(parsing: event.data) else {
            throw RemoteError(
                .invalidResponse,
                "the change feed's '\(event.name)' event is not valid (it needs an id and a JSON object): "
                    + String(event.data.prefix(80).map { $0.isNewline ? " " : $0 }))
        }
        switch event.name {
        case "ready":
            guard case .object(let tables)? = data["tables"] else {
                throw RemoteError(.invalidResponse, "the change feed's 'ready' event has no \"tables\" object")
            }
            var versions: [String: Int64] = [:]
            for (name, value) in tables {
                if let version = value.intValue { versions[name] = version }
            }
            return .ready(versions: versions, position: position)
        case "change":
            guard let table = data["table"]?.stringValue, let version = data["version"]?.intValue else {
                throw RemoteError(
                    .invalidResponse, "the change feed's 'change' event needs a \"table\" and a whole \"version\"")
            }
            return .changed(table: table, version: version, position: position)
        case "caught-up":
            return .caughtUp(position: position)
        default:
            return nil
        }
    }
}
