import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A loopback TCP relay that counts the bytes clients send through it to the server (what the
/// server received) and can slow them to a rate, so that a test can stop a client mid-upload. Each
/// direction of each connection is pumped by a thread of its own with blocking calls (never on the
/// tests' cooperative pool).
final class ThrottlingProxy: Sendable {
    let port: Int
    private let listener: Int32
    private let target: Int
    /// Bytes relayed from clients to the server, and the most per second (0: no limit).
    private let state = Mutex<(sent: Int64, bytesPerSecond: Int)>((0, 0))

    init(target: Int, bytesPerSecond: Int) throws {
        self.target = target
        state.withLock { $0.bytesPerSecond = bytesPerSecond }
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
        Thread.detachNewThread { [self] in
            while true {
                let client = accept(fd, nil, nil)
                if client < 0 { return }
                Thread.detachNewThread { self.relay(client) }
            }
        }
    }

    struct ProxyError: Error { var message: String }

    /// The bytes clients sent through the proxy so far.
    var sent: Int64 { state.withLock { $0.sent } }

    /// Changes the rate (0: no limit).
    func setRate(_ bytesPerSecond: Int) { state.withLock { $0.bytesPerSecond = bytesPerSecond } }

    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return address
    }

    private func relay(_ client: Int32) {
        let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = Self.loopback(port: target)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(server, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            close(client)
            close(server)
            return
        }
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread { [self] in
            pump(from: server, to: client, counted: false)
            done.signal()
        }
        pump(from: client, to: server, counted: true)
        done.wait()
        close(client)
        close(server)
    }

    /// Copies until the source ends (or either side fails), then ends the other side's writing.
    private func pump(from source: Int32, to destination: Int32, counted: Bool) {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            // Slowed: small reads, each followed by the pause that keeps the rate.
            let rate = counted ? state.withLock { $0.bytesPerSecond } : 0
            let want = rate > 0 ? min(buffer.count, max(1024, rate / 50)) : buffer.count
            let count = buffer.withUnsafeMutableBytes { read(source, $0.baseAddress, want) }
            if count <= 0 { break }
            var offset = 0
            while offset < count {
                let written = buffer.withUnsafeBytes {
                    send(destination, $0.baseAddress! + offset, count - offset, Int32(MSG_NOSIGNAL))
                }
                if written <= 0 {
                    shutdown(source, Int32(SHUT_RDWR))
                    return
                }
                offset += written
            }
            if counted {
                state.withLock { $0.sent += Int64(count) }
                if rate > 0 { usleep(useconds_t(Double(count) / Double(rate) * 1_000_000)) }
            }
        }
        shutdown(destination, Int32(SHUT_WR))
    }
}
