import Foundation
import ServerTestSupport

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A minimal HTTP/1.1 client over a plain loopback socket, for tests: it sends exactly the bytes
/// of the request (any method, any header, a body on any method) and reads the answer as the
/// server wrote it, with `Connection: close` (``KeptAlive`` keeps a connection for several
/// requests). No redirects, caching or header rewriting. A body shorter than its `Content-Length`,
/// or a chunked body without its last chunk, is an error.
#if canImport(Glibc)
    private let systemConnect = Glibc.connect
#else
    private let systemConnect = Darwin.connect
#endif

enum LoopbackHTTP {
    struct Response: Sendable {
        var status: Int
        /// Header names lowercased.
        var headers: [String: String]
        var body: [UInt8]
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    static func send(
        port: Int, method: String, target: String, headers: [(String, String)], body: [UInt8]?
    ) async throws -> Response {
        try await offThePool { try exchange(port: port, method: method, target: target, headers: headers, body: body) }
    }

    static func exchange(
        port: Int, method: String, target: String, headers: [(String, String)], body: [UInt8]?
    ) throws -> Response {
        let fd = try connect(port: port)
        defer { close(fd) }
        var timeout = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))

        var head = "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if let body { head += "Content-Length: \(body.count)\r\n" }
        head += "\r\n"
        try writeAll(fd, Array(head.utf8) + (body ?? []))

        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = read(fd, &buffer, buffer.count)
            if count < 0 { throw Failure(description: "read failed (errno \(errno))") }
            if count == 0 { break }
            received.append(contentsOf: buffer[0..<count])
        }
        return try parse(received, method: method)
    }

    /// A connected loopback socket, for tests that send partial or odd requests byte by byte;
    /// `receiveBuffer` sets its receive buffer (before connecting, so the kernel keeps it small).
    static func connect(port: Int, receiveBuffer: Int32? = nil) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket() failed") }
        if var size = receiveBuffer {
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                systemConnect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            close(fd)
            throw Failure(description: "cannot connect to 127.0.0.1:\(port)")
        }
        return fd
    }

    /// Reads until the server closes the connection or `seconds` pass: what arrived, and whether the
    /// server closed it.
    /// Reads until the peer closes, `seconds` pass without a byte, or what was read is `enough`.
    static func readUntilClosed(_ fd: Int32, seconds: Int, enough: ([UInt8]) -> Bool = { _ in false }) -> (
        bytes: [UInt8], closed: Bool
    ) {
        var timeout = timeval(tv_sec: seconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = read(fd, &buffer, buffer.count)
            if count == 0 { return (received, true) }
            if count < 0 { return (received, errno == ECONNRESET) }
            received.append(contentsOf: buffer[0..<count])
            if enough(received) { return (received, false) }
        }
    }

    static func writeAll(_ fd: Int32, _ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if written <= 0 { throw Failure(description: "write failed (errno \(errno))") }
            offset += written
        }
    }

    static func parse(_ data: [UInt8], method: String) throws -> Response {
        let separator: [UInt8] = [13, 10, 13, 10]
        guard let end = data.firstRange(of: separator) else { throw Failure(description: "no HTTP head in the answer") }
        let head = String(decoding: data[..<end.lowerBound], as: UTF8.self)
        var lines = head.components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else {
            throw Failure(description: "bad status line")
        }
        var headers: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let name = line[..<colon].lowercased()
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            headers[name] = headers[name].map { $0 + ", " + value } ?? value
        }
        var body = Array(data[end.upperBound...])
        if method == "HEAD" { return Response(status: status, headers: headers, body: []) }
        if headers["transfer-encoding"]?.lowercased().contains("chunked") == true { body = try unchunk(body) }
        if let length = headers["content-length"].flatMap(Int.init) {
            // A body cut short is a failure, never a shorter answer.
            guard body.count >= length else {
                throw Failure(description: "the body is \(body.count) bytes, shorter than its Content-Length \(length)")
            }
            body = Array(body.prefix(length))
        }
        return Response(status: status, headers: headers, body: body)
    }

    static func unchunk(_ data: [UInt8]) throws -> [UInt8] {
        var output: [UInt8] = []
        var index = 0
        while index < data.count {
            guard let lineEnd = data[index...].firstRange(of: [13, 10]) else { break }
            let sizeText =
                String(decoding: data[index..<lineEnd.lowerBound], as: UTF8.self)
                .split(separator: ";").first.map(String.init) ?? ""
            guard let size = Int(sizeText.trimmingCharacters(in: .whitespaces), radix: 16) else {
                throw Failure(description: "bad chunk size '\(sizeText)'")
            }
            index = lineEnd.upperBound
            if size == 0 { return output }
            guard index + size <= data.count else { throw Failure(description: "truncated chunk") }
            output.append(contentsOf: data[index..<index + size])
            index += size + 2
        }
        throw Failure(description: "the chunked body ended without its last chunk")
    }
}
