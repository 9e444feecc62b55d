import FerryServer
import Foundation
import ServerStorageCore
import ServerTestSupport
import SyncCore
import Testing

/// What a batch may address and how long, how large and how exclusive it may be.
@Suite("Batch bounds", .timeLimit(.minutes(3)))
struct BatchBoundsTests {
    static let tables = [TableSettings(name: "todo"), TableSettings(name: "big")]

    static func statuses(_ reply: LiveServer.Reply) -> [Int64] {
        reply.json?.objectValue?["responses"]?.arrayValue?.compactMap { $0.objectValue?["status"]?.intValue } ?? []
    }

    static func inserts(_ count: Int, prefix: String) -> JSONValue {
        .object([
            "requests": .array(
                (0..<count).map { index in
                    .object([
                        "id": .string("r\(index)"), "method": "POST", "url": "todo",
                        "body": .object(["id": .string("\(prefix)\(index)"), "n": .int(Int64(index))]),
                    ])
                })
        ])
    }

    /// `count` replacements of the rows `seed(_:prefix:)` wrote: writes that run one by one (inserts
    /// run as sets, too fast to outlast a slice).
    static func updates(_ count: Int, prefix: String) -> JSONValue {
        .object([
            "requests": .array(
                (0..<count).map { index in
                    .object([
                        "id": .string("r\(index)"), "method": "PUT", "url": .string("todo/\(prefix)\(index)"),
                        "body": .object(["id": .string("\(prefix)\(index)"), "n": .int(Int64(index + 1))]),
                    ])
                })
        ])
    }

    /// Writes `count` rows `<prefix><index>` into `todo`, straight into the storage.
    static func seed(_ count: Int, prefix: String) -> @Sendable (any ServerStorage) async throws -> Void {
        { storage in
            let rows = (0..<count).map { StorageInsert(id: "\(prefix)\($0)", content: ["n": .int(Int64($0))]) }
            for result in try await storage.insert(into: StorageTable(name: "todo"), rows) { _ = try result.get() }
        }
    }

    /// A batch's body is JSON as a single request's is: text/plain, a form or Latin-1 is 415 and
    /// applies nothing (each was applied); none at all is taken, as the Node server took it.
    @Test func aBatchThatIsNotJSONIsRefusedAsASingleRequestIs() async throws {
        let server = try await LiveServer.start(tables: Self.tables)
        let body = Self.inserts(1, prefix: "typed").serializedUTF8()
        for type in ["text/plain", "application/x-www-form-urlencoded", "application/json; charset=latin1"] {
            let reply = try await server.send("POST", "/tables/$batch", headers: [("Content-Type", type)], body: body)
            #expect(reply.status == 415, "\(type): \(reply.status) \(reply.text)")
            #expect(reply.json?.objectValue?["code"] == "unsupportedMediaType", "\(type)")
        }
        #expect(try await server.send("GET", "/tables/todo/typed0").status == 404, "a refused batch applies nothing")
        let untyped = try await server.send("POST", "/tables/$batch", body: body)
        #expect(Self.statuses(untyped) == [201], "\(untyped.text)")
        try await server.stop()
    }

    @Test func aBatchInsideABatchIsRefusedHoweverItsURLIsWritten() async throws {
        let server = try await LiveServer.start(tables: Self.tables)
        let origin = server.server.url
        // Before, only the literal "$batch" was refused: each of these ran as a batch inside the batch.
        for url in [
            "$batch", "$batch/", "%24batch", "/tables/$batch/", "/tables/%24batch", "/tables//%24batch",
            "\(origin)/tables/$batch", "http://elsewhere.example/tables/todo", "$capabilities", "%24changes",
            "/health", "/tables", "todo/a/b",
        ] {
            let reply = try await server.send(
                "POST", "/tables/$batch",
                json: [
                    "requests": [
                        ["id": "1", "method": "POST", "url": "todo", "body": ["id": "before"]],
                        ["id": "2", "method": "POST", "url": .string(url), "body": ["requests": []]],
                    ]
                ])
            #expect(reply.status == 400, "\(url): \(reply.status) \(reply.text)")
            #expect(reply.json?.objectValue?["code"] == "invalidBatch", "\(url)")
        }
        #expect(try await server.send("GET", "/tables/todo/before").status == 404, "a refused batch applies nothing")
        // This server's own absolute URL addresses a table like a relative one.
        let own = try await server.send(
            "POST", "/tables/$batch",
            json: ["requests": [["method": "POST", "url": .string("\(origin)/tables/todo"), "body": ["id": "abs"]]]])
        #expect(Self.statuses(own) == [201], "\(own.text)")
        // The batch endpoint is the batch endpoint however it is written, with the batch's body limit.
        let encoded = try await server.send("POST", "/tables/%24batch/", json: Self.inserts(2, prefix: "enc"))
        #expect(Self.statuses(encoded) == [201, 201], "\(encoded.text)")
        try await server.stop()
    }

