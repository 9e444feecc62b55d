import Foundation
import SyncCore
import Testing
@testable import Transport

/// Servers of this protocol family (Node's query parser, ASP.NET) read `+` in a query string as a
/// space, so a literal `+` must travel as `%2B`: checked on the exact URL the server receives.
@Suite("Transport: URL encoding")
struct URLEncodingTests {
    static func sentURL(_ host: String, _ version: ProtocolVersion, _ query: TableQuery) async throws -> String {
        let body = version == .v3 ? #"{"items":[]}"# : "[]"
        let remote = stubbedRemote(host, version, [StubAnswer(status: 200, body: body)])
        _ = try await remote.onlineTable("todo").query(query)
        return try #require(StubProtocol.seen(host: host).first).url
    }

    @Test(arguments: [ProtocolVersion.v3, .v2])
    func aPlusInAStringLiteralIsSentAsPercent2B(version: ProtocolVersion) async throws {
        let host = "plusstring\(version == .v3 ? "3" : "2").test"
        let url = try await Self.sentURL(host, version, TableQuery().filter(.field("title").eq("a+b c")))
        #expect(url == "http://\(host)/tables/todo?$filter=(title%20eq%20'a%2Bb%20c')")
    }

    /// A date-time literal written with an offset (`+02:00`), or a string with one cast to a
    /// date-time, goes out in UTC with a `Z`: no `+` to be read as a space.
    @Test(arguments: [ProtocolVersion.v3, .v2])
    func aDateTimeOffsetWithAPlusOffsetIsSentInUTC(version: ProtocolVersion) async throws {
        let host = "plusdate\(version == .v3 ? "3" : "2").test"
        // Query-string text: a literal plus is %2B there ('+' alone reads as a space).
        let literal =
            version == .v3
            ? "cast(2024-01-01T00:00:00%2B02:00,Edm.DateTimeOffset)" : "datetimeoffset'2024-01-01T00:00:00%2B02:00'"
        let odata =
            "$filter=updatedAt gt \(literal) or createdAt gt cast('2024-01-01T00:00:00%2B02:00',Edm.DateTimeOffset)"
        let url = try await Self.sentURL(host, version, try TableQuery(odata: odata, protocolVersion: version))
        let utc =
            version == .v3
            ? "cast(2023-12-31T22:00:00.000Z,Edm.DateTimeOffset)" : "datetimeoffset'2023-12-31T22:00:00.000Z'"
        #expect(
            url
                == "http://\(host)/tables/todo?$filter=((updatedAt%20gt%20\(utc))%20or%20(createdAt%20gt%20\(utc)))")
        #expect(!url.contains("+"))
    }

    @Test func aPlusInAnIDIsSentAsPercent2B() async throws {
        let remote = stubbedRemote(
            "plusid.test", .v3,
            [
                StubAnswer(status: 200, body: #"{"id":"a+b"}"#),
                StubAnswer(status: 200, body: #"{"id":"a+b"}"#),
                StubAnswer(status: 204),
            ])
        let table = remote.onlineTable("to+do")
        _ = try await table.item(id: "a+b", includeDeleted: true)
        _ = try await table.update(["id": "a+b"], ifVersion: nil)
        try await table.delete(id: "a+b", ifVersion: nil)
        #expect(
            StubProtocol.seen(host: "plusid.test").map(\.url) == [
                "http://plusid.test/tables/to%2Bdo/a%2Bb?__includedeleted=true",
                "http://plusid.test/tables/to%2Bdo/a%2Bb",
                "http://plusid.test/tables/to%2Bdo/a%2Bb",
            ])
    }

    /// A next-page link is re-encoded on the way out: its `%2B` stays `%2B`.
    @Test func aNextLinkKeepsItsPercent2B() async throws {
        let remote = stubbedRemote(
            "plusnext.test", .v3,
            [
                StubAnswer(
                    status: 200,
                    body: #"{"items":[{"id":"1"}],"nextLink":"$filter=title%20eq%20'a%2Bb'&$skip=1"}"#),
                StubAnswer(status: 200, body: #"{"items":[]}"#),
            ])
        let table = remote.onlineTable("todo")
        _ = try await table.all(TableQuery().filter(.field("title").eq("a+b")))
        let urls = StubProtocol.seen(host: "plusnext.test").map(\.url)
        #expect(urls.count == 2)
        #expect(urls.allSatisfy { $0.contains("'a%2Bb'") && !$0.contains("+") }, "\(urls)")
    }
}
