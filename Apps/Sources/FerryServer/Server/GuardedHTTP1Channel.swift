import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1

/// Hummingbird's HTTP/1 child channel with a ``ConnectionGuard`` in its pipeline.
struct GuardedHTTP1Channel: ServerChildChannel, HTTPChannelHandler {
    typealias Value = NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>

    let responder: HTTPChannelHandler.Responder
    let limits: ConnectionLimits
    let registry: ConnectionRegistry
    let logger: Logger

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
            try operations.addHandler(HTTP1ToHTTPServerCodec(secure: false))
            // No HTTPConnectionStateHandler: it closes right after queueing a response's end, and
            // drops what the socket had not taken yet; ConnectionGuard closes after the last byte.
            return try NIOAsyncChannel(
                wrappingChannelSynchronously: channel, configuration: .init(isOutboundHalfClosureEnabled: true))
        }
    }

    func handle(value asyncChannel: Value, logger: Logger) async {
        await handleHTTP(asyncChannel: asyncChannel, logger: logger)
    }
}

extension HTTPServerBuilder {
    /// HTTP/1 with Ferry's connection limits.
    static func guardedHTTP1(_ limits: ConnectionLimits, logger: Logger, metrics: ServerMetrics? = nil)
        -> HTTPServerBuilder
    {
        let registry = ConnectionRegistry(maximum: limits.maximumConnections, metrics: metrics)
        return HTTPServerBuilder { responder in
            GuardedHTTP1Channel(responder: responder, limits: limits, registry: registry, logger: logger)
        }
    }
}
