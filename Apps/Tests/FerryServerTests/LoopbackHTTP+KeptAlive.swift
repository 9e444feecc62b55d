import Foundation
import ServerTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension LoopbackHTTP {
    /// One connection for several requests, read as a proxy or a slow phone would: each answer by
    /// its `Content-Length`, its chunks, or (HTTP/1.0) until the server closes, optionally in small
    /// reads with pauses. Blocking: use it off the cooperative pool (`offThePool`).
    final class KeptAlive {
        let fd: Int32
        private var buffered: [UInt8] = []
        private var closed = false

        init(port: Int, timeoutSeconds: Int = 30) throws {
            fd = try LoopbackHTTP.connect(port: port)
            var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        }

        deinit { close(fd) }

        /// Sends a request line and headers (`version` as given, `HTTP/1.1` or `HTTP/1.0`).
        func send(_ method: String, _ target: String, version: String = "HTTP/1.1", headers: [(String, String)] = [])
            throws
        {
            var head = "\(method) \(target) \(version)\r\nHost: 127.0.0.1\r\n"
            for (name, value) in headers { head += "\(name): \(value)\r\n" }
            head += "\r\n"
            try LoopbackHTTP.writeAll(fd, Array(head.utf8))
        }

        /// Reads one answer. `pause` is slept after every `step` bytes read. The answer to a `HEAD`
        /// (`toHead`) has no body, whatever its `Content-Length` says.
        func receive(step: Int = 65_536, pause: Duration = .zero, toHead: Bool = false) throws -> Response {
            var headEnd: Range<Int>?
            while headEnd == nil {
                headEnd = buffered.firstRange(of: [13, 10, 13, 10])
                if headEnd == nil {
                    guard try fill(step, pause) else { throw Failure(description: "closed before a head") }
                }
            }
            let head = Array(buffered[..<headEnd!.upperBound])
            buffered.removeFirst(headEnd!.upperBound)
            let parsedHead = try LoopbackHTTP.parse(head, method: "HEAD")
            var body: [UInt8] = []
            if toHead {
                return Response(status: parsedHead.status, headers: parsedHead.headers, body: [])
            } else if let length = parsedHead.headers["content-length"].flatMap(Int.init) {
                while buffered.count < length {
                    guard try fill(step, pause) else {
                        throw Failure(
                            description:
                                "the body is \(buffered.count) bytes, shorter than its Content-Length \(length)")
                    }
                }
                body = Array(buffered.prefix(length))
                buffered.removeFirst(length)
            } else if parsedHead.headers["transfer-encoding"]?.lowercased().contains("chunked") == true {
                while (try? LoopbackHTTP.unchunk(buffered)) == nil {
                    guard try fill(step, pause) else { throw Failure(description: "the chunked body was cut") }
                }
                body = try LoopbackHTTP.unchunk(buffered)
                buffered = []
            } else {
                while try fill(step, pause) {}
                body = buffered
                buffered = []
            }
            return Response(status: parsedHead.status, headers: parsedHead.headers, body: body)
        }

        /// Reads nothing (socket buffers fill, then nothing moves) until `log` says the server gave
        /// up on this reader, for at most a minute; then expects the rest of the answer to be cut
        /// and the connection closed. A fixed pause was shorter than making a 20 MB page on a
        /// loaded machine, and the reader then got it whole.
        func expectClosedForReadingNothing(log: CapturedLog) throws {
            let deadline = Date().addingTimeInterval(60)
            while !log.contains("the client read nothing of the response"), Date() < deadline {
                Thread.sleep(forTimeInterval: 0.05)
            }
            #expect(log.contains("the client read nothing of the response"), "the server never gave up")
            #expect(throws: LoopbackHTTP.Failure.self, "the server gave up on a reader that stopped") {
                try self.receive()
            }
            #expect(try isClosedByServer())
        }

        /// Whether the server has closed the connection (reads what is left first).
        func isClosedByServer() throws -> Bool {
            while try fill(65_536, .zero) {}
            return closed
        }

        /// Reads up to `count` bytes; `false` once the server closed the connection.
        private func fill(_ count: Int, _ pause: Duration) throws -> Bool {
            if closed { return false }
            var chunk = [UInt8](repeating: 0, count: count)
            let read = Foundation.read(fd, &chunk, count)
            if read == 0 || (read < 0 && errno == ECONNRESET) {
                closed = true
                return false
            }
            if read < 0 { throw Failure(description: "read failed (errno \(errno))") }
            buffered.append(contentsOf: chunk[0..<read])
            if pause > .zero {
                Thread.sleep(
                    forTimeInterval: Double(pause.components.attoseconds) / 1e18 + Double(pause.components.seconds))
            }
            return true
        }
    }
}
