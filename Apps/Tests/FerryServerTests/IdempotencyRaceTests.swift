import FerryServer
import Foundation
import ServerTestSupport
import SyncCore
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// One key, one effect, one recorded answer: for requests that carry the same key at the same
/// moment, alone or in batches, through one server or two on one database. The write is a JSON
/// Patch that appends to an array, so every application shows.
@Suite("Idempotency keys under concurrency", .timeLimit(.minutes(3)))
struct IdempotencyRaceTests {
    static let tables = [TableSettings(name: "todo", softDelete: true)]

    struct Answer: Sendable {
        var status: Int
        var replayed: Bool
        var body: JSONValue?
    }

    /// Sends over URLSession, which does not block the cooperative pool the servers run on, and
    /// sends again after a 503 (the database busy on a loaded machine), as a client does: a 503
    /// applied nothing and recorded nothing, so the key's one effect is still to come.
    static func send(
        _ session: URLSession, _ base: String, _ method: String, _ path: String, headers: [String: String],
        body: JSONValue
    ) async throws -> Answer {
        var request = URLRequest(url: URL(string: base + path)!)
        request.httpMethod = method
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        request.httpBody = Data(body.serializedUTF8())
        for attempt in 1... {
            let (data, response) = try await session.data(for: request)
            let http = response as? HTTPURLResponse
            if http?.statusCode == 503, attempt < 10 {
                try await Task.sleep(for: .milliseconds(200))
                continue
            }
            return Answer(
                status: http?.statusCode ?? 0,
                replayed: http?.value(forHTTPHeaderField: "Idempotency-Replayed") == "true",
                body: data.isEmpty ? nil : try? JSONValue(parsingUTF8: Array(data)))
        }
        fatalError("unreachable")
    }

    static let patchHeaders = ["Content-Type": "application/json-patch+json", "ZUMO-API-VERSION": "3.0.0"]

    static func append(_ tag: String) -> JSONValue {
        [["op": "add", "path": "/tags/-", "value": .string(tag)]]
    }

    /// The same patch as the one request of a batch, with `key`.
    static func batch(_ key: String, tag: String) -> JSONValue {
        [
            "requests": [
                [
                    "id": "1", "method": "PATCH", "url": "todo/t",
                    "headers": .object(
                        (patchHeaders.merging(["Idempotency-Key": key]) { $1 }).mapValues { .string($0) }),
                    "body": append(tag),
                ]
            ]
        ]
    }

    /// The answer of the one request inside a batch's answer.
    static func inner(_ answer: Answer) -> Answer {
        let response = answer.body?.objectValue?["responses"]?.arrayValue?.first?.objectValue ?? [:]
        return Answer(
            status: Int(response["status"]?.intValue ?? 0),
            replayed: response["headers"]?.objectValue?["idempotency-replayed"] == "true", body: response["body"])
    }

    /// The patch appending `tag`, alone, with `key`.
    static func alone(_ session: URLSession, _ base: String, key: String, tag: String) async throws -> Answer {
        try await send(
            session, base, "PATCH", "/tables/todo/t", headers: patchHeaders.merging(["Idempotency-Key": key]) { $1 },
            body: append(tag))
    }

    /// The patch appending `tag`, in a batch of its own, with `key`: the answer of the one request.
    static func batched(_ session: URLSession, _ base: String, key: String, tag: String) async throws -> Answer {
        try await batchOfOne(session, base, batch(key, tag: tag))
    }

    /// A batch of one request, sent again while that request is answered 503 (not applied):
    /// the one request's answer.
    static func batchOfOne(_ session: URLSession, _ base: String, _ batch: JSONValue) async throws -> Answer {
        for attempt in 1... {
            let answer = inner(
                try await send(
                    session, base, "POST", "/tables/$batch", headers: ["Content-Type": "application/json"],
                    body: batch))
            if answer.status != 503 || attempt == 10 { return answer }
            try await Task.sleep(for: .milliseconds(200))
        }
        fatalError("unreachable")
    }

    static func tags(_ server: LiveServer) async throws -> [JSONValue] {
        let item = try await server.send("GET", "/tables/todo/t")
        return item.json?.objectValue?["tags"]?.arrayValue ?? []
    }

    static func seed(_ server: LiveServer) async throws {
        let created = try await server.send("POST", "/tables/todo", json: ["id": "t", "tags": []])
        #expect(created.status == 201, "\(created.text)")
    }

