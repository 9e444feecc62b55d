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

    @Suite("Transport: the connections of AsyncHTTPClient (Linux)", .timeLimit(.minutes(2)))
    struct HTTPConnectionsTests {
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
            let connections = AsyncHTTPConnections()
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
            #expect(heads.first?.lowercased().contains("\r\nhost: 127.0.0.1:\(server.port)") == true)
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
            let connections = AsyncHTTPConnections()
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
            let connections = AsyncHTTPConnections()
            let first = try await connections.exchange(request(server.url))
            let second = try await connections.exchange(request(server.url))
            #expect(String(decoding: first.body, as: UTF8.self) == "until the end")
            #expect(String(decoding: second.body, as: UTF8.self) == "until the end")
            #expect(server.accepted.withLock { $0 } == 2)
        }

        @Test func aConnectionClosedUnderARequestRetriesAReadAndAKeyedWriteButNoOtherWrite() async throws {
            // Every connection answers one request, then reads the next and closes without a word.
            let server = try ScriptedServer { _, connection, server in
                var answered = 0
                while let request = connection.readRequest() {
                    server.record(request.head)
                    if answered == 1 { return }
                    answered += 1
                    // An insert is answered with the item it sent, a read with item "a".
                    let isInsert = request.head.hasPrefix("POST")
                    let body = isInsert ? String(decoding: request.body, as: UTF8.self) : #"{"id":"a"}"#
                    connection.write(
                        "HTTP/1.1 \(isInsert ? "201 Created" : "200 OK")\r\nContent-Type: application/json\r\n"
                            + "Content-Length: \(body.utf8.count)\r\n\r\n\(body)")
                }
            }
            defer { server.stop() }
            let remote = HTTPRemote(
                HTTPRemote.Configuration(
                    serverURL: server.url, retry: .init(maximumAttempts: 3, initialDelay: .milliseconds(10))))
            let table = remote.onlineTable("todo")
            _ = try await table.item(id: "a")
            // A read goes again (the retry policy): the server cannot have applied it twice…
            #expect(try await table.item(id: "a")?.id == "a")
            // …a write does not: its outcome is unknown, and only the sync engine may check it. (The
            // connection of the retried read answered once: it closes under the next request.)
            let before = server.requests.withLock { $0.count }
            do {
                _ = try await table.insert(["id": "c"])
                Issue.record("a write on a connection the server closed was answered")
            } catch {
                #expect(error.code == .network, "\(error)")
                #expect(!error.wasNotSent, "the server may have read it")
            }
            #expect(server.requests.withLock { $0.count } == before + 1, "the write was sent once")

            // A keyed write goes again: a server that honours keys replays what it applied.
            _ = try await table.item(id: "a")
            let keyed = RemoteWrite(
                table: "todo", kind: .insert, itemID: "d", body: ["id": "d"], idempotencyKey: "ferry-test-1")
            let beforeKeyed = server.requests.withLock { $0.count }
            #expect(try await remote.send(keyed)?.id == "d", "the second attempt's answer")
            let keyedHeads = server.requests.withLock { Array($0.dropFirst(beforeKeyed)) }
            #expect(keyedHeads.count == 2, "sent twice: \(keyedHeads)")
            #expect(keyedHeads.allSatisfy { $0.lowercased().contains("idempotency-key: ferry-test-1") })
        }

        /// A keyed write whose first attempt reached the server and lost its answer, and whose
        /// retry found the server gone: the request may have been applied, whatever the last
        /// attempt met. It was "never sent", and a push took a batch the server had applied for
        /// pending again (a delete queued after it then collapsed into it and never went out).
        @Test func aRetryThatCannotConnectDoesNotMakeAnEarlierAttemptUnsent() async throws {
            let server = try ScriptedServer { _, connection, server in
                if let request = connection.readRequest() { server.record(request.head) }
                server.stop()  // read, then gone: no answer, and no connection for the retry
            }
            defer { server.stop() }
            let remote = HTTPRemote(
                HTTPRemote.Configuration(
                    serverURL: server.url, retry: .init(maximumAttempts: 3, initialDelay: .milliseconds(10))))
            let keyed = RemoteWrite(
                table: "todo", kind: .insert, itemID: "k", body: ["id": "k"], idempotencyKey: "ferry-test-2")
            do {
                _ = try await remote.send(keyed)
                Issue.record("a server that closed without an answer answered")
            } catch {
                #expect(error.code == .network, "\(error)")
                #expect(!error.wasNotSent, "the first attempt reached the server: \(error)")
                #expect(error.message.contains("an earlier attempt may have reached the server"), "\(error)")
            }
            #expect(server.requests.withLock { $0.count } == 1)
        }

        @Test func failuresAreTheErrorsOfURLSession() async throws {
            let connections = AsyncHTTPConnections()
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
            let connections = AsyncHTTPConnections()
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