    @Test func aLongBatchLetsOtherWritersInBetweenItsSlices() async throws {
        // The batch's time limit is another test's: on a loaded machine 1,000 updates may pass the default.
        var limits = RequestLimits()
        limits.maximumBatchDuration = .seconds(600)
        // One write per transaction: the batch takes 1,000 commits whatever the machine's speed.
        // With the default 100 ms, a quiet machine ran it in one slice and the single insert came
        // after it.
        limits.batchWriteSlice = .zero
        let server = try await LiveServer.start(
            tables: Self.tables, limits: limits, seed: Self.seed(1_000, prefix: "b"))
        let batch = Task { try await server.send("POST", "/tables/$batch", json: Self.updates(1_000, prefix: "b")) }
        // Once the batch's first slice has committed, a single insert goes in.
        try await eventually("the batch's first slice commits") {
            try await server.send("GET", "/tables/todo/b0").json?.objectValue?["n"] == 1
        }
        let single = try await server.send("POST", "/tables/todo", json: ["id": "single"])
        #expect(single.status == 201)
        let reply = try await batch.value
        #expect(Self.statuses(reply) == Array(repeating: 200, count: 1_000))
        // Before, the single insert waited for the whole batch and came after its last write.
        let last = try await server.send("GET", "/tables/todo/b999")
        let singleVersion = single.json?.objectValue?["version"]?.stringValue ?? ""
        let lastVersion = last.json?.objectValue?["version"]?.stringValue ?? ""
        #expect(
            Self.versionNumber(singleVersion) < Self.versionNumber(lastVersion),
            "the single insert (\(singleVersion)) waited for the whole batch (last \(lastVersion))")
        try await server.stop()
    }

    /// A version tag as the number it carries (base64 of a big-endian 64-bit integer).
    static func versionNumber(_ tag: String) -> UInt64 {
        guard let data = Data(base64Encoded: tag), data.count == 8 else { return 0 }
        return data.reduce(0) { $0 << 8 | UInt64($1) }
    }

    @Test func aBatchPastItsTimeAnswersTheRestNotApplied() async throws {
        var limits = RequestLimits()
        limits.maximumBatchDuration = .milliseconds(150)
        let server = try await LiveServer.start(
            tables: Self.tables, limits: limits, seed: Self.seed(1_000, prefix: "t"))
        let reply = try await server.send("POST", "/tables/$batch", json: Self.updates(1_000, prefix: "t"))
        #expect(reply.status == 200)
        let responses = reply.json?.objectValue?["responses"]?.arrayValue?.compactMap(\.objectValue) ?? []
        let applied = responses.prefix { $0["status"] == 200 }.count
        #expect(applied > 0 && applied < 1_000, "\(applied) applied in 150 ms")
        for response in responses.dropFirst(applied) {
            #expect(response["status"] == 503)
            #expect(response["body"]?.objectValue?["code"] == "batchTimeout")
            #expect(response["headers"]?.objectValue?["retry-after"] != nil)
        }
        #expect(
            try await server.send("GET", "/tables/todo/t\(applied - 1)").json?.objectValue?["n"] == .int(Int64(applied))
        )
        #expect(
            try await server.send("GET", "/tables/todo/t\(applied)").json?.objectValue?["n"] == .int(Int64(applied)),
            "a request not run is not applied")
        try await server.stop()
    }

    @Test func aBatchOfReadsStopsReturningPagesPastItsAnswerLimit() async throws {
        var limits = RequestLimits()
        limits.maximumBatchAnswerSize = 1 << 20
        let filler = String(repeating: "y", count: 50_000)
        let server = try await LiveServer.start(tables: Self.tables, limits: limits) { storage in
            for index in 0..<10 {
                _ = try await storage.insert(
                    into: StorageTable(name: "big"), id: "p\(index)", content: ["text": .string(filler)], owner: nil)
            }
        }
        // Twenty reads of a 500 KB page (about 10 MB of answers before), then a write.
        var requests: [JSONValue] = (0..<20).map { .object(["id": .string("g\($0)"), "method": "GET", "url": "big"]) }
        requests.append(["id": "w", "method": "POST", "url": "todo", "body": ["id": "after-reads"]])
        let reply = try await server.send("POST", "/tables/$batch", json: ["requests": .array(requests)])
        let statuses = Self.statuses(reply)
        #expect(statuses.prefix(2) == [200, 200], "\(statuses)")
        #expect(statuses.dropFirst(2).dropLast().allSatisfy { $0 == 413 }, "\(statuses)")
        #expect(statuses.last == 201, "a write still runs and gets its answer")
        #expect(reply.body.count < 2 << 20, "the answer is \(reply.body.count) bytes")
        try await server.stop()
    }
}
