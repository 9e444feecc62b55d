import FerryServer
import Foundation
import ServerTestSupport
import SyncCore
import Testing

/// The hostile-client probe: in 3.0.0, `POST /tables/t/{id}` with a body answered 200 and changed
/// nothing. 3.0 has no route for it (table-protocol.md §1.1: undelete is a `PUT` with
/// `deleted: false`; `POST /{id}` is 2.0's undelete), so it is a 405 with `Allow`, as any method an
/// item does not serve. 2.0 keeps its undelete.
@Suite("POST on an item", .timeLimit(.minutes(5)))
struct ItemPostTests {
    @Test func inVersion3ItIs405WithAllowAndChangesNothing() async throws {
        let server = try await ProtocolTests.start([TableSettings(name: "todo", softDelete: true)])
        _ = try await server.send("POST", "/tables/todo", json: ["id": "a", "title": "one"])
        _ = try await server.send("POST", "/tables/todo", json: ["id": "d", "title": "gone"])
        #expect(try await server.send("DELETE", "/tables/todo/d").status == 204)
        for (id, body) in [("a", ["title": "two"] as JSONValue), ("d", [:] as JSONValue)] {
            for headers in [[], [("ZUMO-API-VERSION", "3.0.0")]] {
                let reply = try await server.send("POST", "/tables/todo/\(id)", headers: headers, json: body)
                #expect(reply.status == 405, "\(id) \(headers): \(reply.status) \(reply.text)")
                #expect(reply.header("Allow") == "GET, HEAD, PUT, PATCH, DELETE, OPTIONS", "\(reply.headers)")
                #expect(reply.json?["code"] == "methodNotAllowed", "\(reply.text)")
                #expect(reply.json?["error"]?.stringValue?.contains("PUT") == true, "\(reply.text)")
            }
        }
        #expect(try await server.send("GET", "/tables/todo/a").json?["title"] == "one")
        #expect(try await server.send("GET", "/tables/todo/d").status == 410, "still deleted")
        // In a batch too.
        let batch = try await server.send(
            "POST", "/tables/$batch",
            json: ["requests": [["id": "1", "method": "POST", "url": "todo/d", "body": [:]]]])
        let answer = batch.json?["responses"]?.arrayValue?.first
        #expect(answer?["status"] == 405, "\(batch.text)")
        #expect(answer?["headers"]?["allow"] == "GET, HEAD, PUT, PATCH, DELETE, OPTIONS", "\(batch.text)")
        // 2.0 still undeletes.
        let undeleted = try await server.send("POST", "/tables/todo/d", headers: ProtocolTests.v2)
        #expect(undeleted.status == 201, "\(undeleted.text)")
        #expect(undeleted.json?["deleted"] == false)
        try await server.stop()
    }

    /// Every 405 says what the URL serves (RFC 9110 §15.5.6): 2.0's undelete where the table does not
    /// soft-delete, and an operation the table disables, leave their methods out of `Allow`.
    @Test func every405SaysWhatTheTableServes() async throws {
        let server = try await ProtocolTests.start([
            TableSettings(name: "hard"), TableSettings(name: "kept", disabledOperations: [.delete, .insert]),
        ])
        _ = try await server.send("POST", "/tables/hard", json: ["id": "h"])
        let undelete = try await server.send("POST", "/tables/hard/h", headers: ProtocolTests.v2)
        #expect(undelete.status == 405, "\(undelete.text)")
        #expect(undelete.header("Allow") == "GET, HEAD, PUT, PATCH, DELETE, OPTIONS", "\(undelete.headers)")
        let delete = try await server.send("DELETE", "/tables/kept/k")
        #expect(delete.status == 405, "\(delete.text)")
        #expect(delete.header("Allow") == "GET, HEAD, PUT, PATCH, OPTIONS", "\(delete.headers)")
        let insert = try await server.send("POST", "/tables/kept", json: ["id": "k"])
        #expect(insert.status == 405, "\(insert.text)")
        #expect(insert.header("Allow") == "GET, HEAD, PATCH, OPTIONS", "\(insert.headers)")
        // A method no table serves: the table's own list, as OPTIONS gives it.
        for (method, path, allow) in [
            ("PUT", "/tables/kept", "GET, HEAD, PATCH, OPTIONS"),
            ("TRACE", "/tables/kept/k", "GET, HEAD, PUT, PATCH, OPTIONS"),
        ] {
            let reply = try await server.send(method, path)
            #expect(reply.status == 405 && reply.header("Allow") == allow, "\(method) \(path): \(reply.headers)")
            #expect(try await server.send("OPTIONS", path).header("Allow") == allow, "OPTIONS \(path)")
        }
        try await server.stop()
    }

    /// The routes beside the tables' say what they serve on a 405 too.
    @Test func every405OfTheOtherRoutesHasAllow() async throws {
        let live = try await AttachmentUploadTests.start()
        let alice = AttachmentUploadTests.auth("alice")
        for (method, path, allow) in [
            ("GET", "/tables/$batch", "POST"), ("POST", "/tables/$capabilities", "GET"),
            ("POST", "/tables/$changes", "GET"), ("POST", "/health", "GET, HEAD"), ("POST", "/tables", "GET"),
            ("POST", "/tables/$uploads/x", "HEAD, PATCH, DELETE"), ("POST", "/tables/notes/a1/$attachments", "GET"),
            ("POST", "/tables/notes/a1/$attachments/f.bin", "GET, HEAD, PUT, DELETE"),
            ("POST", "/tables/$attachments/notes", "GET"),
        ] {
            let reply = try await live.send(method, path, headers: alice)
            #expect(reply.status == 405, "\(method) \(path): \(reply.status) \(reply.text)")
            #expect(reply.header("Allow") == allow, "\(method) \(path): \(reply.headers)")
        }
        try await live.stop()
    }

    /// `OPTIONS` is exempt from the version check (table-protocol.md §1.3): 204 with what the URL
    /// serves, whatever `ZUMO-API-VERSION` says.
    @Test func optionsSaysWhatTheURLServes() async throws {
        let server = try await ProtocolTests.start([TableSettings(name: "soft", softDelete: true)])
        for headers in [[], [("ZUMO-API-VERSION", "1.0.0")], [("ZUMO-API-VERSION", "3.0.0")]] {
            let table = try await server.send("OPTIONS", "/tables/soft", headers: headers)
            #expect(table.status == 204, "\(headers): \(table.text)")
            #expect(table.header("Allow") == "GET, HEAD, POST, PATCH, OPTIONS", "\(table.headers)")
            let item = try await server.send("OPTIONS", "/tables/soft/a", headers: headers)
            #expect(item.header("Allow") == "GET, HEAD, PUT, PATCH, DELETE, OPTIONS", "\(item.headers)")
        }
        let v2 = try await server.send("OPTIONS", "/tables/soft/a", headers: ProtocolTests.v2)
        #expect(v2.header("Allow") == "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS", "\(v2.headers)")
        #expect(try await server.send("OPTIONS", "/tables/__bad").status == 404)
        try await server.stop()
    }
}
