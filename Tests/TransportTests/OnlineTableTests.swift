import Foundation
import SyncCore
import Synchronization
import Testing
@testable import Transport

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A request the stub saw.
struct SeenRequest: Sendable {
    var method: String
    /// The whole URL, as sent (percent-encoding untouched).
    var url: String
    var path: String
    var query: String?
    var headers: [String: String]
    var body: JSONValue?

    func header(_ name: String) -> String? {
        headers.first { $0.key.lowercased() == name.lowercased() }?.value
    }
}

/// A canned answer.
struct StubAnswer: Sendable {
    var status: Int
    var headers: [String: String] = [:]
    var body: String = ""
    var delay: Duration = .zero
}

/// Answers requests to `<host>.test` from a per-host script, and records them: a URLProtocol, so
/// the real URLSession code path runs without a network.
final class StubProtocol: URLProtocol {
    struct Script: Sendable {
        var answers: [StubAnswer]
        var seen: [SeenRequest] = []
    }
    static let scripts = Mutex<[String: Script]>([:])

    static func install(host: String, _ answers: [StubAnswer]) {
        scripts.withLock { $0[host] = Script(answers: answers) }
    }

    static func seen(host: String) -> [SeenRequest] { scripts.withLock { $0[host]?.seen ?? [] } }

    override class func canInit(with request: URLRequest) -> Bool { request.url?.host?.hasSuffix(".test") ?? false }
    override class func canonicalRequest(for request: URLRequest) -> URLRequest { request }

    override func startLoading() {
        let request = self.request
        let host = request.url?.host ?? ""
        var body: Data? = request.httpBody
        if body == nil, let stream = request.httpBodyStream {
            stream.open()
            var data = Data()
            var buffer = [UInt8](repeating: 0, count: 4096)
            while stream.hasBytesAvailable {
                let read = stream.read(&buffer, maxLength: buffer.count)
                if read <= 0 { break }
                data.append(buffer, count: read)
            }
            stream.close()
            body = data
        }
        let seen = SeenRequest(
            method: request.httpMethod ?? "GET", url: request.url?.absoluteString ?? "", path: request.url?.path ?? "",
            query: request.url?.query, headers: request.allHTTPHeaderFields ?? [:],
            body: body.flatMap { try? JSONValue(parsingUTF8: $0) })
        let answer: StubAnswer? = Self.scripts.withLock { scripts in
            scripts[host]?.seen.append(seen)
            guard var script = scripts[host], !script.answers.isEmpty else { return nil }
            let next = script.answers.removeFirst()
            scripts[host] = script
            return next
        }
        guard let answer else {
            client?.urlProtocol(self, didFailWithError: URLError(.cannotConnectToHost))
            return
        }
        // URLProtocol is not Sendable; the loading system calls back on its own terms.
        nonisolated(unsafe) let loader = self
        let respond: @Sendable () -> Void = {
            if loader.stopped.withLock({ $0 }) { return }
            let response = HTTPURLResponse(
                url: request.url!, statusCode: answer.status, httpVersion: "HTTP/1.1", headerFields: answer.headers)!
            loader.client?.urlProtocol(loader, didReceive: response, cacheStoragePolicy: .notAllowed)
            loader.client?.urlProtocol(loader, didLoad: Data(answer.body.utf8))
            loader.client?.urlProtocolDidFinishLoading(loader)
        }
        if answer.delay == .zero {
            respond()
        } else {
            DispatchQueue.global().asyncAfter(deadline: .now() + answer.delay.seconds) { respond() }
        }
    }

    /// Set when the loading system stops this load (a cancelled task): a delayed answer must not
    /// reach it then (FoundationNetworking traps on callbacks for tasks it has forgotten).
    private let stopped = Mutex(false)

    override func stopLoading() { stopped.withLock { $0 = true } }
}

