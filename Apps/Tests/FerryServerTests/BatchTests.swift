import FerryServer
import Foundation
#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
import ServerTestSupport
import StoreConformance
import SyncCore
import Testing

@Suite("Batch requests and idempotency keys", .timeLimit(.minutes(10)))
struct BatchTests {
    static let tables = [
        TableSettings(name: "todo", softDelete: true),
        TableSettings(name: "hard"),
        TableSettings(name: "notes", softDelete: true, perUser: true),
        TableSettings(name: "private", requiresAuth: true),
    ]

    static func bearer(_ subject: String) -> (String, String) {
        ("Authorization", "Bearer " + LiveServer.token(subject))
    }

    // MARK: - One step of a generated sequence

    /// One generated request: what is sent alone, or as one entry of a batch.
    struct Step: Sendable, CustomStringConvertible {
        var method: String
        /// Relative to `/tables/`.
        var url: String
        var headers: [String: String]
        var body: JSONObject?
        var user: String

        var description: String { "\(user): \(method) \(url) \(headers) \(body.map { JSONValue.object($0) } ?? .null)" }
    }

    /// A random sequence over a few ids: inserts (new and existing ids), updates and deletes with a
    /// right, stale or absent If-Match, reads, invalid bodies, on a soft-delete table, a hard-delete
    /// table and a per-user table written by two users.
    static func steps(seed: UInt64, count: Int, version: String) -> [Step] {
        var random = SeededRandom(seed: seed)
        var steps: [Step] = []
        for index in 0..<count {
            let table = ["todo", "hard", "notes"][Int(random.next() % 3)]
            let user = table == "notes" && random.next() % 2 == 0 ? "bob" : "alice"
            let id = "i\(random.next() % 5)"
            var headers: [String: String] = ["ZUMO-API-VERSION": version]
            switch random.next() % 4 {
            case 0: headers["If-Match"] = "\"\(random.next() % 12 + 1)\""
            case 1: headers["If-Match"] = "*"
            default: break
            }
            let body: JSONObject = ["id": .string(id), "n": .int(Int64(index)), "text": .string("step \(index)")]
            switch random.next() % 7 {
            case 0, 1:
                steps.append(Step(method: "POST", url: table, headers: [:], body: body, user: user))
            case 2, 3:
                steps.append(
                    Step(
                        method: version == "2.0.0" ? "PATCH" : "PUT", url: "\(table)/\(id)", headers: headers,
                        body: body,
                        user: user))
            case 4:
                steps.append(Step(method: "DELETE", url: "\(table)/\(id)", headers: headers, body: nil, user: user))
            case 5:
                steps.append(Step(method: "GET", url: "\(table)/\(id)", headers: [:], body: nil, user: user))
            default:
                var bad = body
                bad["n"] = "not a number"
                steps.append(Step(method: "POST", url: table, headers: [:], body: bad, user: user))
            }
            steps[steps.count - 1].headers["ZUMO-API-VERSION"] = version
        }
        return steps
    }

    /// What must be equal between a request sent alone and the same one in a batch: the status, the
    /// body without the wall-clock stamps, and the ETag.
    static func comparable(status: Int, etag: String?, body: JSONValue?) -> String {
        var value = body ?? .null
        if case .object(var object) = value {
            object.removeValue(forKey: "updatedAt")
            object.removeValue(forKey: "createdAt")
            value = .object(object)
        }
        return "\(status) \(etag ?? "-") \(value.serialized())"
    }

    /// What each step answers sent alone to `server`, in order, as ``comparable(status:etag:body:)``.
    static func alone(_ steps: [Step], on server: LiveServer) async throws -> [String] {
        var answers: [String] = []
        for step in steps {
            let headers = [bearer(step.user)] + step.headers.map { ($0.key, $0.value) }
            let reply =
                if let body = step.body {
                    try await server.send(step.method, "/tables/" + step.url, headers: headers, json: .object(body))
                } else {
                    try await server.send(step.method, "/tables/" + step.url, headers: headers)
                }
            answers.append(comparable(status: reply.status, etag: reply.header("ETag"), body: reply.json))
        }
        return answers
    }

