import FerryServer
import Foundation
import ServerTestSupport
import SyncCore
import Testing

/// The hostile-client probe: a request of a batch that carried its own `ZUMO-API-VERSION` was
/// served in that version, whatever the batch's, so one batch mixed 2.0.0 and 3.0.0 answers. The
/// requests of a batch take the batch's version; one that names another is answered 400 (that
/// request only, the others run), not served in a version the batch did not ask for.
@Suite("The protocol version of a batch's requests", .timeLimit(.minutes(5)))
struct BatchVersionTests {
    static func entry(_ id: String, _ method: String, _ url: String, version: String? = nil, body: JSONValue? = nil)
        -> JSONValue
    {
        var entry: JSONObject = ["id": .string(id), "method": .string(method), "url": .string(url)]
        if let version { entry["headers"] = ["ZUMO-API-VERSION": .string(version)] }
        if let body { entry["body"] = body }
        return .object(entry)
    }

    static func responses(_ reply: LiveServer.Reply) -> [String: JSONValue] {
        var result: [String: JSONValue] = [:]
        for response in reply.json?["responses"]?.arrayValue ?? [] {
            if let id = response["id"]?.stringValue { result[id] = response }
        }
        return result
    }

    @Test func requestsTakeTheBatchsVersionAndOneNamingAnotherIsRefused() async throws {
        let server = try await LiveServer.start(tables: [TableSettings(name: "todo", softDelete: true)])
        let v3 = try await server.send(
            "POST", "/tables/$batch", headers: [("ZUMO-API-VERSION", "3.0.0")],
            json: [
                "requests": [
                    Self.entry("plain", "POST", "todo", body: ["id": "a"]),
                    Self.entry("same", "POST", "todo", version: "3.0", body: ["id": "b"]),
                    Self.entry("other", "POST", "todo", version: "2.0.0", body: ["id": "c"]),
                    Self.entry("query", "POST", "todo?ZUMO-API-VERSION=2.0.0", body: ["id": "d"]),
                    Self.entry("bad", "POST", "todo", version: "9.9.9", body: ["id": "e"]),
                    Self.entry("after", "DELETE", "todo/a"),
                ]
            ])
        #expect(v3.status == 200, "\(v3.text)")
        let answers = Self.responses(v3)
        #expect(answers["plain"]?["status"] == 201)
        #expect(answers["plain"]?["body"]?["createdAt"] == nil, "a 3.0.0 item: \(v3.text)")
        #expect(answers["same"]?["status"] == 201, "\(v3.text)")
        for (id, named) in [("other", "2.0.0"), ("query", "2.0.0"), ("bad", "9.9.9")] {
            #expect(answers[id]?["status"] == 400, "\(id): \(v3.text)")
            let message = answers[id]?["body"]?["error"]?.stringValue ?? ""
            #expect(message.contains("'\(named)'") && message.contains("3.0.0"), "\(id): \(message)")
        }
        #expect(answers["after"]?["status"] == 204, "the batch goes on, in 3.0.0: \(v3.text)")
        for id in ["c", "d", "e"] {
            #expect(try await server.send("GET", "/tables/todo/\(id)").status == 404, "\(id) was written")
        }

        // A 2.0.0 batch (header or query string): its requests are 2.0.0, a 3.0.0 one is refused.
        for (target, headers) in [
            ("/tables/$batch", [("ZUMO-API-VERSION", "2.0.0")]), ("/tables/$batch?zumo-api-version=2.0.0", []),
        ] {
            let v2 = try await server.send(
                "POST", target, headers: headers,
                json: [
                    "requests": [
                        Self.entry("plain", "DELETE", "todo/b"),
                        Self.entry("other", "DELETE", "todo/a", version: "3.0.0"),
                    ]
                ])
            let answers = Self.responses(v2)
            let plain = answers["plain"]?["status"]
            #expect(plain == 200 || plain == 404, "\(target): a 2.0.0 delete: \(v2.text)")
            #expect(answers["other"]?["status"] == 400, "\(target): \(v2.text)")
            #expect(answers["other"]?["body"]?["error"]?.stringValue?.contains("'3.0.0'") == true, "\(v2.text)")
        }
        // A batch without a version is 3.0.0: a request naming 2.0.0 is refused too.
        let unnamed = try await server.send(
            "POST", "/tables/$batch",
            json: ["requests": [Self.entry("other", "POST", "todo", version: "2.0.0", body: ["id": "f"])]])
        #expect(Self.responses(unnamed)["other"]?["status"] == 400, "\(unnamed.text)")
        try await server.stop()
    }
}
