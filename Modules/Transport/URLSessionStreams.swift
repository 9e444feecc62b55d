import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Long-lived answers (a change feed) through `URLSession`: the head as soon as it arrives, then
/// the body as it arrives, on a session of its own made from the given session's configuration.
enum URLSessionStreams {
    typealias Opened = (status: Int, headers: [String: String], body: AsyncThrowingStream<[UInt8], any Error>)

    #if canImport(FoundationNetworking)
        static func open(_ request: URLRequest, configuration: URLSessionConfiguration) async throws -> Opened {
            let (stream, sink) = AsyncThrowingStream.makeStream(of: [UInt8].self)
            let delegate = StreamingDelegate(sink: sink)
            let session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
            let task = session.dataTask(with: request)
            sink.onTermination = { _ in
                task.cancel()
                session.invalidateAndCancel()
            }
            return try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { continuation in
                    delegate.waitForHead(continuation, body: stream)
                    task.resume()
                }
            } onCancel: {
                task.cancel()
            }
        }

        /// Hands the head to the opener and the body to the stream.
        final class StreamingDelegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {
            private let lock = NSLock()
            private var head: CheckedContinuation<Opened, any Error>?
            private var body: AsyncThrowingStream<[UInt8], any Error>?
            private let sink: AsyncThrowingStream<[UInt8], any Error>.Continuation

            init(sink: AsyncThrowingStream<[UInt8], any Error>.Continuation) { self.sink = sink }

            func waitForHead(
                _ continuation: CheckedContinuation<Opened, any Error>, body: AsyncThrowingStream<[UInt8], any Error>
            ) {
                lock.lock()
                head = continuation
                self.body = body
                lock.unlock()
            }

            private func takeHead() -> (
                CheckedContinuation<Opened, any Error>, AsyncThrowingStream<[UInt8], any Error>
            )? {
                lock.lock()
                defer {
                    head = nil
                    body = nil
                    lock.unlock()
                }
                guard let head, let body else { return nil }
                return (head, body)
            }

            func urlSession(
                _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
                completionHandler: @escaping (URLSession.ResponseDisposition) -> Void
            ) {
                completionHandler(.allow)
                guard let (head, body) = takeHead() else { return }
                guard let http = response as? HTTPURLResponse else {
                    head.resume(throwing: URLError(.badServerResponse))
                    return
                }
                let headers = http.stringHeaders
                head.resume(returning: (http.statusCode, headers, body))
            }

            func urlSession(
                _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
                newRequest request: URLRequest, completionHandler: @escaping (URLRequest?) -> Void
            ) {
                completionHandler(nil)  // never followed (HTTPClient.redirected)
            }

            func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
                sink.yield(Array(data))
            }

            func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
                if let (head, _) = takeHead() { head.resume(throwing: error ?? URLError(.badServerResponse)) }
                if let error { sink.finish(throwing: error) } else { sink.finish() }
                session.finishTasksAndInvalidate()
            }
        }
    #else
        static func open(_ request: URLRequest, configuration: URLSessionConfiguration) async throws -> Opened {
            let session = URLSession(configuration: configuration)
            let (bytes, response) = try await session.bytes(for: request)
            guard let http = response as? HTTPURLResponse else { throw URLError(.badServerResponse) }
            let headers = http.stringHeaders
            let (stream, sink) = AsyncThrowingStream.makeStream(of: [UInt8].self)
            let reader = Task {
                do {
                    var piece: [UInt8] = []
                    for try await byte in bytes {
                        piece.append(byte)
                        if byte == UInt8(ascii: "\n") {
                            sink.yield(piece)
                            piece.removeAll(keepingCapacity: true)
                        }
                    }
                    if !piece.isEmpty { sink.yield(piece) }
                    sink.finish()
                } catch {
                    sink.finish(throwing: error)
                }
                session.finishTasksAndInvalidate()
            }
            sink.onTermination = { _ in reader.cancel() }
            return (http.statusCode, headers, stream)
        }
    #endif
}

/// The delegate of Ferry's own sessions: redirects are answered as they are, never followed
/// (HTTPClient.redirected says why).
final class RedirectRefusal: NSObject, URLSessionTaskDelegate, Sendable {
    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        completionHandler(nil)
    }
}

extension HTTPURLResponse {
    /// The headers, names as the server sent them.
    var stringHeaders: [String: String] {
        var headers: [String: String] = [:]
        for (name, value) in allHeaderFields {
            if let name = name as? String, let value = value as? String { headers[name] = value }
        }
        return headers
    }
}
