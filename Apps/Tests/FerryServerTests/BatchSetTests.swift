import FerryServer
import Foundation
import ServerTestSupport
import StoreConformance
import SyncCore
import Testing

/// Consecutive inserts of a batch are written as sets (one claim of their keys, one set insert,
/// one recording): each still gets the answer it gets alone, in its place.
@Suite("Inserts of a batch written as sets", .timeLimit(.minutes(10)))
struct BatchSetTests {
    static let tables = BatchTests.tables

    /// `{"responses": [...]}` as (status, headers, body) in order.
    static func responses(_ reply: LiveServer.Reply) -> [(status: Int, headers: JSONObject, body: JSONValue?)] {
        (reply.json?.objectValue?["responses"]?.arrayValue ?? []).map { response in
            let object = response.objectValue ?? [:]
            return (Int(object["status"]?.intValue ?? 0), object["headers"]?.objectValue ?? [:], object["body"])
        }
    }

    static func post(_ id: String, table: String = "todo", key: String? = nil, body: JSONObject = [:]) -> JSONValue {
        var content = body
        content["id"] = .string(id)
        var entry: JSONObject = ["method": "POST", "url": .string(table), "body": .object(content)]
        if let key { entry["headers"] = ["Idempotency-Key": .string(key)] }
        return .object(entry)
    }

    @Test(arguments: ServerBackend.allCases)
    func eachInsertOfARunGetsItsOwnAnswerInItsPlace(_ backend: ServerBackend) async throws {
        let server = try await LiveServer.start(tables: Self.tables, backend: backend)
        let existing = try await server.send("POST", "/tables/todo", json: ["id": "x", "n": 1])
        #expect(existing.status == 201)
        let requests: [JSONValue] = [
            Self.post("a", key: "k-a", body: ["n": 2]),
            Self.post("x", key: "k-x", body: ["n": 3]),  // 409: exists
            Self.post("a", body: ["n": 4]),  // 409: the first request of this batch took it
            Self.post("b", body: ["n": "text"]),  // 400: n holds numbers
            Self.post("c", table: "hard", key: "k-c"),  // another table, same set
            Self.post("d", key: "k-a", body: ["n": 2]),  // 422: k-a was sent with another request
            Self.post("a", key: "k-a", body: ["n": 2]),  // the same request again: replayed
            ["method": "PUT", "url": "todo/x", "body": ["id": "x", "n": 5]],  // not an insert: ends the run
            Self.post("e", table: "notes", key: "k-anon"),  // 401 (no token): runs alone, not recorded
            Self.post("f", body: ["n": 6]),
            ["method": "POST", "url": "todo", "headers": ["Idempotency-Key": "bad key"], "body": ["id": "g"]],
        ]
        let reply = try await server.send(
            "POST", "/tables/$batch", json: ["requests": .array(requests)])
        #expect(reply.status == 200, "\(reply.text)")
        let answers = Self.responses(reply)
        #expect(answers.map(\.status) == [201, 409, 409, 400, 201, 422, 201, 200, 401, 201, 400], "\(reply.text)")
        #expect(answers[1].body?.objectValue?["n"] == 1, "the conflict carries the stored item")
        #expect(answers[2].body?.objectValue?["n"] == 2, "the conflict carries the item this batch inserted")
        #expect(answers[5].body?.objectValue?["code"] == "idempotencyKeyReused")
        #expect(answers[6].headers["idempotency-replayed"] == "true")
        #expect(answers[6].body == answers[0].body)
        #expect(answers[0].headers["idempotency-replayed"] == nil)
        #expect(answers[10].body?.objectValue?["code"] == "invalidIdempotencyKey")
        for answer in answers { #expect(answer.headers["x-zumo-server-version"] != nil) }
        #expect(answers[0].headers["location"]?.stringValue?.hasSuffix("/tables/todo/a") == true)
        // Stamps follow the requests' order.
        let stored = try await server.send("GET", "/tables/todo?$orderby=updatedAt&$select=id")
        #expect(
            stored.json?.objectValue?["items"]?.arrayValue?.compactMap { $0.objectValue?["id"]?.stringValue }
                == ["a", "x", "f"], "\(stored.text)")
        // The whole batch again: every keyed answer replays, nothing is applied twice.
        let again = Self.responses(
            try await server.send("POST", "/tables/$batch", json: ["requests": .array(requests)]))
        #expect(again.map(\.status) == [201, 409, 409, 400, 201, 422, 201, 200, 401, 409, 400])
        for index in [0, 1, 4, 6] {
            #expect(again[index].headers["idempotency-replayed"] == "true", "request \(index)")
            #expect(again[index].body == answers[index].body, "request \(index)")
        }
        let anonymous = try await server.send("GET", "/tables/notes/e", headers: [BatchTests.bearer("alice")])
        #expect(anonymous.status == 404, "the anonymous insert was not applied")
        try await server.stop()
    }

    @Test(arguments: ServerBackend.allCases)
    func aRunOfKeyedRequestsGivesWhatEachGivesAloneAndReplaysWhole(_ backend: ServerBackend) async throws {
        let single = try await LiveServer.start(tables: Self.tables, backend: backend)
        let batched = try await LiveServer.start(tables: Self.tables, backend: backend)
        var steps = BatchTests.steps(seed: 7, count: 100, version: "3.0.0")
        for index in steps.indices where steps[index].method != "GET" {
            steps[index].headers["Idempotency-Key"] = "key-\(index)"
        }
        let alone = try await BatchTests.alone(steps, on: single)
        var together: [String] = []
        for (start, end, batch) in BatchTests.batches(of: steps) {
            let headers = [BatchTests.bearer(steps[start].user)]
            let first = Self.responses(try await batched.send("POST", "/tables/$batch", headers: headers, json: batch))
            let second = Self.responses(try await batched.send("POST", "/tables/$batch", headers: headers, json: batch))
            #expect(first.count == end - start && second.count == end - start)
            for (offset, (answer, replay)) in zip(first, second).enumerated() {
                let etag = answer.headers["etag"]?.stringValue
                together.append(BatchTests.comparable(status: answer.status, etag: etag, body: answer.body))
                guard steps[start + offset].method != "GET" else { continue }
                #expect(replay.status == answer.status && replay.body == answer.body, "step \(start + offset)")
                #expect(replay.headers["idempotency-replayed"] == "true", "step \(start + offset)")
            }
        }
        #expect(alone.count == together.count)
        for (index, (one, other)) in zip(alone, together).enumerated() where one != other {
            Issue.record("step \(index) \(steps[index]):\n alone:   \(one)\n batched: \(other)")
            break
        }
        try await single.stop()
        try await batched.stop()
    }
}
