#if canImport(Glibc)
    import Foundation
    import Glibc
    import Synchronization
    import SyncCore
    import Testing
    @testable import Transport

    /// Answers a client must not take at their word (a probe with a hostile server found each):
    /// a redirect, which followed would turn a write into a GET whose answer passes for the write's
    /// and carry the token to another host, and an answer about another item than the one asked.
    @Suite("Transport: redirects and answers about other items", .timeLimit(.minutes(2)))
    struct RedirectAndIdentityTests {
        /// A server that answers every request with `answer` and records the request heads.
        static func answering(_ answer: @escaping @Sendable (String) -> String) throws -> ScriptedServer {
            try ScriptedServer { _, connection, server in
                while let request = connection.readRequest() {
                    server.record(request.head)
                    connection.write(answer(request.head))
                }
            }
        }

        static func json(_ status: String, _ body: String, extra: String = "") -> String {
            "HTTP/1.1 \(status)\r\nContent-Type: application/json\r\n\(extra)Content-Length: \(body.utf8.count)\r\n\r\n"
                + body
        }

        @Test(arguments: ["301 Moved Permanently", "302 Found", "303 See Other", "307 Temporary Redirect"])
        func aRedirectedWriteFailsAndNothingGoesWhereTheRedirectSays(status: String) async throws {
            let elsewhere = try Self.answering { _ in Self.json("200 OK", #"{"items":[],"id":"x"}"#) }
            defer { elsewhere.stop() }
            let server = try Self.answering { _ in
                "HTTP/1.1 \(status)\r\nLocation: \(elsewhere.url.absoluteString)/tables/todo\r\nContent-Length: 0\r\n\r\n"
            }
            defer { server.stop() }
            let remote = HTTPRemote(
                HTTPRemote.Configuration(serverURL: server.url, protocolVersion: .v2), tokenProvider: { _ in "SECRET" })
            let write = RemoteWrite(table: "todo", kind: .insert, itemID: "m", body: ["id": "m", "title": "mine"])
            do {
                _ = try await remote.onlineTable("todo").send(write)
                Issue.record("a redirected insert was taken as done")
            } catch {
                // Unreachable at this address: the push stops and keeps the operation.
                #expect(error.code == .network, "\(error)")
                #expect(error.message.contains("redirected it to \(elsewhere.url.absoluteString)/tables/todo"))
                #expect(error.message.contains("use its new address as the server URL"))
            }
            do {
                _ = try await remote.onlineTable("todo").item(id: "m")
                Issue.record("a redirected read was followed")
            } catch {
                #expect(error.code == .network && error.message.contains("redirected"), "\(error)")
            }
            #expect(elsewhere.requests.withLock { $0.isEmpty }, "the other host got a request (and the token)")
        }

        /// An upload's `Location` on another origin: followed, its `PATCH`es carried the file and
        /// the token there. It is refused before anything is sent; a path on the server is followed.
        @Test func anUploadLocationOnAnotherOriginIsNotFollowed() async throws {
            let elsewhere = try Self.answering { _ in "HTTP/1.1 204 No Content\r\nUpload-Offset: 1\r\n\r\n" }
            defer { elsewhere.stop() }
            let server = try Self.answering { head in
                head.hasPrefix("PUT")
                    ? "HTTP/1.1 201 Created\r\nLocation: \(elsewhere.url.absoluteString)/uploads/u1\r\n"
                        + "Upload-Offset: 0\r\nContent-Length: 0\r\n\r\n"
                    : Self.json("200 OK", #"{"attachments":{"maxBytes":1000}}"#)
            }
            defer { server.stop() }
            let remote = HTTPRemote(
                HTTPRemote.Configuration(serverURL: server.url, protocolVersion: .v3), tokenProvider: { _ in "SECRET" })
            let file = FileManager.default.temporaryDirectory.appending(path: "ferry-\(UUID().uuidString)")
            try Data("x".utf8).write(to: file)
            defer { try? FileManager.default.removeItem(at: file) }
            do {
                try await remote.uploadAttachment(
                    table: "todo", itemID: "1", name: "x", file: file, contentType: nil,
                    sha256: String(repeating: "0", count: 64), progress: { _, _ in })
                Issue.record("an upload location on another origin was followed")
            } catch let error as RemoteError {
                #expect(error.code == .invalidResponse, "\(error)")
                #expect(
                    error.message.contains("another origin (\(elsewhere.url.absoluteString)/uploads/u1)"), "\(error)")
            } catch {
                Issue.record("not a RemoteError: \(error)")
            }
            #expect(elsewhere.requests.withLock { $0.isEmpty }, "the other host got the upload (and the token)")
            #expect(
                HTTPRemote.sameOrigin(URL(string: "HTTP://Example.com/a")!, URL(string: "http://example.com:80/b")!))
            #expect(!HTTPRemote.sameOrigin(URL(string: "http://example.com/a")!, URL(string: "https://example.com/a")!))
            #expect(!HTTPRemote.sameOrigin(URL(string: "http://example.com:81/")!, URL(string: "http://example.com/")!))
        }

        @Test func theNewAddressIsShownAsOneBoundedLineWithoutBidiOverrides() async throws {
            let location = "https://elsewhere/\u{202E}" + String(repeating: "x", count: 2000)
            let server = try Self.answering { _ in
                "HTTP/1.1 301 Moved Permanently\r\nLocation: \(location)\r\nContent-Length: 0\r\n\r\n"
            }
            defer { server.stop() }
            do {
                _ = try await HTTPRemote(HTTPRemote.Configuration(serverURL: server.url)).onlineTable("todo").item(
                    id: "a")
                Issue.record("a redirect was followed")
            } catch {
                #expect(error.message.contains("redirected it to https://elsewhere/xxx"), "\(error.message)")
                #expect(!error.message.unicodeScalars.contains { $0.properties.isBidiControl })
                #expect(error.message.count < 600, "\(error.message.count) characters")
            }
        }

        /// A URL of another scheme (`ftp://`) went nowhere until the request timed out, 90 s.
        @Test func aServerURLOfAnotherSchemeFailsAtOnceUnsent() async throws {
            let remote = HTTPRemote(HTTPRemote.Configuration(serverURL: URL(string: "ftp://127.0.0.1:9")!))
            do {
                _ = try await remote.onlineTable("todo").insert(["id": "a"])
                Issue.record("an ftp URL was used")
            } catch {
                #expect(error.code == .network && error.wasNotSent, "\(error)")
                #expect(error.message == "the server URL's scheme 'ftp' is not http or https", "\(error.message)")
            }
        }

        /// A port above 65535 stopped the process (a runtime trap in NIO's socket address), for a
        /// request and for the change feed alike.
        @Test func aServerURLWithAPortOutOfRangeFailsAtOnceUnsent() async throws {
            let remote = HTTPRemote(HTTPRemote.Configuration(serverURL: URL(string: "http://127.0.0.1:65536")!))
            do {
                _ = try await remote.onlineTable("todo").insert(["id": "a"])
                Issue.record("a port above 65535 was used")
            } catch {
                #expect(error.code == .network && error.wasNotSent, "\(error)")
                #expect(error.message == "the server URL's port 65536 is not 1 to 65535", "\(error.message)")
            }
            await #expect(throws: RemoteError.self) { _ = try await remote.changeFeed(tables: ["todo"], after: nil) }
        }

        @Test func anAcceptedWriteAnsweredWithAnotherItemIsAnInvalidResponse() async throws {
            let server = try Self.answering { head in
                head.hasPrefix("POST")
                    ? Self.json("201 Created", #"{"id":"server-chosen","version":"1","title":"mine"}"#)
                    : Self.json("200 OK", #"{"id":"OTHER","version":"2","title":"theirs"}"#)
            }
            defer { server.stop() }
            let table = HTTPRemote(HTTPRemote.Configuration(serverURL: server.url)).onlineTable("todo")
            for write in [
                RemoteWrite(table: "todo", kind: .insert, itemID: "mine1", body: ["id": "mine1", "title": "mine"]),
                RemoteWrite(table: "todo", kind: .update, itemID: "mine1", body: ["id": "mine1"], ifVersion: "1"),
            ] {
                do {
                    _ = try await table.send(write)
                    Issue.record("\(write.kind): an answer about another item was taken")
                } catch {
                    #expect(error.code == .invalidResponse, "\(error)")
                    #expect(error.message.contains("instead"), "\(error)")
                }
            }
        }

        /// An insert without an id lets the server choose it: its answer was called an answer about
        /// another item, after the server had stored it (a retry stored it twice).
        @Test func anInsertWithoutAnIdTakesTheServersId() async throws {
            let server = try Self.answering { _ in
                Self.json("201 Created", #"{"id":"server-chosen","version":"1","title":"Amélie"}"#)
            }
            defer { server.stop() }
            let table = HTTPRemote(HTTPRemote.Configuration(serverURL: server.url)).onlineTable("movies")
            let item = try await table.insert(["title": "Amélie"])
            #expect(item["id"] == "server-chosen" && item["version"] == "1", "\(item)")
        }

        @Test func anIdThatDiffersOnlyInCaseIsTheSameItem() async throws {
            let server = try Self.answering { _ in Self.json("201 Created", #"{"id":"ABC-1","version":"1"}"#) }
            defer { server.stop() }
            let table = HTTPRemote(HTTPRemote.Configuration(serverURL: server.url)).onlineTable("todo")
            let item = try await table.send(
                RemoteWrite(table: "todo", kind: .insert, itemID: "abc-1", body: ["id": "abc-1"]))
            #expect(item?["version"] == "1")
        }

        /// Next-page links that do not advance (the same page again, a malformed `Link` read as the
        /// first page) were followed until the item limit, a million items later.
        @Test(arguments: [
            #"{"items":[{"id":"a"}],"nextLink":"http://h/tables/todo?$skip=0"}"#,
            #"{"items":[{"id":"a"}],"nextLink":"http://h/tables/todo"}"#,
        ])
        func nextLinksThatLeadBackAreNotFollowedForever(page: String) async throws {
            let server = try Self.answering { _ in Self.json("200 OK", page) }
            defer { server.stop() }
            let table = HTTPRemote(HTTPRemote.Configuration(serverURL: server.url)).onlineTable("todo")
            do {
                _ = try await table.all(TableQuery())
                Issue.record("a page read again and again was followed")
            } catch {
                #expect(error.code == .invalidResponse, "\(error)")
                #expect(error.message.contains("leads back to a page already read"), "\(error)")
            }
            #expect(server.requests.withLock { $0.count } <= 3)
        }

        @Test func aConflictWhoseBodyIsAnotherItemCarriesNoServerItem() async throws {
            let server = try Self.answering { head in
                head.contains("/tables/todo/s1")
                    ? Self.json("412 Precondition Failed", #"{"id":"not-s1","version":"9","title":"a different item"}"#)
                    : Self.json("404 Not Found", #"{"error":"no"}"#)
            }
            defer { server.stop() }
            let table = HTTPRemote(HTTPRemote.Configuration(serverURL: server.url)).onlineTable("todo")
            do {
                _ = try await table.send(
                    RemoteWrite(table: "todo", kind: .update, itemID: "s1", body: ["id": "s1"], ifVersion: "1"))
                Issue.record("a 412 was taken as done")
            } catch {
                #expect(error.code == .conflict)
                #expect(error.serverItem == nil, "another item's fields were offered as the server's copy")
            }
        }
    }
#endif
