import Foundation
import ServerTestSupport
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A loopback TCP proxy that passes bytes both ways on any number of connections (keep-alive
/// included) and counts them, and that resets the connection carrying the byte at each offset it
/// was armed with: it forwards the bytes before the offset, then closes both sides with a TCP
/// reset. Offsets count the bytes sent to the server (`upstream`: requests, upload bodies) and to
/// the client (`downstream`: answers, download bodies) from the moment ``arm(upstream:downstream:)``
/// is called.
final class ResettingProxy: Sendable {
    enum Direction: Sendable { case upstream, downstream }

    struct Counts: Sendable {
        /// Bytes passed to the server and to the client since the proxy started.
        var upstream = 0
        var downstream = 0
        /// Connections reset, and connections accepted.
        var cuts = 0
        var connections = 0
    }

    var port: Int { listener.port }
    private let listener: LoopbackListener
    private let target: Int
    private let state: Mutex<State>

    private struct State {
        var counts = Counts()
        /// Absolute byte counts at which to reset, soonest first, per direction.
        var upstreamCuts: [Int] = []
        var downstreamCuts: [Int] = []
        var open: Set<Int32> = []
    }

    init(target: Int) throws {
        self.target = target
        state = Mutex(State())
        listener = try LoopbackListener()
        listener.start { [self] client in self.relay(client) }
    }

    var counts: Counts { state.withLock { $0.counts } }

    /// Resets the connections that carry the bytes at these offsets (from now) of each direction.
    func arm(upstream: [Int] = [], downstream: [Int] = []) {
        state.withLock { state in
            state.upstreamCuts = upstream.sorted().map { state.counts.upstream + $0 }
            state.downstreamCuts = downstream.sorted().map { state.counts.downstream + $0 }
        }
    }

    /// Offsets still armed (none once every planned cut happened).
    var armed: Int { state.withLock { $0.upstreamCuts.count + $0.downstreamCuts.count } }

    /// Stops accepting, and ends the open connections.
    func stop() {
        listener.stop()
        for fd in state.withLock({ $0.open }) { shutdown(fd, Int32(SHUT_RDWR)) }
    }

    private func relay(_ client: Int32) {
        guard let server = LoopbackSockets.connect(port: target) else {
            LoopbackSockets.reset(client)
            return
        }
        state.withLock {
            $0.counts.connections += 1
            $0.open.formUnion([client, server])
        }
        // Two pumps; the one that ends last closes both descriptors (so neither is reused while
        // the other pump still reads it). A cut sets `reset`: the close is then a TCP reset.
        let pair = Pair(client: client, server: server)
        Thread.detachNewThread { self.pump(pair, .upstream) }
        pump(pair, .downstream)
    }

    private final class Pair: Sendable {
        let client: Int32
        let server: Int32
        let ended = Mutex((pumps: 0, reset: false))
        init(client: Int32, server: Int32) {
            self.client = client
            self.server = server
        }
    }

    private func pump(_ pair: Pair, _ direction: Direction) {
        let (from, to) = direction == .upstream ? (pair.client, pair.server) : (pair.server, pair.client)
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var cut = false
        while true {
            let count = read(from, &buffer, buffer.count)
            if count <= 0 { break }
            // How much of what came may pass before this direction's next cut.
            let passing = state.withLock { state -> Int in
                let next = direction == .upstream ? state.upstreamCuts.first : state.downstreamCuts.first
                let done = direction == .upstream ? state.counts.upstream : state.counts.downstream
                var passing = count
                if let next, done + count >= next {
                    passing = max(0, next - done)
                    cut = true
                    state.counts.cuts += 1
                    if direction == .upstream {
                        state.upstreamCuts.removeFirst()
                    } else {
                        state.downstreamCuts.removeFirst()
                    }
                }
                if direction == .upstream {
                    state.counts.upstream += passing
                } else {
                    state.counts.downstream += passing
                }
                return passing
            }
            if passing > 0, !Self.writeAll(to, Array(buffer[0..<passing])) { break }
            if cut { break }
        }
        if cut {
            pair.ended.withLock { $0.reset = true }
            // Wakes the other pump (nothing is sent: the reset comes with the close).
            shutdown(pair.client, Int32(SHUT_RD))
            shutdown(pair.server, Int32(SHUT_RD))
        } else if !pair.ended.withLock({ $0.reset }) {
            // An orderly end one way: pass it on, the other way may still carry bytes.
            shutdown(to, Int32(SHUT_WR))
        }
        let (last, reset) = pair.ended.withLock { ended -> (Bool, Bool) in
            ended.pumps += 1
            return (ended.pumps == 2, ended.reset)
        }
        guard last else { return }
        state.withLock { $0.open.subtract([pair.client, pair.server]) }
        if reset {
            LoopbackSockets.reset(pair.client)
            LoopbackSockets.reset(pair.server)
        } else {
            close(pair.client)
            close(pair.server)
        }
    }

    private static func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var sent = 0
        while sent < bytes.count {
            let count = bytes[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if count <= 0 { return false }
            sent += count
        }
        return true
    }
}
