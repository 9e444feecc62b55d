// The fan-out benchmark's client: thousands of change feeds on one NIO event loop (one thread),
// each read by a small channel handler that scans for its events, so that the client costs a read
// and a short scan per event, not a task, an HTTP client and a parser each (10,000 AsyncHTTPClient
// streams would measure the client). Linux only, like the benchmark's server figures (/proc).
#if canImport(Glibc)
    import Foundation
    import Glibc
    import NIOCore
    import NIOPosix
    import Synchronization

    /// Change feeds of one table, opened and read by this process.
    final class FeedSockets: Sendable {
        /// Per write (1-based, in the order made): how many feeds have its event, and when the first
        /// and the last arrived (monotonic nanoseconds).
        struct Arrival {
            var count = 0
            var first: UInt64 = 0
            var last: UInt64 = 0
        }

        struct Progress {
            var ready = 0
            var refused = 0
            var closed = 0
            var arrivals: [Arrival]
            /// The write and the number of feeds ``wait(write:feeds:timeout:)`` waits for.
            var awaited: (write: Int, feeds: Int)?
        }

        let port: Int
        let table: String
        private let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        private let channels = Mutex<[any Channel]>([])
        fileprivate let progress: Mutex<Progress>
        /// Signalled when the awaited write reached the awaited number of feeds.
        fileprivate let reached = DispatchSemaphore(value: 0)

        init(port: Int, table: String, writes: Int) {
            self.port = port
            self.table = table
            progress = Mutex(Progress(arrivals: Array(repeating: Arrival(), count: writes + 1)))
        }

        var snapshot: Progress { progress.withLock { $0 } }

        /// Opens `count` feeds, `batch` at a time, each batch answered (ready or refused) before the
        /// next, so that the server's accept queue never overflows.
        func open(_ count: Int, batch: Int = 250, timeout: Double = 60) throws {
            let request = ByteBuffer(
                string:
                    "GET /tables/$changes?tables=\(table) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nZUMO-API-VERSION: 3.0.0\r\n\r\n"
            )
            let bootstrap = ClientBootstrap(group: group)
                .channelOption(.tcpOption(.tcp_nodelay), value: 1)
                .channelInitializer { [self] channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(FeedHandler(feeds: self))
                    }
                }
            var opened = 0
            while opened < count {
                let size = min(batch, count - opened)
                let connecting = (0..<size).map { _ in bootstrap.connect(host: "127.0.0.1", port: port) }
                for future in connecting {
                    let channel = try future.wait()
                    channels.withLock { $0.append(channel) }
                    channel.writeAndFlush(request, promise: nil)
                }
                opened += size
                let deadline = Date().addingTimeInterval(timeout)
                while progress.withLock({ $0.ready + $0.refused + $0.closed }) < opened {
                    guard Date() < deadline else {
                        throw BenchmarkError("only \(snapshot.ready) of \(opened) feeds started within \(timeout) s")
                    }
                    usleep(500)
                }
            }
        }

        /// Waits until `feeds` feeds have the event of write `index`; `false` after `timeout`. The
        /// reader signals it (no polling: this process's CPU is the client's cost).
        func wait(write index: Int, feeds: Int, timeout: Double) -> Bool {
            let deadline = DispatchTime.now() + timeout
            while true {
                let done = progress.withLock { progress in
                    progress.awaited = (index, feeds)
                    return progress.arrivals[index].count >= feeds
                }
                if done { return true }
                if reached.wait(timeout: deadline) == .timedOut { return false }
            }
        }

        /// Closes every feed and stops the event loop.
        func close() {
            let open = channels.withLock { channels in
                defer { channels = [] }
                return channels
            }
            for channel in open { channel.close(promise: nil) }
            try? group.syncShutdownGracefully()
        }
    }

    /// Reads one feed: the status line, then the `data:` lines of its events. The first is `ready`
    /// (the table's version, from which writes are counted); each later one credits the writes up
    /// to its version.
    private final class FeedHandler: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer

        private let feeds: FeedSockets
        private let versionKey: [UInt8]
        private let tableKey: [UInt8]
        private var headerDone = false
        private var carry: [UInt8] = []
        private var base: Int64?
        private var credited = 0

        init(feeds: FeedSockets) {
            self.feeds = feeds
            versionKey = Array("\"version\":".utf8)
            tableKey = Array("\"\(feeds.table)\":".utf8)
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let buffer = unwrapInboundIn(data)
            let now = Monotonic.now()
            guard carry.isEmpty else {
                // A line cut between two reads: rare, the slow way.
                var bytes = carry
                bytes += buffer.readableBytesView
                carry = []
                scan(bytes[...], now)
                return
            }
            let view = buffer.readableBytesView
            scan(view[...], now)
        }

        /// Handles the complete lines of `bytes` and keeps the rest for the next read.
        private func scan<Bytes: Collection<UInt8>>(_ bytes: Bytes, _ now: UInt64) where Bytes.SubSequence == Bytes {
            var rest = bytes
            while let newline = rest.firstIndex(of: UInt8(ascii: "\n")) {
                let text = rest[..<newline]
                rest = rest[rest.index(after: newline)...]
                // Only the status line, the end of the head, and data lines matter.
                if headerDone, text.first != UInt8(ascii: "d") { continue }
                line(ArraySlice(text), now)
            }
            if !rest.isEmpty { carry = Array(rest) }
        }

        func channelInactive(context: ChannelHandlerContext) {
            feeds.progress.withLock { $0.closed += 1 }
        }

        private func line(_ line: ArraySlice<UInt8>, _ now: UInt64) {
            if !headerDone {
                if line.starts(with: Array("HTTP/1.1 ".utf8)) {
                    let status = Int(String(decoding: line.dropFirst(9).prefix(3), as: UTF8.self)) ?? 0
                    if status != 200 { feeds.progress.withLock { $0.refused += 1 } }
                } else if line.count <= 1 {
                    headerDone = true
                }
                return
            }
            guard line.starts(with: Array("data: {".utf8)) else { return }
            guard let base else {
                // ready: {"tables":{"bench":7}}
                base = Self.number(after: tableKey, in: line) ?? 0
                feeds.progress.withLock { $0.ready += 1 }
                return
            }
            guard let version = Self.number(after: versionKey, in: line) else { return }
            let upTo = Int(version - base)
            let from = credited + 1
            guard upTo >= from else { return }
            credited = upTo
            let signal = feeds.progress.withLock { progress in
                var signal = false
                for write in from...min(upTo, progress.arrivals.count - 1) {
                    progress.arrivals[write].count += 1
                    if progress.arrivals[write].first == 0 { progress.arrivals[write].first = now }
                    progress.arrivals[write].last = now
                    if let awaited = progress.awaited, awaited.write == write,
                        progress.arrivals[write].count == awaited.feeds
                    {
                        signal = true
                    }
                }
                return signal
            }
            if signal { feeds.reached.signal() }
        }

        private static func number(after key: [UInt8], in line: ArraySlice<UInt8>) -> Int64? {
            guard let range = line.firstRange(of: key) else { return nil }
            var value: Int64 = 0
            var any = false
            for byte in line[range.upperBound...] {
                guard byte >= 48 && byte <= 57 else { break }
                value = value * 10 + Int64(byte - 48)
                any = true
            }
            return any ? value : nil
        }
    }

    /// Plain blocking sockets, for the writer's connection.
    enum Sockets {
        static func connect(port: Int) throws -> Int32 {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard fd >= 0 else { throw BenchmarkError("socket() failed (errno \(errno)): raise the open-file limit") }
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            guard connected == 0 else {
                Glibc.close(fd)
                throw BenchmarkError("cannot connect to 127.0.0.1:\(port) (errno \(errno))")
            }
            return fd
        }

        static func writeAll(_ fd: Int32, _ bytes: [UInt8]) throws {
            var offset = 0
            while offset < bytes.count {
                let written = bytes[offset...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
                if written <= 0 { throw BenchmarkError("write failed (errno \(errno))") }
                offset += written
            }
        }

        /// Raises this process's soft open-file limit to the hard one; answers the limit in force.
        @discardableResult
        static func raiseOpenFileLimit() -> Int {
            var limit = rlimit()
            let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
            guard getrlimit(resource, &limit) == 0 else { return 0 }
            if limit.rlim_cur < limit.rlim_max {
                limit.rlim_cur = min(limit.rlim_max, 1 << 20)
                _ = setrlimit(resource, &limit)
                _ = getrlimit(resource, &limit)
            }
            return Int(limit.rlim_cur)
        }
    }

    /// One request at a time over a kept-alive connection: the writes of the fan-out benchmark.
    final class PlainConnection {
        private let fd: Int32
        private let port: Int
        private var pending: [UInt8] = []

        init(port: Int) throws {
            self.port = port
            fd = try Sockets.connect(port: port)
        }

        deinit { Glibc.close(fd) }

        /// Sends a JSON `POST` to `path` and reads the answer; its status.
        func post(_ path: String, json: String) throws -> Int {
            let body = Array(json.utf8)
            let head =
                "POST \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nContent-Type: application/json\r\nZUMO-API-VERSION: 3.0.0\r\nContent-Length: \(body.count)\r\n\r\n"
            try Sockets.writeAll(fd, Array(head.utf8) + body)
            var buffer = [UInt8](repeating: 0, count: 16 * 1024)
            while true {
                if let end = pending.firstRange(of: Array("\r\n\r\n".utf8)) {
                    let head = String(decoding: pending[..<end.lowerBound], as: UTF8.self).lowercased()
                    let length =
                        head.components(separatedBy: "\r\n").first { $0.hasPrefix("content-length:") }
                        .flatMap { Int($0.dropFirst(15).trimmingCharacters(in: .whitespaces)) } ?? 0
                    if pending.count >= end.upperBound + length {
                        let status = Int(head.dropFirst(9).prefix(3)) ?? 0
                        pending.removeFirst(end.upperBound + length)
                        return status
                    }
                }
                let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
                guard count > 0 else { throw BenchmarkError("the server closed the writer's connection") }
                pending += buffer[0..<count]
            }
        }
    }

    enum Monotonic {
        static func now() -> UInt64 {
            var time = timespec()
            clock_gettime(CLOCK_MONOTONIC, &time)
            return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
        }
    }
#endif
