import Foundation
import Instrumentation
import Logging
import SyncCore

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Connections that carry some requests instead of `URLSession` (on Linux, AsyncHTTPClient).
/// Failures are `URLError`s, as from `URLSession`, so that every path describes them alike.
protocol HTTPConnections: Sendable {
    /// Whether `url` goes through these connections.
    func handles(_ url: URL) -> Bool
    /// One request and its whole answer, whose body may hold at most `limit` bytes (a larger one
    /// fails with `URLError(.dataLengthExceedsMaximum)`).
    func exchange(_ request: URLRequest, limit: Int) async throws -> (
        status: Int, headers: [String: String], body: Data
    )
    /// The status and headers as soon as they arrive, and the body as it arrives.
    func openStream(_ request: URLRequest) async throws -> (
        status: Int, headers: [String: String], body: AsyncThrowingStream<[UInt8], any Error>
    )
}

/// Sends the protocol's requests: headers, auth, timeouts, retries of safe requests, and the
/// mapping of every failure to `RemoteError`.
struct HTTPClient: Sendable {
    let configuration: HTTPRemote.Configuration
    let tokenProvider: HTTPRemote.TokenProvider?
    let session: URLSession
    /// The connections requests go through when they handle the URL (AsyncHTTPClient on Linux),
    /// or `nil` to send everything through `session`.
    let connections: (any HTTPConnections)?
    let logger: Logger

    var protocolHeader: String {
        switch configuration.protocolVersion {
        case .v2: "2.0.0"
        case .v3: "3.0.0"
        }
    }

    /// `<server>/<tablesPath>/<table>[/<id>][?<query>]`, with the table and id percent-encoded as
    /// path segments.
    func url(table: String, id: String? = nil, query: String? = nil) throws(RemoteError) -> URL {
        var text = configuration.serverURL.absoluteString
        while text.hasSuffix("/") { text.removeLast() }
        text += "/" + PercentEncoding.pathSegment(configuration.tablesPath) + "/" + PercentEncoding.pathSegment(table)
        if let id { text += "/" + PercentEncoding.pathSegment(id) }
        if let query, !query.isEmpty { text += "?" + query }
        guard let url = URL(string: text) else {
            throw RemoteError(
                .invalidTableName, "cannot form a URL for table '\(table)' on \(configuration.serverURL)")
        }
        return url
    }

    /// `<server>/<tablesPath>`, where Ferry's server lists its tables.
    func tablesURL() throws(RemoteError) -> URL {
        var text = configuration.serverURL.absoluteString
        while text.hasSuffix("/") { text.removeLast() }
        text += "/" + PercentEncoding.pathSegment(configuration.tablesPath)
        guard let url = URL(string: text) else {
            throw RemoteError(.badRequest, "cannot form a URL for the tables of \(configuration.serverURL)")
        }
        return url
    }

    /// The table's URL for messages: no query, no user name or password.
    func displayURL(table: String) -> String {
        guard let url = try? url(table: table) else { return "'\(table)' on the server" }
        guard var components = URLComponents(url: url, resolvingAgainstBaseURL: false) else {
            return url.absoluteString
        }
        components.user = nil
        components.password = nil
        return components.url?.absoluteString ?? url.absoluteString
    }

