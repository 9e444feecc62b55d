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

            func write(_ text: String) { write(bytes: Array(text.utf8)) }

            func write(bytes: [UInt8]) {
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
#endif
