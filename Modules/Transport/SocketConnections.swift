#if canImport(Glibc)
    import Foundation
    import Glibc
    import Synchronization

    #if canImport(FoundationNetworking)
        import FoundationNetworking
    #endif

    /// HTTP/1.1 over plain sockets, for `http://` servers on Linux.
    ///
    /// FoundationNetworking's `URLSession` keeps a socket's write-readiness source registered after
    /// the request is sent, so while it waits for an answer it spins through `curl_multi_socket_action`
    /// (about three quarters of a core per request in flight, measured on 6.3.1). A push or a pull
    /// would spend that core beside the server it waits for, and a long-lived stream would spend it
    /// for as long as it is open. This client blocks in `recv` instead, on a thread of its own per
    /// exchange (never a thread of the cooperative pool or of GCD's), and keeps connections alive
    /// between requests (a few per server).
    ///
    /// It speaks what the table protocol needs: `Content-Length` and chunked answers, keep-alive,
    /// `TCP_NODELAY`, a timeout between bytes (the request's `timeoutInterval`, as `URLSession`), and
    /// cancellation (the socket is shut down). `https://` and proxies (`http_proxy`) stay with
    /// `URLSession`.
    final class SocketConnections: HTTPConnections {
        /// Idle kept-alive connections by `host:port`, the most recently used last.
        private let idle = Mutex<[String: [Int32]]>([:])
        /// The most idle connections kept per server.
        static let maximumIdlePerServer = 4

        deinit {
            for fds in idle.withLock({ $0.values }) { for fd in fds { close(fd) } }
        }

        /// The proxy settings of the environment, read once (`http_proxy`, `all_proxy`, `no_proxy`).
        private let proxy: (configured: Bool, exempt: [String]) = {
            let environment = ProcessInfo.processInfo.environment
            let proxy =
                environment["http_proxy"] ?? environment["HTTP_PROXY"] ?? environment["all_proxy"]
                ?? environment["ALL_PROXY"]
            let exempt = (environment["no_proxy"] ?? environment["NO_PROXY"] ?? "").split(separator: ",").map {
                $0.trimmingCharacters(in: .whitespaces).lowercased()
            }
            return (proxy?.isEmpty == false, exempt)
        }()

        /// Whether `url` can go through this client: `http`, and no proxy configured for it.
        func handles(_ url: URL) -> Bool {
            guard url.scheme?.lowercased() == "http", let host = url.host, !host.isEmpty else { return false }
            guard proxy.configured else { return true }
            let name = host.lowercased()
            return proxy.exempt.contains { entry in
                entry == "*"
                    || (!entry.isEmpty && (name == entry || name.hasSuffix(entry.hasPrefix(".") ? entry : "." + entry)))
            }
        }

        /// Sends `request` and reads the whole answer. Failures are `URLError`s, as from `URLSession`
        /// (the caller maps them), so that both paths describe failures alike.
        /// One request and its answer, whose body may hold at most `limit` bytes (a larger one fails
        /// with `URLError(.dataLengthExceedsMaximum)` before it is read).
        func exchange(_ request: URLRequest, limit: Int = .max) async throws -> (
            status: Int, headers: [String: String], body: Data
        ) {
            guard let url = request.url, let host = url.host else { throw URLError(.badURL) }
            let port = url.port ?? 80
            let server = "\(host):\(port)"
            let head = Self.head(of: request, host: host, port: url.port)
            let body = request.httpBody ?? Data()
            let timeout = request.timeoutInterval > 0 ? request.timeoutInterval : 60
            let method = request.httpMethod ?? "GET"
            // A request that may be sent twice (the server closed a kept-alive connection as it was
            // reused): a read, or a write the server recognises by its key.
            let repeatable =
                method == "GET" || method == "HEAD" || request.value(forHTTPHeaderField: "Idempotency-Key") != nil
            let socket = InFlight()
            return try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { continuation in
                    // A thread of its own: a blocked GCD worker could hold back the cooperative pool.
                    let thread = Thread {
                        continuation.resume(
                            with: Result {
                                try self.run(
                                    server: server, host: host, port: port, head: head, body: body, method: method,
                                    timeout: timeout, repeatable: repeatable, socket: socket, limit: limit)
                            })
                    }
                    thread.stackSize = 256 * 1024
                    thread.start()
                }
            } onCancel: {
                socket.cancel()
            }
        }

        /// Sends `request` on a connection of its own and answers the status and headers as soon as
        /// they arrive; the body follows as it arrives, until the server ends it (the stream
        /// finishes), the connection fails (it throws a `URLError`) or the consumer stops reading
        /// (the connection is shut down). For long-lived answers such as a change feed.
        func openStream(_ request: URLRequest) async throws -> (
            status: Int, headers: [String: String], body: AsyncThrowingStream<[UInt8], any Error>
        ) {
            guard let url = request.url, let host = url.host else { throw URLError(.badURL) }
            let port = url.port ?? 80
            let head = Self.head(of: request, host: host, port: url.port)
            let body = request.httpBody ?? Data()
            let timeout = request.timeoutInterval > 0 ? request.timeoutInterval : 60
            let method = request.httpMethod ?? "GET"
            let socket = InFlight()
            let (stream, sink) = AsyncThrowingStream.makeStream(of: [UInt8].self)
            sink.onTermination = { _ in socket.cancel() }
            return try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { continuation in
                    let thread = Thread {
                        var answered = false
                        var fd: Int32 = -1
                        do {
                            fd = try Self.connect(host: host, port: port, timeout: timeout)
                            guard socket.set(fd) else { throw URLError(.cancelled) }
                            Self.setTimeout(fd, timeout)
                            try Self.sendAll(fd, head)
                            if !body.isEmpty { try body.withUnsafeBytes { try Self.sendAll(fd, $0) } }
                            var reader = Reader(fd: fd)
                            try reader.readStreaming(method: method) { status, headers in
                                answered = true
                                continuation.resume(returning: (status, headers, stream))
                            } deliver: { chunk in
                                sink.yield(chunk)
                            }
                            _ = socket.clear()
                            close(fd)
                            sink.finish()
                        } catch {
                            let cancelled = !socket.clear()
                            if fd >= 0 { close(fd) }
                            let failure: any Error =
                                cancelled ? URLError(.cancelled) : (error as? Failure)?.error ?? error
                            if answered {
                                sink.finish(throwing: failure)
                            } else {
                                sink.finish(throwing: failure)
                                continuation.resume(throwing: failure)
                            }
                        }
                    }
                    thread.stackSize = 256 * 1024
                    thread.start()
                }
            } onCancel: {
                socket.cancel()
            }
        }

        /// The blocking exchange, on a thread of its own.
        private func run(
            server: String, host: String, port: Int, head: [UInt8], body: Data, method: String, timeout: Double,
            repeatable: Bool, socket: InFlight, limit: Int
        ) throws -> (status: Int, headers: [String: String], body: Data) {
            while true {
                let reused = takeIdle(server)
                let fd = try reused ?? Self.connect(host: host, port: port, timeout: timeout)
                guard socket.set(fd) else {
                    close(fd)
                    throw URLError(.cancelled)
                }
                do {
                    Self.setTimeout(fd, timeout)
                    try Self.sendAll(fd, head)
                    if !body.isEmpty { try body.withUnsafeBytes { try Self.sendAll(fd, $0) } }
                    var reader = Reader(fd: fd, limit: limit)
                    let answer = try reader.readResponse(method: method)
                    if socket.clear(), answer.keepAlive, reader.isDrained {
                        putIdle(server, fd)
                    } else {
                        close(fd)
                    }
                    return (answer.status, answer.headers, answer.body)
                } catch let failure as Failure {
                    let wasCancelled = !socket.clear()
                    close(fd)
                    if wasCancelled { throw URLError(.cancelled) }
                    // A kept-alive connection the server had closed: nothing of the answer came back.
                    if reused != nil, failure.nothingReceived, repeatable { continue }
                    if reused != nil, failure.nothingReceived, failure.beforeSending { continue }
                    throw failure.error
                }
            }
        }

        // MARK: - Connections

        private func takeIdle(_ server: String) -> Int32? {
            while let fd = idle.withLock({ $0[server]?.popLast() }) {
                // A connection the server closed (or that holds stray bytes) is readable: not reused.
                var poll = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                if Glibc.poll(&poll, 1, 0) == 0 { return fd }
                close(fd)
            }
            return nil
        }

        private func putIdle(_ server: String, _ fd: Int32) {
            let extra: Int32? = idle.withLock { idle in
                idle[server, default: []].append(fd)
                guard idle[server]!.count > Self.maximumIdlePerServer else { return nil }
                return idle[server]!.removeFirst()
            }
            if let extra { close(extra) }
        }

        static func connect(host: String, port: Int, timeout: Double) throws -> Int32 {
            var hints = addrinfo()
            hints.ai_family = AF_UNSPEC
            hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
            var list: UnsafeMutablePointer<addrinfo>?
            let name = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
            guard getaddrinfo(name, String(port), &hints, &list) == 0, let first = list else {
                throw URLError(.cannotFindHost)
            }
            defer { freeaddrinfo(list) }
            var lastError = URLError(.cannotConnectToHost)
            var next: UnsafeMutablePointer<addrinfo>? = first
            while let address = next {
                next = address.pointee.ai_next
                let fd = socket(
                    address.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
                if fd < 0 { continue }
                let flags = fcntl(fd, F_GETFL)
                _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
                var result = Glibc.connect(fd, address.pointee.ai_addr, address.pointee.ai_addrlen)
                if result != 0 && errno == EINPROGRESS {
                    var poll = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                    let ready = Glibc.poll(&poll, 1, Int32(min(Double(Int32.max), timeout * 1000)))
                    var error: Int32 = 0
                    var length = socklen_t(MemoryLayout<Int32>.size)
                    if ready == 1, getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0, error == 0 {
                        result = 0
                    } else if ready == 0 {
                        lastError = URLError(.timedOut)
                    }
                }
                if result == 0 {
                    _ = fcntl(fd, F_SETFL, flags & ~O_NONBLOCK)
                    var on: Int32 = 1
                    setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &on, socklen_t(MemoryLayout<Int32>.size))
                    return fd
                }
                close(fd)
            }
            throw lastError
        }

        static func setTimeout(_ fd: Int32, _ seconds: Double) {
            var value = timeval(
                tv_sec: Int(seconds), tv_usec: Int((seconds - seconds.rounded(.down)) * 1_000_000))
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &value, socklen_t(MemoryLayout<timeval>.size))
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &value, socklen_t(MemoryLayout<timeval>.size))
        }

        // MARK: - Requests

        /// The request line and headers.
        static func head(of request: URLRequest, host: String, port: Int?) -> [UInt8] {
            let url = request.url!
            var target = url.path(percentEncoded: true)
            if target.isEmpty { target = "/" }
            if let query = url.query(percentEncoded: true) { target += "?" + query }
            var text = "\(request.httpMethod ?? "GET") \(target) HTTP/1.1\r\n"
            text += "Host: \(host)\(port.map { ":\($0)" } ?? "")\r\n"
            var fields = request.allHTTPHeaderFields ?? [:]
            for name in fields.keys
            where ["host", "content-length", "connection", "transfer-encoding"].contains(name.lowercased()) {
                fields.removeValue(forKey: name)
            }
            for (name, value) in fields.sorted(by: { $0.key < $1.key }) {
                // Header values cannot hold line breaks (they would start a header of their own).
                let clean = value.filter { $0 != "\r" && $0 != "\n" }
                text += "\(name): \(clean)\r\n"
            }
            if fields.keys.contains(where: { $0.lowercased() == "user-agent" }) == false {
                text += "User-Agent: Ferry\r\n"
            }
            let length = request.httpBody?.count ?? 0
            if length > 0 || ["POST", "PUT", "PATCH"].contains(request.httpMethod ?? "GET") {
                text += "Content-Length: \(length)\r\n"
            }
            text += "\r\n"
            return Array(text.utf8)
        }

        static func sendAll(_ fd: Int32, _ bytes: [UInt8]) throws {
            try bytes.withUnsafeBytes { try sendAll(fd, $0) }
        }

        static func sendAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) throws {
            var offset = 0
            while offset < bytes.count {
                let sent = send(fd, bytes.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
                if sent < 0 {
                    if errno == EINTR { continue }
                    throw Failure(Self.error(errno), nothingReceived: true, beforeSending: offset == 0)
                }
                offset += sent
            }
        }

        /// The `URLError` of a socket's `errno`.
        static func error(_ number: Int32) -> URLError {
            switch number {
            case EAGAIN, ETIMEDOUT: URLError(.timedOut)
            case ECONNREFUSED: URLError(.cannotConnectToHost)
            case ENETUNREACH, EHOSTUNREACH: URLError(.notConnectedToInternet)
            default: URLError(.networkConnectionLost)
            }
        }

        /// A failed exchange, and how far it got.
        struct Failure: Error {
            var error: URLError
            /// No byte of the answer arrived.
            var nothingReceived: Bool
            /// Not even the first byte of the request was sent.
            var beforeSending = false

            init(_ error: URLError, nothingReceived: Bool, beforeSending: Bool = false) {
                self.error = error
                self.nothingReceived = nothingReceived
                self.beforeSending = beforeSending
            }
        }

        /// The socket of an exchange, so that cancellation can shut it down.
        final class InFlight: Sendable {
            private let state = Mutex<(fd: Int32?, cancelled: Bool)>((nil, false))

            /// Records the socket; `false` when the exchange was cancelled already.
            func set(_ fd: Int32) -> Bool {
                state.withLock { state in
                    if state.cancelled { return false }
                    state.fd = fd
                    return true
                }
            }

            /// Forgets the socket; `false` when the exchange was cancelled meanwhile.
            func clear() -> Bool {
                state.withLock { state in
                    state.fd = nil
                    return !state.cancelled
                }
            }

            func cancel() {
                state.withLock { state in
                    state.cancelled = true
                    if let fd = state.fd { shutdown(fd, Int32(SHUT_RDWR)) }
                }
            }
        }

        // MARK: - Answers
    }
#else
    import Foundation

    /// Ferry's own connections exist on Linux only (see the Linux version); elsewhere every request
    /// goes through `URLSession`.
    final class SocketConnections: Sendable {
        static var platformDefault: SocketConnections? { nil }

        func handles(_ url: URL) -> Bool { false }

        /// One request and its answer, whose body may hold at most `limit` bytes (a larger one fails
        /// with `URLError(.dataLengthExceedsMaximum)` before it is read).
        func exchange(_ request: URLRequest, limit: Int = .max) async throws -> (
            status: Int, headers: [String: String], body: Data
        ) {
            throw URLError(.unsupportedURL)
        }

        func openStream(_ request: URLRequest) async throws -> (
            status: Int, headers: [String: String], body: AsyncThrowingStream<[UInt8], any Error>
        ) {
            throw URLError(.unsupportedURL)
        }
    }
#endif
