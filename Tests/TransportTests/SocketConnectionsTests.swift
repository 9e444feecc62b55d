#if canImport(Glibc)
    import Foundation
    import Glibc
    import Synchronization
    import SyncCore
    import Testing
    @testable import Transport

    #if canImport(FoundationNetworking)
        import FoundationNetworking
    #endif

    /// A TCP server on loopback that plays a script per connection, on a thread of its own.
    final class ScriptedServer: Sendable {
        /// One accepted connection, as the script sees it.
        final class Connection {
            let fd: Int32
            private var pending: [UInt8] = []

            init(fd: Int32) { self.fd = fd }

            /// Reads one request (head and `Content-Length` body); `nil` when the client closed.
            func readRequest() -> (head: String, body: [UInt8])? {
                while true {
                    if let end = find([13, 10, 13, 10]) {
                        let head = String(decoding: pending[..<end], as: UTF8.self)
                        var length = 0
                        for line in head.split(separator: "\r\n") {
                            let parts = line.split(separator: ":", maxSplits: 1)
                            if parts.count == 2, parts[0].lowercased() == "content-length" {
                                length = Int(parts[1].trimmingCharacters(in: .whitespaces)) ?? 0
                            }
                        }
                        while pending.count < end + 4 + length { if !fill() { return nil } }
                        let body = Array(pending[(end + 4)..<(end + 4 + length)])
                        pending.removeFirst(end + 4 + length)
                        return (head, body)
                    }
                    if !fill() { return nil }
                }
            }

            func write(_ text: String) {
                let bytes = Array(text.utf8)
                var offset = 0
                while offset < bytes.count {
                    let sent = bytes.withUnsafeBytes {
                        send(fd, $0.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
                    }
                    if sent <= 0 { return }
                    offset += sent
                }
            }

            private func find(_ pattern: [UInt8]) -> Int? {
                guard pending.count >= pattern.count else { return nil }
                for index in 0...(pending.count - pattern.count)
                where pending[index..<(index + pattern.count)].elementsEqual(pattern) {
                    return index
                }
                return nil
            }

            private func fill() -> Bool {
                var chunk = [UInt8](repeating: 0, count: 65536)
                let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress!, 65536, 0) }
                if count <= 0 { return false }
                pending += chunk[..<count]
                return true
            }
        }

        let port: Int
        private let listener: Int32
        /// Requests read so far, in order (their heads).
        let requests = Mutex<[String]>([])
        let accepted = Mutex(0)

        /// Starts listening; `script` runs for each connection (the n-th one gets `n`, from 0) and
        /// the connection is closed when it returns.
        init(script: @escaping @Sendable (Int, Connection, ScriptedServer) -> Void) throws {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var on: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            address.sin_port = 0
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
            }
            guard bound == 0, listen(fd, 16) == 0 else { throw URLError(.cannotConnectToHost) }
            _ = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
            }
            listener = fd
            port = Int(UInt16(bigEndian: address.sin_port))
            let server = self
            Thread {
                var index = 0
                while true {
                    let client = accept(fd, nil, nil)
                    if client < 0 { return }
                    let number = index
                    index += 1
                    server.accepted.withLock { $0 += 1 }
                    Thread {
                        script(number, Connection(fd: client), server)
                        close(client)
                    }.start()
                }
            }.start()
        }

        func record(_ head: String) { requests.withLock { $0.append(head) } }

        var url: URL { URL(string: "http://127.0.0.1:\(port)")! }

        func stop() { shutdown(listener, Int32(SHUT_RDWR)) }

        /// A port nothing listens on.
        static func closedPort() throws -> Int {
            let server = try ScriptedServer { _, _, _ in }
            server.stop()
            return server.port
        }
    }

    func request(_ url: URL, _ method: String = "GET", body: String? = nil, timeout: Double = 10) -> URLRequest {
        var request = URLRequest(url: url)
        request.httpMethod = method
        request.timeoutInterval = timeout
        if let body { request.httpBody = Data(body.utf8) }
        return request
    }

    @Suite("Transport: Ferry's own HTTP connections (Linux)")
    struct SocketConnectionsTests {
        @Test func answersWithALengthShareOneConnection() async throws {
            let server = try ScriptedServer { _, connection, server in
                while let request = connection.readRequest() {
                    server.record(request.head + "|" + String(decoding: request.body, as: UTF8.self))
                    let body = #"{"seen":\#(request.body.count)}"#
                    connection.write(
                        "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nX-Tag: a\r\nX-Tag: b\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
                    )
                }
            }
            defer { server.stop() }
            let connections = SocketConnections()
            let url = server.url.appending(path: "tables/todo").appending(queryItems: [.init(name: "$top", value: "2")])
            let first = try await connections.exchange(request(url, "POST", body: #"{"id":"a"}"#))
            let second = try await connections.exchange(request(url))
            #expect(first.status == 201)
            #expect(String(decoding: first.body, as: UTF8.self) == #"{"seen":10}"#)
            #expect(first.headers["X-Tag"] == "a, b")
            #expect(second.status == 201)
            #expect(server.accepted.withLock { $0 } == 1)
            let heads = server.requests.withLock { $0 }
            #expect(heads.count == 2)
            #expect(heads.first?.hasPrefix("POST /tables/todo?$top=2 HTTP/1.1\r\n") == true)
            #expect(heads.first?.contains("\r\nContent-Length: 10") == true)
            #expect(heads.first?.contains("\r\nHost: 127.0.0.1:\(server.port)") == true)
            #expect(heads.first?.hasSuffix(#"|{"id":"a"}"#) == true)
        }

        @Test func chunkedAndInterimAnswersAreRead() async throws {
            let server = try ScriptedServer { _, connection, _ in
                while connection.readRequest() != nil {
                    connection.write("HTTP/1.1 100 Continue\r\n\r\n")
                    connection.write(
                        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"
                    )
                }
            }
            defer { server.stop() }
            let connections = SocketConnections()
            for _ in 0..<3 {
                let answer = try await connections.exchange(request(server.url))
                #expect(answer.status == 200)
                #expect(String(decoding: answer.body, as: UTF8.self) == "hello world")
            }
            #expect(server.accepted.withLock { $0 } == 1)
        }

        @Test func anAnswerEndedByClosingIsReadToTheEnd() async throws {
            let server = try ScriptedServer { _, connection, _ in
                _ = connection.readRequest()
                connection.write("HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end")
            }
            defer { server.stop() }
            let connections = SocketConnections()
            let first = try await connections.exchange(request(server.url))
            let second = try await connections.exchange(request(server.url))
            #expect(String(decoding: first.body, as: UTF8.self) == "until the end")
            #expect(String(decoding: second.body, as: UTF8.self) == "until the end")
            #expect(server.accepted.withLock { $0 } == 2)
        }

        @Test func aKeptAliveConnectionTheServerClosedIsNotTrustedWithAWrite() async throws {
            // The first connection answers one request, then reads the next and closes without a word.
            let server = try ScriptedServer { number, connection, server in
                while let request = connection.readRequest() {
                    server.record(request.head)
                    if number == 0 && server.requests.withLock({ $0.count }) == 2 { return }
                    connection.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                }
            }
            defer { server.stop() }
            let connections = SocketConnections()
            _ = try await connections.exchange(request(server.url))
            // A read goes again on a new connection (the server cannot have applied it twice)…
            let read = try await connections.exchange(request(server.url))
            #expect(read.status == 200)
            #expect(server.accepted.withLock { $0 } == 2)

            let second = try ScriptedServer { number, connection, server in
                while let request = connection.readRequest() {
                    server.record(request.head)
                    if number == 0 && server.requests.withLock({ $0.count }) == 2 { return }
                    connection.write("HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")
                }
            }
            defer { second.stop() }
            _ = try await connections.exchange(request(second.url, "POST", body: "{}"))
            // …a write without an idempotency key does not: its outcome is unknown.
            await #expect(throws: URLError.self) {
                _ = try await connections.exchange(request(second.url, "POST", body: "{}"))
            }
            #expect(second.accepted.withLock { $0 } == 1)
        }

        @Test func failuresAreTheErrorsOfURLSession() async throws {
            let connections = SocketConnections()
            let closed = try ScriptedServer.closedPort()
            do {
                _ = try await connections.exchange(request(URL(string: "http://127.0.0.1:\(closed)/x")!))
                Issue.record("a closed port answered")
            } catch let error as URLError {
                #expect(error.code == .cannotConnectToHost)
            }

            // A connection closed before any byte of the answer (FoundationNetworking traps on this).
            let silent = try ScriptedServer { _, connection, _ in _ = connection.readRequest() }
            defer { silent.stop() }
            do {
                _ = try await connections.exchange(request(silent.url, "POST", body: "{}"))
                Issue.record("a closed connection answered")
            } catch let error as URLError {
                #expect(error.code == .networkConnectionLost)
            }

            // A server that never answers.
            let mute = try ScriptedServer { _, connection, _ in
                _ = connection.readRequest()
                Thread.sleep(forTimeInterval: 3)
            }
            defer { mute.stop() }
            do {
                _ = try await connections.exchange(request(mute.url, timeout: 0.3))
                Issue.record("a mute server answered")
            } catch let error as URLError {
                #expect(error.code == .timedOut)
            }
        }

        @Test func cancellingARequestStopsItsWait() async throws {
            let server = try ScriptedServer { _, connection, server in
                if let request = connection.readRequest() { server.record(request.head) }
                Thread.sleep(forTimeInterval: 40)
            }
            defer { server.stop() }
            let connections = SocketConnections()
            let task = Task { try await connections.exchange(request(server.url, timeout: 30)) }
            while server.requests.withLock({ $0.isEmpty }) { try await Task.sleep(for: .milliseconds(10)) }
            task.cancel()
            do {
                _ = try await task.value
                Issue.record("a cancelled request answered")
            } catch let error as URLError {
                // Not a timeout (30 s) nor a lost connection (the server closes after 40 s).
                #expect(error.code == .cancelled)
            }
        }

        @Test func theRemoteMapsFailuresAsBefore() async throws {
            let closed = try ScriptedServer.closedPort()
            let remote = HTTPRemote(
                HTTPRemote.Configuration(
                    serverURL: URL(string: "http://127.0.0.1:\(closed)")!, retry: .init(maximumAttempts: 1)))
            do {
                _ = try await remote.onlineTable("todo").item(id: "a")
                Issue.record("a closed port answered")
            } catch {
                #expect(error.code == .network)
                #expect(error.wasNotSent)
                #expect(error.message.contains("could not connect to the server"))
            }
        }
    }
#endif
