import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOHTTPTypes
import ServerStorageCore
import SyncCore
import ServiceLifecycle
import Tracing

/// The Hummingbird side: collects the body within the size limit, hands the request to
/// ``TableService`` and logs one line per request.
struct TableResponder: HTTPResponder {
    typealias Context = FerryRequestContext

    let service: TableService
    let limits: RequestLimits
    /// The configured public URL's origin; `nil` to use the request's validated `Host`.
    let publicOrigin: PublicOrigin?
    /// Whether a proxy's `Forwarded`/`X-Forwarded-*` headers name the origin of links.
    var trustsForwardedHeaders = false
    let logger: Logger
    /// The server's metrics; `nil` when they are off.
    var metrics: ServerMetrics?
    /// Whether `GET /metrics` is answered here (on the server's own port).
    var servesMetrics = false

    func respond(to request: Request, context: Context) async throws -> Response {
        let route = TableRoute(path: request.uri.path)
        guard let tracer = service.configuration.tracer else {
            return try await answer(request, route: route, context: context)
        }
        return try await RequestSpans.serve(request, route: route, tracer: tracer) {
            try await answer(request, route: route, context: context)
        }
    }

    func answer(_ request: Request, route: TableRoute, context: Context) async throws -> Response {
        let started = ContinuousClock.now
        let path = request.uri.path
        var headers: [(name: String, value: String)] = []
        for field in request.headers { headers.append((field.name.canonicalName, field.value)) }
        let method = request.method.rawValue.uppercased()
        if let refusal = HostFields.refusal(authority: request.head.authority, headers: request.headers) {
            // The connection closes after this answer; ConnectionGuard's lingering close drops the
            // unread body, so the client reads the answer instead of a reset.
            return respond(
                TableService.errorResponse(refusal), route: route, path: path, method: method, started: started,
                context: context)
        }
        if route == .metrics, servesMetrics, let metrics {
            let response = MetricsResponder.answer(method: method, metrics: metrics)
            metrics.request(
                route: route, path: path, method: method, status: response.status.code,
                duration: ContinuousClock.now - started)
            return response
        }
        if service.configuration.offersPushExtensions, route == .changes {
            let response = await changeFeed(request, headers: headers, method: method, context: context)
            metrics?.request(
                route: route, path: path, method: method, status: response.status.code,
                duration: ContinuousClock.now - started)
            return response
        }
        if service.streamsDownload(route: route, method: method) {
            return await download(request, headers: headers, method: method, started: started, context: context)
        }
        var answer: TableResponse
        var room: HeldRoom?
        do {
            let limit = route == .batch ? limits.maximumBatchBodySize : limits.maximumBodySize
            if !service.streamsBody(route: route, method: method),
                let length = request.headers[.contentLength].flatMap({ Int($0) }), length > limit
            {
                throw ProtocolError(413, "bodyTooLarge", "the body is \(length) bytes; the limit is \(limit)")
            }
            if service.streamsBody(route: route, method: method) {
                // An upload: its body goes to the blob storage as it arrives, never collected.
                if let refusal = ContentCodings.refusal(request.headers) { throw refusal }
                let origin = try Self.origin(
                    of: request, configured: publicOrigin, trustsForwarded: trustsForwardedHeaders)
                answer = await service.handleUpload(
                    TableRequest(
                        method: method, path: path, rawQuery: request.uri.query ?? "",
                        headers: RequestHeaders(headers), body: nil, origin: origin),
                    body: request.body)
            } else {
                (answer, room) = try await collectedAnswer(request, headers: headers, method: method, limit: limit)
            }
        } catch let error as ProtocolError {
            answer = TableService.errorResponse(error)
        } catch is NIOTooManyBytesError {
            let limit = route == .batch ? limits.maximumBatchBodySize : limits.maximumBodySize
            answer = TableService.errorResponse(
                ProtocolError(413, "bodyTooLarge", "the body is larger than \(limit) bytes"))
        } catch {
            answer = TableService.errorResponse(ProtocolError(400, "badRequest", "the request body could not be read"))
        }
        room = holdRoom(for: &answer, method: method, holding: room)
        return respond(answer, route: route, path: path, method: method, started: started, context: context, room: room)
    }

