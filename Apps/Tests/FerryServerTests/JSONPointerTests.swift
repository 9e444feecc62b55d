import FerryServer
import Foundation
import ServerTestSupport
import SyncCore
import Testing

/// The hostile-client probe: the JSON Pointers of a JSON Patch (RFC 6901) took `~2` (only `~0` and
/// `~1` are escapes) and array indexes such as `01` or `+1` (RFC 6901 §4: `0`, or digits without a
/// leading zero). Both are a 400 naming the pointer.
@Suite("JSON Pointers in JSON Patch", .timeLimit(.minutes(5)))
struct JSONPointerTests {
    static let patch = [("Content-Type", "application/json-patch+json")]

    @Test func invalidEscapesAndArrayIndexesAre400NamingThePointer() async throws {
        let server = try await HardeningTests.start()
        let item = #"{"id":"p1","list":[1,2,3],"obj":{"01":"x","a~b":1}}"#
        #expect(try await HardeningTests.send(server, "POST", "/tables/todo", json: item).status == 201)
        for (operations, pointer) in [
            (#"[{"op":"add","path":"/note~2","value":1}]"#, "/note~2"),
            (#"[{"op":"add","path":"/note~","value":1}]"#, "/note~"),
            (#"[{"op":"add","path":"/obj/a~2b","value":1}]"#, "/obj/a~2b"),
            (#"[{"op":"test","path":"/list/01","value":2}]"#, "/list/01"),
            (#"[{"op":"replace","path":"/list/01","value":9}]"#, "/list/01"),
            (#"[{"op":"add","path":"/list/00","value":9}]"#, "/list/00"),
            (#"[{"op":"remove","path":"/list/+1"}]"#, "/list/+1"),
            (#"[{"op":"copy","from":"/list/01","path":"/copied"}]"#, "/list/01"),
            (#"[{"op":"move","from":"/obj/x~3","path":"/moved"}]"#, "/obj/x~3"),
        ] {
            let reply = try await HardeningTests.send(
                server, "PATCH", "/tables/todo/p1", headers: Self.patch, json: operations)
            let text = HardeningTests.text(reply)
            #expect(reply.status == 400, "\(operations): \(reply.status) \(text)")
            let error = try? JSONValue(parsing: text)
            #expect(error?["code"] == "invalidPatch", "\(operations): \(text)")
            #expect(error?["error"]?.stringValue?.contains("'\(pointer)'") == true, "\(operations): \(text)")
        }
        let stored = HardeningTests.text(try await HardeningTests.send(server, "GET", "/tables/todo/p1"))
        #expect(!stored.contains("note") && !stored.contains("copied"), "\(stored)")
        #expect(stored.contains(#""list":[1,2,3]"#), "\(stored)")

        // Valid pointers still work: an object member may be named "01", and ~0 ~1 are escapes.
        let fine = try await HardeningTests.send(
            server, "PATCH", "/tables/todo/p1", headers: Self.patch,
            json: #"[{"op":"test","path":"/obj/01","value":"x"},{"op":"replace","path":"/obj/a~0b","value":2},"#
                + #"{"op":"add","path":"/a~1b","value":3},{"op":"replace","path":"/list/0","value":0},"#
                + #"{"op":"add","path":"/list/3","value":4},{"op":"add","path":"/list/-","value":5}]"#)
        #expect(fine.status == 200, "\(HardeningTests.text(fine))")
        let after = try JSONValue(parsing: HardeningTests.text(fine))
        #expect(after["list"] == [0, 2, 3, 4, 5])
        #expect(after["obj"]?["a~b"] == 2)
        #expect(after["a/b"] == 3)
        try await server.shutdown()
    }
}
