import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPCompression
import NIOHTTPTypes
import NIOHTTPTypesHTTP1

/// Hummingbird's HTTP/1 child channel with a ``ConnectionGuard`` in its pipeline.
struct GuardedHTTP1Channel: ServerChildChannel, HTTPChannelHandler {
    typealias Value = NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>
    typealias CompressionIntent = HTTPResponseCompressor.CompressionIntent

    let responder: HTTPChannelHandler.Responder
    let limits: ConnectionLimits
    let registry: ConnectionRegistry
    let logger: Logger
    /// Whether JSON answers are compressed for clients that ask (``ServerConfiguration/compressesAnswers``).
    var compresses = false

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            let operations = channel.pipeline.syncOperations
            // 80 KiB per field and in all (NIO's defaults), and at most 1,000 fields (NIO allows
            // 65,534: a request of 12,000 tiny fields passed).
            var decoderLimits = NIOHTTPDecoderLimitConfiguration()
            decoderLimits.maxHeaderFieldCount = 1_000
            try operations.configureHTTPServerPipeline(
                withPipeliningAssistance: false, withErrorHandling: false, withOutboundHeaderValidation: false,
                withEncoderConfiguration: .init(), withDecoderLimitConfiguration: decoderLimits)
            try operations.addHandler(ConnectionGuard(limits: limits, registry: registry, logger: self.logger))
            if compresses {
                try operations.addHandler(UncompressedHeads())
                try operations.addHandler(HTTPResponseCompressor(responseCompressionPredicate: Self.compressible))
            }
            try operations.addHandler(HTTP1ToHTTPServerCodec(secure: false))
            // No HTTPConnectionStateHandler: it closes right after queueing a response's end, and
            // drops what the socket had not taken yet; ConnectionGuard closes after the last byte.
            return try NIOAsyncChannel(
                wrappingChannelSynchronously: channel, configuration: .init(isOutboundHalfClosureEnabled: true))
        }
    }

    /// Whether an answer is worth compressing: JSON (pages, items, batches, errors) of at least
    /// 1 KiB or of a length not known ahead. Never a change feed (an event would wait for a
    /// compressor's block), an attachment download (its length and ranges are its bytes') or a
    /// partial answer.
    static func compressible(_ head: inout HTTPResponseHead, _ supported: Bool) -> CompressionIntent {
        let type = head.headers.first(name: "Content-Type")?.lowercased() ?? ""
        let length = head.headers.first(name: "Content-Length").flatMap(Int.init)
        guard supported, type.hasPrefix("application/json"), head.status != .partialContent,
            !head.headers.contains(name: "Accept-Ranges"), length.map({ $0 >= 1_024 }) ?? true
        else { return .doNotCompress }
        return .compressIfPossible
    }

    func handle(value asyncChannel: Value, logger: Logger) async {
        await handleHTTP(asyncChannel: asyncChannel, logger: logger)
    }
}

extension HTTPServerBuilder {
    /// HTTP/1 with Ferry's connection limits.
    static func guardedHTTP1(
        _ limits: ConnectionLimits, logger: Logger, metrics: ServerMetrics? = nil, compresses: Bool = false
    ) -> HTTPServerBuilder {
        let registry = ConnectionRegistry(maximum: limits.maximumConnections, metrics: metrics)
        return HTTPServerBuilder { responder in
            GuardedHTTP1Channel(
                responder: responder, limits: limits, registry: registry, logger: logger, compresses: compresses)
        }
    }
}

/// Takes `Accept-Encoding` off `HEAD` requests, so that the compressor leaves their answers alone:
/// it answered them `Content-Encoding: gzip` with the length of an empty body compressed (20), not
/// the length a `GET` would have.
final class UncompressedHeads: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head(var head) = unwrapInboundIn(data), head.method == .HEAD {
            head.headers.remove(name: "Accept-Encoding")
            context.fireChannelRead(wrapInboundOut(.head(head)))
            return
        }
        context.fireChannelRead(data)
    }
}
