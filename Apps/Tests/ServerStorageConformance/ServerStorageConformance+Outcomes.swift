import ServerStorageCore
import StoreConformance
import SyncCore
import Testing

extension ServerStorageConformanceSuite {
    static func outcome(_ key: String, scope: String = "user-1", status: Int = 201, at time: Int64 = 1_000)
        -> RecordedOutcome
    {
        RecordedOutcome(
            scope: scope, key: key, fingerprint: "POST /tables/todo \(key)", status: status,
            headers: ["ETag": "\"\(key)\"", "Location": "/tables/todo/\(key)"],
            body: #"{"id":"\#(key)","text":"é \"quoted\" 🎬"}"#, recordedAt: time)
    }

    static var outcomes: [ServerStorageCheck] {
        [
            .init("a recorded outcome reads back exactly; an unknown key reads nil") { fixture async throws in
                let storage = fixture.storage
                let first = outcome("k-1")
                var bodiless = outcome("k-2", status: 204)
                bodiless.body = nil
                bodiless.headers = [:]
                #expect(try await storage.recordOutcome(first) == first)
                #expect(try await storage.recordOutcome(bodiless) == bodiless)
                #expect(try await storage.recordedOutcome(scope: "user-1", key: "k-1") == first)
                #expect(try await storage.recordedOutcome(scope: "user-1", key: "k-2") == bodiless)
                #expect(try await storage.recordedOutcome(scope: "user-1", key: "k-3") == nil)
            },
            .init("the first outcome of a key wins; scopes never share keys") { fixture async throws in
                let storage = fixture.storage
                let first = outcome("k", status: 201)
                try await storage.recordOutcome(first)
                var second = outcome("k", status: 409)
                second.fingerprint = "PUT /tables/todo/k other"
                #expect(try await storage.recordOutcome(second) == first)
                #expect(try await storage.recordedOutcome(scope: "user-1", key: "k") == first)
                #expect(try await storage.recordedOutcome(scope: "user-2", key: "k") == nil)
                #expect(try await storage.recordedOutcome(scope: "", key: "k") == nil)
                let other = outcome("k", scope: "user-2", status: 200)
                #expect(try await storage.recordOutcome(other) == other)
                #expect(try await storage.recordedOutcome(scope: "user-2", key: "k") == other)
                #expect(try await storage.recordedOutcome(scope: "user-1", key: "k") == first)
            },
            .init("concurrent recordings of one key all answer the same outcome") { fixture async throws in
                let storage = fixture.storage
                let answers = try await withThrowingTaskGroup(of: RecordedOutcome.self) { group in
                    for status in 200..<208 {
                        group.addTask { try await storage.recordOutcome(outcome("race", status: status)) }
                    }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                let kept = try await storage.recordedOutcome(scope: "user-1", key: "race")
                #expect(kept != nil)
                #expect(
                    answers.allSatisfy { $0 == kept }, "answers: \(answers.map(\.status)), kept: \(kept?.status ?? 0)")
            },
            .init("outcomes recorded before a time are forgotten, later ones kept") { fixture async throws in
                let storage = fixture.storage
                try await storage.recordOutcome(outcome("old-1", at: 1_000))
                try await storage.recordOutcome(outcome("old-2", scope: "user-2", at: 1_999))
                try await storage.recordOutcome(outcome("new", at: 2_000))
                #expect(try await storage.forgetOutcomes(recordedBefore: 2_000) == 2)
                #expect(try await storage.recordedOutcome(scope: "user-1", key: "old-1") == nil)
                #expect(try await storage.recordedOutcome(scope: "user-2", key: "old-2") == nil)
                #expect(try await storage.recordedOutcome(scope: "user-1", key: "new") != nil)
                #expect(try await storage.forgetOutcomes(recordedBefore: 2_000) == 0)
            },
            .init("a key that is empty, too long or not printable ASCII is refused") { fixture async throws in
                let storage = fixture.storage
                for key in ["", String(repeating: "k", count: RecordedOutcome.maximumKeyLength + 1), "a b", "clé"] {
                    await expectError(StorageError.self, .invalidName, "the key \(key.prefix(20))") {
                        try await storage.recordOutcome(outcome(key))
                    }
                }
                let longest = String(repeating: "k", count: RecordedOutcome.maximumKeyLength)
                try await storage.recordOutcome(outcome(longest))
                #expect(try await storage.recordedOutcome(scope: "user-1", key: longest)?.key == longest)
            },
        ]
    }
}