    /// The steps as batch bodies: consecutive steps of one user in one batch (a batch carries one
    /// token), at most 25 each; `start..<end` are the steps of each, whose entries are `r0`, `r1` ….
    static func batches(of steps: [Step]) -> [(start: Int, end: Int, body: JSONValue)] {
        var batches: [(start: Int, end: Int, body: JSONValue)] = []
        var start = 0
        while start < steps.count {
            var end = start
            while end < steps.count && steps[end].user == steps[start].user && end - start < 25 { end += 1 }
            let entries: [JSONValue] = steps[start..<end].enumerated().map { offset, step in
                var entry: JSONObject = [
                    "id": .string("r\(offset)"), "method": .string(step.method), "url": .string(step.url),
                    "headers": .object(step.headers.mapValues { .string($0) }),
                ]
                if let body = step.body { entry["body"] = .object(body) }
                return .object(entry)
            }
            batches.append((start, end, ["requests": .array(entries)]))
            start = end
        }
        return batches
    }

    @Test(arguments: ServerBackend.allCases)
    func aBatchGivesExactlyWhatEachRequestGivesAlone(_ backend: ServerBackend) async throws {
        let runs: [(UInt64, String)] =
            backend == .sqlite
            ? [(1, "3.0.0"), (2, "2.0.0"), (3, "3.0.0"), (4, "2.0.0")] : [(1, "3.0.0"), (2, "2.0.0")]
        for (seed, version) in runs {
            let single = try await LiveServer.start(tables: Self.tables, backend: backend)
            let batched = try await LiveServer.start(tables: Self.tables, backend: backend)
            let steps = Self.steps(seed: seed, count: 120, version: version)
            let alone = try await Self.alone(steps, on: single)
            var together: [String] = []
            for (start, end, batch) in Self.batches(of: steps) {
                // The batch names the version its requests name (a request naming another is refused).
                let reply = try await batched.send(
                    "POST", "/tables/$batch", headers: [Self.bearer(steps[start].user), ("ZUMO-API-VERSION", version)],
                    json: batch)
                #expect(reply.status == 200, "\(reply.text)")
                let responses = reply.json?.objectValue?["responses"]?.arrayValue ?? []
                #expect(responses.count == end - start)
                for (offset, response) in responses.enumerated() {
                    let object = response.objectValue ?? [:]
                    #expect(object["id"] == .string("r\(offset)"), "responses come back in order")
                    let etag = object["headers"]?.objectValue?["etag"]?.stringValue
                    together.append(
                        Self.comparable(
                            status: Int(object["status"]?.intValue ?? 0), etag: etag, body: object["body"]))
                }
            }
            #expect(alone.count == together.count)
            for (index, (one, other)) in zip(alone, together).enumerated() where one != other {
                Issue.record("step \(index) \(steps[index]):\n alone:   \(one)\n batched: \(other)")
                break
            }
            let statuses = Set(alone.map { $0.prefix(3) })
            #expect(
                statuses.isSuperset(of: ["200", "201", "400", "404", "409", "412"]), "the sequence covers \(statuses)")
            try await single.stop()
            try await batched.stop()
        }
    }

    // MARK: - Batch rules

    @Test func theServerAdvertisesBatchesAndKeys() async throws {
        let server = try await LiveServer.start(tables: Self.tables)
        defer { Task { try await server.stop() } }
        let reply = try await server.send("GET", "/tables/$capabilities")
        #expect(reply.status == 200)
        let document = reply.json?.objectValue ?? [:]
        #expect(document["batch"]?.objectValue?["url"] == "$batch")
        #expect(document["batch"]?.objectValue?["format"] == "odata-json-batch")
        #expect(document["batch"]?.objectValue?["maxRequests"] == .int(Int64(RequestLimits().maximumBatchRequests)))
        #expect(document["idempotency"]?.objectValue?["header"] == "Idempotency-Key")
        #expect(document["idempotency"]?.objectValue?["retentionSeconds"] == .int(86_400))
        #expect(document["changes"]?.objectValue?["url"] == "$changes")
        // Feeds turned off: none is offered, so that clients poll from the start.
        var limits = RequestLimits()
        limits.maximumChangeFeeds = 0
        let feedless = try await LiveServer.start(tables: Self.tables, limits: limits)
        defer { Task { try await feedless.stop() } }
        let offer = try await feedless.send("GET", "/tables/$capabilities").json?.objectValue ?? [:]
        #expect(offer["changes"] == nil && offer["batch"] != nil, "\(offer)")
    }

    @Test func batchesBeyondTheLimitsOrMalformedAreRefusedWithOneClearLine() async throws {
        var limits = RequestLimits()
        limits.maximumBatchRequests = 3
        limits.maximumBodySize = 2048
        limits.maximumBatchBodySize = 8192
        let server = try await LiveServer.start(tables: Self.tables, limits: limits)
        let post: (Int) -> JSONValue = {
            .object(["method": "POST", "url": "todo", "body": ["id": .string("b\($0)")]])
        }
        let cases: [(JSONValue?, [UInt8]?, Int, String)] = [
            (["requests": .array((0..<4).map(post))], nil, 413, "batchTooLarge"),
            (nil, Array("{not json".utf8), 400, "invalidBatch"),
            (["requests": "no"], nil, 400, "invalidBatch"),
            (["requests": [["method": "POST", "url": "todo", "atomicityGroup": "g"]]], nil, 400, "invalidBatch"),
            (["requests": [["method": "POST", "url": "todo", "dependsOn": ["1"]]]], nil, 400, "invalidBatch"),
            (["requests": [["method": "POST", "url": "$batch", "body": ["requests": []]]]], nil, 400, "invalidBatch"),
            (
                [
                    "requests": [
                        ["id": "x", "method": "GET", "url": "todo"], ["id": "x", "method": "GET", "url": "todo"],
                    ]
                ], nil, 400, "invalidBatch"
            ),
            (["requests": [["method": "POST"]]], nil, 400, "invalidBatch"),
            (nil, Array(repeating: UInt8(ascii: " "), count: 9000), 413, "bodyTooLarge"),
        ]
        for (json, raw, status, code) in cases {
            let reply =
                if let json {
                    try await server.send("POST", "/tables/$batch", json: json)
                } else {
                    try await server.send(
                        "POST", "/tables/$batch", headers: [("Content-Type", "application/json")], body: raw)
                }
            #expect(reply.status == status, "\(json.map { $0.serialized() } ?? "raw"): \(reply.text)")
            #expect(reply.json?.objectValue?["code"]?.stringValue == code, "\(reply.text)")
            #expect(reply.json?.objectValue?["error"]?.stringValue?.contains("\n") == false)
        }
        #expect(try await server.send("GET", "/tables/$batch").status == 405)
        // A key on the batch itself was ignored: the batch ran again when sent again. Keys go on
        // its requests.
        let keyed = try await server.send(
            "POST", "/tables/$batch", headers: [("Idempotency-Key", "batch-key-1")],
            json: ["requests": [post(0)]])
        #expect(keyed.status == 400, "\(keyed.text)")
        #expect(keyed.json?["code"] == "invalidIdempotencyKey" && keyed.text.contains("each request"), "\(keyed.text)")
        // A request without an id gets its position's, and the message says so when it is taken.
        let positional = try await server.send(
            "POST", "/tables/$batch",
            json: ["requests": [["id": "2", "method": "GET", "url": "todo"], ["method": "GET", "url": "todo"]]])
        #expect(positional.status == 400)
        #expect(
            positional.text.contains("requests[1] has no id, and the id of its position, '2'"), "\(positional.text)")
        // The other way round, the request that gave the id is told whose position took it (it was
        // told its id was "used twice").
        let taken = try await server.send(
            "POST", "/tables/$batch",
            json: ["requests": [["method": "GET", "url": "todo"], ["id": "1", "method": "GET", "url": "todo"]]])
        #expect(taken.status == 400)
        #expect(
            taken.text.contains("requests[1]: the id '1' is the one requests[0] got for its position (it has no id)"),
            "\(taken.text)")
        // Nothing of a refused batch was applied.
        #expect(try await server.send("GET", "/tables/todo/b0").status == 404)
        // An entry above the single-request limit fails alone; the others apply.
        let big = String(repeating: "x", count: 3000)
        let reply = try await server.send(
            "POST", "/tables/$batch",
            json: [
                "requests": [
                    ["id": "1", "method": "POST", "url": "todo", "body": ["id": "ok1"]],
                    ["id": "2", "method": "POST", "url": "todo", "body": ["id": "big", "text": .string(big)]],
                    ["id": "3", "method": "POST", "url": "/tables/todo", "body": ["id": "ok2"]],
                ]
            ])
        let statuses = reply.json?.objectValue?["responses"]?.arrayValue?.compactMap {
            $0.objectValue?["status"]?.intValue
        }
        #expect(statuses == [201, 413, 201])
        try await server.stop()
    }

    @Test func aBatchCarriesTheBatchsTokenAndNoOther() async throws {
        let server = try await LiveServer.start(tables: Self.tables)
        let reply = try await server.send(
            "POST", "/tables/$batch", headers: [Self.bearer("alice")],
            json: [
                "requests": [
                    ["id": "1", "method": "POST", "url": "notes", "body": ["id": "n1"]],
                    [
                        "id": "2", "method": "POST", "url": "notes", "body": ["id": "n2"],
                        "headers": ["Authorization": .string("Bearer " + LiveServer.token("bob"))],
                    ],
                ]
            ])
        #expect(reply.status == 200)
        for id in ["n1", "n2"] {
            let mine = try await server.send("GET", "/tables/notes/\(id)", headers: [Self.bearer("alice")])
            #expect(mine.status == 200, "\(id) belongs to the batch's user")
            let theirs = try await server.send("GET", "/tables/notes/\(id)", headers: [Self.bearer("bob")])
            #expect(theirs.status == 404, "\(id) is not bob's")
        }
        let anonymous = try await server.send(
            "POST", "/tables/$batch", json: ["requests": [["method": "GET", "url": "private"]]])
        #expect(anonymous.json?.objectValue?["responses"]?.arrayValue?.first?.objectValue?["status"] == 401)
        try await server.stop()
    }

    // MARK: - Idempotency keys

    @Test(arguments: ServerBackend.allCases)
    func aResentKeyGetsTheRecordedAnswerAndIsNotAppliedTwice(_ backend: ServerBackend) async throws {
        let server = try await LiveServer.start(tables: Self.tables, backend: backend)
        let key = [("Idempotency-Key", "device-1-op-1")]
        let first = try await server.send("POST", "/tables/todo", headers: key, json: ["id": "a", "n": 1])
        #expect(first.status == 201)
        #expect(first.header("Idempotency-Replayed") == nil)
        let again = try await server.send("POST", "/tables/todo", headers: key, json: ["id": "a", "n": 1])
        #expect(again.status == 201, "a retried insert is not a conflict: \(again.text)")
        #expect(again.header("Idempotency-Replayed") == "true")
        #expect(again.json == first.json)
        #expect(again.header("ETag") == first.header("ETag"))
        // The same key for another request: refused.
        let reused = try await server.send("POST", "/tables/todo", headers: key, json: ["id": "a", "n": 2])
        #expect(reused.status == 422)
        #expect(reused.json?.objectValue?["code"] == "idempotencyKeyReused")
        // A recorded conflict stays that conflict, whatever happens to the item since.
        let etag = first.header("ETag") ?? ""
        let stale = [("If-Match", "\"999\""), ("Idempotency-Key", "device-1-op-2")]
        let conflict = try await server.send("PUT", "/tables/todo/a", headers: stale, json: ["id": "a", "n": 3])
        #expect(conflict.status == 412)
        let update = try await server.send(
            "PUT", "/tables/todo/a", headers: [("If-Match", etag), ("Idempotency-Key", "device-1-op-3")],
            json: ["id": "a", "n": 4])
        #expect(update.status == 200)
        let replayedConflict = try await server.send(
            "PUT", "/tables/todo/a", headers: stale, json: ["id": "a", "n": 3])
        #expect(replayedConflict.status == 412)
        #expect(replayedConflict.json == conflict.json)
        let replayedUpdate = try await server.send(
            "PUT", "/tables/todo/a", headers: [("If-Match", etag), ("Idempotency-Key", "device-1-op-3")],
            json: ["id": "a", "n": 4])
        #expect(replayedUpdate.status == 200, "not a false 412: \(replayedUpdate.text)")
        #expect(replayedUpdate.json == update.json)
        let stored = try await server.send("GET", "/tables/todo/a")
        #expect(stored.json?.objectValue?["n"] == 4)
        // A bad key is one clear line.
        let bad = try await server.send(
            "POST", "/tables/todo", headers: [("Idempotency-Key", "has space")], json: ["id": "b"])
        #expect(bad.status == 400)
        #expect(bad.json?.objectValue?["code"] == "invalidIdempotencyKey")
        try await server.stop()
    }

    @Test func keysAreScopedToTheirUserAndToTheirAuthorization() async throws {
        let server = try await LiveServer.start(tables: Self.tables)
        let key = ("Idempotency-Key", "shared-key")
        let alice = try await server.send(
            "POST", "/tables/notes", headers: [Self.bearer("alice"), key], json: ["id": "x1", "secret": "alice's"])
        #expect(alice.status == 201)
        // Bob's request with the same key is his own: applied, and he never sees alice's answer.
        let bob = try await server.send(
            "POST", "/tables/notes", headers: [Self.bearer("bob"), key], json: ["id": "x1", "secret": "alice's"])
        #expect(bob.status == 400, "the id is alice's: bob is told only that he cannot use it: \(bob.text)")
        #expect(bob.json?.objectValue?["code"] == "idUnavailable")
        #expect(bob.header("Idempotency-Replayed") == nil)
        #expect(!bob.text.contains("alice's"), "bob learnt alice's row: \(bob.text)")
        // Without a token the table's rule answers first: a replay never bypasses authentication.
        let anonymous = try await server.send(
            "POST", "/tables/notes", headers: [key], json: ["id": "x1", "secret": "alice's"])
        #expect(anonymous.status == 401)
        try await server.stop()
    }

    @Test func concurrentRequestsWithOneKeyApplyOnce() async throws {
        let server = try await LiveServer.start(tables: Self.tables)
        // URLSession, not the blocking loopback client: eight blocked dispatch threads would starve
        // the other suites' servers.
        let url = URL(string: server.server.url + "/tables/hard")!
        let session = URLSession(configuration: .ephemeral)
        let replies = try await withThrowingTaskGroup(of: (status: Int, replayed: Bool, body: Data).self) { group in
            for _ in 0..<8 {
                group.addTask {
                    var request = URLRequest(url: url)
                    request.httpMethod = "POST"
                    request.setValue("application/json", forHTTPHeaderField: "Content-Type")
                    request.setValue("race", forHTTPHeaderField: "Idempotency-Key")
                    request.httpBody = Data(#"{"id":"r","n":1}"#.utf8)
                    // A 503 (the database busy on a loaded machine) applied nothing: sent again,
                    // as a client does.
                    for attempt in 1... {
                        let (body, response) = try await session.data(for: request)
                        let http = response as? HTTPURLResponse
                        if http?.statusCode == 503, attempt < 10 {
                            try await Task.sleep(for: .milliseconds(200))
                            continue
                        }
                        return (
                            http?.statusCode ?? 0, http?.value(forHTTPHeaderField: "Idempotency-Replayed") == "true",
                            body
                        )
                    }
                    fatalError("unreachable")
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(replies.map(\.status) == Array(repeating: 201, count: 8))
        #expect(replies.filter { !$0.replayed }.count == 1, "one applied, seven replayed")
        #expect(Set(replies.map(\.body)).count == 1)
        try await server.stop()
    }

    @Test func keyedRequestsInABatchReplayLikeSingleOnes() async throws {
        let server = try await LiveServer.start(tables: Self.tables)
        let batch: JSONValue = [
            "requests": [
                [
                    "id": "1", "method": "POST", "url": "todo", "headers": ["Idempotency-Key": "k1"],
                    "body": ["id": "c"],
                ],
                ["id": "2", "method": "DELETE", "url": "todo/c", "headers": ["Idempotency-Key": "k2"]],
            ]
        ]
        let first = try await server.send("POST", "/tables/$batch", json: batch)
        let second = try await server.send("POST", "/tables/$batch", json: batch)
        let statuses: (LiveServer.Reply) -> [Int64] = {
            $0.json?.objectValue?["responses"]?.arrayValue?.compactMap { $0.objectValue?["status"]?.intValue } ?? []
        }
        #expect(statuses(first) == [201, 204])
        #expect(statuses(second) == [201, 204], "a resent batch is answered as the first: \(second.text)")
        let replayed = second.json?.objectValue?["responses"]?.arrayValue?.map {
            $0.objectValue?["headers"]?.objectValue?["idempotency-replayed"]
        }
        #expect(replayed == [.string("true"), .string("true")])
        // Applied once: the item is soft-deleted, not re-created.
        let item = try await server.send("GET", "/tables/todo/c?__includedeleted=true")
        #expect(item.json?.objectValue?["deleted"] == true)
        try await server.stop()
    }
}
