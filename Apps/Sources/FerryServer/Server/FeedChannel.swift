import NIOCore
import NIOHTTPTypes

/// A change's event as a change feed's connections write it: made once per event loop for all the
/// feeds whose connections live on it (the same bytes, and the same as one HTTP/1.1 chunk), so that
/// a write to thousands of feeds neither copies nor frames the event for each.
struct FeedWire: Sendable {
    /// The event's bytes, for a response ended by the connection's close (HTTP/1.0).
    let plain: ByteBuffer
    /// The event as one chunk of a chunked response (HTTP/1.1).
    let chunk: ByteBuffer

    init(_ frame: [UInt8], allocator: ByteBufferAllocator) {
        var plain = allocator.buffer(capacity: frame.count)
        plain.writeBytes(frame)
        var chunk = allocator.buffer(capacity: frame.count + 16)
        chunk.writeString(String(frame.count, radix: 16))
        chunk.writeStaticString("\r\n")
        chunk.writeBytes(frame)
        chunk.writeStaticString("\r\n")
        (self.plain, self.chunk) = (plain, chunk)
    }
}

/// A change feed's channel, written by the feed hub on the channel's event loop: each event goes
/// in one write beneath the HTTP handlers, framed as NIO's encoder would frame it
/// (``ConnectionGuard/writeFramed(_:chunk:plain:)``), or, when the response is not such a stream,
/// as a body part through the pipeline, as the feed's writer would write it.
final class ChannelFeedConnection: FeedConnection {
    let channel: any Channel
    /// The connection's guard and its context, found at the first write (on the event loop);
    /// `nil` before.
    private let guardian: NIOLoopBoundBox<Guardian?>

    private enum Guardian {
        case found(ConnectionGuard, ChannelHandlerContext)
        case absent
    }

    init(_ channel: any Channel) {
        self.channel = channel
        guardian = .makeEmptyBox(valueType: Guardian.self, eventLoop: channel.eventLoop)
    }

    var lane: ObjectIdentifier { ObjectIdentifier(channel.eventLoop) }

    func onLane(_ frame: [UInt8], _ body: @escaping @Sendable (FeedWire) -> Void) {
        let channel = channel
        channel.eventLoop.execute { body(FeedWire(frame, allocator: channel.allocator)) }
    }

    var isWritable: Bool { channel.isWritable }

    func write(_ wire: FeedWire) {
        if guardian.value == nil {
            if let context = try? channel.pipeline.syncOperations.context(handlerType: ConnectionGuard.self),
                let handler = context.handler as? ConnectionGuard
            {
                guardian.value = .found(handler, context)
            } else {
                guardian.value = .absent
            }
        }
        if case .found(let handler, let context)? = guardian.value,
            handler.writeFramed(context, chunk: wire.chunk, plain: wire.plain)
        {
            return
        }
        channel.writeAndFlush(HTTPResponsePart.body(wire.plain), promise: nil)
    }
}
