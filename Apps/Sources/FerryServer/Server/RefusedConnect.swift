import NIOCore

/// The answer to `CONNECT`: the server is no proxy. NIO's encoder writes a response to `CONNECT`
/// without its body (and its length), whatever the status, and its decoder treats what follows the
/// request as a tunnel's bytes: Hummingbird's 404 went out with `Content-Type: application/json`,
/// no length and no body, and the connection hung until the idle timeout (30 s). So
/// ``ConnectionGuard`` answers `CONNECT` itself, beneath the encoder, with this whole response
/// (length, one-line JSON error, `Connection: close`) and closes the connection once it is sent.
enum RefusedConnect {
    /// The error's body: `{"code":"methodNotAllowed","error":"…"}`.
    static let answer = TableService.errorResponse(
        ProtocolError(405, "methodNotAllowed", "CONNECT is not allowed: this server is not a proxy"))

    /// The response, as bytes on the wire.
    static func bytes(allocator: ByteBufferAllocator) -> ByteBuffer {
        let body = answer.body ?? []
        var head = "HTTP/1.1 405 Method Not Allowed\r\n"
        for (name, value) in answer.headers { head += "\(name): \(value)\r\n" }
        head += "x-zumo-server-version: \(TableService.serverVersion)\r\n"
        head += "Allow: GET, HEAD, POST, PUT, PATCH, DELETE\r\n"
        head += "Content-Length: \(body.count)\r\nConnection: close\r\n\r\n"
        var buffer = allocator.buffer(capacity: head.utf8.count + body.count)
        buffer.writeString(head)
        buffer.writeBytes(body)
        return buffer
    }
}