    /// Sends a request and returns the answer, whatever its status. Retries `GET`s, and writes
    /// whose every effect is keyed (`idempotent`: a server that honours `Idempotency-Key` replays
    /// instead of applying twice), as the policy says: after a connection lost on the way (a
    /// keep-alive connection a proxy closed as it was reused), and after 429, 502, 503 and 504;
    /// never after a timeout.
    /// Asks the token provider again once after a 401.
    func send(
        _ method: String, _ url: URL, body: JSONValue? = nil, data: Data? = nil, headers: [String: String] = [:],
        retries: Bool = true, idempotent: Bool = false
    ) async throws(RemoteError) -> HTTPResponse {
        try Self.checkSendable(url)
        let isSafe = (method == "GET" || idempotent) && retries
        var attempt = 1
        var refreshedToken = false
        /// Whether an attempt before this one may have reached the server: then so may the request,
        /// whatever the last attempt met (a batch applied whose answer was lost, then a server that
        /// refused the retry's connection, is not "never sent").
        var mayHaveArrived = false
        var token = try await currentToken(forceRefresh: false)
        while true {
            var request = makeRequest(method, url, body: body, headers: headers, token: token)
            if let data { request.httpBody = data }
            let response: HTTPResponse
            do {
                response = try await exchange(request)
            } catch var error {
                // Not after a timeout: the attempt waited the whole timeout for a server that took
                // the request and said nothing (hung); another would wait as long again (a push
                // against a stopped server failed after three timeouts).
                let timedOut = (error.underlying as? URLError)?.code == .timedOut
                if isSafe, error.code == .network, !timedOut, attempt < configuration.retry.maximumAttempts {
                    mayHaveArrived = mayHaveArrived || !error.wasNotSent
                    try await pause(
                        beforeAttempt: attempt + 1, after: "\(method) \(Self.shownPath(url.path)): \(error.message)")
                    attempt += 1
                    continue
                }
                if mayHaveArrived && error.wasNotSent {
                    error.wasNotSent = false
                    error.message += " (an earlier attempt may have reached the server)"
                }
                throw error
            }
            if (300..<400).contains(response.status) && response.status != 304 {
                throw Self.redirected(method, url, status: response.status, to: response.header("Location"))
            }
            if response.status == 401, tokenProvider != nil, !refreshedToken {
                refreshedToken = true
                token = try await currentToken(forceRefresh: true)
                logger.debug("401 from \(method) \(Self.shownPath(url.path)): asking the token provider again")
                continue
            }
            // A server that asks for a longer wait than the policy's longest gets its answer back: the
            // caller (automatic sync) waits that long instead of this request.
            if isSafe, [429, 502, 503, 504].contains(response.status), attempt < configuration.retry.maximumAttempts,
                (response.retryAfter ?? .zero) <= configuration.retry.maximumDelay
            {
                // A proxy's 502 or 504 may come after the server read the request.
                mayHaveArrived = mayHaveArrived || response.status == 502 || response.status == 504
                try await pause(
                    beforeAttempt: attempt + 1, retryAfter: response.retryAfter,
                    after: "\(method) \(Self.shownPath(url.path)): HTTP \(response.status)")
                attempt += 1
                continue
            }
            return response
        }
    }

