import ServerStorageCore
import StoreConformance
import SyncCore
import Testing

extension ServerStorageConformanceSuite {
    static var sets: [ServerStorageCheck] {
        [
            .init("a set insert gives each row the outcome it would have alone, with consecutive stamps") {
                fixture async throws in
                let storage = fixture.storage
                let existing = try await storage.insert(into: todo, id: "x", content: ["n": 1], owner: "alice")
                let stream = storage.changes()
                fixture.clock.advance(by: 5)
                let results = try await storage.insert(
                    into: todo,
                    [
                        StorageInsert(id: "a", content: ["n": 2, "tag": "first"]),
                        StorageInsert(id: "x", content: ["n": 3, "lost": true]),
                        StorageInsert(id: "b", content: ["n": 4], owner: "bob"),
                        StorageInsert(id: "a", content: ["n": 5]),
                        StorageInsert(id: "c", content: ["tag": 7]),
                        StorageInsert(id: "", content: [:]),
                        StorageInsert(id: "d", content: ["ratio": .double(.nan)]),
                        StorageInsert(id: "c", content: ["tag": "second"]),
                    ])
                let codes = results.map { result -> String in
                    switch result {
                    case .success: "ok"
                    case .failure(let error): "\(error.code)"
                    }
                }
                #expect(codes == ["ok", "conflict", "ok", "conflict", "fieldKind", "invalidName", "fieldKind", "ok"])
                let stored = results.compactMap { try? $0.get() }
                #expect(stored.map(\.id) == ["a", "b", "c"])
                #expect(stored.map(\.version) == [1, 2, 3].map { existing.version + $0 }, "consecutive versions")
                #expect(stored.first?.updatedAt.millisecondsSince1970 == fixture.clock.now())
                #expect(zip(stored, stored.dropFirst()).allSatisfy { $0.updatedAt < $1.updatedAt })
                #expect(stored[1].owner == "bob")
                if case .failure(let error) = results[1] { #expect(error.current == existing) }
                if case .failure(let error) = results[3] { #expect(error.current == stored[0], "the row before it") }
                for item in stored { #expect(try await storage.item(in: todo, id: item.id, owner: .all) == item) }
                #expect(try await storage.item(in: todo, id: "x", owner: .all) == existing)
                // A row that failed fixed no kind; the sequence goes on after the set.
                let after = try await storage.insert(into: todo, id: "e", content: ["lost": "text"], owner: nil)
                #expect(after.version == stored[2].version + 1)
                let (changes, _) = await collectChanges(stream) { $0.contains { $0.version >= after.version } }
                #expect(changes.contains { $0.version == stored[2].version }, "the set was announced: \(changes)")
                // One announcement for the set, its last stamp (PostgreSQL may still deliver the
                // insert's before it).
                #expect(
                    Set(changes.map(\.version).filter { $0 > existing.version }).isSubset(of: [
                        stored[2].version, after.version,
                    ]), "\(changes)")
            },
            .init("ids equal only as Swift strings (two Unicode forms) are two rows, alone and in a set") {
                fixture async throws in
                // "café" composed (NFC) and decomposed (NFD): a set took the second for the first.
                let storage = fixture.storage
                let (composed, decomposed) = ("caf\u{E9}", "cafe\u{301}")
                _ = try await storage.insert(into: todo, id: composed, content: ["n": 1], owner: nil)
                let alone = try await storage.insert(into: todo, [StorageInsert(id: decomposed, content: ["n": 2])])
                #expect((try? alone[0].get())?.id == decomposed)
                let (setComposed, setDecomposed) = ("s\u{E9}t", "se\u{301}t")
                let together = try await storage.insert(
                    into: todo,
                    [
                        StorageInsert(id: setComposed, content: ["n": 3]),
                        StorageInsert(id: setDecomposed, content: ["n": 4]),
                    ])
                #expect(together.map { (try? $0.get())?.id } == [setComposed, setDecomposed])
                for (id, n) in [(composed, 1), (decomposed, 2), (setComposed, 3), (setDecomposed, 4)] {
                    let item = try await storage.item(in: todo, id: id, owner: .all)
                    #expect(
                        item?.id == id && item?.content["n"] == .int(Int64(n)), "\(id.unicodeScalars.count) scalars")
                }
            },
            .init("a set insert matches single inserts row for row, stamps included") { fixture async throws in
                let storage = fixture.storage
                var random = SeededRandom(seed: 31)
                var rows: [StorageInsert] = []
                for index in 0..<80 {
                    var content: JSONObject = ["i": .int(Int64(index))]
                    switch random.next() % 6 {
                    case 0: content["n"] = "text"
                    case 1: content["s"] = .int(Int64(index))
                    case 2: content["f\(random.next() % 4)"] = .bool(index % 2 == 0)
                    default:
                        content["n"] = .int(Int64(index))
                        content["s"] = "s"
                    }
                    let owner: String? = random.next() % 3 == 0 ? "owner-\(random.next() % 2)" : nil
                    rows.append(StorageInsert(id: "i\(random.next() % 30)", content: content, owner: owner))
                }
                let singles = StorageTable(name: "singles")
                var alone: [Result<StoredItem, StorageError>] = []
                for row in rows {
                    do {
                        alone.append(
                            .success(
                                try await storage.insert(
                                    into: singles, id: row.id, content: row.content, owner: row.owner)))
                    } catch let error as StorageError {
                        alone.append(.failure(error))
                    }
                }
                let together = try await storage.insert(into: StorageTable(name: "sets"), rows)
                #expect(together.count == rows.count)
                for (index, (one, other)) in zip(alone, together).enumerated() {
                    switch (one, other) {
                    case (.success(let single), .success(let set)):
                        #expect(single == set, "row \(index)")
                    case (.failure(let single), .failure(let set)):
                        #expect(single.code == set.code, "row \(index): \(single) / \(set)")
                        #expect(single.current == set.current, "row \(index)")
                    default:
                        Issue.record("row \(index) \(rows[index]): alone \(one), in a set \(other)")
                    }
                }
                let statuses = Set(together.map { (try? $0.get()) == nil })
                #expect(statuses == [true, false], "the rows cover successes and failures")
            },
            .init("a set insert in a transaction that throws keeps nothing: rows, table, kinds, announcements") {
                fixture async throws in
                let storage = fixture.storage
                let fresh = StorageTable(name: "fresh")
                let before = try await storage.insert(into: todo, id: "kept", content: [:], owner: nil)
                let stream = storage.changes()
                await #expect(throws: Boom.self) {
                    try await storage.transaction {
                        let first = try await storage.insert(
                            into: fresh,
                            [StorageInsert(id: "1", content: ["k": 1]), StorageInsert(id: "2", content: [:])])
                        let second = try await storage.insert(
                            into: todo, [StorageInsert(id: "t1", content: ["k": true])])
                        #expect((first + second).allSatisfy { (try? $0.get()) != nil })
                        throw Boom()
                    }
                }
                #expect(try await storage.tableExists("fresh") == false)
                #expect(try await storage.item(in: todo, id: "t1", owner: .all) == nil)
                let results = try await storage.insert(into: todo, [StorageInsert(id: "t2", content: ["k": "text"])])
                let after = try results[0].get()
                #expect(after.version == before.version + 1, "the rolled-back versions are taken again")
                let (changes, _) = await collectChanges(stream) { $0.contains { $0.version >= after.version } }
                #expect(changes.filter { $0.table == "fresh" }.isEmpty, "\(changes)")
                // (An announcement of the write before may still arrive: PostgreSQL delivers them
                // asynchronously.)
                #expect(
                    changes.filter { $0.table == "todo" && $0.version > before.version }.map(\.version)
                        == [after.version], "\(changes)")
            },
            .init("several keys are claimed and recorded at once; the first outcome of a key wins") {
                fixture async throws in
                let storage = fixture.storage
                let old = outcome("old")
                try await storage.recordOutcome(old)
                var later = outcome("old", status: 409)
                later.fingerprint = "another"
                var repeated = outcome("new-1", status: 400)
                repeated.body = nil
                let (second, third) = (later, repeated)
                let (claimed, kept) = try await storage.transaction {
                    let claimed = try await storage.claimOutcomes(
                        scope: "user-1", keys: ["new-1", "old", "new-2", "new-1"])
                    let kept = try await storage.recordOutcomes([
                        outcome("new-1"), outcome("new-2", status: 409), second, third,
                    ])
                    return (claimed, kept)
                }
                #expect(claimed == ["old": old])
                #expect(kept == [outcome("new-1"), outcome("new-2", status: 409), old, outcome("new-1")])
                #expect(
                    try await storage.recordedOutcome(scope: "user-1", key: "new-2") == outcome("new-2", status: 409))
                #expect(try await storage.recordedOutcome(scope: "user-1", key: "new-1") == outcome("new-1"))
                #expect(try await storage.claimOutcomes(scope: "user-2", keys: ["new-1"]).isEmpty, "scopes apart")
                // Outside a transaction a claim only reads.
                #expect(try await storage.claimOutcomes(scope: "user-1", keys: ["never", "old"]) == ["old": old])
                #expect(try await storage.recordedOutcome(scope: "user-1", key: "never") == nil)
                await expectError(StorageError.self, .invalidName, "a key with a space") {
                    try await storage.recordOutcomes([outcome("a b")])
                }
            },
            .init("keys claimed at once have one effect among concurrent transactions, whatever their order") {
                fixture async throws in
                let storage = fixture.storage
                let answers = try await withThrowingTaskGroup(of: [String].self) { group in
                    for index in 0..<8 {
                        group.addTask {
                            try await claimAndApplySet(
                                storage, keys: index % 2 == 0 ? ["k1", "k2"] : ["k2", "k1"], index: index)
                        }
                    }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                let applied = try await storage.query(todo, StorageQuery(limit: 100)).items.map(\.id).sorted()
                #expect(applied.count == 2, "the keys were applied \(applied.count / 2) times: \(applied)")
                #expect(Set(answers.map { $0.sorted() }) == [applied], "answers \(answers), applied \(applied)")
            },
        ]
    }

    /// Claims `keys` in a transaction; the free ones insert `set-<index>-<key>` as a set and record
    /// those ids. Returns the ids the keys' outcomes name.
    static func claimAndApplySet(_ storage: any ServerStorage, keys: [String], index: Int) async throws -> [String] {
        try await storage.transaction {
            let recorded = try await storage.claimOutcomes(scope: "s", keys: keys)
            let free = keys.filter { recorded[$0] == nil }
            let rows = free.map { StorageInsert(id: "set-\(index)-\($0)", content: ["i": .int(Int64(index))]) }
            _ = try await storage.insert(into: todo, rows)
            try await Task.sleep(for: .milliseconds(5))
            let kept = try await storage.recordOutcomes(
                free.map { key in
                    var claimed = outcome(key, scope: "s")
                    claimed.body = "set-\(index)-\(key)"
                    return claimed
                })
            return recorded.values.compactMap(\.body) + kept.compactMap(\.body)
        }
    }
}