func stubbedRemote(
    _ host: String, _ version: ProtocolVersion, _ answers: [StubAnswer], tokens: HTTPRemote.TokenProvider? = nil,
    retry: HTTPRemote.RetryPolicy = HTTPRemote.RetryPolicy(initialDelay: .milliseconds(1)), basePath: String = "/",
    user: String = ""
) -> HTTPRemote {
    StubProtocol.install(host: host, answers)
    let configuration = URLSessionConfiguration.ephemeral
    configuration.protocolClasses = [StubProtocol.self]
    return HTTPRemote(
        HTTPRemote.Configuration(
            serverURL: URL(string: "http://\(user)\(host)\(basePath)")!, protocolVersion: version, retry: retry),
        tokenProvider: tokens, session: URLSession(configuration: configuration))
}

@Suite("Transport: requests and answers")
struct OnlineTableTests {
    @Test func insertSendsTheProtocolHeadersAndReadsTheETag() async throws {
        let remote = stubbedRemote(
            "insert3.test", .v3,
            [
                StubAnswer(
                    status: 201, headers: ["ETag": "\"AAAB\""], body: #"{"id":"a b/c","title":"x","version":"old"}"#)
            ],
            tokens: { _ in "tok" })
        let item = try await remote.onlineTable("todo").insert(["id": "a b/c", "title": "x"])
        #expect(item["version"] == "AAAB")
        let seen = try #require(StubProtocol.seen(host: "insert3.test").first)
        #expect(seen.method == "POST")
        #expect(seen.path == "/tables/todo")
        #expect(seen.header("ZUMO-API-VERSION") == "3.0.0")
        #expect(seen.header("Authorization") == "Bearer tok")
        #expect(seen.body == ["id": "a b/c", "title": "x"])
    }

    @Test func protocol2UpdatesWithPATCHAndTheZumoAuthHeader() async throws {
        let remote = stubbedRemote(
            "update2.test", .v2, [StubAnswer(status: 200, body: #"{"id":"a b/c","version":"MQ=="}"#)],
            tokens: { _ in "tok" })
        let item = try await remote.onlineTable("todo").update(["id": "a b/c", "n": 1], ifVersion: "MA==")
        #expect(item["version"] == "MQ==")
        let seen = try #require(StubProtocol.seen(host: "update2.test").first)
        #expect(seen.method == "PATCH")
        #expect(seen.header("X-ZUMO-AUTH") == "tok")
        #expect(seen.header("ZUMO-API-VERSION") == "2.0.0")
        #expect(seen.header("If-Match") == "\"MA==\"")
        // The id is one percent-encoded path segment.
        #expect(seen.path == "/tables/todo/a b/c" || seen.path == "/tables/todo/a%20b%2Fc")
    }

    @Test(arguments: [409, 412])
    func conflictsCarryTheServersItem(status: Int) async throws {
        let host = "conflict\(status).test"
        let remote = stubbedRemote(
            host, .v3, [StubAnswer(status: status, headers: ["ETag": "\"v9\""], body: #"{"id":"1","title":"theirs"}"#)])
        let error = await #expect(throws: RemoteError.self) {
            _ = try await remote.onlineTable("todo").update(["id": "1", "title": "mine"], ifVersion: "v1")
        }
        #expect(error?.code == .conflict)
        #expect(error?.status == status)
        #expect(error?.serverItem == ["id": "1", "title": "theirs", "version": "v9"])
    }

    @Test func readAnswersNilForMissingAndSoftDeletedItems() async throws {
        let remote = stubbedRemote(
            "read.test", .v3,
            [StubAnswer(status: 404), StubAnswer(status: 410), StubAnswer(status: 200, body: #"{"id":"3"}"#)])
        let table = remote.onlineTable("todo")
        #expect(try await table.item(id: "1") == nil)
        #expect(try await table.item(id: "2") == nil)
        #expect(try await table.item(id: "3") == ["id": "3"])
    }

    @Test func errorsAreOneLineWithTheServersMessage() async throws {
        let remote = stubbedRemote(
            "errors.test", .v3,
            [
                StubAnswer(status: 400, body: #"{"error":"bad\nthing"}"#),
                StubAnswer(status: 500, body: ""),
                StubAnswer(status: 413, body: #""too large""#),
            ])
        let table = remote.onlineTable("todo")
        let bad = await #expect(throws: RemoteError.self) { _ = try await table.insert(["id": "1"]) }
        #expect(bad?.code == .badRequest)
        #expect(bad?.message == "inserting into 'todo': bad thing")
        let server = await #expect(throws: RemoteError.self) { _ = try await table.insert(["id": "1"]) }
        #expect(server?.code == .server)
        #expect(server?.description.contains("\n") == false)
        let large = await #expect(throws: RemoteError.self) { _ = try await table.insert(["id": "1"]) }
        #expect(large?.message == "inserting into 'todo': too large")
    }

    @Test func protocol3PagesFollowTheRelativeNextLink() async throws {
        let firstPage = StubAnswer(
            status: 200, body: #"{"items":[{"id":"1"},{"id":"2"}],"count":3,"nextLink":"$count=true&$skip=2&$top=8"}"#)
        let lastPage = StubAnswer(status: 200, body: #"{"items":[{"id":"3"}],"count":3,"nextLink":null}"#)
        let remote = stubbedRemote("page3.test", .v3, [firstPage, firstPage, lastPage])
        let table = remote.onlineTable("movies")
        let query = TableQuery().top(10).includingTotalCount().includingDeleted()
        let first = try await table.query(query)
        #expect(first.totalCount == 3)
        #expect(first.nextPage?.skip == 2)
        #expect(first.nextPage?.top == 8)
        let all = try await table.all(query)
        #expect(all.map(\.id) == ["1", "2", "3"])
        let seen = StubProtocol.seen(host: "page3.test")
        #expect(seen.first?.query?.contains("__includedeleted=true") == true)
        #expect(seen.first?.query?.contains("$count=true") == true)
    }

    @Test func protocol2PagesReadArraysResultsAndTheLinkHeader() async throws {
        let remote = stubbedRemote(
            "page2.test", .v2,
            [
                StubAnswer(
                    status: 200, headers: ["Link": "http://page2.test/tables/movies?%24top=2&%24skip=2; rel=next"],
                    body: #"[{"id":"1"},{"id":"2"}]"#),
                StubAnswer(status: 200, body: #"{"results":[{"id":"3"}],"count":3}"#),
            ])
        let table = remote.onlineTable("movies")
        let first = try await table.query(TableQuery().includingDeleted())
        #expect(first.items.count == 2)
        #expect(first.nextPage?.skip == 2)
        #expect(first.nextPage?.top == 2)
        let second = try await table.query(try #require(first.nextPage))
        #expect(second.totalCount == 3)
        #expect(second.nextPage == nil)
        // The 2.0 node server reads `__includeDeleted` case-sensitively.
        #expect(StubProtocol.seen(host: "page2.test").first?.query?.contains("__includeDeleted=true") == true)
        #expect(PageDecoding.nextFromLinkHeader("<http://h/t?$skip=5>; rel=\"next\"") == "http://h/t?$skip=5")
    }

    @Test func a401AsksTheTokenProviderAgainOnce() async throws {
        let calls = Mutex<[Bool]>([])
        let remote = stubbedRemote(
            "auth.test", .v3, [StubAnswer(status: 401), StubAnswer(status: 200, body: #"{"id":"1"}"#)],
            tokens: { refresh in
                calls.withLock { $0.append(refresh) }
                return refresh ? "fresh" : "stale"
            })
        #expect(try await remote.onlineTable("todo").item(id: "1") == ["id": "1"])
        #expect(calls.withLock { $0 } == [false, true])
        #expect(
            StubProtocol.seen(host: "auth.test").map { $0.header("Authorization") } == ["Bearer stale", "Bearer fresh"])

        // A second 401 is the answer.
        let again = stubbedRemote(
            "auth2.test", .v3, [StubAnswer(status: 401), StubAnswer(status: 401)], tokens: { _ in "t" })
        let error = await #expect(throws: RemoteError.self) { _ = try await again.onlineTable("todo").item(id: "1") }
        #expect(error?.code == .unauthorized)
        #expect(StubProtocol.seen(host: "auth2.test").count == 2)
    }

    @Test func onlySafeRequestsAreRetried() async throws {
        let remote = stubbedRemote(
            "retry.test", .v3,
            [StubAnswer(status: 503), StubAnswer(status: 502), StubAnswer(status: 200, body: #"{"id":"1"}"#)])
        #expect(try await remote.onlineTable("todo").item(id: "1") == ["id": "1"])
        #expect(StubProtocol.seen(host: "retry.test").count == 3)

        let writes = stubbedRemote("noretry.test", .v3, [StubAnswer(status: 503), StubAnswer(status: 201, body: "{}")])
        let error = await #expect(throws: RemoteError.self) {
            _ = try await writes.onlineTable("todo").insert(["id": "1"])
        }
        #expect(error?.code == .server)
        #expect(StubProtocol.seen(host: "noretry.test").count == 1)
    }

    @Test func anUnreachableServerIsANetworkError() async throws {
        // Port 1 on loopback: nothing listens there.
        let remote = HTTPRemote(
            HTTPRemote.Configuration(
                serverURL: URL(string: "http://127.0.0.1:1")!, retry: HTTPRemote.RetryPolicy(maximumAttempts: 1)))
        let error = await #expect(throws: RemoteError.self) { _ = try await remote.onlineTable("todo").item(id: "1") }
        #expect(error?.code == .network)
        // No connection was made: the engine may treat the request as never sent.
        #expect(error?.wasNotSent == true, "\(String(describing: error))")
    }

    /// An error names a request by its path, a long segment (an upload's ticket, some 300
    /// characters) cut to its start: the error stays one readable line, the log holds no ticket.
    @Test func anErrorNamesALongPathByItsStart() async throws {
        let ticket = String(repeating: "eyJjIjoiYXBwbGljYXRpb24", count: 12)
        let remote = HTTPRemote(
            HTTPRemote.Configuration(
                serverURL: URL(string: "http://127.0.0.1:1")!, retry: HTTPRemote.RetryPolicy(maximumAttempts: 1)))
        let file = FileManager.default.temporaryDirectory.appending(path: "ferry-\(UUID().uuidString)")
        try Data("x".utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let error = await #expect(throws: RemoteError.self) {
            try await remote.uploadAttachment(
                table: "todo", itemID: "1", name: ticket, file: file, contentType: nil,
                sha256: String(repeating: "0", count: 64), progress: { _, _ in })
        }
        let message = error?.message ?? ""
        #expect(!message.contains(ticket), "\(message)")
        #expect(message.contains("/tables/todo/1/$attachments/eyJjIjoiYXBw…"), "\(message)")
        #expect(HTTPClient.shownPath("/tables/todo/1") == "/tables/todo/1")
    }

    @Test func onlyErrorsBeforeAConnectionMeanNotSent() {
        #expect(HTTPClient.wasNotSent(URLError(.cannotConnectToHost)))
        #expect(HTTPClient.wasNotSent(URLError(.notConnectedToInternet)))
        #expect(HTTPClient.wasNotSent(URLError(.cannotFindHost)))
        #expect(!HTTPClient.wasNotSent(URLError(.timedOut)))
        #expect(!HTTPClient.wasNotSent(URLError(.networkConnectionLost)))
        #expect(!HTTPClient.wasNotSent(URLError(.badServerResponse)))
    }

    @Test func cancellingTheTaskCancelsTheRequest() async throws {
        let remote = stubbedRemote(
            "cancel.test", .v3, [StubAnswer(status: 200, body: #"{"id":"1"}"#, delay: .seconds(5))])
        let task = Task { try await remote.onlineTable("todo").insert(["id": "1"]) }
        try await Task.sleep(for: .milliseconds(100))
        task.cancel()
        let error = await #expect(throws: RemoteError.self) { _ = try await task.value }
        #expect(error?.code == .cancelled)
    }
}
