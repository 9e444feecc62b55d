// The fan-out benchmark's client: thousands of change feeds read by one thread of this process over
// plain non-blocking sockets and one epoll set (level-triggered). Per ready socket: one read() into
// a buffer of the reader's, the time taken as the read returns, and a scan of the bytes for the
// events' `data:` lines; per wake-up: one lock to publish what arrived. Test equipment on the same
// cores as the server: it should cost a read and a short scan per event, not a channel pipeline, a
// task, an HTTP client or a parser each (10,000 AsyncHTTPClient streams would measure the client).
// Linux only, like the benchmark's server figures (/proc).
#if canImport(Glibc)
    import CNIOLinux  // epoll (sys/epoll.h), which Glibc's module leaves out; comes with NIOPosix
    import Foundation
    import Glibc
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
        private let poll: Int32
        private let sockets = Mutex<[Int32]>([])
        fileprivate let progress: Mutex<Progress>
        /// Signalled when the awaited write reached the awaited number of feeds.
        fileprivate let reached = DispatchSemaphore(value: 0)
        fileprivate let stopping = Atomic(false)
        private let stopped = DispatchSemaphore(value: 0)

        init(port: Int, table: String, writes: Int) {
            self.port = port
            self.table = table
            progress = Mutex(Progress(arrivals: Array(repeating: Arrival(), count: writes + 1)))
            poll = epoll_create1(Int32(EPOLL_CLOEXEC))
            let reader = FeedReader(feeds: self, poll: poll)
            let thread = Thread { [stopped] in
                reader.run()
                stopped.signal()
            }
            thread.stackSize = 1 << 20
            thread.start()
        }

        var snapshot: Progress { progress.withLock { $0 } }

        /// Opens `count` feeds, `batch` at a time, each batch answered (ready or refused) before the
        /// next, so that the server's accept queue never overflows.
        func open(_ count: Int, batch: Int = 250, timeout: Double = 60) throws {
            let request = Array(
                "GET /tables/$changes?tables=\(table) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nZUMO-API-VERSION: 3.0.0\r\n\r\n"
                    .utf8)
            var opened = 0
            while opened < count {
                let size = min(batch, count - opened)
                for _ in 0..<size {
                    let fd = try Sockets.connect(port: port)
                    sockets.withLock { $0.append(fd) }
                    try Sockets.writeAll(fd, request)
                    _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
                    var event = epoll_event()
                    event.events = EPOLLIN.rawValue | EPOLLRDHUP.rawValue
                    event.data.fd = fd
                    guard epoll_ctl(poll, EPOLL_CTL_ADD, fd, &event) == 0 else {
                        throw BenchmarkError("epoll_ctl failed (errno \(errno))")
                    }
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

        /// Stops the reader and closes every feed.
        func close() {
            stopping.store(true, ordering: .relaxed)
            stopped.wait()
            for fd in sockets.withLock({ $0 }) { Glibc.close(fd) }
            sockets.withLock { $0 = [] }
            Glibc.close(poll)
        }
    }

    /// The reader's thread: waits on the epoll set, reads each ready socket once (again while a read
    /// fills the buffer), and scans what came for the status line, the end of the head, and the
    /// `data:` lines of events. The first event is `ready` (the table's version, from which writes
    /// are counted); each later one credits the writes up to its version. All its state is its own
    /// (indexed by descriptor); what others see goes through ``FeedSockets/progress``, once per wake-up.
    private final class FeedReader: @unchecked Sendable {
        /// One feed's reading.
        struct Feed {
            var headerDone = false
            /// A line cut between two reads (rare).
            var carry: [UInt8] = []
            /// The table's version in `ready`; `-1` before it.
            var base: Int64 = -1
            var credited = 0
        }

        /// What one wake-up saw: writes `from...upTo` reached a feed at `now`; a feed started or was refused.
        private struct Credit {
            var from: Int
            var upTo: Int
            var now: UInt64
        }

        private let feeds: FeedSockets
        private let poll: Int32
        private var states: [Feed] = []
        private var credits: [Credit] = []
        private var ready = 0
        private var refused = 0
        private var closed = 0
        private let versionKey = Array("\"version\":".utf8)
        private let tableKey: [UInt8]
        private let statusPrefix = Array("HTTP/1.1 ".utf8)
        private let dataPrefix = Array("data: {".utf8)

        init(feeds: FeedSockets, poll: Int32) {
            self.feeds = feeds
            self.poll = poll
            tableKey = Array("\"\(feeds.table)\":".utf8)
        }

        func run() {
            let capacity = 1_024
            let events = UnsafeMutablePointer<epoll_event>.allocate(capacity: capacity)
            defer { events.deallocate() }
            let size = 64 * 1_024
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 16)
            defer { buffer.deallocate() }
            while !feeds.stopping.load(ordering: .relaxed) {
                let count = epoll_wait(poll, events, Int32(capacity), 50)
                guard count > 0 else { continue }
                for index in 0..<Int(count) {
                    let fd = events[index].data.fd
                    if Int(fd) >= states.count { states += Array(repeating: Feed(), count: Int(fd) + 1 - states.count) }
                    while true {
                        let got = Glibc.read(fd, buffer.baseAddress, size)
                        if got < 0 && (errno == EAGAIN || errno == EINTR) { break }
                        guard got > 0 else {
                            // The server closed the feed (or an error): it counts as closed, once.
                            var event = epoll_event()
                            _ = epoll_ctl(poll, EPOLL_CTL_DEL, fd, &event)
                            states[Int(fd)] = Feed()
                            closed += 1
                            break
                        }
                        let now = Monotonic.now()
                        scan(fd, UnsafeRawBufferPointer(rebasing: buffer[0..<got]), now)
                        if got < size { break }
                    }
                }
                publish()
            }
        }

        /// Hands what this wake-up saw to the waiting side in one lock.
        private func publish() {
            guard !credits.isEmpty || ready > 0 || refused > 0 || closed > 0 else { return }
            let signal = feeds.progress.withLock { progress in
                progress.ready += ready
                progress.refused += refused
                progress.closed += closed
                var signal = false
                for credit in credits {
                    let last = min(credit.upTo, progress.arrivals.count - 1)
                    guard credit.from <= last else { continue }
                    for write in credit.from...last {
                        progress.arrivals[write].count += 1
                        if progress.arrivals[write].first == 0 { progress.arrivals[write].first = credit.now }
                        progress.arrivals[write].last = credit.now
                        if let awaited = progress.awaited, awaited.write == write,
                            progress.arrivals[write].count == awaited.feeds
                        {
                            signal = true
                        }
                    }
                }
                return signal
            }
            (ready, refused, closed) = (0, 0, 0)
            credits.removeAll(keepingCapacity: true)
            if signal { feeds.reached.signal() }
        }

        /// Handles the complete lines of `bytes` (after what was carried from the last read) and
        /// keeps the rest for the next read.
        private func scan(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, _ now: UInt64) {
            let slot = Int(fd)
            if !states[slot].carry.isEmpty {
                var joined = states[slot].carry
                joined += bytes
                states[slot].carry = []
                joined.withUnsafeBytes { scan(fd, $0, now) }
                return
            }
            guard let base = bytes.baseAddress else { return }
            var start = 0
            while start < bytes.count, let found = memchr(base + start, 0x0A, bytes.count - start) {
                let newline = base.distance(to: UnsafeRawPointer(found))
                let line = UnsafeRawBufferPointer(rebasing: bytes[start..<newline])
                start = newline + 1
                // Only the status line, the end of the head, and data lines matter.
                if states[slot].headerDone, line.first != UInt8(ascii: "d") { continue }
                handle(slot, line, now)
            }
            if start < bytes.count { states[slot].carry = Array(bytes[start...]) }
        }

        private func handle(_ slot: Int, _ line: UnsafeRawBufferPointer, _ now: UInt64) {
            if !states[slot].headerDone {
                if line.starts(with: statusPrefix) {
                    let status = Int(String(decoding: line.dropFirst(9).prefix(3), as: UTF8.self)) ?? 0
                    if status != 200 { refused += 1 }
                } else if line.count <= 1 {
                    states[slot].headerDone = true
                }
                return
            }
            guard line.starts(with: dataPrefix) else { return }
            guard states[slot].base >= 0 else {
                // ready: {"tables":{"bench":7}}
                states[slot].base = Self.number(after: tableKey, in: line) ?? 0
                ready += 1
                return
            }
            guard let version = Self.number(after: versionKey, in: line) else { return }
            let upTo = Int(version - states[slot].base)
            let from = states[slot].credited + 1
            guard upTo >= from else { return }
            states[slot].credited = upTo
            credits.append(Credit(from: from, upTo: upTo, now: now))
        }

        /// The decimal number right after `key` in `line`. A plain search: Foundation's generic
        /// `firstRange(of:)` took a third of the reader's time.
        private static func number(after key: [UInt8], in line: UnsafeRawBufferPointer) -> Int64? {
            guard line.count >= key.count else { return nil }
            var start: Int?
            for offset in 0...(line.count - key.count) where line[offset] == key[0] {
                var matches = true
                for index in 1..<key.count where line[offset + index] != key[index] {
                    matches = false
                    break
                }
                if matches {
                    start = offset + key.count
                    break
                }
            }
            guard let start else { return nil }
            var value: Int64 = 0
            var any = false
            for byte in line[start...] {
                guard byte >= 48 && byte <= 57 else { break }
                value = value * 10 + Int64(byte - 48)
                any = true
            }
            return any ? value : nil
        }
    }

    /// Plain blocking sockets, for the writer's connection and for opening feeds.
    enum Sockets {
        static func connect(port: Int) throws -> Int32 {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
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

        /// Raises this process's soft open-file limit to the hard one, and the hard one to `wanted`
        /// where the process may (root); answers the limit in force.
        @discardableResult
        static func raiseOpenFileLimit(wanted: Int = 0) -> Int {
            var limit = rlimit()
            let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
            guard getrlimit(resource, &limit) == 0 else { return 0 }
            if limit.rlim_max < rlim_t(wanted) {
                var raised = limit
                (raised.rlim_cur, raised.rlim_max) = (rlim_t(wanted), rlim_t(wanted))
                if setrlimit(resource, &raised) == 0 { limit = raised }
            }
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
