import Foundation
import ServerStorageCore
import ServerTestSupport
import SyncCore
import Testing

@testable import FerryServer

/// The attachment routes that answer with JSON: an item's list, removal, and a table's rows, with
/// the table's rules (issue 30).
@Suite("Attachment routes", .timeLimit(.minutes(2)))
struct AttachmentRouteTests {
    static let notes = TableSettings(name: "notes", softDelete: true, requiresAuth: true, perUser: true)

    /// A server with `notes` (per user): alice's item `a1` with two attachments, bob's `b1` with one.
    static func start(backend: ServerBackend = .sqlite) async throws -> LiveServer {
        let live = try await LiveServer.start(
            tables: [notes], backend: backend, attachments: AttachmentLimits())
        for (user, id) in [("alice", "a1"), ("bob", "b1")] {
            let reply = try await live.send(
                "POST", "/tables/notes", headers: auth(user), json: ["id": .string(id), "text": "x"])
            #expect(reply.status == 201, "\(reply.text)")
        }
        let index = AttachmentIndex(storage: live.server.storage)
        for (item, name, owner) in [
            ("a1", "photo.jpg", "alice"), ("a1", "scan.pdf", "alice"), ("b1", "photo.jpg", "bob"),
        ] {
            _ = try await index.put(
                StoredAttachment(
                    table: "notes", item: item, name: name, sha256: String(repeating: "ab", count: 32), size: 3,
                    contentType: "image/jpeg"), owner: owner)
        }
        return live
    }

    static func auth(_ user: String) -> [(String, String)] {
        [("X-ZUMO-AUTH", LiveServer.token(user)), ("ZUMO-API-VERSION", "3.0.0")]
    }

    static func names(_ reply: LiveServer.Reply) -> [String] {
        (reply.json?.arrayValue ?? []).compactMap { $0.objectValue?["name"]?.stringValue }
    }

    @Test(arguments: ServerBackend.allCases)
    func listsFollowTheTablesRules(_ backend: ServerBackend) async throws {
        let live = try await Self.start(backend: backend)
        let mine = try await live.send("GET", "/tables/notes/a1/$attachments", headers: Self.auth("alice"))
        #expect(mine.status == 200 && Self.names(mine) == ["photo.jpg", "scan.pdf"], "\(mine.text)")
        let first = try #require(mine.json?.arrayValue?.first?.objectValue)
        #expect(first["item"] == "a1" && first["size"] == 3 && first["contentType"] == "image/jpeg")
        #expect(first["sha256"]?.stringValue?.count == 64)
        let others = try await live.send("GET", "/tables/notes/a1/$attachments", headers: Self.auth("bob"))
        #expect(others.status == 404, "another user's item is not there for bob")
        let anonymous = try await live.send("GET", "/tables/notes/a1/$attachments")
        #expect(anonymous.status == 401)
        let missing = try await live.send("GET", "/tables/notes/zz/$attachments", headers: Self.auth("alice"))
        #expect(missing.status == 404)

        // A deleted item's attachments are gone with it.
        let deleted = try await live.send("DELETE", "/tables/notes/a1", headers: Self.auth("alice"))
        #expect(deleted.status == 200 || deleted.status == 204, "\(deleted.text)")
        let gone = try await live.send("GET", "/tables/notes/a1/$attachments", headers: Self.auth("alice"))
        #expect(gone.status == 410, "\(gone.status)")
        try await live.stop()
    }

