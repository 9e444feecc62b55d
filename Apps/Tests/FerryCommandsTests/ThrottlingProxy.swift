import Foundation
import ServerTestSupport
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A loopback TCP relay that counts the bytes clients send through it to the server (what the
/// server received) and can slow them to a rate, so that a test can stop a client mid-upload. Each
/// direction of each connection is pumped by a thread of its own with blocking calls (never on the
/// tests' cooperative pool).
final class ThrottlingProxy: Sendable {
    var port: Int { listener.port }
    private let listener: LoopbackListener
    private let target: Int
    /// Bytes relayed from clients to the server, and the most per second (0: no limit).
    private let state = Mutex<(sent: Int64, bytesPerSecond: Int)>((0, 0))

    init(target: Int, bytesPerSecond: Int) throws {
        self.target = target
        state.withLock { $0.bytesPerSecond = bytesPerSecond }
        listener = try LoopbackListener()
        listener.start { [self] client in self.relay(client) }
    }

    /// The bytes clients sent through the proxy so far.
    var sent: Int64 { state.withLock { $0.sent } }

    /// Changes the rate (0: no limit).
    func setRate(_ bytesPerSecond: Int) { state.withLock { $0.bytesPerSecond = bytesPerSecond } }

    func stop() { listener.stop() }

    private func relay(_ client: Int32) {
        let server = LoopbackSockets.connect(port: target) ?? -1
        guard server >= 0 else {
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
