import CoreMetrics
import HTTPTypes
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import Synchronization

/// Enforces ``ConnectionLimits`` on one HTTP/1 connection, and closes a connection after its
/// response when the request did not ask to keep it alive (HTTP/1.0 without `keep-alive`, or
/// `Connection: close` in any letter case), or when the server shuts down. It sits between NIO's
/// HTTP/1 codec, which still knows the request's version, and the conversion to HTTPTypes.
///
/// A connection closes only once the last byte of its response was written: closing right after
/// queueing the response's end dropped what the socket had not taken yet (a 45 MB page arrived as
/// 3.9 MB under a correct `Content-Length`). For the same reason the idle timer starts when the
/// response's end was written, not when it was queued. Large bodies are written in 64 KiB pieces;
/// the write timer compares the bytes the channel holds unwritten from one check to the next. A
/// client that closes its side while a stream without end (a change feed) goes out is gone: the
/// connection closes at once.
final class ConnectionGuard: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    /// The piece a body is written in: the unit of a reader's progress.
    static let writePiece = 64 * 1024

    let limits: ConnectionLimits
    let registry: ConnectionRegistry
    let logger: Logger
    private var id: Int?
    private var timer: Scheduled<Void>?
    private var writeTimer: Scheduled<Void>?
    /// Requests whose response has not been written to its last byte.
    private var requestsInProgress = 0
    private var readingRequest = false
    /// The connection closes once no request is left to answer (shutdown, the client's side closed).
    private var closesAfterResponse = false
    /// For each request read and not answered yet, oldest first: whether it asked to close the
    /// connection (`Connection: close`, HTTP/1.0 without keep-alive). Only its own response says
    /// `close`: a pipelined request's close on the responses before it made a client drop them.
    private var requestsClose: [Bool] = []
    /// Whether the connection closes once the response being written is out (nothing after it is
    /// answered: a server that sent `close` answers no further request, RFC 9112 §9.6).
    private var closesAfterThisResponse = false
    /// Bytes of body parts handed down since the write timer's last check.
    private var queuedSinceCheck = 0
    /// The bytes the channel held unwritten at the write timer's last check.
    private var bufferedAtCheck = 0
    /// The version of the request being answered (an HTTP/1.0 client gets a body of unknown length
    /// delimited by the close, never chunked).
    private var requestVersion = HTTPVersion.http1_1
    /// Whether the response being written has no length: a stream that ends when the server ends it.
    private var respondingWithStream = false
    /// The methods of the requests read and not answered yet, oldest first (a HEAD's response has
    /// no body), as NIO's encoder keeps them.
    private var requestMethods: [HTTPMethod] = []
    /// How NIO's encoder frames the body of the stream being written (`nil`: not a stream with a
    /// body), so that ``writeFramed(_:_:)`` can write parts beneath it.
    private var streamFraming: StreamFraming?
    /// Whether a `CONNECT` was answered: the connection closes, and nothing more is read.
    private var refusedConnect = false
    /// Whether the connection is closing after a response that went out before its request's
    /// body was read whole: its output is closed, and the rest of the body is read and dropped.
    private var lingering = false
    /// The longest a connection reads the rest of a body answered already before it closes.
    static let lingerLimit = Duration.seconds(5)
    /// What NIO's parser could not read, then the JSON body its answer gets (``MalformedRequest``).
    private var parserError: HTTPParserError?
    private var malformedAnswer: [UInt8]?
    /// NIO's encoder's context, whose writes go straight to the socket.
    private var encoderContext: ChannelHandlerContext?
    /// Those waiting for the channel to hold less than its low watermark unwritten (``drained(_:)``).
    private var drainWaiters: [EventLoopPromise<Void>] = []

    /// How a stream's body goes on the wire.
    enum StreamFraming {
        /// HTTP/1.1: each part a chunk.
        case chunked
        /// HTTP/1.0: the bytes as they are, ended by the connection's close.
        case plain
    }

    init(limits: ConnectionLimits, registry: ConnectionRegistry, logger: Logger) {
        self.limits = limits
        self.registry = registry
        self.logger = logger
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { start(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        start(context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        stop()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        stop()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { endDrainWaits() }
        context.fireChannelWritabilityChanged()
    }

    /// Succeeds once the channel holds less than its low watermark unwritten (at once if it does),
    /// or has closed: what was handed to it is as good as written.
    func drained(_ context: ChannelHandlerContext) -> EventLoopFuture<Void> {
        guard context.channel.isActive, !context.channel.isWritable else {
            return context.eventLoop.makeSucceededFuture(())
        }
        let promise = context.eventLoop.makePromise(of: Void.self)
        drainWaiters.append(promise)
        return promise.futureResult
    }

    private func endDrainWaits() {
        let waiters = drainWaiters
        drainWaiters = []
        for waiter in waiters { waiter.succeed(()) }
    }

    /// Waits until the answer handed to `channel` is written but for its low watermark (32 KiB), or
    /// the channel closed (``drained(_:)``); at once on a channel without a guard.
    static func drained(_ channel: any Channel) async {
        let drained = channel.eventLoop.flatSubmit {
            guard let context = try? channel.pipeline.syncOperations.context(handlerType: ConnectionGuard.self),
                let guardian = context.handler as? ConnectionGuard
            else { return channel.eventLoop.makeSucceededVoidFuture() }
            return guardian.drained(context)
        }
        try? await drained.get()
    }

    private func start(_ context: ChannelHandlerContext) {
        guard id == nil else { return }
        guard let (id, evicted) = registry.open(context.channel) else {
            logger.notice(
                "refusing a connection: all \(registry.maximum) connections are busy with requests",
                metadata: ["ferry.remote": "\(context.channel.remoteAddress?.description ?? "?")"])
            context.close(promise: nil)
            return
        }
        self.id = id
        if let evicted {
            logger.info("closing the connection that waited longest for a request, to make room for a new one")
            evicted.close(promise: nil)
        }
        schedule(context, after: limits.idleTimeout, "no complete request head")
    }

    private func stop() {
        endDrainWaits()
        timer?.cancel()
        timer = nil
        writeTimer?.cancel()
        writeTimer = nil
        if let id { registry.close(id) }
        id = nil
    }

    private static func nanoseconds(_ duration: Duration) -> Int64 {
        let components = duration.components
        return components.seconds * 1_000_000_000 + components.attoseconds / 1_000_000_000
    }

    private func schedule(_ context: ChannelHandlerContext, after duration: Duration, _ reason: String) {
        timer?.cancel()
        let logger = self.logger
        timer = context.eventLoop.assumeIsolated().scheduleTask(in: .nanoseconds(Self.nanoseconds(duration))) {
            logger.debug("closing a connection: \(reason) within \(duration)")
            context.close(promise: nil)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !refusedConnect else { return }
        if lingering {
            if case .end = unwrapInboundIn(data) { context.close(promise: nil) }
            return
        }
        switch unwrapInboundIn(data) {
        case .head(let head) where head.method == .CONNECT:
            // Answered here, beneath NIO's encoder, which would drop the body (RefusedConnect).
            refusedConnect = true
            let started = ContinuousClock.now
            logger.info("\(LogText.escaped("CONNECT \(head.uri)")) 405: CONNECT is not allowed")
            guard let encoder = encoderContext ?? findEncoder(context) else {
                context.close(promise: nil)
                return
            }
            let bytes = RefusedConnect.bytes(allocator: context.channel.allocator)
            // Counted as every request is (its target is no route of the server's).
            registry.metrics?.request(
                route: .unknown, path: "", method: "CONNECT", status: 405, duration: ContinuousClock.now - started)
            encoder.writeAndFlush(NIOAny(IOData.byteBuffer(bytes))).assumeIsolated().whenComplete { _ in
                context.close(promise: nil)
            }
        case .head(var head):
            requestsInProgress += 1
            readingRequest = true
            requestVersion = head.version
            requestMethods.append(head.method)
            // Two Host fields are answered 400 (HostFields), and nothing after them: a proxy in
            // front may have framed or routed the request by the other one. So is an HTTP/1.1
            // request without one, which only the version read here tells from HTTP/1.0.
            head.headers.remove(name: HostFields.missingMarker)
            let hosts = head.headers["host"].count
            let lacksHost = hosts == 0 && head.version.major == 1 && head.version.minor >= 1
            if lacksHost { head.headers.add(name: HostFields.missingMarker, value: "1") }
            let closes = !head.isKeepAlive || hosts > 1 || lacksHost
            requestsClose.append(closes)
            if let id { registry.setWaiting(id, since: nil) }
            schedule(context, after: limits.requestTimeout, "the request body did not arrive")
            if closes {
                // Hummingbird then stops reading requests on this connection after the response.
                head.headers.replaceOrAdd(name: "connection", value: "close")
            }
            // RFC 9110 § 10.1.1: a client that sends `Expect: 100-continue` waits for a 100 (or a
            // final answer) before its body. None came, and curl waited a second before each body
            // it sent so. Not between the answers of pipelined requests, nor to HTTP/1.0.
            if head.version.major == 1, head.version.minor >= 1, requestsInProgress == 1,
                head.headers["expect"].contains(where: { $0.lowercased() == "100-continue" })
            {
                context.writeAndFlush(
                    wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: .continue))), promise: nil)
            }
            context.fireChannelRead(wrapInboundOut(.head(head)))
        case .body:
            context.fireChannelRead(data)
        case .end:
            readingRequest = false
            timer?.cancel()
            timer = nil
            context.fireChannelRead(data)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        // Nobody above reads while the connection lingers: ask for more here.
        if lingering { context.read() }
        context.fireChannelReadComplete()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let error = error as? HTTPParserError { parserError = error }
        context.fireErrorCaught(error)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent {
            // The server is shutting down: close an idle connection now, a busy one after its response.
            closesAfterResponse = true
            if requestsInProgress == 0 && !readingRequest && Self.buffered(context) == 0 { context.close(promise: nil) }
            return
        }
        if case .inputClosed = event as? ChannelEvent {
            // The client closed its side (the server allows half-closure). A response of known length
            // still goes out; a stream without end (a change feed) has nobody left to read it, and an
            // idle or half-sent request never completes: close now, which ends the feed and frees
            // its place at once instead of at its next write.
            closesAfterResponse = true
            if readingRequest || requestsInProgress == 0 || respondingWithStream { context.close(promise: nil) }
        }
        context.fireUserInboundEventTriggered(event)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .head(var head):
            if let error = parserError, head.status == .badRequest {
                // Hummingbird's empty 400 for what the parser could not read: said in words.
                parserError = nil
                let answer = MalformedRequest.answer(error)
                head.status = answer.status
                head.headers.replaceOrAdd(name: "content-type", value: "application/json; charset=utf-8")
                head.headers.replaceOrAdd(name: "content-length", value: String(answer.body.count))
                malformedAnswer = answer.body
                // The parser cannot go on after the error: the connection ends with this answer.
                head.headers.replaceOrAdd(name: "connection", value: "close")
                closesAfterThisResponse = true
                logger.info("malformed request, \(answer.status.code): \(error)")
            }
            if let modified = head.headers.first(name: "last-modified"),
                let date = HTTPDate.answerDate(head.headers.first(name: "date"), lastModified: modified)
            {
                head.headers.replaceOrAdd(name: "date", value: date)
            }
            // As NIO's encoder frames it (automatic framing headers): chunks from HTTP/1.1 on,
            // plain bytes before; no body for HEAD and CONNECT or a status without one.
            let code = head.status.code
            let method = (100..<200).contains(code) && code != 101 ? nil : requestMethods.first
            var closes = false
            if method != nil {
                requestMethods.removeFirst()
                closes = requestsClose.isEmpty ? false : requestsClose.removeFirst()
            }
            if requestVersion == .http1_0 && !head.headers.contains(name: "content-length") {
                // An HTTP/1.0 client cannot read chunks: a body without length is answered as
                // HTTP/1.0 (NIO then does not chunk it) and ends where the connection does.
                head.version = .http1_0
                closes = true
            }
            // A close for the whole connection goes on the last response it owes.
            if closesAfterResponse && requestsInProgress <= 1 && !readingRequest { closes = true }
            // The answer to the request still being read (a 413 by its length, an upload refused at
            // its first bytes): the connection closes after it, lingering. Kept open, it waited for
            // a body a client that heard its answer may never send, until the request timeout.
            if method != nil && readingRequest && requestMethods.isEmpty { closes = true }
            if method != nil && closes {
                head.headers.replaceOrAdd(name: "connection", value: "close")
                closesAfterThisResponse = true
            }
            respondingWithStream = !head.headers.contains(name: "content-length")
            streamFraming =
                !respondingWithStream || method == nil || method == .HEAD || method == .CONNECT
                    || !head.status.mayHaveResponseBody
                ? nil : head.version.major == 1 && head.version.minor >= 1 ? .chunked : .plain
            tracked(context, .head(head), promise)
        case .body where malformedAnswer != nil:
            // The parser failed inside a body the responder had begun to read, and the responder
            // answered that failure with a body of its own: the words for the parser's error replace
            // it (the length above is theirs), rather than follow it.
            promise?.succeed(())
        case .body(.byteBuffer(var buffer)) where buffer.readableBytes > Self.writePiece:
            while buffer.readableBytes > Self.writePiece, let piece = buffer.readSlice(length: Self.writePiece) {
                tracked(context, .body(.byteBuffer(piece)), nil)
            }
            tracked(context, .body(.byteBuffer(buffer)), promise)
        case .body:
            tracked(context, unwrapOutboundIn(data), promise)
        case .end:
            streamFraming = nil
            if let body = malformedAnswer {
                malformedAnswer = nil
                tracked(context, .body(.byteBuffer(context.channel.allocator.buffer(bytes: body))), nil)
            }
            tracked(context, unwrapOutboundIn(data), promise) { guardian, context in
                guardian.responseWritten(context)
            }
        }
    }

    /// Writes one part of a stream's body (a change feed's event) and sends it, already framed
    /// (`chunk` for HTTP/1.1, `plain` for HTTP/1.0), beneath NIO's encoder and the conversions
    /// above it: what a feed hub writing one event to thousands of connections would otherwise
    /// pay in every handler of each. Watched by the write timer like any part. `false` when the
    /// response being written is not such a stream (then write the part through the pipeline).
    func writeFramed(_ context: ChannelHandlerContext, chunk: ByteBuffer, plain: ByteBuffer) -> Bool {
        guard let framing = streamFraming, let encoder = encoderContext ?? findEncoder(context) else { return false }
        let part = framing == .chunked ? chunk : plain
        queuedSinceCheck += part.readableBytes
        encoder.writeAndFlush(NIOAny(IOData.byteBuffer(part)), promise: nil)
        if writeTimer == nil {
            (bufferedAtCheck, queuedSinceCheck) = (Self.buffered(context), 0)
            scheduleWriteTimer(context, at: .now() + Self.timeAmount(limits.writeTimeout))
        }
        return true
    }

    private func findEncoder(_ context: ChannelHandlerContext) -> ChannelHandlerContext? {
        encoderContext = try? context.pipeline.syncOperations.context(handlerType: HTTPResponseEncoder.self)
        return encoderContext
    }

    /// Writes `part`; the write timer watches the bytes the channel holds unwritten. Only a
    /// response's end is followed to the socket (its last byte written closes the connection or
    /// starts the idle timer): a promise per write cost a change feed writing to thousands of
    /// connections more than the write itself.
    private func tracked(
        _ context: ChannelHandlerContext, _ part: HTTPServerResponsePart, _ promise: EventLoopPromise<Void>?,
        whenWritten: ((ConnectionGuard, ChannelHandlerContext) -> Void)? = nil
    ) {
        if case .body(.byteBuffer(let buffer)) = part { queuedSinceCheck += buffer.readableBytes }
        if let whenWritten {
            let written = context.eventLoop.makePromise(of: Void.self)
            context.write(wrapOutboundOut(part), promise: written)
            written.futureResult.assumeIsolated().whenComplete { result in
                promise?.completeWith(result)
                if case .success = result { whenWritten(self, context) }
            }
        } else {
            context.write(wrapOutboundOut(part), promise: promise)
        }
        if writeTimer == nil {
            (bufferedAtCheck, queuedSinceCheck) = (Self.buffered(context), 0)
            scheduleWriteTimer(context, at: .now() + Self.timeAmount(limits.writeTimeout))
        }
    }

    /// Arms the write timer for `deadline`. It is never cancelled while the connection lives (a
    /// cancellation costs the event loop a search through all its timers, and a change feed writes
    /// to thousands of connections at once). When it fires it lapses if the channel holds nothing
    /// unwritten, checks again a write timeout later if the client took something since the last
    /// check, and otherwise closes the connection: a client that takes nothing is closed within one
    /// to two write timeouts.
    private func scheduleWriteTimer(_ context: ChannelHandlerContext, at deadline: NIODeadline) {
        writeTimer = context.eventLoop.assumeIsolated().scheduleTask(deadline: deadline) {
            self.writeTimer = nil
            let buffered = Self.buffered(context)
            guard buffered > 0 else { return }
            if buffered < self.bufferedAtCheck + self.queuedSinceCheck {
                (self.bufferedAtCheck, self.queuedSinceCheck) = (buffered, 0)
                self.scheduleWriteTimer(context, at: .now() + Self.timeAmount(self.limits.writeTimeout))
                return
            }
            self.logger.debug(
                "closing a connection: the client read nothing of the response within \(self.limits.writeTimeout)")
            context.close(promise: nil)
        }
    }

    /// The bytes `context`'s channel holds that the socket has not taken yet.
    private static func buffered(_ context: ChannelHandlerContext) -> Int {
        (try? context.channel.syncOptions?.getOption(.bufferedWritableBytes)) ?? 0
    }

    private static func timeAmount(_ duration: Duration) -> TimeAmount { .nanoseconds(nanoseconds(duration)) }

    /// The last byte of a response is written: close the connection if it was to close, or start
    /// waiting for the next request.
    private func responseWritten(_ context: ChannelHandlerContext) {
        requestsInProgress = max(0, requestsInProgress - 1)
        if closesAfterThisResponse {
            if readingRequest { linger(context) } else { context.close(promise: nil) }
            return
        }
        guard requestsInProgress == 0, !readingRequest else { return }
        if closesAfterResponse {
            context.close(promise: nil)
        } else {
            if let id { registry.setWaiting(id, since: .now()) }
            schedule(context, after: limits.idleTimeout, "no complete request head")
        }
    }

    /// The response went out before its request's body was read whole (a 413 by its length, an
    /// upload refused at its first bytes), and the connection closes: closing at once, with bytes
    /// unread, resets the connection, and a client still sending loses the answer (RFC 9112 §9.6,
    /// "lingering close"). The output is closed, so the client reads the answer and its end; the
    /// rest of the body is read and dropped until it ends, the client closes, or ``lingerLimit``.
    private func linger(_ context: ChannelHandlerContext) {
        lingering = true
        context.close(mode: .output, promise: nil)
        schedule(context, after: Self.lingerLimit, "the rest of a body answered already")
        context.read()
    }
}
