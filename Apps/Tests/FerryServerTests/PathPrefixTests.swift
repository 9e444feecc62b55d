import Foundation
import ServerStorageCore
import SyncCore
import Testing

@testable import FerryServer

/// A proxy that serves the server under a path (`https://example.com/sync/` → the server's `/`):
/// every link the server sends carries that path, from the public URL's path or, behind a trusted
/// proxy, from `X-Forwarded-Prefix`. Without it an item's `Location`, the 2.0 `Link` to the next
/// page and an upload's `Location` named paths the proxy does not serve.
@Suite("Links under a proxy's path prefix", .timeLimit(.minutes(2)))
struct PathPrefixTests {
    static let tables: [TableSettings] = {
        var todo = TableSettings(name: "todo")
        todo.pageSize = 1
        return [todo, TableSettings(name: "notes")]
    }()

    @Test func thePublicURLsPathPrefixesEveryLink() async throws {
        let live = try await LiveServer.start(
            tables: Self.tables, attachments: AttachmentLimits(), authSecret: nil,
            publicURL: "https://api.example.com/sync/")
        let inserted = try await live.send("POST", "/tables/todo", json: ["id": "p1"])
        #expect(inserted.header("Location") == "https://api.example.com/sync/tables/todo/p1")
        _ = try await live.send("POST", "/tables/todo", json: ["id": "p2"])

        // The 2.0 next-page link (the table's page size of 1 cuts the result).
        let page = try await live.send("GET", "/tables/todo?ZUMO-API-VERSION=2.0.0")
        #expect(page.status == 200)
        let link = try #require(page.header("Link"))
        #expect(link.hasPrefix("https://api.example.com/sync/tables/todo?"), "\(link)")

        // A batch may name the server by its public URL, prefix included, and by nothing else.
        let own = try await live.send(
            "POST", "/tables/$batch",
            json: [
                "requests": [
                    ["method": "POST", "url": "https://API.example.com/sync/tables/todo", "body": ["id": "b1"]]
                ]
            ])
        #expect(own.status == 200 && own.text.contains(#""status":201"#), "\(own.text)")
        for other in [
            "https://api.example.com/tables/todo", "https://api.example.com/synced/tables/todo",
            "https://api.example.com/SYNC/tables/todo",
        ] {
            let refused = try await live.send(
                "POST", "/tables/$batch",
                json: ["requests": [["method": "POST", "url": .string(other), "body": ["id": "b2"]]]])
            #expect(refused.status == 400 && refused.text.contains("https://api.example.com/sync"), "\(other)")
        }

        // An upload's Location: root-relative, under the prefix.
        _ = try await live.send("POST", "/tables/notes", json: ["id": "a1", "text": "x"])
        let bytes = AttachmentUploadTests.file(1_000)
        let created = try await live.send(
            "PUT", "/tables/notes/a1/$attachments/photo.png",
            headers: AttachmentUploadTests.creation(bytes, complete: false))
        #expect(created.status == 201, "\(created.text)")
        let location = try #require(created.header("Location"))
        #expect(location.hasPrefix("/sync/tables/$uploads/"), "\(location)")
        // The proxy takes the prefix off: the rest is the upload.
        let finished = try await live.send(
            "PATCH", String(location.dropFirst("/sync".count)),
            headers: [
                ("Content-Type", "application/partial-upload"), ("Upload-Offset", "0"), ("Upload-Complete", "?1"),
            ], body: bytes)
        #expect(finished.status == 200, "\(finished.text)")
        try await live.stop()
    }

    @Test func aTrustedProxysPrefixIsAddedAndAnInvalidOneIgnored() async throws {
        let live = try await LiveServer.start(tables: Self.tables, authSecret: nil, trustsForwardedHeaders: true)
        func location(_ id: String, _ headers: [(String, String)]) async throws -> String? {
            try await live.send(
                "POST", "/tables/todo", headers: [("Content-Type", "application/json")] + headers,
                body: Array(#"{"id":"\#(id)"}"#.utf8)
            ).header("Location")
        }
        let proxied = [("X-Forwarded-Host", "sync.example.org"), ("X-Forwarded-Proto", "https")]
        #expect(
            try await location("f1", proxied + [("X-Forwarded-Prefix", "/sync/")])
                == "https://sync.example.org/sync/tables/todo/f1")
        #expect(
            try await location("f2", proxied + [("X-Forwarded-Prefix", "/a/b-c")])
                == "https://sync.example.org/a/b-c/tables/todo/f2")
        for (index, bad) in ["sync", "/../x", "/a b", "/%2e", "//x", "/a?b"].enumerated() {
            #expect(
                try await location("bad\(index)", proxied + [("X-Forwarded-Prefix", bad)])
                    == "https://sync.example.org/tables/todo/bad\(index)", "\(bad)")
        }
        // A proxy that passes its path on: the 404 says what to change.
        let passedOn = try await live.send("GET", "/sync/tables/todo")
        #expect(passedOn.status == 404)
        #expect(passedOn.text.contains("under '/sync' must take it off"), "\(passedOn.text)")
        let elsewhere = try await live.send("GET", "/nothing/here")
        #expect(elsewhere.status == 404 && !elsewhere.text.contains("proxy"), "\(elsewhere.text)")

        try await live.stop()

        // A server that does not trust the proxy ignores the header.
        let untrusting = try await LiveServer.start(tables: Self.tables, authSecret: nil)
        let reply = try await untrusting.send(
            "POST", "/tables/todo", headers: [("Content-Type", "application/json"), ("X-Forwarded-Prefix", "/sync")],
            body: Array(#"{"id":"u1"}"#.utf8))
        #expect(reply.header("Location")?.contains("/sync/") == false, "\(reply.header("Location") ?? "")")
        try await untrusting.stop()
    }
}
