import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A loopback HTTP proxy that loses requests and answers: for each request it draws whether to pass
/// it, cut it before the server sees it, or let the server apply it and then lose the answer
/// (entirely, or after part of it was written). One request per connection (`Connection: close`).
final class AnswerDroppingProxy: Sendable {
    enum Fate: Sendable { case pass, cutBeforeServer, loseAnswer, cutAnswerMidway }

    let port: Int
    private let listener: Int32
    private let target: Int
    private let state: Mutex<(random: UInt64, lossRate: Double, fates: [Fate], losses: Int)>

    init(target: Int, lossRate: Double, seed: UInt64) throws {
        self.target = target
        state = Mutex((seed, lossRate, [], 0))
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = Self.loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, listen(fd, 64) == 0 else {
            close(fd)
            throw ProxyError(message: "cannot listen")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        listener = fd
        port = Int(UInt16(bigEndian: address.sin_port))
        let listener = fd
        Thread.detachNewThread { [self] in
            while true {
                let client = accept(listener, nil, nil)
                if client < 0 { return }
                Thread.detachNewThread { self.serve(client) }
            }
        }
    }

    struct ProxyError: Error { var message: String }

    /// What happened to every request so far.
    var fates: [Fate] { state.withLock { $0.fates } }

    /// Stops losing requests (later ones all pass).
    func stopLosing() { state.withLock { $0.lossRate = 0 } }

    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private func draw() -> Fate {
        state.withLock { state in
            state.random &+= 0x9E37_79B9_7F4A_7C15
            var z = state.random
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            z ^= z >> 31
            let unit = Double(z >> 11) / Double(1 << 53)
            let fate: Fate
            if unit >= state.lossRate {
                fate = .pass
            } else {
                // The kinds of loss in turn, so that every kind happens.
                fate = [.cutBeforeServer, .loseAnswer, .cutAnswerMidway][state.losses % 3]
                state.losses += 1
            }
            state.fates.append(fate)
            return fate
        }
    }

    private func serve(_ client: Int32) {
        guard let request = Self.readRequest(client) else {
            close(client)
            return
        }
        let fate = draw()
        // A lost request or answer ends in a reset: FoundationNetworking (swift-corelibs-foundation
        // #5285) traps when a connection closes cleanly before any byte of an answer.
        defer {
            if fate == .pass { close(client) } else { Self.reset(client) }
        }
        if fate == .cutBeforeServer { return }
        let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(server) }
        var address = Self.loopback(port: target)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(server, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0, Self.writeAll(server, request) else { return }
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = read(server, &buffer, buffer.count)
            if count <= 0 { break }
            answer += buffer[0..<count]
        }
        switch fate {
        case .pass: _ = Self.writeAll(client, answer)
        case .cutAnswerMidway:
            // The head and part of the body: the client knows the status, not the outcome.
            let head = (answer.firstRange(of: Array("\r\n\r\n".utf8))?.upperBound ?? 0)
            _ = Self.writeAll(client, Array(answer.prefix(head + (answer.count - head) / 2)))
        case .loseAnswer, .cutBeforeServer: break
        }
    }

    /// Closes with a TCP reset.
    static func reset(_ fd: Int32) {
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
        close(fd)
    }

    /// Reads one request (head and `Content-Length` body) and rewrites it to close its connection.
    static func readRequest(_ fd: Int32) -> [UInt8]? {
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        let separator: [UInt8] = Array("\r\n\r\n".utf8)
        var headEnd: Int?
        var expected = 0
        while true {
            if headEnd == nil, let range = data.firstRange(of: separator) {
                headEnd = range.upperBound
                let head = String(decoding: data[..<range.lowerBound], as: UTF8.self)
                for line in head.split(separator: "\r\n") {
                    let parts = line.split(separator: ":", maxSplits: 1)
                    if parts.count == 2, parts[0].lowercased() == "content-length" {
                        expected = Int(parts[1].trimmingCharacters(in: .whitespaces)) ?? 0
                    }
                }
            }
            if let headEnd, data.count >= headEnd + expected { break }
            let count = read(fd, &buffer, buffer.count)
            if count <= 0 { return nil }
            data += buffer[0..<count]
        }
        let end = headEnd ?? data.count
        var lines = String(decoding: data[..<(end - 4)], as: UTF8.self).components(separatedBy: "\r\n")
        lines.removeAll { $0.lowercased().hasPrefix("connection:") }
        lines.append("Connection: close")
        return Array((lines.joined(separator: "\r\n") + "\r\n\r\n").utf8) + data[end...]
    }

    static func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if written <= 0 { return false }
            offset += written
        }
        return true
    }

    static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return address
    }
}
