#if canImport(AsyncHTTPClient)
    internal import AsyncHTTPClient
    import Foundation
    internal import NIOCore
    internal import NIOHTTP1
    internal import NIOHTTPCompression
    import Logging
    internal import NIOSSL
    import Synchronization

    #if canImport(FoundationNetworking)
        import FoundationNetworking
    #endif

    /// Requests and long-lived answers through swift-server's AsyncHTTPClient: what every request
    /// goes through on Linux, `http://` and `https://` alike.
    ///
    /// FoundationNetworking's `URLSession` keeps a core busy while it waits for an answer (about
    /// three quarters of a core per request in flight, measured on 6.3.1); AsyncHTTPClient waits in
    /// NIO's event loop, keeps connections alive in a pool, speaks TLS through BoringSSL (NIOSSL)
    /// and HTTP/2 where the server offers it.
    ///
    /// Failures are `URLError`s, as from `URLSession`, so that every path describes them alike.
    /// Proxies set in the environment (`http_proxy`, `https_proxy`, `all_proxy`) stay with
    /// `URLSession`, which reads them (``handles(_:)``).
    final class AsyncHTTPConnections: HTTPConnections {
        /// PEM files of certificates trusted besides the system's.
        let trustRoots: [String]

        init(trustRoots: [String] = []) { self.trustRoots = trustRoots }

        /// The client for requests whose longest wait between bytes is `timeout` seconds (the
        /// request's `timeoutInterval`, as `URLSession` reads it; AsyncHTTPClient sets it per
        /// client). One per timeout, trust roots and decompression for the whole process, never
        /// shut down: a remote made for every request must not cost a new pool.
        ///
        /// With `decompressing` (whole answers: pages, batches, items), requests say
        /// `Accept-Encoding: deflate, gzip` and answers a server or proxy compressed are inflated
        /// as they arrive, as `URLSession` does on Apple platforms (pages of JSON shrink about
        /// tenfold). Streams (change feeds, attachment downloads) ask for none: an event must not
        /// wait for a compressor's block, and a download's length and ranges are its bytes'. The
        /// inflated size is held to the request's limit by the reader (`collect(upTo:)`).
        func client(timeout: Double, decompressing: Bool = false) -> AsyncHTTPClient.HTTPClient {
            let key = ClientKey(
                milliseconds: max(1, Int64((timeout > 0 ? timeout : 60) * 1000)), trustRoots: trustRoots,
                decompressing: decompressing)
            return Self.clients.withLock { clients in
                if let known = clients[key] { return known }
                var tls = TLSConfiguration.makeClientConfiguration()
                tls.additionalTrustRoots = key.trustRoots.map { .file($0) }
                var pool = AsyncHTTPClient.HTTPClient.Configuration.ConnectionPool(
                    idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: 8)
                // A refused connection fails the request at once: Ferry retries with its own policy
                // and backoff, and the status must say "unreachable" when the server is down, not
                // after the connect timeout (10 s) of AsyncHTTPClient's own retries.
                pool.retryConnectionEstablishment = false
                var configuration = AsyncHTTPClient.HTTPClient.Configuration(
                    tlsConfiguration: tls,
                    // Never followed: a write would go on as a GET and its answer be taken for the
                    // write's, and the token would go to another host (HTTPClient.redirected).
                    redirectConfiguration: .disallow,
                    timeout: .init(connect: .seconds(10), read: .milliseconds(key.milliseconds)),
                    connectionPool: pool)
                if decompressing { configuration.decompression = .enabled(limit: .none) }
                // The remote's own `instrument` writes the trace context; AsyncHTTPClient would add a
                // second `traceparent` with the tracer a process bootstrapped globally.
                configuration.tracing.tracer = nil
                let made = AsyncHTTPClient.HTTPClient(
                    eventLoopGroup: AsyncHTTPClient.HTTPClient.defaultEventLoopGroup, configuration: configuration)
                clients[key] = made
                return made
            }
        }

        private static let clients = Mutex<[ClientKey: AsyncHTTPClient.HTTPClient]>([:])

        private struct ClientKey: Hashable, Sendable {
            var milliseconds: Int64
            var trustRoots: [String]
            var decompressing: Bool
        }

        /// The proxy settings of the environment, read once.
        private static let proxyConfigured: Bool = {
            let environment = ProcessInfo.processInfo.environment
            return ["http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"].contains {
                environment[$0]?.isEmpty == false
            }
        }()

        private static let proxyExempt: [String] = {
            let environment = ProcessInfo.processInfo.environment
            return (environment["no_proxy"] ?? environment["NO_PROXY"] ?? "").split(separator: ",").map {
                $0.trimmingCharacters(in: .whitespaces).lowercased()
            }
        }()

        /// Whether `url` goes through this client: `http` or `https`, and no proxy set for it.
        func handles(_ url: URL) -> Bool {
            guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https",
                let host = url.host, !host.isEmpty
            else { return false }
            guard Self.proxyConfigured else { return true }
            let name = host.lowercased()
            return Self.proxyExempt.contains { entry in
                entry == "*"
                    || (!entry.isEmpty && (name == entry || name.hasSuffix(entry.hasPrefix(".") ? entry : "." + entry)))
            }
        }

        /// One request and its whole answer, whose body may hold at most `limit` bytes (a larger one
        /// fails with `URLError(.dataLengthExceedsMaximum)`, before it is read when the server says
        /// its length).
        func exchange(_ request: URLRequest, limit: Int = .max) async throws -> (
            status: Int, headers: [String: String], body: Data
        ) {
            do {
                let response = try await Self.executeOnALiveConnection(
                    try Self.request(request), client(timeout: request.timeoutInterval, decompressing: true))
                if let length = response.headers.first(name: "Content-Length").flatMap(Int.init), length > limit {
                    throw URLError(.dataLengthExceedsMaximum)
                }
                let body: ByteBuffer
                do {
                    body = try await response.body.collect(upTo: limit)
                } catch is NIOTooManyBytesError {
                    throw URLError(.dataLengthExceedsMaximum)
                }
                return (Int(response.status.code), Self.headers(response.headers), Data(body.readableBytesView))
            } catch {
                throw Self.urlError(error)
            }
        }

        /// Sends `request` and answers the status and headers as soon as they arrive; the body follows
        /// as it arrives, until the server ends it (the stream finishes), the connection fails (it
        /// throws a `URLError`) or the consumer stops reading (the request is cancelled, which closes
        /// its connection).
        func openStream(_ request: URLRequest) async throws -> (
            status: Int, headers: [String: String], body: AsyncThrowingStream<[UInt8], any Error>
        ) {
            let response: HTTPClientResponse
            do {
                response = try await Self.executeOnALiveConnection(
                    try Self.request(request), client(timeout: request.timeoutInterval))
            } catch {
                throw Self.urlError(error)
            }
            // Read as the consumer asks, never ahead of it: a server that sends faster than the
            // consumer parses (a feed of endless events) waits in the socket, where TCP holds it back,
            // not in this process's memory (a free-running reader grew to 6 GB in 25 s). Dropping the
            // stream drops the body, which cancels the request and closes its connection.
            let pieces = BodyPieces(response.body.makeAsyncIterator())
            let stream = AsyncThrowingStream<[UInt8], any Error> {
                do {
                    return try await pieces.next()
                } catch {
                    throw Self.urlError(error)
                }
            }
            return (Int(response.status.code), Self.headers(response.headers), stream)
        }

        /// The body's iterator, read by one consumer at a time (an `AsyncThrowingStream` built by
        /// unfolding calls its closure once per element, never concurrently).
        private final class BodyPieces: @unchecked Sendable {
            private var iterator: HTTPClientResponse.Body.AsyncIterator

            init(_ iterator: HTTPClientResponse.Body.AsyncIterator) { self.iterator = iterator }

            func next() async throws -> [UInt8]? {
                try await iterator.next().map { Array($0.readableBytesView) }
            }
        }

        /// Executes `request`, once more when the pool handed it a kept-alive connection that had
        /// closed before anything was written to it (NIO's "I/O on closed channel": a server that
        /// restarted, or a proxy that dropped an idle connection, just before its close reached the
        /// pool). Nothing of the request left this process then, so sending it again cannot apply a
        /// write twice, whatever its method; a connection that fails later is the caller's to judge.
        private static func executeOnALiveConnection(
            _ request: HTTPClientRequest, _ client: AsyncHTTPClient.HTTPClient
        ) async throws -> HTTPClientResponse {
            do {
                return try await client.execute(request, deadline: .distantFuture, logger: silent)
            } catch ChannelError.ioOnClosedChannel {
                return try await client.execute(request, deadline: .distantFuture, logger: silent)
            }
        }

        private static let silent = Logger(label: "ferry.transport.http", factory: { _ in SwiftLogNoOpLogHandler() })

        /// `request` for AsyncHTTPClient: its method, URL, headers and body.
        static func request(_ request: URLRequest) throws -> HTTPClientRequest {
            guard let url = request.url?.absoluteString else { throw URLError(.badURL) }
            var converted = HTTPClientRequest(url: url)
            converted.method = HTTPMethod(rawValue: request.httpMethod ?? "GET")
            for (name, value) in request.allHTTPHeaderFields ?? [:] { converted.headers.add(name: name, value: value) }
            if let body = request.httpBody { converted.body = .bytes(ByteBuffer(bytes: body)) }
            return converted
        }

        /// The headers, names as the server sent them; repeated ones joined with `, ` (RFC 9110 §5.3).
        static func headers(_ headers: HTTPHeaders) -> [String: String] {
            var joined: [String: String] = [:]
            for (name, value) in headers {
                if let earlier = joined[name] { joined[name] = earlier + ", " + value } else { joined[name] = value }
            }
            return joined
        }

        /// A TLS failure in words: the library's own description names OpenSSL reason codes and
        /// source paths, which tell a person nothing.
        static func tlsFailure(_ error: any Error) -> String {
            let text = String(describing: error)
            if let extra = error as? NIOSSLExtraError, extra == .failedToValidateHostname {
                return "the TLS handshake failed: the server's certificate is for another host name"
            }
            if case .failedToLoadCertificate? = error as? NIOSSLError {
                return "an additional trusted authority's certificate could not be loaded (not a PEM certificate?)"
            }
            if ["WRONG_VERSION_NUMBER", "PACKET_LENGTH_TOO_LONG", "HTTP_REQUEST", "RECORD_TOO_LARGE"].contains(where: {
                text.contains($0)
            }) {
                return "the TLS handshake failed: the server does not speak TLS there (a plain http:// server?)"
            }
            if text.contains("CERTIFICATE_VERIFY_FAILED") {
                return
                    "the TLS handshake failed: the server's certificate is not trusted (an authority this device does not know, or expired)"
            }
            return "the TLS handshake failed"
        }

        /// A failure of AsyncHTTPClient, NIO or TLS as the `URLError` `URLSession` gives for it.
        static func urlError(_ error: any Error) -> URLError {
            if let error = error as? URLError { return error }
            if error is CancellationError { return URLError(.cancelled) }
            func described(_ code: URLError.Code, _ text: String) -> URLError {
                URLError(code, userInfo: [NSLocalizedDescriptionKey: text, NSUnderlyingErrorKey: error as NSError])
            }
            if let client = error as? HTTPClientError {
                switch client {
                case .cancelled: return URLError(.cancelled)
                case .readTimeout, .deadlineExceeded, .writeTimeout: return URLError(.timedOut)
                case .connectTimeout: return described(.cannotConnectToHost, "connecting to the server timed out")
                case .tlsHandshakeTimeout: return described(.secureConnectionFailed, "the TLS handshake timed out")
                case .remoteConnectionClosed: return URLError(.networkConnectionLost)
                case .invalidURL, .emptyHost, .emptyScheme: return URLError(.badURL)
                default: return described(.badServerResponse, "\(client)")
                }
            }
            if let parser = error as? HTTPParserError {
                // A body cut short is a lost connection; anything else, an answer that is not HTTP.
                if case .invalidEOFState = parser { return URLError(.networkConnectionLost) }
                return described(.badServerResponse, "the server's answer is not valid HTTP: \(parser)")
            }
            if error is NIOSSLError || error is BoringSSLError || error is NIOSSLExtraError {
                return described(.secureConnectionFailed, tlsFailure(error))
            }
            if let unknown = error as? SocketAddressError.UnknownHost {
                return described(.cannotFindHost, "the server's host name '\(unknown.host)' was not found")
            }
            if let channel = error as? ChannelError {
                switch channel {
                case .ioOnClosedChannel, .alreadyClosed, .eof, .outputClosed, .inputClosed:
                    return described(.networkConnectionLost, "the connection closed")
                case .connectTimeout: return described(.cannotConnectToHost, "connecting to the server timed out")
                default: break
                }
            }
            if let inflating = error as? NIOHTTPDecompression.DecompressionError {
                // A compressed answer that does not inflate: cut, or not what its encoding says.
                return described(.cannotDecodeContentData, "the server's compressed answer is corrupt (\(inflating))")
            }
            if let io = error as? IOError {
                switch io.errnoCode {
                case ECONNREFUSED, EHOSTUNREACH, ENETUNREACH: return URLError(.cannotConnectToHost)
                case ECONNRESET, EPIPE: return URLError(.networkConnectionLost)
                default: return described(.networkConnectionLost, "\(io)")
                }
            }
            let text = String(describing: error)
            if text.contains("connectionRefused") || text.contains("Connection refused") {
                return URLError(.cannotConnectToHost)
            }
            // NIOPosix's connection error: "DNS error: SocketAddressError.UnknownHost: …".
            if ["NXDOMAIN", "lookup", "resolve", "DNS error", "UnknownHost"].contains(where: { text.contains($0) }) {
                return URLError(.cannotFindHost)
            }
            return described(.unknown, text)
        }
    }
#endif
