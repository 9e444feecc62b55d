// The fan-out benchmark's floor: the same reader (FeedSockets) and the same number of feeds, served
// by the least a server can do: one thread of this process that answers each feed's request with an
// SSE head and a `ready` event, then writes each event to every feed with one plain write() of
// about the size of Ferry's. What it measures is this machine's kernel (TCP over loopback) and the
// reader, on the same two cores: no server can deliver to the last feed sooner here, so Ferry's
// figures read against it.
#if canImport(Glibc)
    import Foundation
    import Glibc
    import Synchronization

    final class FloorServer: Sendable {
        let port: Int
        private let listener: Int32
        private let feeds = Mutex<[Int32]>([])
        private let stopping = Atomic(false)
        private let stopped = DispatchSemaphore(value: 0)

        init() throws {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { throw BenchmarkError("socket() failed (errno \(errno))") }
            var one: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            guard bound == 0, listen(fd, 4_096) == 0 else {
                Glibc.close(fd)
                throw BenchmarkError("the floor server cannot listen (errno \(errno))")
            }
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            _ = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
            }
            listener = fd
            port = Int(UInt16(bigEndian: address.sin_port))
            let thread = Thread { [self] in
                acceptFeeds()
                stopped.signal()
            }
            thread.start()
        }

        /// Accepts feeds one after the other: reads each request's head, answers the SSE head and
        /// `ready` (the table at version 0).
        private func acceptFeeds() {
            let answer = Array(
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\r\nevent: ready\ndata: {\"tables\":{\"bench\":0}}\n\n"
                    .utf8)
            var head = [UInt8](repeating: 0, count: 4_096)
            while !stopping.load(ordering: .relaxed) {
                var ready = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
                guard poll(&ready, 1, 50) > 0 else { continue }
                let fd = accept(listener, nil, nil)
                guard fd >= 0 else { continue }
                var one: Int32 = 1
                setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
                var got = 0
                while got < head.count {
                    let count = head.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + got, $0.count - got) }
                    guard count > 0 else { break }
                    got += count
                    if head[..<got].firstRange(of: Array("\r\n\r\n".utf8)) != nil { break }
                }
                guard (try? Sockets.writeAll(fd, answer)) != nil else {
                    Glibc.close(fd)
                    continue
                }
                feeds.withLock { $0.append(fd) }
            }
        }

        /// Writes the event of `version` to every feed, one write() each, from the calling thread.
        func broadcast(version: Int) {
            var text = "id: \(version)\nevent: change\ndata: {\"table\":\"bench\",\"version\":\(version),"
            text += "\"id\":\"fan-\(version)\",\"updatedAt\":\"2026-11-27T00:00:00.000Z\",\"deleted\":false}\n\n"
            let bytes = Array(text.utf8)
            for fd in feeds.withLock({ $0 }) { try? Sockets.writeAll(fd, bytes) }
        }

        func close() {
            stopping.store(true, ordering: .relaxed)
            stopped.wait()
            for fd in feeds.withLock({ $0 }) { Glibc.close(fd) }
            Glibc.close(listener)
        }
    }

    extension FanOutBenchmark {
        /// `count` feeds of the floor server and the same reader; `writes` events, each alone. The
        /// CPU is this whole process's (server and reader) per event delivered.
        static func measureFloor(_ count: Int, writes: Int) throws -> Result {
            // Both ends of every feed are this process's: at most what its open-file limit allows
            // (the line says how many).
            let limit = Sockets.raiseOpenFileLimit(wanted: 2 * count + 256)
            let count = min(count, (limit - 256) / 2)
            guard count > 0 else { throw BenchmarkError("the open-file limit (\(limit)) leaves no room for feeds") }
            let server = try FloorServer()
            defer { server.close() }
            let warmUp = 5
            let feeds = FeedSockets(port: server.port, table: "bench", writes: warmUp + writes + 1)
            defer { feeds.close() }
            let opening = Monotonic.now()
            try feeds.open(count)
            let openSeconds = Double(Monotonic.now() - opening) / 1e9
            guard feeds.snapshot.ready == count else {
                throw BenchmarkError("\(feeds.snapshot.ready) of \(count) floor feeds started")
            }
            var version = 0
            for _ in 0..<warmUp {
                version += 1
                server.broadcast(version: version)
                guard feeds.wait(write: version, feeds: count, timeout: 30) else {
                    throw BenchmarkError("a floor event reached \(feeds.snapshot.arrivals[version].count) of \(count)")
                }
            }
            var first: [Double] = []
            var last: [Double] = []
            let cpu = CPUTime.now()
            for _ in 0..<writes {
                version += 1
                let started = Monotonic.now()
                server.broadcast(version: version)
                guard feeds.wait(write: version, feeds: count, timeout: 30) else {
                    throw BenchmarkError("a floor event reached \(feeds.snapshot.arrivals[version].count) of \(count)")
                }
                let arrival = feeds.snapshot.arrivals[version]
                first.append(Double(arrival.first - started) / 1e6)
                last.append(Double(arrival.last - started) / 1e6)
                usleep(10_000)
            }
            return Result(
                feeds: count, openSeconds: openSeconds, last: last.sorted(), first: first.sorted(), answered: [],
                bytesPerFeed: 0, serverMicrosecondsPerEvent: 0,
                clientMicrosecondsPerEvent: (CPUTime.now() - cpu) * 1e6 / Double(writes * count), refused: 0)
        }
    }
#endif
