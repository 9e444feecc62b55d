#if canImport(Glibc)
    import Foundation
    import Glibc
    import Synchronization
    import SyncCore
    import Testing
    @testable import Transport

    /// A server that sends faster than the client reads (an endless feed, a hostile server) is held
    /// back by the connection, not buffered by the client: before, a change feed of endless events
    /// grew the client to 6 GB in 25 s.
    @Suite("Transport: streams read no faster than their consumer", .timeLimit(.minutes(2)))
    struct StreamBackpressureTests {
        /// A server that writes `piece` until the client stops taking it, counting the bytes sent.
        final class Sent: Sendable {
            let bytes = Mutex(0)
        }

        static func flooding(head: String, piece: String) throws -> (ScriptedServer, Sent) {
            let sent = Sent()
            let bytes = Array(piece.utf8)
            let server = try ScriptedServer { _, connection, _ in
                _ = connection.readRequest()
                connection.write(head)
                while true {
                    let written = bytes.withUnsafeBytes {
                        send(connection.fd, $0.baseAddress!, bytes.count, Int32(MSG_NOSIGNAL))
                    }
                    if written <= 0 { return }
                    sent.bytes.withLock { $0 += written }
                }
            }
            return (server, sent)
        }

        @Test func aStreamNotReadHoldsTheServerBack() async throws {
            let (server, sent) = try Self.flooding(
                head: "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n",
                piece: String(repeating: "x", count: 64 * 1024))
            defer { server.stop() }
            let opened = try await AsyncHTTPConnections().openStream(request(server.url, timeout: 30))
            var iterator = opened.body.makeAsyncIterator()
            _ = try await iterator.next()
            try await Task.sleep(for: .seconds(1))
            // What the kernel's buffers and NIO's few pieces hold, not what a second of loopback
            // carries (gigabytes).
            let held = sent.bytes.withLock { $0 }
            #expect(held < 64 << 20, "the client read \(held) bytes ahead of its consumer")
            _ = iterator
        }

        @Test func aFeedOfEndlessEventsIsParsedAsTheyAreTaken() async throws {
            let event = "event: change\nid: 1\ndata: {\"table\":\"todo\",\"version\":1}\n\n"
            let (server, sent) = try Self.flooding(
                head: "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n",
                piece: String(repeating: event, count: 512))
            defer { server.stop() }
            let remote = HTTPRemote(HTTPRemote.Configuration(serverURL: server.url))
            remote.capabilityCache.value.withLock {
                $0 = ServerExtensions(writes: .none, changes: ChangeFeedOffer(heartbeatSeconds: 30))
            }
            let feed = try await remote.changeFeed(tables: ["todo"], after: nil)
            var events = feed.makeAsyncIterator()
            guard case .changed(let table, _, _)? = try await events.next() else {
                Issue.record("no change event")
                return
            }
            #expect(table == "todo")
            try await Task.sleep(for: .seconds(1))
            let held = sent.bytes.withLock { $0 }
            #expect(held < 64 << 20, "the feed read \(held) bytes ahead of its consumer")
            _ = events
        }
    }
#endif