    @Test func removalChecksItsPreconditionAndLeavesATombstone() async throws {
        let live = try await Self.start()
        let path = "/tables/notes/a1/$attachments/photo.jpg"
        #expect(try await live.send("DELETE", path, headers: Self.auth("bob")).status == 404)
        let stale = try await live.send("DELETE", path, headers: Self.auth("alice") + [("If-Match", "\"00\"")])
        #expect(stale.status == 412, "\(stale.text)")
        let sha = String(repeating: "ab", count: 32)
        let removed = try await live.send("DELETE", path, headers: Self.auth("alice") + [("If-Match", "\"\(sha)\"")])
        #expect(removed.status == 204, "\(removed.text)")
        #expect(try await live.send("DELETE", path, headers: Self.auth("alice")).status == 404)
        let list = try await live.send("GET", "/tables/notes/a1/$attachments", headers: Self.auth("alice"))
        #expect(Self.names(list) == ["scan.pdf"])

        // The table's rows, in the caller's scope, with the tombstone on request.
        let rows = try await live.send("GET", "/tables/$attachments/notes", headers: Self.auth("alice"))
        let items = rows.json?.objectValue?["items"]?.arrayValue ?? []
        #expect(rows.status == 200 && items.count == 1, "\(rows.text)")
        #expect(items.first?.objectValue?["name"] == "scan.pdf" && items.first?.objectValue?["item"] == "a1")
        let all = try await live.send(
            "GET", "/tables/$attachments/notes?__includeDeleted=true", headers: Self.auth("alice"))
        let tombstones = (all.json?.objectValue?["items"]?.arrayValue ?? []).filter {
            $0.objectValue?["deleted"] == true
        }
        #expect(tombstones.count == 1, "\(all.text)")
        let bobs = try await live.send("GET", "/tables/$attachments/notes", headers: Self.auth("bob"))
        #expect((bobs.json?.objectValue?["items"]?.arrayValue ?? []).count == 1, "\(bobs.text)")
        try await live.stop()
    }

    @Test func hostileNamesAreRefusedWithA4xx() async throws {
        let live = try await Self.start()
        for name in ["a%2Fb", "..", ".", "%00x", String(repeating: "n", count: 256), "a%5Cb"] {
            let reply = try await live.send(
                "DELETE", "/tables/notes/a1/$attachments/\(name)", headers: Self.auth("alice"))
            #expect((400..<500).contains(reply.status), "\(name.prefix(20)): \(reply.status) \(reply.text)")
        }
        for target in ["/tables/$attachments/__attachments", "/tables/$uploads/x/y"] {
            let reply = try await live.send("GET", target, headers: Self.auth("alice"))
            #expect(reply.status == 404, "\(target): \(reply.status)")
        }
        // A table nobody has written yet has no attachment rows, as it has no items (it was a 404
        // that failed every pull of such a table).
        let items = try await live.send("GET", "/tables/nosuch", headers: Self.auth("alice"))
        let rows = try await live.send("GET", "/tables/$attachments/nosuch", headers: Self.auth("alice"))
        #expect(rows.status == items.status && rows.status == 200, "\(rows.status) \(rows.text)")
        #expect(rows.json?.objectValue?["items"]?.arrayValue?.isEmpty == true, "\(rows.text)")
        try await live.stop()
    }

    /// Without attachments configured (the default), and for legacy clients, nothing changes.
    @Test func offeredOnlyWhenConfigured() async throws {
        let live = try await LiveServer.start(tables: [Self.notes])
        _ = try await live.send("POST", "/tables/notes", headers: Self.auth("alice"), json: ["id": "a1"])
        let reply = try await live.send("GET", "/tables/notes/a1/$attachments", headers: Self.auth("alice"))
        #expect(reply.status == 404)
        let item = try await live.send("GET", "/tables/notes/a1", headers: Self.auth("alice"))
        #expect(item.json?.objectValue?.keys.contains { $0.lowercased().contains("attach") } == false)
        try await live.stop()
    }

    /// A table without soft delete deletes an item for good, and its attachment rows with it.
    @Test func anItemDeletedForGoodTakesItsAttachments() async throws {
        let live = try await LiveServer.start(tables: [TableSettings(name: "todo")], attachments: AttachmentLimits())
        _ = try await live.send("POST", "/tables/todo", json: ["id": "t1"])
        let index = AttachmentIndex(storage: live.server.storage)
        _ = try await index.put(
            StoredAttachment(table: "todo", item: "t1", name: "a", sha256: "cd", size: 1, contentType: "text/plain"),
            owner: nil)
        #expect(try await live.send("GET", "/tables/todo/t1/$attachments").json?.arrayValue?.count == 1)
        let deleted = try await live.send("DELETE", "/tables/todo/t1")
        #expect(deleted.status == 200 || deleted.status == 204)
        #expect(
            try await index.reference(to: "cd") == AttachmentIndex.Reference.none, "the row is gone, not a tombstone")
        try await live.stop()
    }
}