    @Test(arguments: ServerBackend.allCases)
    func tenConcurrentBatchesWithOneKeyApplyItOnce(_ backend: ServerBackend) async throws {
        let server = try await LiveServer.start(tables: Self.tables, backend: backend)
        try await Self.seed(server)
        let session = URLSession(configuration: .ephemeral)
        let base = server.server.url
        let answers = try await withThrowingTaskGroup(of: Answer.self) { group in
            for _ in 0..<10 {
                group.addTask { try await Self.batched(session, base, key: "tag-once", tag: "x") }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(try await Self.tags(server) == ["x"], "the patch was applied more than once")
        #expect(answers.map(\.status) == Array(repeating: 200, count: 10), "\(answers.map(\.status))")
        #expect(answers.filter { !$0.replayed }.count == 1, "one applied, nine replayed")
        #expect(Set(answers.map { $0.body?.serialized() ?? "" }).count == 1, "one recorded answer")
        try await server.stop()
    }

    @Test(arguments: ServerBackend.allCases)
    func aKeySentAloneAndInABatchAtTheSameMomentAppliesOnce(_ backend: ServerBackend) async throws {
        let server = try await LiveServer.start(tables: Self.tables, backend: backend)
        try await Self.seed(server)
        let session = URLSession(configuration: .ephemeral)
        let base = server.server.url
        for round in 0..<6 {
            let key = "mixed-\(round)"
            let tag = JSONValue.string("r\(round)")
            async let alone = Self.alone(session, base, key: key, tag: "r\(round)")
            async let batched = Self.batched(session, base, key: key, tag: "r\(round)")
            let answers = [try await alone, try await batched]
            #expect(answers.map(\.status) == [200, 200], "round \(round): \(answers.map(\.status))")
            #expect(answers.filter(\.replayed).count == 1, "round \(round): one replayed")
            #expect(answers[0].body == answers[1].body, "round \(round): one recorded answer")
            #expect(try await Self.tags(server).filter { $0 == tag }.count == 1, "round \(round) applied twice")
        }
        #expect(try await Self.tags(server).count == 6)
        try await server.stop()
    }

    @Test func twoInstancesOnOneDatabaseApplyAKeyOnce() async throws {
        let first = try await LiveServer.start(tables: Self.tables, backend: .postgreSQL)
        let second = try await LiveServer.start(tables: Self.tables, backend: .postgreSQL, sharing: first)
        try await Self.seed(first)
        let session = URLSession(configuration: .ephemeral)
        let bases = [first.server.url, second.server.url]
        let answers = try await withThrowingTaskGroup(of: Answer.self) { group in
            for index in 0..<12 {
                let base = bases[index % 2]
                group.addTask {
                    index % 3 == 0
                        ? try await Self.alone(session, base, key: "across", tag: "x")
                        : try await Self.batched(session, base, key: "across", tag: "x")
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(try await Self.tags(first) == ["x"], "applied more than once across instances")
        #expect(answers.map(\.status) == Array(repeating: 200, count: 12), "\(answers.map(\.status))")
        #expect(answers.filter { !$0.replayed }.count == 1)
        try await second.stop()
        try await first.stop()
    }

    /// Six batches of the same twenty keyed inserts at once (half of them in reverse order), through
    /// one server, or two on one PostgreSQL database: each key applies once, and every batch gets
    /// the same answers.
    @Test(arguments: [(ServerBackend.sqlite, 1), (.postgreSQL, 1), (.postgreSQL, 2)])
    func concurrentBatchesOfKeyedInsertsApplyEachKeyOnce(_ backend: ServerBackend, instances: Int) async throws {
        let first = try await LiveServer.start(tables: Self.tables, backend: backend)
        let second =
            instances > 1 ? try await LiveServer.start(tables: Self.tables, backend: backend, sharing: first) : nil
        let bases = [first.server.url] + (second.map { [$0.server.url] } ?? [])
        let session = URLSession(configuration: .ephemeral)
        let inserts: [JSONValue] = (0..<20).map { index in
            [
                "id": .string("r\(index)"), "method": "POST", "url": "todo",
                "headers": ["Idempotency-Key": .string("insert-\(index)")], "body": ["id": .string("i\(index)")],
            ]
        }
        let answers = try await withThrowingTaskGroup(of: [String: Answer].self) { group in
            for round in 0..<6 {
                let base = bases[round % bases.count]
                group.addTask {
                    let batch: JSONValue = ["requests": .array(round % 2 == 0 ? inserts : inserts.reversed())]
                    let reply = try await Self.send(
                        session, base, "POST", "/tables/$batch", headers: ["Content-Type": "application/json"],
                        body: batch)
                    var byID: [String: Answer] = [:]
                    for case .object(let response) in reply.body?.objectValue?["responses"]?.arrayValue ?? [] {
                        byID[response["id"]?.stringValue ?? ""] = Answer(
                            status: Int(response["status"]?.intValue ?? 0),
                            replayed: response["headers"]?.objectValue?["idempotency-replayed"] == "true",
                            body: response["body"])
                    }
                    return byID
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        // A request of a batch answered 503 (the database busy, the batch past its time on a loaded
        // machine) was not applied: a client sends it again, and hears the key's one answer.
        var settled = answers
        for round in settled.indices {
            for (id, answer) in settled[round] where answer.status == 503 {
                guard let index = Int(id.dropFirst()) else { continue }
                settled[round][id] = try await Self.batchOfOne(
                    session, bases[round % bases.count], ["requests": [inserts[index]]])
            }
        }
        let stored = try await first.send("GET", "/tables/todo?$top=100")
        #expect(stored.json?.objectValue?["items"]?.arrayValue?.count == 20, "\(stored.text)")
        for index in 0..<20 {
            let mine = settled.compactMap { $0["r\(index)"] }
            #expect(mine.map(\.status) == Array(repeating: 201, count: 6), "insert \(index): \(mine.map(\.status))")
            #expect(mine.filter { !$0.replayed }.count == 1, "insert \(index) applied once, replayed five times")
            #expect(Set(mine.map { $0.body?.serialized() ?? "" }).count == 1, "insert \(index): one recorded answer")
        }
        try await second?.stop()
        try await first.stop()
    }

    @Test func theSameJSONWrittenDifferentlyIsTheSameRequest() async throws {
        let server = try await LiveServer.start(tables: Self.tables)
        let key = [("Idempotency-Key", "spacing"), ("Content-Type", "application/json")]
        let first = try await server.send(
            "POST", "/tables/todo", headers: key, body: Array(#"{"id":"s","n":1,"tags":["a","b"]}"#.utf8))
        #expect(first.status == 201)
        let again = try await server.send(
            "POST", "/tables/todo", headers: key,
            body: Array("{ \"tags\" : [ \"a\", \"b\" ],\n  \"n\": 1, \"id\": \"s\" }".utf8))
        #expect(again.status == 201, "other spacing and member order: \(again.text)")
        #expect(again.header("Idempotency-Replayed") == "true")
        let other = try await server.send(
            "POST", "/tables/todo", headers: key, body: Array(#"{"id":"s","n":1,"tags":["b","a"]}"#.utf8))
        #expect(other.status == 422, "another array order is another request")
        try await server.stop()
    }

    /// The answer's shape depends on the protocol version: the same key and body under the other
    /// version is another request (it was replayed in the first version's shape).
    @Test func theSameWriteUnderTheOtherProtocolVersionIsAnotherRequest() async throws {
        let server = try await LiveServer.start(tables: Self.tables)
        let body = Array(#"{"id":"v","n":1}"#.utf8)
        func send(_ key: String, _ version: String) async throws -> LiveServer.Reply {
            try await server.send(
                "POST", "/tables/todo",
                headers: [
                    ("Idempotency-Key", key), ("Content-Type", "application/json"), ("ZUMO-API-VERSION", version),
                ],
                body: body)
        }
        let first = try await send("versions", "3.0.0")
        #expect(first.status == 201, "\(first.text)")
        let same = try await send("versions", "3.0.0")
        #expect(same.status == 201 && same.header("Idempotency-Replayed") == "true", "\(same.text)")
        let other = try await send("versions", "2.0.0")
        #expect(other.status == 422, "the other version was replayed: \(other.text)")
        #expect(other.text.contains("idempotencyKeyReused"), "\(other.text)")
        // And the other way round: a key first used under 2.0.0 (its answer a 409: the item
        // exists) replays under 2.0.x only.
        let older = try await send("older", "2.0.0")
        #expect(older.status == 409, "\(older.text)")
        let olderAgain = try await send("older", "2.0.0.")
        #expect(olderAgain.status == 400, "a malformed version is refused before the key: \(olderAgain.text)")
        let olderSame = try await send("older", "2.0.1")
        #expect(olderSame.header("Idempotency-Replayed") == "true", "2.0.x is 2.0.0: \(olderSame.text)")
        #expect(try await send("older", "3.0.0").status == 422)
        try await server.stop()
    }
}