    /// The room `answer` holds until it is written (``HeldRoom``), from the room its request held:
    /// an answer of more than one written piece (64 KiB) holds its size; a smaller one nothing (the
    /// socket takes it at once). An answer larger than the room held takes the rest now, or, if it
    /// only read, becomes 503 `busy` when there is none (it can be asked again; holding it while it
    /// waits would hold what the budget bounds). A write's answer takes it regardless: it was applied.
    func holdRoom(for answer: inout TableResponse, method: String, holding room: HeldRoom?) -> HeldRoom? {
        let size = method == "HEAD" ? 0 : answer.body?.count ?? 0
        guard size > ConnectionGuard.writePiece else { return nil }
        let room = room ?? HeldRoom(service.bodyBytes)
        let held = room.bytes
        if size <= held {
            room.shrink(to: size)
        } else if !TableService.isRead(method) {
            room.overdraw(by: size - held)
        } else if !room.grow(by: size - held) {
            answer = TableService.noRoomForAnswer()
            return nil
        }
        return room
    }

    /// The response of `answer`, counted in the metrics and logged.
    func respond(
        _ answer: TableResponse, route: TableRoute, path: String, method: String, started: ContinuousClock.Instant,
        context: Context, room: HeldRoom? = nil
    ) -> Response {
        var fields = HTTPFields()
        for header in answer.headers {
            if let name = HTTPField.Name(header.name) { fields.append(HTTPField(name: name, value: header.value)) }
        }
        let elapsed = ContinuousClock.now - started
        metrics?.request(route: route, path: path, method: method, status: answer.status, duration: elapsed)
        let milliseconds = Double(elapsed.components.attoseconds) / 1e15 + Double(elapsed.components.seconds) * 1000
        Self.log(answer, method: method, path: path, milliseconds: milliseconds, to: logger, context: context.logger)
        let status = HTTPResponse.Status(code: answer.status)
        guard let bytes = answer.body else { return Response(status: status, headers: fields) }
        if method == "HEAD" { return Self.headResponse(status, fields, length: bytes.count) }
        guard let room else {
            return Response(status: status, headers: fields, body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes)))
        }
        // The room goes back once the socket took the answer but for the channel's low watermark
        // (ConnectionGuard.drained), or the connection closed (the write timeout closes it).
        // Only the buffer is kept, which the channel shares: the answer is not held twice.
        let channel = context.channel
        let buffer = ByteBuffer(bytes: bytes)
        return Response(
            status: status, headers: fields,
            body: ResponseBody(contentLength: buffer.readableBytes) { writer in
                try await writer.write(buffer)
                try await writer.finish(nil)
                await ConnectionGuard.drained(channel)
                withExtendedLifetime(room) {}
            })
    }

    /// A `HEAD`'s response: no body, and the `Content-Length` the `GET` would have (RFC 9110
    /// §8.6; without it Hummingbird sends 0, the length of the empty body).
    static func headResponse(_ status: HTTPResponse.Status, _ fields: HTTPFields, length: Int) -> Response {
        var fields = fields
        fields[.contentLength] = String(length)
        return Response(status: status, headers: fields)
    }

    /// The answer to a request whose body is collected whole (up to `limit` bytes) first.
    func collectedAnswer(
        _ request: Request, headers: [(name: String, value: String)], method: String, limit: Int
    ) async throws -> (TableResponse, HeldRoom?) {
        // Room for the body among those handled at once (RequestLimits.maximumBodyBytesAtOnce),
        // taken before a byte of it is read: by its length, or as large as it may be when it comes
        // in chunks. A request without either has no body. It is held until the answer is written.
        let declared = request.headers[.contentLength].flatMap { Int($0) }
        let size = min(declared ?? (request.headers[.transferEncoding] == nil ? 0 : limit), limit)
        var room: HeldRoom?
        if size > 0 {
            guard await service.bodyBytes.take(size, within: service.configuration.limits.bodyRoomWait) else {
                var error = ProtocolError(
                    503, "busy",
                    "other requests take the room this server gives request bodies at once; nothing was applied, send it again"
                )
                error.retryAfter = 1
                throw error
            }
            room = HeldRoom(service.bodyBytes, holding: service.bodyBytes.clamped(size))
        }
        var body: [UInt8]?
        let buffer = try await request.body.collect(upTo: limit)
        if buffer.readableBytes > 0 { body = Array(buffer.readableBytesView) }
        // A body in a content coding the server does not decode is refused, once it was read.
        if let refusal = ContentCodings.refusal(request.headers) { throw refusal }
        // After the body is read: answering before it and closing would reset the connection
        // with the body unread, and the client could lose the answer.
        let origin = try Self.origin(of: request, configured: publicOrigin, trustsForwarded: trustsForwardedHeaders)
        var tableRequest = TableRequest(
            method: method, path: request.uri.path, rawQuery: request.uri.query ?? "",
            headers: RequestHeaders(headers), body: body, origin: origin)
        tableRequest.room = room  // a batch, which has a body, takes its reads' room in it
        return (await service.handle(tableRequest), room)
    }

    /// `GET /tables/{table}/{id}/$attachments/{name}`: the bytes streamed from the blob storage.
    func download(
        _ request: Request, headers: [(name: String, value: String)], method: String, started: ContinuousClock.Instant,
        context: Context
    ) async -> Response {
        let path = request.uri.path
        let (answer, bytes) = await service.download(
            TableRequest(
                method: method, path: path, rawQuery: request.uri.query ?? "", headers: RequestHeaders(headers),
                body: nil, origin: ""))
        var fields = HTTPFields()
        for header in answer.headers {
            if let name = HTTPField.Name(header.name) { fields.append(HTTPField(name: name, value: header.value)) }
        }
        let elapsed = ContinuousClock.now - started
        metrics?.request(
            route: TableRoute(path: path), path: path, method: method, status: answer.status, duration: elapsed)
        let milliseconds = Double(elapsed.components.attoseconds) / 1e15 + Double(elapsed.components.seconds) * 1000
        Self.log(answer, method: method, path: path, milliseconds: milliseconds, to: logger, context: context.logger)
        let status = HTTPResponse.Status(code: answer.status)
        if let stream = bytes {
            let length = Int(stream.range.count)
            return Response(
                status: status, headers: fields,
                body: ResponseBody(contentLength: length) { writer in
                    for try await chunk in stream { try await writer.write(ByteBuffer(bytes: chunk)) }
                    try await writer.finish(nil)
                })
        }
        if method == "HEAD", let body = answer.body { return Self.headResponse(status, fields, length: body.count) }
        if answer.body == nil { return Response(status: status, headers: fields) }
        return Response(
            status: status, headers: fields, body: ResponseBody(byteBuffer: ByteBuffer(bytes: answer.body ?? [])))
    }

    /// `GET /tables/$changes`: a stream of Server-Sent Events for as long as the client stays, the
    /// feed lasts (token expiry, storage closed) and the server runs (a graceful shutdown ends it).
    func changeFeed(
        _ request: Request, headers: [(name: String, value: String)], method: String, context: Context
    ) async -> Response {
        let path = request.uri.path
        let feed: ChangeFeed
        do {
            feed = try await service.openChangeFeed(
                TableRequest(
                    method: method, path: path, rawQuery: request.uri.query ?? "", headers: RequestHeaders(headers),
                    body: nil, origin: ""),
                peer: context.channel.remoteAddress?.ipAddress)
        } catch {
            let answer = await service.answering { throw error }
            Self.log(answer, method: method, path: path, milliseconds: 0, to: logger, context: context.logger)
            var fields = HTTPFields()
            for header in answer.headers {
                if let name = HTTPField.Name(header.name) { fields.append(HTTPField(name: name, value: header.value)) }
            }
            return Response(
                status: HTTPResponse.Status(code: answer.status), headers: fields,
                body: ResponseBody(byteBuffer: ByteBuffer(bytes: answer.body ?? [])))
        }
        // A client that goes away frees the feed's place at once, not at the next write.
        context.channel.closeFuture.whenComplete { _ in feed.close() }
        context.logger.info(
            "\(LogText.escaped("\(method) \(path)")) 200 (feed opened)", metadata: ["ferry.status": "200"])
        var fields = HTTPFields()
        fields[.contentType] = "text/event-stream; charset=utf-8"
        fields[.cacheControl] = "no-cache"
        fields[HTTPField.Name("x-zumo-server-version")!] = TableService.serverVersion
        fields[HTTPField.Name("X-Accel-Buffering")!] = "no"  // nginx: do not hold the events back
        return Response(
            status: .ok, headers: fields,
            body: ResponseBody { writer in
                defer { feed.close() }
                // The writer runs on the connection's event loop: an event goes to the socket
                // without a hop between threads, which is most of a feed's cost when one write
                // reaches thousands of them.
                let channel = context.channel
                try await withTaskExecutorPreference(EventLoopExecutor(channel.eventLoop)) {
                    try await withGracefulShutdownHandler {
                        try await withTaskCancellationHandler {
                            defer { feed.detach() }
                            var attached = false
                            while let bytes = await feed.next() {
                                try await writer.write(ByteBuffer(bytes: bytes))
                                // After the first bytes: the hub may now write to the channel itself.
                                if !attached { feed.attach(ChannelFeedConnection(channel)) }
                                attached = true
                            }
                        } onCancel: {
                            feed.end()
                        }
                    } onGracefulShutdown: {
                        feed.end()
                    }
                }
                try await writer.finish(nil)
            })
    }

    /// The origin of absolute links: the configured public URL (with its path, when a proxy
    /// serves the server under one); else, when the proxy is trusted, the one its `Forwarded` (or
    /// `X-Forwarded-Host`/`-Proto`) header names; else `scheme://Host` when the `Host` header is a
    /// valid host and port (400 when it is not), else empty (links stay relative). A trusted
    /// proxy's `X-Forwarded-Prefix` (`/sync`) is added to the last two.
    static func origin(of request: Request, configured: PublicOrigin?, trustsForwarded: Bool = false) throws
        -> String
    {
        if let configured { return configured.text }
        var origin: PublicOrigin
        if trustsForwarded, let forwarded = forwardedOrigin(request.headers) {
            origin = forwarded
        } else {
            guard let host = request.head.authority else { return "" }
            let scheme =
                request.headers[HTTPField.Name("X-Forwarded-Proto")!]?.lowercased() == "https" ? "https" : "http"
            guard let fromHost = PublicOrigin(scheme: scheme, hostHeader: host) else {
                throw ProtocolError(400, "invalidHost", "the Host header is not a valid host and port")
            }
            origin = fromHost
        }
        if trustsForwarded, let prefix = request.headers[HTTPField.Name("X-Forwarded-Prefix")!] {
            var prefix = Substring(prefix.split(separator: ",").first ?? "").trimmingCharacters(in: .whitespaces)
            if prefix.hasSuffix("/") { prefix.removeLast() }
            origin = origin.adding(prefix: prefix)
        }
        return origin.text
    }

    /// The origin a proxy names: the first `X-Forwarded-Host` with `X-Forwarded-Proto`, else the
    /// first element of `Forwarded` (`host=` and `proto=`); `nil` when neither names a valid host.
    /// `X-Forwarded-Host` comes first because it is what the documented proxies set: a proxy that
    /// sets it and passes a client's `Forwarded` through must not let the client name the origin.
    static func forwardedOrigin(_ headers: HTTPFields) -> PublicOrigin? {
        func first(_ name: String) -> String? {
            headers[HTTPField.Name(name)!]?.split(separator: ",").first.map {
                $0.trimmingCharacters(in: .whitespaces)
            }
        }
        if let host = first("X-Forwarded-Host") {
            let scheme = first("X-Forwarded-Proto")?.lowercased() == "https" ? "https" : "http"
            return PublicOrigin(scheme: scheme, hostHeader: host)
        }
        guard let element = first("Forwarded") else { return nil }
        var pairs: [String: String] = [:]
        for pair in element.split(separator: ";") {
            let parts = pair.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard parts.count == 2 else { continue }
            pairs[parts[0].lowercased()] = parts[1].trimmingCharacters(in: CharacterSet(charactersIn: "\""))
        }
        guard let host = pairs["host"] else { return nil }
        let scheme = pairs["proto"]?.lowercased() == "https" ? "https" : "http"
        return PublicOrigin(scheme: scheme, hostHeader: host)
    }
}

