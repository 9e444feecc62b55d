#if canImport(Glibc)
    import Foundation
    import Glibc

    extension SocketConnections {
        /// Reads one answer from a socket. Every size it reads is bounded: a head by 64 KiB, a chunk-size line by 1 KiB, a body by
        /// `limit` (checked against `Content-Length` before reading, and as chunked or
        /// close-delimited bodies arrive), and a streamed chunk is handed on in pieces as it arrives,
        /// never allocated whole. A hostile or broken server cannot make the client allocate without
        /// bound.
        struct Reader {
            let fd: Int32
            /// The largest body of an answer read whole.
            let limit: Int
            private var buffer: [UInt8] = []
            private var start = 0
            private var received = 0
            private var ended = false

            /// The longest chunk-size line (with its extensions).
            static let maximumLineLength = 1024

            init(fd: Int32, limit: Int = .max) {
                self.fd = fd
                self.limit = limit
            }

            var tooLarge: Failure { Failure(URLError(.dataLengthExceedsMaximum), nothingReceived: false) }

            /// Whether every byte read belonged to the answer (the connection can carry the next).
            var isDrained: Bool { start == buffer.count && !ended }

            struct Answer {
                var status: Int
                var headers: [String: String]
                var body: Data
                var keepAlive: Bool
            }

            mutating func readResponse(method: String) throws -> Answer {
                while true {
                    let headLine = try readHead()
                    guard let status = headLine.status else {
                        throw Failure(URLError(.badServerResponse), nothingReceived: false)
                    }
                    // 1xx answers (100 Continue) come before the real one.
                    if (100..<200).contains(status) && status != 101 { continue }
                    let headers = headLine.headers
                    let connection = headers["connection"]?.lowercased() ?? ""
                    var keepAlive =
                        headLine.version == "HTTP/1.1"
                        ? !connection.contains("close") : connection.contains("keep-alive")
                    var body: [UInt8] = []
                    if method == "HEAD" || status == 204 || status == 304 {
                        // no body
                    } else if headers["transfer-encoding"]?.lowercased().contains("chunked") == true {
                        body = try readChunked()
                    } else if let text = headers["content-length"] {
                        guard let length = Int(text.trimmingCharacters(in: .whitespaces)), length >= 0 else {
                            throw Failure(URLError(.badServerResponse), nothingReceived: false)
                        }
                        guard length <= limit else { throw tooLarge }
                        body = try readExactly(length)
                    } else {
                        body = try readToEnd()
                        keepAlive = false
                    }
                    var merged: [String: String] = [:]
                    for (name, value) in headLine.original { merged[name] = value }
                    return Answer(status: status, headers: merged, body: Data(body), keepAlive: keepAlive)
                }
            }

            /// Reads the head of one answer (after any 1xx), hands it to `head`, then hands the body
            /// to `deliver` piece by piece as it arrives.
            mutating func readStreaming(
                method: String, head: (Int, [String: String]) -> Void, deliver: ([UInt8]) -> Void
            ) throws {
                var parsed: Head
                var status: Int
                repeat {
                    parsed = try readHead()
                    guard let code = parsed.status else {
                        throw Failure(URLError(.badServerResponse), nothingReceived: false)
                    }
                    status = code
                } while (100..<200).contains(status) && status != 101
                var headers: [String: String] = [:]
                for (name, value) in parsed.original { headers[name] = value }
                head(status, headers)
                if method == "HEAD" || status == 204 || status == 304 { return }
                if parsed.headers["transfer-encoding"]?.lowercased().contains("chunked") == true {
                    try readChunks(deliver)
                } else if let text = parsed.headers["content-length"],
                    var remaining = Int(text.trimmingCharacters(in: .whitespaces)), remaining >= 0
                {
                    while remaining > 0 {
                        if start == buffer.count {
                            guard try fill() else {
                                throw Failure(URLError(.networkConnectionLost), nothingReceived: false)
                            }
                        }
                        let piece = Array(buffer[start..<min(buffer.count, start + remaining)])
                        start += piece.count
                        remaining -= piece.count
                        deliver(piece)
                    }
                } else {
                    while true {
                        if start < buffer.count {
                            deliver(Array(buffer[start...]))
                            start = buffer.count
                        }
                        guard try fill() else { return }
                    }
                }
            }

            struct Head {
                var version: String
                var status: Int?
                /// Lower-cased names.
                var headers: [String: String]
                /// Names as sent.
                var original: [(String, String)]
            }

            mutating func readHead() throws -> Head {
                let terminator: [UInt8] = [13, 10, 13, 10]
                var searchFrom = start
                while true {
                    if let end = find(terminator, from: searchFrom) {
                        let text = String(decoding: buffer[start..<end], as: UTF8.self)
                        start = end + 4
                        return Self.parseHead(text)
                    }
                    if buffer.count - start > 64 * 1024 {
                        throw Failure(URLError(.badServerResponse), nothingReceived: false)
                    }
                    searchFrom = max(start, buffer.count - 3)
                    guard try fill() else {
                        throw Failure(URLError(.networkConnectionLost), nothingReceived: received == 0)
                    }
                }
            }

            static func parseHead(_ text: String) -> Head {
                var lines = text.split(separator: "\r\n", omittingEmptySubsequences: false).map(String.init)
                let statusLine = lines.isEmpty ? "" : lines.removeFirst()
                let parts = statusLine.split(separator: " ", maxSplits: 2)
                let version = parts.first.map(String.init) ?? ""
                let status = parts.count >= 2 && version.hasPrefix("HTTP/") ? Int(parts[1]) : nil
                var headers: [String: String] = [:]
                var original: [(String, String)] = []
                for line in lines {
                    guard let colon = line.firstIndex(of: ":") else { continue }
                    let name = String(line[..<colon]).trimmingCharacters(in: .whitespaces)
                    let value = String(line[line.index(after: colon)...]).trimmingCharacters(in: .whitespaces)
                    let key = name.lowercased()
                    if let earlier = headers[key] {
                        headers[key] = earlier + ", " + value
                        if let index = original.firstIndex(where: { $0.0.lowercased() == key }) {
                            original[index].1 = earlier + ", " + value
                        }
                    } else {
                        headers[key] = value
                        original.append((name, value))
                    }
                }
                return Head(version: version, status: status, headers: headers, original: original)
            }

            func find(_ pattern: [UInt8], from: Int) -> Int? {
                guard buffer.count >= pattern.count else { return nil }
                var index = max(from, 0)
                while index + pattern.count <= buffer.count {
                    if buffer[index] == pattern[0] && buffer[index..<(index + pattern.count)].elementsEqual(pattern) {
                        return index
                    }
                    index += 1
                }
                return nil
            }

            /// Reads more bytes; `false` at the end of the stream.
            mutating func fill() throws -> Bool {
                if ended { return false }
                if start > 0 && start == buffer.count {
                    buffer.removeAll(keepingCapacity: true)
                    start = 0
                }
                let chunk = 64 * 1024
                let before = buffer.count
                buffer.reserveCapacity(before + chunk)
                var count = 0
                buffer.append(contentsOf: repeatElement(0, count: chunk))
                while true {
                    count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress! + before, chunk, 0) }
                    if count < 0 && errno == EINTR { continue }
                    break
                }
                let number = errno
                buffer.removeLast(chunk - max(0, count))
                if count < 0 { throw Failure(SocketConnections.error(number), nothingReceived: received == 0) }
                if count == 0 {
                    ended = true
                    return false
                }
                received += count
                return true
            }

            mutating func readExactly(_ length: Int) throws -> [UInt8] {
                while buffer.count - start < length {
                    guard try fill() else { throw Failure(URLError(.networkConnectionLost), nothingReceived: false) }
                }
                let bytes = Array(buffer[start..<(start + length)])
                start += length
                return bytes
            }

            mutating func readLine() throws -> String {
                while true {
                    if let end = find([13, 10], from: start) {
                        let line = String(decoding: buffer[start..<end], as: UTF8.self)
                        start = end + 2
                        return line
                    }
                    guard buffer.count - start <= Self.maximumLineLength else {
                        throw Failure(URLError(.badServerResponse), nothingReceived: false)
                    }
                    guard try fill() else { throw Failure(URLError(.networkConnectionLost), nothingReceived: false) }
                }
            }

            mutating func readChunked() throws -> [UInt8] {
                var body: [UInt8] = []
                let limit = limit
                let tooLarge = tooLarge
                try readChunks { piece in
                    guard body.count + piece.count <= limit else { throw tooLarge }
                    body += piece
                }
                return body
            }

            /// Reads a chunked body, handing each chunk to `deliver` as it arrives.
            mutating func readChunks(_ deliver: ([UInt8]) throws -> Void) throws {
                while true {
                    let line = try readLine()
                    let sizeText =
                        line.split(separator: ";", maxSplits: 1).first.map {
                            $0.trimmingCharacters(in: .whitespaces)
                        } ?? ""
                    guard let size = Int(sizeText, radix: 16), size >= 0 else {
                        throw Failure(URLError(.badServerResponse), nothingReceived: false)
                    }
                    if size == 0 {
                        while try !readLine().isEmpty {}  // trailers, then the empty line
                        return
                    }
                    // Handed on as it arrives: a chunk that claims gigabytes is never allocated whole.
                    var remaining = size
                    while remaining > 0 {
                        if start == buffer.count {
                            guard try fill() else {
                                throw Failure(URLError(.networkConnectionLost), nothingReceived: false)
                            }
                        }
                        let end = min(buffer.count, start + remaining)
                        let piece = Array(buffer[start..<end])
                        start = end
                        remaining -= piece.count
                        try deliver(piece)
                    }
                    guard try readLine().isEmpty else {
                        throw Failure(URLError(.badServerResponse), nothingReceived: false)
                    }
                }
            }

            mutating func readToEnd() throws -> [UInt8] {
                while try fill() {
                    if buffer.count - start > limit { throw tooLarge }
                }
                let bytes = Array(buffer[start...])
                start = buffer.count
                return bytes
            }
        }
    }
#endif
