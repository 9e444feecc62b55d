import ServerStorageCore
import StoreConformance
import SyncCore
import Synchronization
import Testing

extension ServerStorageConformanceSuite {
    struct Boom: Error {}

    static var transactions: [ServerStorageCheck] {
        [
            .init("in a transaction each write succeeds or fails alone, reads see earlier writes, all commit together")
            {
                fixture async throws in
                let storage = fixture.storage
                let stream = storage.changes()
                let seen = try await storage.transaction {
                    let first = try await storage.insert(into: todo, id: "b1", content: ["n": 1], owner: nil)
                    await expectError(StorageError.self, .conflict, "a duplicate in the transaction") {
                        try await storage.insert(into: todo, id: "b1", content: ["n": 9], owner: nil)
                    }
                    await expectError(StorageError.self, .fieldKind, "a wrong kind in the transaction") {
                        try await storage.insert(into: todo, id: "b2", content: ["n": "text"], owner: nil)
                    }
                    _ = try await storage.replace(
                        in: todo, id: "b1", expectedVersion: first.version, content: ["n": 2], deleted: false,
                        owner: .all)
                    try await storage.recordOutcome(outcome("batched"))
                    return try await storage.item(in: todo, id: "b1", owner: .all)
                }
                #expect(seen?.content == ["n": 2], "a read in the transaction sees its earlier writes")
                #expect(try await storage.item(in: todo, id: "b1", owner: .all)?.content == ["n": 2])
                #expect(try await storage.item(in: todo, id: "b2", owner: .all) == nil)
                #expect(try await storage.recordedOutcome(scope: "user-1", key: "batched") != nil)
                let (changes, _) = await collectChanges(stream) { $0.count >= 2 }
                #expect(changes.count == 2 && changes.allSatisfy { $0.table == "todo" }, "\(changes)")
                // A write after the transaction goes on as usual.
                _ = try await storage.insert(into: todo, id: "b3", content: ["n": 3], owner: nil)
            },
            .init("a transaction that throws keeps nothing: rows, tables, field kinds, outcomes, announcements") {
                fixture async throws in
                let storage = fixture.storage
                let before = try await storage.insert(into: todo, id: "kept", content: ["n": 1], owner: nil)
                let stream = storage.changes()
                let fresh = StorageTable(name: "fresh")
                await #expect(throws: Boom.self) {
                    try await storage.transaction {
                        _ = try await storage.insert(into: todo, id: "gone", content: ["n": 2, "kind": 1], owner: nil)
                        _ = try await storage.insert(into: fresh, id: "x", content: ["f": true], owner: nil)
                        try await storage.recordOutcome(outcome("rolled-back"))
                        throw Boom()
                    }
                }
                #expect(try await storage.item(in: todo, id: "gone", owner: .all) == nil)
                #expect(try await storage.tableExists("fresh") == false, "a table created in it is gone")
                #expect(try await storage.recordedOutcome(scope: "user-1", key: "rolled-back") == nil)
                // The field kind it fixed is free again, and the next write takes the next version.
                let after = try await storage.insert(into: todo, id: "text", content: ["kind": "text"], owner: nil)
                #expect(after.version == before.version + 1, "version \(after.version) after \(before.version)")
                let (changes, _) = await collectChanges(stream) { $0.contains { $0.version == after.version } }
                // (An announcement of the write before may still arrive: PostgreSQL delivers them
                // asynchronously.)
                #expect(
                    changes.map(\.version).filter { $0 > before.version } == [after.version], "announced: \(changes)")
            },
            .init("a transaction inside another is a savepoint: it rolls back alone") { fixture async throws in
                let storage = fixture.storage
                let stream = storage.changes()
                let (first, last) = try await storage.transaction {
                    let first = try await storage.insert(into: todo, id: "a", content: ["n": 1], owner: nil)
                    await #expect(throws: Boom.self) {
                        try await storage.transaction {
                            _ = try await storage.insert(into: todo, id: "b", content: ["n": 2], owner: nil)
                            throw Boom()
                        }
                    }
                    let inner = try await storage.transaction {
                        try await storage.insert(into: todo, id: "c", content: ["n": 3], owner: nil)
                    }
                    return (first, inner)
                }
                #expect(try await storage.item(in: todo, id: "b", owner: .all) == nil)
                #expect(try await storage.item(in: todo, id: "a", owner: .all) != nil)
                #expect(try await storage.item(in: todo, id: "c", owner: .all) != nil)
                #expect(last.version == first.version + 1, "the rolled-back version is taken again")
                let (changes, _) = await collectChanges(stream) { $0.contains { $0.version == last.version } }
                // Every announcement is of a committed write: none for the write that rolled back (its
                // version belongs to "c" now, and a listener that heard it would skip "c").
                #expect(Set(changes.map(\.version)).isSubset(of: [first.version, last.version]), "\(changes)")
                #expect(changes.last?.version == last.version)
            },
            .init("a table a transaction creates is used by others only once it commits, never if rolled back") {
                fixture async throws in
                let storage = fixture.storage
                let late = StorageTable(name: "late")
                let ghost = StorageTable(name: "ghost")
                let outside = try await storage.transaction {
                    _ = try await storage.insert(into: late, id: "x", content: ["n": 1], owner: nil)
                    // Another request, outside the transaction (a detached task inherits none): it
                    // sees no table yet, or waits for the commit (a memory database has one
                    // connection); never a storage failure.
                    let outside = Task.detached { try await storage.query(late, StorageQuery()).items.map(\.id) }
                    let early = await firstOf(outside, orAfter: .seconds(1))
                    switch early {
                    case .none: break
                    case .success(let ids): #expect(ids.isEmpty, "saw uncommitted rows: \(ids)")
                    case .failure(let error as StorageError): #expect(error.code == .noSuchTable, "\(error)")
                    case .failure(let error): Issue.record("a query beside the transaction failed: \(error)")
                    }
                    // A table created in a savepoint that rolls back is forgotten with it.
                    await #expect(throws: Boom.self) {
                        try await storage.transaction {
                            _ = try await storage.insert(into: ghost, id: "g", content: [:], owner: nil)
                            throw Boom()
                        }
                    }
                    return early == nil ? outside : nil
                }
                if let waited = outside {
                    // Slower than the window: it read before the commit or waited for it.
                    switch await waited.result {
                    case .success(let ids): #expect(ids.isEmpty || ids == ["x"], "\(ids)")
                    case .failure(let error as StorageError): #expect(error.code == .noSuchTable, "\(error)")
                    case .failure(let error): Issue.record("a query beside the transaction failed: \(error)")
                    }
                }
                #expect(try await storage.query(late, StorageQuery()).items.map(\.id) == ["x"])
                #expect(try await storage.tableExists("ghost") == false)
                await expectError(StorageError.self, .noSuchTable, "query of the rolled-back table") {
                    _ = try await storage.query(ghost, StorageQuery())
                }
                _ = try await storage.insert(into: ghost, id: "g2", content: [:], owner: nil)
                #expect(try await storage.query(ghost, StorageQuery()).items.map(\.id) == ["g2"])
            },
            .init("a key claimed in a transaction has one effect among concurrent transactions") {
                fixture async throws in
                try await expectOneEffect(on: [fixture.storage], key: "once")
            },
            .init(
                "a key claimed in a transaction has one effect across two storages on one database",
                requires: [.sharedDatabase]
            ) { fixture async throws in
                try await withAnother(fixture) { try await expectOneEffect(on: $0, key: "shared") }
            },
            .init(
                "exclusive transactions of one lock never overlap across two storages on one database",
                requires: [.sharedDatabase]
            ) { fixture async throws in
                try await withAnother(fixture) { try await expectExclusive(on: $0) }
            },
            .init("an exclusive transaction that throws keeps nothing and lets the next holder in") {
                fixture async throws in
                let storage = fixture.storage
                await #expect(throws: Boom.self) {
                    try await storage.exclusiveTransaction(StorageLock("conformance")) {
                        _ = try await storage.insert(into: todo, id: "held", content: [:], owner: nil)
                        throw Boom()
                    }
                }
                #expect(try await storage.item(in: todo, id: "held", owner: .all) == nil)
                let next = try await storage.exclusiveTransaction(StorageLock("conformance")) {
                    try await storage.insert(into: todo, id: "next", content: [:], owner: nil).id
                }
                #expect(next == "next")
                try await expectExclusive(on: [storage])
            },
            .init("a claim that rolls back frees its key; outside a transaction a claim only reads") {
                fixture async throws in
                let storage = fixture.storage
                await #expect(throws: Boom.self) {
                    try await storage.transaction {
                        #expect(try await storage.claimOutcome(scope: "s", key: "retry") == nil)
                        _ = try await storage.insert(into: todo, id: "first", content: [:], owner: nil)
                        throw Boom()
                    }
                }
                let applied = try await claimAndApply(storage, key: "retry", index: 2)
                #expect(applied == "eff-2", "the key was still held after its transaction rolled back")
                #expect(try await storage.item(in: todo, id: "first", owner: .all) == nil)
                #expect(try await storage.claimOutcome(scope: "s", key: "retry")?.body == "eff-2")
                #expect(try await storage.claimOutcome(scope: "s", key: "never") == nil)
                #expect(try await storage.recordedOutcome(scope: "s", key: "never") == nil, "a read claims nothing")
            },
        ]
    }

    /// Claims `key` in a transaction on `storage`; when it is free, inserts `eff-<index>` and
    /// records that id as the outcome. Returns the outcome's body: the id of the one insert the key
    /// had.
    static func claimAndApply(_ storage: any ServerStorage, key: String, index: Int) async throws -> String {
        try await storage.transaction {
            if let recorded = try await storage.claimOutcome(scope: "s", key: key) { return recorded.body ?? "" }
            _ = try await storage.insert(into: todo, id: "eff-\(index)", content: ["i": .int(Int64(index))], owner: nil)
            // A window for the others to arrive while the key is held.
            try await Task.sleep(for: .milliseconds(5))
            var claimed = outcome(key, scope: "s")
            claimed.body = "eff-\(index)"
            return try await storage.recordOutcome(claimed).body ?? ""
        }
    }

    /// Runs `body` on the fixture's storage and another on the same database, closing that one after.
    static func withAnother(
        _ fixture: ServerStorageFixture, _ body: ([any ServerStorage]) async throws -> Void
    ) async throws {
        let another = try await fixture.openAnother!()
        do {
            try await body([fixture.storage, another])
        } catch {
            try? await another.close()
            throw error
        }
        try await another.close()
    }

    /// Eight exclusive transactions of one lock at once, spread over `storages`: never two inside
    /// at the same moment, and each one's read-then-write of a counter counts (none is lost).
    static func expectExclusive(on storages: [any ServerStorage]) async throws {
        final class Inside: Sendable { let count = Mutex((now: 0, most: 0)) }
        let inside = Inside()
        _ = try await storages[0].insert(into: todo, id: "counter", content: ["n": 0], owner: nil)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<8 {
                let storage = storages[index % storages.count]
                group.addTask {
                    try await storage.exclusiveTransaction(StorageLock("conformance")) {
                        inside.count.withLock {
                            $0.now += 1
                            $0.most = max($0.most, $0.now)
                        }
                        defer { inside.count.withLock { $0.now -= 1 } }
                        let counter = try #require(try await storage.item(in: todo, id: "counter", owner: .all))
                        try await Task.sleep(for: .milliseconds(5))
                        let count = counter.content["n"]?.intValue ?? -1
                        _ = try await storage.replace(
                            in: todo, id: "counter", expectedVersion: counter.version, content: ["n": .int(count + 1)],
                            deleted: false, owner: .all)
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(inside.count.withLock { $0.most } == 1, "exclusive transactions overlapped")
        let counter = try await storages[0].item(in: todo, id: "counter", owner: .all)
        #expect(counter?.content["n"] == 8, "\(String(describing: counter))")
        try await storages[0].delete(from: todo, id: "counter", expectedVersion: counter?.version ?? 0, owner: .all)
    }

    /// Eight transactions at once, spread over `storages`, claim one key: exactly one applies.
    static func expectOneEffect(on storages: [any ServerStorage], key: String) async throws {
        let answers = try await withThrowingTaskGroup(of: String.self) { group in
            for index in 0..<8 {
                let storage = storages[index % storages.count]
                group.addTask { try await claimAndApply(storage, key: key, index: index) }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        let applied = try await storages[0].query(todo, StorageQuery(limit: 100)).items.map(\.id)
            .filter { $0.hasPrefix("eff-") }
        #expect(applied.count == 1, "the key was applied \(applied.count) times: \(applied)")
        #expect(Set(answers) == Set(applied), "answers \(answers), applied \(applied)")
    }
}

/// The result of `task` if it ends within `wait`, `nil` otherwise (it goes on). Polls: awaiting
/// the task in a task group would wait for it even after the group is cancelled.
func firstOf<T: Sendable>(_ task: Task<T, any Error>, orAfter wait: Duration) async -> Result<T, any Error>? {
    let ended = Mutex<Result<T, any Error>?>(nil)
    Task {
        let result = await task.result
        ended.withLock { $0 = result }
    }
    let deadline = ContinuousClock.now + wait
    while ContinuousClock.now < deadline {
        if let result = ended.withLock({ $0 }) { return result }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return ended.withLock { $0 }
}
