#if canImport(Glibc)
    import Foundation
    import Glibc
    import Synchronization

    #if canImport(FoundationNetworking)
        import FoundationNetworking
    #endif
    import SyncCore
    import Testing
    @testable import Transport

    /// Answers a server or proxy compressed (nginx's `gzip on`, an Express server's compression):
    /// whole answers ask for them and are inflated; streams ask for none.
    @Suite("Compressed answers")
    struct CompressedAnswerTests {
        /// `bytes` as one gzip member of stored (uncompressed) deflate blocks: valid gzip that any
        /// inflater reads, written here because Foundation on Linux has no compressor.
        static func gzip(_ bytes: [UInt8]) -> [UInt8] {
            var out: [UInt8] = [0x1F, 0x8B, 8, 0, 0, 0, 0, 0, 0, 255]
            var offset = 0
            repeat {
                let count = min(65_535, bytes.count - offset)
                let last: UInt8 = offset + count == bytes.count ? 1 : 0
                out += [
                    last, UInt8(count & 0xFF), UInt8(count >> 8), UInt8(~count & 0xFF), UInt8((~count >> 8) & 0xFF),
                ]
                out += bytes[offset..<(offset + count)]
                offset += count
            } while offset < bytes.count
            for value in [crc32(bytes), UInt32(truncatingIfNeeded: bytes.count)] {
                out += (0..<4).map { UInt8(truncatingIfNeeded: value >> (8 * $0)) }
            }
            return out
        }

        static func crc32(_ bytes: [UInt8]) -> UInt32 {
            var crc: UInt32 = 0xFFFF_FFFF
            for byte in bytes {
                crc ^= UInt32(byte)
                for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
            }
            return ~crc
        }

        /// A server answering every request with `body`, gzipped as `encode` makes it.
        static func server(body: [UInt8], encode: @escaping @Sendable ([UInt8]) -> [UInt8]) throws -> ScriptedServer {
            try ScriptedServer { _, connection, server in
                while let request = connection.readRequest() {
                    server.record(request.head)
                    let zipped = encode(body)
                    connection.write(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
                            + "Content-Length: \(zipped.count)\r\n\r\n")
                    connection.write(bytes: zipped)
                }
            }
        }

        @Test func pagesAskForCompressionAndAreInflated() async throws {
            let items = (0..<2_000).map { index -> JSONValue in
                ["id": .string("item-\(index)"), "title": .string(String(repeating: "x", count: 100))]
            }
            let body = JSONValue.object(["items": .array(items)]).serializedUTF8()
            #expect(body.count > 65_535, "several stored blocks")
            let server = try Self.server(body: body, encode: Self.gzip)
            defer { server.stop() }
            let remote = HTTPRemote(HTTPRemote.Configuration(serverURL: server.url))
            let page = try await remote.onlineTable("todo").query(TableQuery())
            #expect(page.items.count == 2_000)
            #expect(page.items.last?["id"] == "item-1999")
            let head = try #require(server.requests.withLock { $0.first })
            #expect(head.lowercased().contains("accept-encoding: deflate, gzip"), "\(head)")
        }

        @Test func aCorruptCompressedAnswerIsAnErrorThatSaysSo() async throws {
            let server = try Self.server(body: Array(#"{"items":[]}"#.utf8)) { bytes in
                var zipped = CompressedAnswerTests.gzip(bytes)
                zipped[zipped.count - 6] ^= 0xFF  // the CRC no longer matches
                return zipped
            }
            defer { server.stop() }
            let remote = HTTPRemote(HTTPRemote.Configuration(serverURL: server.url))
            do {
                _ = try await remote.onlineTable("todo").query(TableQuery())
                Issue.record("a corrupt answer was taken")
            } catch {
                #expect("\(error)".contains("compressed answer is corrupt"), "\(error)")
            }
        }

        @Test func streamsAskForNoCompression() async throws {
            let server = try ScriptedServer { _, connection, server in
                guard let request = connection.readRequest() else { return }
                server.record(request.head)
                connection.write("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n: hello\n\n")
            }
            defer { server.stop() }
            let connections = AsyncHTTPConnections()
            var request = URLRequest(url: server.url.appendingPathComponent("tables/$changes"))
            request.timeoutInterval = 5
            let (status, _, body) = try await connections.openStream(request)
            #expect(status == 200)
            var iterator = body.makeAsyncIterator()
            #expect(try await iterator.next() != nil)
            let head = try #require(server.requests.withLock { $0.first })
            #expect(!head.lowercased().contains("accept-encoding"), "\(head)")
        }
    }
#endif
