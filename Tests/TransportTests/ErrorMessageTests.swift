import Foundation
import SyncCore
import Testing
@testable import Transport

/// An error's text comes from error bodies only: the body of a 409 or 412 is the server's item,
/// which is user data, and must never become the message.
@Suite("Transport: error messages")
struct ErrorMessageTests {
    static let itemWithMessageFields =
        #"{"id":"1","title":"secret title","message":"secret message","error":"secret error","#
        + #""detail":"secret detail","version":"v9"}"#

    @Test(arguments: [(ProtocolVersion.v3, 409), (.v3, 412), (.v2, 409), (.v2, 412)])
    func aConflictsMessageHoldsNothingOfTheServersItem(version: ProtocolVersion, status: Int) async throws {
        let host = "conflictmessage\(status)-\(version == .v3 ? "3" : "2").test"
        let remote = stubbedRemote(
            host, version,
            [
                StubAnswer(status: status, body: Self.itemWithMessageFields),
                StubAnswer(status: status, body: Self.itemWithMessageFields),
                StubAnswer(status: status, body: Self.itemWithMessageFields),
            ])
        let table = remote.onlineTable("todo")
        let update = await #expect(throws: RemoteError.self) {
            _ = try await table.update(["id": "1", "title": "mine"], ifVersion: "v1")
        }
        let insert = await #expect(throws: RemoteError.self) { _ = try await table.insert(["id": "1"]) }
        let delete = await #expect(throws: RemoteError.self) { try await table.delete(id: "1", ifVersion: "v1") }
        for error in [update, insert, delete] {
            let error = try #require(error)
            #expect(error.code == .conflict)
            #expect(error.status == status)
            #expect(!error.description.contains("secret"), "\(error)")
            #expect(error.message.contains("(\(status) "), "a fixed description naming the status: \(error)")
            #expect(error.serverItem?["message"] == "secret message")
            #expect(error.serverItem?["title"] == "secret title")
            #expect(error.serverItem?.id == "1")
        }
    }

    @Test func otherStatusesReadTheMessageOfAnErrorBody() async throws {
        let remote = stubbedRemote(
            "errorbodies.test", .v3,
            [
                // Node 2.0 and Ferry's server.
                StubAnswer(status: 400, body: #"{"error":"id is not valid","code":"badRequest"}"#),
                // ASP.NET ProblemDetails: `title`, or `detail` when there is one.
                StubAnswer(
                    status: 400, headers: ["Content-Type": "application/problem+json"],
                    body:
                        #"{"type":"https://tools.ietf.org/html/rfc9110#section-15.5.1","title":"Bad Request","status":400}"#
                ),
                // OData's error object.
                StubAnswer(status: 400, body: #"{"error":{"code":"BadArgument","message":"$top is too large"}}"#),
                // CommunityToolkit: a JSON string.
                StubAnswer(status: 400, body: #""The filter is not valid""#),
                // Plain text.
                StubAnswer(status: 503, headers: ["Content-Type": "text/plain"], body: "down for maintenance"),
            ])
        let table = remote.onlineTable("todo")
        var messages: [String] = []
        for _ in 0..<5 {
            let error = await #expect(throws: RemoteError.self) { _ = try await table.insert(["id": "1"]) }
            messages.append(error?.message ?? "")
        }
        #expect(
            messages == [
                "inserting into 'todo': id is not valid",
                "inserting into 'todo': Bad Request",
                "inserting into 'todo': $top is too large",
                "inserting into 'todo': The filter is not valid",
                "inserting into 'todo': down for maintenance",
            ])
    }

    @Test func aBodyThatIsNotAnErrorBodyGivesTheStatus() async throws {
        let remote = stubbedRemote(
            "noterrorbodies.test", .v3,
            [
                // An item is not an error body, whatever its fields.
                StubAnswer(status: 400, body: #"{"id":"1","message":"secret message"}"#),
                // A proxy's HTML page.
                StubAnswer(
                    status: 502, headers: ["Content-Type": "text/html"],
                    body: "<html><head><title>502 Bad Gateway</title></head><body>nginx secret</body></html>"),
                StubAnswer(status: 500, body: "<!DOCTYPE html><html>secret</html>"),
                StubAnswer(status: 400, body: #"["secret"]"#),
            ])
        let table = remote.onlineTable("todo")
        for status in [400, 502, 500, 400] {
            let error = await #expect(throws: RemoteError.self) { _ = try await table.insert(["id": "1"]) }
            #expect(error?.status == status)
            #expect(error?.message.contains("secret") == false, "\(String(describing: error))")
            #expect(error?.message.contains("HTTP \(status)") == true, "\(String(describing: error))")
        }
    }

    @Test func aServersMessageIsOneBoundedLineWithoutControlCharacters() async throws {
        let long = String(repeating: "x", count: 5000)
        let remote = stubbedRemote(
            "longmessage.test", .v3,
            [
                StubAnswer(status: 400, body: #"{"error":"\#(long)"}"#),
                StubAnswer(status: 400, body: #"{"error":"bad\r\n\tthing\u001b[31m red\u0007\u0000 end"}"#),
            ])
        let table = remote.onlineTable("todo")
        let longError = await #expect(throws: RemoteError.self) { _ = try await table.insert(["id": "1"]) }
        let message = try #require(longError?.message)
        let prefix = "inserting into 'todo': "
        #expect(message.hasPrefix(prefix))
        #expect(message.count <= prefix.count + 300, "\(message.count) characters")
        #expect(message.hasSuffix("…"))

        let control = await #expect(throws: RemoteError.self) { _ = try await table.insert(["id": "1"]) }
        #expect(control?.message == "inserting into 'todo': bad thing[31m red end")
        #expect(
            control?.description.unicodeScalars.contains { $0.properties.generalCategory == .control } == false)
    }
}