    /// Refuses, unsent, a URL no request could go to: another scheme than http or https would go
    /// nowhere until the request timed out (90 s for `ftp://`); a port above 65535 stopped the
    /// process in NIO's socket address (a Swift runtime trap, not an error).
    static func checkSendable(_ url: URL) throws(RemoteError) {
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
            throw RemoteError(
                .network, "the server URL's scheme '\(url.scheme ?? "")' is not http or https", wasNotSent: true)
        }
        if let port = url.port, !(1...65_535).contains(port) {
            throw RemoteError(.network, "the server URL's port \(port) is not 1 to 65535", wasNotSent: true)
        }
    }

    /// Opens a long-lived `GET` (a change feed): the head, then the body as it arrives. Asks the
    /// token provider again once after a 401. `timeout` is the longest wait between bytes.
    func openStream(_ url: URL, headers: [String: String], timeout: Double) async throws(RemoteError) -> (
        status: Int, headers: [String: String], body: AsyncThrowingStream<[UInt8], any Error>
    ) {
        try Self.checkSendable(url)
        var refreshedToken = false
        var token = try await currentToken(forceRefresh: false)
        while true {
            if Task.isCancelled { throw RemoteError(.cancelled, "the request was cancelled before it was sent") }
            var request = makeRequest("GET", url, body: nil, headers: headers, token: token)
            request.timeoutInterval = timeout
            let opened: (status: Int, headers: [String: String], body: AsyncThrowingStream<[UInt8], any Error>)
            do {
                if let connections, connections.handles(url) {
                    opened = try await connections.openStream(request)
                } else {
                    opened = try await URLSessionStreams.open(request, configuration: session.configuration)
                }
            } catch {
                throw failure(error, method: "GET", path: Self.shownPath(url.path))
            }
            if opened.status == 401, tokenProvider != nil, !refreshedToken {
                refreshedToken = true
                token = try await currentToken(forceRefresh: true)
                continue
            }
            if (300..<400).contains(opened.status) {
                throw Self.redirected(
                    "GET", url, status: opened.status,
                    to: opened.headers.first { HTTPResponse.sameName($0.key, "Location") }?.value)
            }
            return opened
        }
    }

    private func pause(beforeAttempt attempt: Int, retryAfter: Duration? = nil, after reason: String)
        async throws(RemoteError)
    {
        let delay = configuration.retry.delay(beforeAttempt: attempt, retryAfter: retryAfter)
        logger.debug("retrying in \(delay) after \(reason)")
        do {
            try await Task.sleep(for: delay)
        } catch {
            throw RemoteError(.cancelled, "the request was cancelled while waiting to retry")
        }
    }

    private func currentToken(forceRefresh: Bool) async throws(RemoteError) -> String? {
        guard let tokenProvider else { return nil }
        do {
            return try await tokenProvider(forceRefresh)
        } catch is CancellationError {
            throw RemoteError(.cancelled, "the request was cancelled while getting an auth token")
        } catch let error as RemoteError {
            throw error
        } catch {
            throw RemoteError(.unauthorized, "the auth token provider failed: \(error)")
        }
    }

    func makeRequest(
        _ method: String, _ url: URL, body: JSONValue?, headers: [String: String], token: String?
    ) -> URLRequest {
        var request = URLRequest(url: url)
        request.httpMethod = method
        request.timeoutInterval = configuration.timeout.seconds
        request.setValue(protocolHeader, forHTTPHeaderField: "ZUMO-API-VERSION")
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        if let body {
            request.httpBody = Data(body.serializedUTF8())
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        if let token {
            switch configuration.protocolVersion {
            case .v2: request.setValue(token, forHTTPHeaderField: "X-ZUMO-AUTH")
            case .v3: request.setValue("Bearer " + token, forHTTPHeaderField: "Authorization")
            }
        }
        for (name, value) in configuration.additionalHeaders { request.setValue(value, forHTTPHeaderField: name) }
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        if let instrument = configuration.instrument, let context = ServiceContext.current {
            var fields: [String: String] = [:]
            instrument.inject(context, into: &fields, using: HeaderInjector())
            for (name, value) in fields { request.setValue(value, forHTTPHeaderField: name) }
        }
        return request
    }

    /// One round trip, cancellable, with every failure mapped to `RemoteError`.
    private func exchange(_ request: URLRequest) async throws(RemoteError) -> HTTPResponse {
        if Task.isCancelled { throw RemoteError(.cancelled, "the request was cancelled before it was sent") }
        if let connections, let url = request.url, connections.handles(url) {
            return try await exchange(request, through: connections)
        }
        let box = TaskBox()
        let result: Result<(Data, URLResponse), any Error> = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let task = session.dataTask(with: request) { data, response, error in
                    if let error {
                        continuation.resume(returning: .failure(error))
                    } else if let response {
                        continuation.resume(returning: .success((data ?? Data(), response)))
                    } else {
                        continuation.resume(returning: .failure(URLError(.badServerResponse)))
                    }
                }
                box.set(task)
                task.resume()
            }
        } onCancel: {
            box.cancel()
        }
        let method = request.httpMethod ?? "GET"
        let path = Self.shownPath(request.url?.path ?? "?")
        switch result {
        case .success((let data, let response)):
            guard let http = response as? HTTPURLResponse else {
                throw RemoteError(.invalidResponse, "\(method) \(path): the answer is not HTTP")
            }
            if let final = http.url, let sent = request.url, final != sent {
                // A session of the app's that followed a redirect.
                throw Self.redirected(method, sent, status: nil, to: final.absoluteString)
            }
            guard data.count <= configuration.maximumResponseSize else {
                throw failure(URLError(.dataLengthExceedsMaximum), method: method, path: path)
            }
            let headers = http.stringHeaders
            logger.trace("\(method) \(path) → \(http.statusCode)")
            return HTTPResponse(status: http.statusCode, headers: headers, body: data)
        case .failure(let error):
            throw failure(error, method: method, path: path)
        }
    }

    /// One round trip over `connections`.
    private func exchange(_ request: URLRequest, through connections: any HTTPConnections) async throws(RemoteError)
        -> HTTPResponse
    {
        let method = request.httpMethod ?? "GET"
        let path = Self.shownPath(request.url?.path ?? "?")
        do {
            let answer = try await connections.exchange(request, limit: configuration.maximumResponseSize)
            logger.trace("\(method) \(path) → \(answer.status)")
            return HTTPResponse(status: answer.status, headers: answer.headers, body: answer.body)
        } catch {
            throw failure(error, method: method, path: path)
        }
    }

    /// `path` as errors and logs show it: a segment of more than 32 characters (an upload's
    /// ticket, some 300 characters of base64 that also stand for the upload) is cut to its first
    /// 12 and `…`, so that the error stays one readable line and the log holds no ticket.
    static func shownPath(_ path: String) -> String {
        guard path.utf8.count > 32 else { return path }
        return path.split(separator: "/", omittingEmptySubsequences: false)
            .map { $0.count > 32 ? $0.prefix(12) + "…" : $0 }
            .joined(separator: "/")
    }

    /// A failed round trip as a `RemoteError`.
    private func failure(_ error: any Error, method: String, path: String) -> RemoteError {
        if Task.isCancelled || (error as? URLError)?.code == .cancelled {
            return RemoteError(
                .cancelled, "\(method) \(path) was cancelled; the server may or may not have applied it")
        }
        if (error as? URLError)?.code == .dataLengthExceedsMaximum {
            return RemoteError(
                .invalidResponse,
                "\(method) \(path): the server's answer is larger than \(configuration.maximumResponseSize) bytes (maximumResponseSize)",
                underlying: error)
        }
        let reason = (error as? URLError).map(Self.describe) ?? "\(error)"
        return RemoteError(
            .network, "\(method) \(path) failed: \(reason)",
            underlying: error, wasNotSent: (error as? URLError).map(Self.wasNotSent) ?? false)
    }

    /// A redirect, which Ferry never follows: a `POST`, `PUT` or `DELETE` that a client follows
    /// goes on as a `GET` (or to another host), its answer would be taken for the write's, and
    /// the token would go where the redirect says. The request was not applied where it was sent;
    /// the push stops and keeps the operation, as when the server cannot be reached.
    static func redirected(_ method: String, _ url: URL, status: Int?, to location: String?) -> RemoteError {
        // The server's text, shown as one bounded line without control characters.
        let target = location.flatMap(HTTPResponse.displayLine)
        let whereTo = target.map { " to \($0)" } ?? ""
        return RemoteError(
            .network, status: status,
            "\(method) \(url.path): the server redirected it\(whereTo); Ferry does not follow redirects: if the "
                + "server moved (http to https, another host or path), use its new address as the server URL")
    }

    /// Whether the error means no connection was made, so the request cannot have reached the
    /// server. A timeout or a lost connection may come after the server read the request: not these.
    static func wasNotSent(_ error: URLError) -> Bool {
        switch error.code {
        case .notConnectedToInternet, .cannotConnectToHost, .cannotFindHost, .dnsLookupFailed, .dataNotAllowed,
            .internationalRoamingOff:
            true
        default: false
        }
    }

    static func describe(_ error: URLError) -> String {
        switch error.code {
        case .timedOut: "the request timed out"
        case .cannotConnectToHost: "could not connect to the server"
        case .cannotFindHost, .dnsLookupFailed: "the server's host name was not found"
        case .networkConnectionLost: "the connection was lost"
        case .notConnectedToInternet: "the device is offline"
        default: error.localizedDescription
        }
    }
}

/// Holds the data task so that cancellation, which may come first, reaches it.
final class TaskBox: @unchecked Sendable {
    private let lock = NSLock()
    private var task: URLSessionDataTask?
    private var cancelled = false

    func set(_ task: URLSessionDataTask) {
        lock.lock()
        self.task = task
        let cancelNow = cancelled
        lock.unlock()
        if cancelNow { task.cancel() }
    }

    /// Called from a cancellation handler, which runs holding the Swift task's status lock: the
    /// data task is cancelled from another thread. swift-corelibs-foundation's `cancel()` waits on
    /// the session's queue, where a completing answer may be waiting on that same lock to resume
    /// the continuation: cancelling in place deadlocked both (seen in a CI run, through
    /// `URLSession`'s own async API).
    func cancel() {
        lock.lock()
        cancelled = true
        let task = self.task
        lock.unlock()
        guard let task else { return }
        DispatchQueue.global().async { task.cancel() }
    }
}

/// Writes trace context fields (`traceparent`, `tracestate`) as request headers.
private struct HeaderInjector: Injector {
    func inject(_ value: String, forKey key: String, into carrier: inout [String: String]) {
        carrier[key] = value
    }
}
