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

    /// A change feed that ends, goes silent or is refused is noticed by the client.
    @Suite("Transport: a dead change feed is noticed", .timeLimit(.minutes(2)))
    struct FeedLivenessTests {
        /// A server with a feed whose heartbeat is 1 s; `feed` plays the feed's connection.
        static func server(feed: @escaping @Sendable (ScriptedServer.Connection) -> Void) throws -> ScriptedServer {
            try ScriptedServer { _, connection, server in
                while let request = connection.readRequest() {
                    server.record(request.head)
                    if request.head.hasPrefix("GET /tables/$capabilities")
                        || request.head.hasPrefix("GET /tables/%24capabilities")
                    {
                        let body = #"{"changes":{"url":"$changes","format":"text/event-stream","heartbeatSeconds":1}}"#
                        connection.write(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
                        )
                    } else {
                        feed(connection)
                        return
                    }
                }
            }
        }

        static let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"

        static func chunk(_ text: String) -> String { String(text.utf8.count, radix: 16) + "\r\n" + text + "\r\n" }

        static let ready = chunk("event: ready\nid: t1\ndata: {\"tables\":{}}\n\n")

        /// Reads the feed until it ends; how it ended, and how long it took.
        static func readToEnd(_ remote: HTTPRemote) async throws -> (error: RemoteError?, seconds: Double) {
            let started = ContinuousClock.now
            let events = try await remote.changeFeed(tables: ["todo"], after: nil)
            var failure: RemoteError?
            do {
                for try await _ in events {}
            } catch {
                failure = error as? RemoteError
            }
            let elapsed = ContinuousClock.now - started
            return (failure, Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
        }

        @Test func aFeedTheServerClosesEndsAtOnce() async throws {
            let server = try Self.server { connection in
                connection.write(Self.head + Self.ready)
                Thread.sleep(forTimeInterval: 0.2)  // then the server goes away: a close, no last chunk
            }
            defer { server.stop() }
            let (error, seconds) = try await Self.readToEnd(HTTPRemote(HTTPRemote.Configuration(serverURL: server.url)))
            #expect(error?.code == .network, "a cut stream is a network failure: \(String(describing: error))")
            #expect(seconds < 10, "noticed after \(seconds) s")
        }

        @Test func aFeedThatGoesSilentIsDeadAfterTwoAndAHalfHeartbeats() async throws {
            // Before, the wait was the request timeout or three heartbeats, whichever was longer
            // (45 s with Ferry's server): a silent feed kept "everything synced" on screen that long.
            let server = try Self.server { connection in
                connection.write(Self.head + Self.ready)
                Thread.sleep(forTimeInterval: 20)  // no heartbeat, no close: a black hole
            }
            defer { server.stop() }
            let remote = HTTPRemote(HTTPRemote.Configuration(serverURL: server.url))
            #expect(await remote.offersChangeFeed())
            let (error, seconds) = try await Self.readToEnd(remote)
            #expect(error?.code == .network, "\(String(describing: error))")
            #expect(seconds < 10, "a silent feed was noticed after \(seconds) s (heartbeat 1 s)")
        }

        @Test func theServersRetryIsWaitedAfterTheFeedFailsAndWhileTheServerIsGone() async throws {
            let server = try Self.server { connection in
                connection.write(Self.head + Self.chunk("retry: 3000\n\n") + Self.ready)
                Thread.sleep(forTimeInterval: 0.2)  // then a close without the last chunk
            }
            let remote = HTTPRemote(HTTPRemote.Configuration(serverURL: server.url))
            let (error, _) = try await Self.readToEnd(remote)
            #expect(error?.code == .network)
            #expect(error?.retryAfter == .seconds(3), "the feed's failure carries the server's retry")
            // The server is gone: opening fails, and still waits what the server last asked.
            server.stop()
            do {
                _ = try await remote.changeFeed(tables: ["todo"], after: "t1")
                Issue.record("a feed opened on a stopped server")
            } catch {
                #expect(error.code == .network, "\(error)")
                #expect(error.retryAfter == .seconds(3), "\(error)")
            }
        }

        @Test func aRefusedTokenAsksTheProviderOnceThenSaysUnauthorized() async throws {
            let server = try Self.server { connection in
                connection.write("HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n")
                while connection.readRequest() != nil {
                    connection.write("HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n")
                }
            }
            defer { server.stop() }
            let refreshes = Mutex(0)
            let remote = HTTPRemote(
                HTTPRemote.Configuration(serverURL: server.url),
                tokenProvider: { forceRefresh in
                    if forceRefresh { refreshes.withLock { $0 += 1 } }
                    return "expired"
                })
            do {
                _ = try await remote.changeFeed(tables: ["todo"], after: nil)
                Issue.record("a refused feed opened")
            } catch {
                #expect(error.code == .unauthorized)
            }
            #expect(refreshes.withLock { $0 } == 1, "the token provider is asked for a new token once")
        }
    }
#endif
