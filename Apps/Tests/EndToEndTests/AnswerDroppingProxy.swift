import Foundation
import ServerTestSupport
import StoreConformance
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A loopback HTTP proxy that loses requests and answers: for each request it draws whether to pass
/// it, cut it before the server sees it, or let the server apply it and then lose the answer
/// (entirely, or after part of it was written). One request per connection (`Connection: close`).
final class AnswerDroppingProxy: Sendable {
    enum Fate: Sendable { case pass, cutBeforeServer, loseAnswer, cutAnswerMidway }

    var port: Int { listener.port }
    private let listener: LoopbackListener
    private let target: Int
    private let state: Mutex<(random: SeededRandom, lossRate: Double, fates: [Fate], losses: Int)>

    init(target: Int, lossRate: Double, seed: UInt64) throws {
        self.target = target
        state = Mutex((SeededRandom(seed: seed), lossRate, [], 0))
        listener = try LoopbackListener()
        listener.start { [self] client in self.serve(client) }
    }

    /// What happened to every request so far.
    var fates: [Fate] { state.withLock { $0.fates } }

    /// Stops losing requests (later ones all pass).
    func stopLosing() { state.withLock { $0.lossRate = 0 } }

    func stop() { listener.stop() }

    private func draw() -> Fate {
        state.withLock { state in
            let unit = Double(state.random.next() >> 11) / Double(1 << 53)
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
            if fate == .pass { close(client) } else { LoopbackSockets.reset(client) }
        }
        if fate == .cutBeforeServer { return }
        let server = LoopbackSockets.connect(port: target) ?? -1
        defer { close(server) }
        guard server >= 0, LoopbackSockets.writeAll(server, request) else { return }
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = read(server, &buffer, buffer.count)
            if count <= 0 { break }
            answer += buffer[0..<count]
        }
        switch fate {
        case .pass: _ = LoopbackSockets.writeAll(client, answer)
        case .cutAnswerMidway:
            // The head and part of the body: the client knows the status, not the outcome.
            let head = (answer.firstRange(of: Array("\r\n\r\n".utf8))?.upperBound ?? 0)
            _ = LoopbackSockets.writeAll(client, Array(answer.prefix(head + (answer.count - head) / 2)))
        case .loseAnswer, .cutBeforeServer: break
        }
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

}