/// Hummingbird's basic request context, and the connection a request came on (its client's
/// address, and its close, which ends a change feed at once).
struct FerryRequestContext: RequestContext {
    var coreContext: CoreRequestContextStorage
    let channel: any Channel

    init(source: ApplicationRequestContextSource) {
        coreContext = CoreRequestContextStorage(source: source)
        channel = source.channel
    }
}

extension TableResponder {
    /// A request's line: at `debug` when it went well, one line with the reason at `info` for a
    /// client's error (4xx) and at `error` for the server's (5xx), each with the request id, so an
    /// operator at the default level sees the errors and not every request. The storage's own
    /// words are in it (`ferry.error`); a batch whose requests the server failed is an `error` line.
    static func log(
        _ answer: TableResponse, method: String, path: String, milliseconds: Double, to logger: Logger,
        context: Logger
    ) {
        let level: Logger.Level =
            answer.status >= 500 || answer.logDetail != nil ? .error : answer.status >= 400 ? .info : .debug
        // Nothing is built for a line that is not written (a request at `debug` by default):
        // formatting the time alone took 1.7% of the server's time serving reads by id.
        guard logger.logLevel <= level else { return }
        var metadata: Logger.Metadata = [
            // A number (to the hundredth), which a JSON log keeps as one.
            "ferry.status": "\(answer.status)", "ferry.ms": .stringConvertible((milliseconds * 100).rounded() / 100),
        ]
        if let id = context[metadataKey: "hb.request.id"] { metadata["request.id"] = id }
        let line = LogText.escaped("\(method) \(path) \(answer.status)")
        if let detail = answer.logDetail { metadata["ferry.error"] = "\(LogText.escaped(detail))" }
        guard answer.status >= 400 else {
            if let detail = answer.logDetail {
                logger.error("\(line): \(LogText.escaped(detail))", metadata: metadata)
            } else {
                logger.debug("\(line)", metadata: metadata)
            }
            return
        }
        let reason = answer.body.flatMap { try? JSONValue(parsingUTF8: $0) }?["error"]?.stringValue
        let message: Logger.Message = "\(line)\(reason.map { ": " + LogText.escaped($0) } ?? "")"
        if answer.status >= 500 {
            logger.error(message, metadata: metadata)
        } else {
            logger.info(message, metadata: metadata)
        }
    }
}

/// Runs a task's jobs on one NIO event loop (a change feed's writer, on its connection's loop).
final class EventLoopExecutor: TaskExecutor {
    let eventLoop: any EventLoop

    init(_ eventLoop: any EventLoop) { self.eventLoop = eventLoop }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
