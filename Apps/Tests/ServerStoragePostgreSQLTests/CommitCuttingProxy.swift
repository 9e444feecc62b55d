import Foundation
import ServerTestSupport
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A loopback proxy in front of PostgreSQL that, once armed, loses the answer to the next `COMMIT`:
/// it passes the `COMMIT` on, stops passing the server's bytes back, closes the client's connection
/// and reads the server's answer to the end (so the commit happens: PostgreSQL sent its answer).
/// What a connection cut at that moment does, every time.
final class CommitCuttingProxy: Sendable {
    var port: Int { listener.port }
    private let listener: LoopbackListener
    private let target: Int
    private let state = Mutex<(armed: Bool, cuts: Int)>((false, 0))

    init(target: Int) throws {
        self.target = target
        listener = try LoopbackListener()
        listener.start { [self] client in self.serve(client) }
    }

    /// Loses the answer to the next `COMMIT` on any connection.
    func arm() { state.withLock { $0.armed = true } }

    /// How many answers it lost.
    var cuts: Int { state.withLock { $0.cuts } }

    func stop() { listener.stop() }

    private func serve(_ client: Int32) {
        guard let server = LoopbackSockets.connect(port: target) else {
            close(client)
            return
        }
        let cut = Mutex(false)
        let serverClosed = Mutex(false)
        // The server's bytes go back until the cut.
        Thread.detachNewThread {
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while true {
                let count = read(server, &buffer, buffer.count)
                if count <= 0 { break }
                if cut.withLock({ $0 }) { continue }  // read to the end, pass nothing on
                if !LoopbackSockets.writeAll(client, buffer[0..<count]) { break }
            }
            serverClosed.withLock { $0 = true }
            close(client)
        }
        var pending: [UInt8] = []
        var startup = true
        // Armed and past a `COMMIT`: the cut comes once its messages end (a `Sync`, or the `Query`).
        var cutting = false
        var buffer = [UInt8](repeating: 0, count: 65_536)
        reading: while true {
            let count = read(client, &buffer, buffer.count)
            if count <= 0 { break }
            pending += buffer[0..<count]
            // Whole messages only: the startup packets (a length, then a code), then typed ones.
            var forward: [UInt8] = []
            var cutsNow = false
            while !cutsNow {
                let header = startup ? 0 : 1
                guard pending.count >= header + 4 else { break }
                let length = pending[header..<(header + 4)].reduce(0) { $0 << 8 | Int($1) }
                guard pending.count >= header + length else { break }
                let message = Array(pending[..<(header + length)])
                pending.removeFirst(header + length)
                forward += message
                if startup {
                    // SSLRequest and GSSENCRequest come before the startup message proper.
                    let code = message.count >= 8 ? message[4..<8].reduce(0) { $0 << 8 | Int($1) } : 0
                    if code != 80_877_103 && code != 80_877_104 { startup = false }
                    continue
                }
                let type = message[0]
                if !cutting, type == UInt8(ascii: "P") || type == UInt8(ascii: "Q"),
                    message.firstRange(of: Array("COMMIT".utf8)) != nil,
                    state.withLock({ state in
                        guard state.armed else { return false }
                        state.armed = false
                        state.cuts += 1
                        return true
                    })
                {
                    cutting = true
                }
                if cutting && (type == UInt8(ascii: "S") || type == UInt8(ascii: "Q")) { cutsNow = true }
            }
            // Nothing of the server's goes back from here on: its answer to the COMMIT is lost.
            if cutsNow { cut.withLock { $0 = true } }
            if !forward.isEmpty, !LoopbackSockets.writeAll(server, forward) { break }
            if cutsNow {
                // The client loses the connection; the server answers the COMMIT to nobody.
                shutdown(client, Int32(SHUT_RDWR))
                for _ in 0..<250 where !serverClosed.withLock({ $0 }) { usleep(20_000) }
                break reading
            }
        }
        shutdown(server, Int32(SHUT_RDWR))
        close(server)
    }
}
