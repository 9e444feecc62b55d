import Foundation
import SyncCore
import Testing
@testable import Transport

/// A query must tell "this table has no rows yet" (a page with no items) from "this is not a table
/// endpoint" (a 404, or a 200 whose body is not a page of the protocol).
@Suite("Transport: query answers")
struct QueryAnswerTests {
    @Test(arguments: [ProtocolVersion.v3, .v2])
    func anEmptyTableIsAnEmptyPage(version: ProtocolVersion) async throws {
        let host = "empty-\(version == .v3 ? "3" : "2").test"
        let body = version == .v3 ? #"{"items":[],"count":0,"nextLink":null}"# : "[]"
        let remote = stubbedRemote(host, version, [StubAnswer(status: 200, body: body)])
        let page = try await remote.onlineTable("todo").query(TableQuery().includingDeleted())
        #expect(page.items.isEmpty)
        #expect(page.nextPage == nil)
    }

    /// `ferry pull --server http://host:port/api`: the server has no table endpoint there. Before,
    /// the engine's query turned the 404 into an empty page and the pull "succeeded".
    @Test func a404OnAQueryIsNotAnEmptyPage() async throws {
        let remote = stubbedRemote(
            "wrongpath.test", .v3,
            [
                StubAnswer(status: 404, body: #"{"error":"Cannot GET /api/tables/todo"}"#),
                StubAnswer(
                    status: 404, headers: ["Content-Type": "text/html"], body: "<html><body>Not Found</body></html>"),
            ], basePath: "/api", user: "ann:secret@")
        let table = remote.onlineTable("todo")
        let error = await #expect(throws: RemoteError.self) {
            _ = try await table.query(TableQuery().includingDeleted().top(50))
        }
        #expect(error?.code == .notFound)
        #expect(error?.status == 404)
        let message = try #require(error?.message)
        #expect(message.contains("'todo'"), "\(message)")
        #expect(message.contains("http://wrongpath.test/api/tables/todo"), "\(message)")
        #expect(message.contains("the server URL is not the base URL"), "\(message)")
        #expect(message.contains("Cannot GET /api/tables/todo"), "\(message)")
        #expect(!message.contains("\n"))
        #expect(!message.contains("$top"), "the URL is shown without the query: \(message)")
        #expect(!message.contains("secret"), "nor the password: \(message)")

        // The online API says the same; an HTML body is not quoted, and a web page is plainly no
        // table endpoint (`noEndpoint`: a push stops on it rather than taking it for a missing item).
        let online = await #expect(throws: RemoteError.self) { _ = try await table.query(TableQuery()) }
        #expect(online?.code == .noEndpoint)
        #expect(online?.message.contains("http://wrongpath.test/api/tables/todo") == true)
        #expect(online?.message.contains("<html") == false, "\(online?.message ?? "")")
    }

    /// A web server that implements no POST (`python3 -m http.server` answers 501) is no table
    /// endpoint: `noEndpoint`, which stops a push, not a refusal recorded against the operation.
    @Test func a501IsNoTableEndpoint() async throws {
        let remote = stubbedRemote(
            "static.test", .v3,
            [StubAnswer(status: 501, headers: ["Content-Type": "text/html"], body: "<html>Unsupported method</html>")])
        let error = await #expect(throws: RemoteError.self) {
            _ = try await remote.onlineTable("todo").insert(["id": "a"])
        }
        #expect(error?.code == .noEndpoint)
        #expect(error?.message.contains("there is no table endpoint at http://static.test/tables/todo") == true)
        #expect(error?.message.contains("501") == true, "\(error?.message ?? "")")
    }

    /// Bodies of a 200 that are not a page of the protocol the client speaks.
    static let notAPage: [(ProtocolVersion, String, String)] = [
        (.v3, "<!doctype html><html><body>Welcome</body></html>", "an HTML page"),
        (.v3, "Hello, world", "not JSON"),
        (.v3, "", "an empty body"),
        (.v3, "{}", "a JSON object with no 'items'"),
        (.v3, #"{"value":[{"id":"1"}]}"#, "a JSON object with no 'items'"),
        (.v3, #"{"results":[{"id":"1"}],"count":1}"#, "a JSON object with no 'items'"),
        (.v3, #"[{"id":"1"}]"#, "a JSON array"),
        (.v3, #"{"items":{"id":"1"}}"#, "'items' is not an array"),
        (.v3, #"{"items":[1,2]}"#, "not an object"),
        (.v3, #"{"items":[],"nextLink":42}"#, "'nextLink'"),
        (.v3, #""items""#, "a JSON string"),
        (.v2, "<html><body>It works!</body></html>", "an HTML page"),
        (.v2, #"{"items":[{"id":"1"}]}"#, "a JSON object with no 'results'"),
        (.v2, #"{"status":"ok"}"#, "a JSON object with no 'results'"),
        (.v2, "null", "null"),
    ]

    @Test(arguments: notAPage.indices)
    func a200ThatIsNotATablePageIsAnInvalidResponse(index: Int) async throws {
        let (version, body, expected) = Self.notAPage[index]
        let host = "notapage\(index).test"
        let remote = stubbedRemote(host, version, [StubAnswer(status: 200, body: body)])
        let error = await #expect(throws: RemoteError.self) {
            _ = try await remote.onlineTable("todo").query(TableQuery().includingDeleted())
        }
        #expect(error?.code == .invalidResponse)
        let message = error?.message ?? ""
        #expect(message.contains("'todo'"), "\(message)")
        #expect(message.contains("http://\(host)/tables/todo"), "\(message)")
        #expect(message.contains(expected), "\(message)")
        #expect(!message.contains("\n"))
        #expect(!message.contains("Welcome") && !message.contains("It works"), "no body text: \(message)")
    }
}
