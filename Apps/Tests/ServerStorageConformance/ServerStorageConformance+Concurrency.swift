import ServerStorageCore
import StoreConformance
import SyncCore
import Testing

extension ServerStorageConformanceSuite {
    static var concurrency: [ServerStorageCheck] {
        [
            .init("concurrent writers get unique versions and updatedAt values in commit order") {
                fixture async throws in
                let storage = fixture.storage
                // The clock stands still: every stamp past the first comes from the +1 ms rule.
                let writers = 4
                let perWriter = 40
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for writer in 0..<writers {
                        group.addTask {
                            var mine: StoredItem?
                            for step in 0..<perWriter {
                                if step % 4 == 3, let item = mine {
                                    mine = try await storage.replace(
                                        in: todo, id: item.id, expectedVersion: item.version,
                                        content: ["step": .int(Int64(step))], deleted: false, owner: .all)
                                } else {
                                    mine = try await storage.insert(
                                        into: todo, id: "w\(writer)-\(step)", content: ["writer": .int(Int64(writer))],
                                        owner: nil)
                                }
                            }
                        }
                    }
                    try await group.waitForAll()
                }
                let all = try await storage.query(todo, StorageQuery()).items
                #expect(all.count == writers * perWriter * 3 / 4)
                #expect(Set(all.map(\.version)).count == all.count, "versions are not unique")
                #expect(Set(all.map(\.updatedAt)).count == all.count, "updatedAt values are not unique")
                let byVersion = all.sorted { $0.version < $1.version }.map(\.id)
                let byUpdatedAt = all.sorted { $0.updatedAt < $1.updatedAt }.map(\.id)
                #expect(byVersion == byUpdatedAt, "updatedAt order differs from commit (version) order")
            },
            .init("a reader paging on (updatedAt, id) beside concurrent writers misses no row") {
                fixture async throws in
                let storage = fixture.storage
                let total = 240
                let collected = try await withThrowingTaskGroup(of: [String].self) { group in
                    for writer in 0..<3 {
                        group.addTask {
                            for step in 0..<(total / 3) {
                                // A few writers share each millisecond; ids do not follow time.
                                if step % 5 == 0 { fixture.clock.advance(by: 1) }
                                _ = try await storage.insert(
                                    into: todo, id: "\(9 - writer)-\(1000 - step)", content: [:], owner: nil)
                            }
                            return []
                        }
                    }
                    group.addTask {
                        var seen: [String] = []
                        var cursor: (Timestamp, String)?
                        var emptyPasses = 0
                        // Keep paging until the writers are done and a pass finds nothing new.
                        while emptyPasses < 3 {
                            var query = StorageQuery(orderBy: [.field("updatedAt"), .field("id")], limit: 7)
                            if let (time, id) = cursor {
                                let after: QueryExpression = .binary(
                                    .greaterThan, .field("updatedAt"), .literal(.dateTimeOffset(time)))
                                let tie: QueryExpression = .binary(
                                    .and, .binary(.equal, .field("updatedAt"), .literal(.dateTimeOffset(time))),
                                    .binary(.greaterThan, .field("id"), .literal(.string(id))))
                                query.filter = .binary(.or, after, tie)
                            }
                            let page: StoragePage
                            do {
                                page = try await storage.query(todo, query)
                            } catch let error as StorageError where error.code == .noSuchTable {
                                await Task.yield()
                                continue
                            }
                            seen += page.items.map(\.id)
                            if let last = page.items.last { cursor = (last.updatedAt, last.id) }
                            if page.items.isEmpty {
                                let count = try await storage.query(todo, StorageQuery(includeTotalCount: true))
                                    .totalCount
                                if count == total { emptyPasses += 1 }
                                await Task.yield()
                            }
                        }
                        return seen
                    }
                    var result: [String] = []
                    for try await part in group { result += part }
                    return result
                }
                #expect(collected.count == total, "the reader saw \(collected.count) rows of \(total)")
                #expect(Set(collected).count == collected.count, "the reader saw a row twice")
            },
            .init("concurrent compare-and-set writers: exactly one wins each round") { fixture async throws in
                let storage = fixture.storage
                var current = try await storage.insert(into: todo, id: "counter", content: ["n": 0], owner: nil)
                for round in 1...10 {
                    let base = current
                    let outcomes = try await withThrowingTaskGroup(of: StoredItem?.self) { group in
                        for writer in 0..<4 {
                            group.addTask {
                                do {
                                    return try await storage.replace(
                                        in: todo, id: "counter", expectedVersion: base.version,
                                        content: ["n": .int(Int64(round)), "by": .int(Int64(writer))], deleted: false,
                                        owner: .all)
                                } catch let error as StorageError where error.code == .versionMismatch {
                                    return nil
                                }
                            }
                        }
                        var results: [StoredItem?] = []
                        for try await outcome in group { results.append(outcome) }
                        return results
                    }
                    let winners = outcomes.compactMap { $0 }
                    #expect(winners.count == 1, "round \(round): \(winners.count) writers won")
                    current = try #require(try await storage.item(in: todo, id: "counter", owner: .all))
                    #expect(current.content["n"] == .int(Int64(round)))
                }
            },
        ]
    }

    static var fields: [ServerStorageCheck] {
        [
            .init("a claimed table name is one table whatever its case, even for claims at once") {
                fixture async throws in
                let storage = fixture.storage
                #expect(try await storage.claimTable("Notes") == "Notes")
                #expect(try await storage.claimTable("notes") == "Notes")
                #expect(try await storage.claimTable("NOTES") == "Notes")
                _ = try await storage.insert(into: StorageTable(name: "Notes"), id: "1", content: [:], owner: nil)
                // Names that an earlier version made differing only in case: each keeps its own.
                try await storage.prepare([StorageTable(name: "twin"), StorageTable(name: "Twin")])
                #expect(try await storage.claimTable("twin") == "twin")
                #expect(try await storage.claimTable("Twin") == "Twin")
                #expect(try await storage.claimTable("TWIN") == "Twin", "the first by name")
                let spellings = ["RaceA", "racea", "RACEA", "raceA", "rAcEa", "Racea", "RACEa", "racEA"]
                let claimed = try await withThrowingTaskGroup(of: String.self) { group in
                    for spelling in spellings { group.addTask { try await storage.claimTable(spelling) } }
                    return try await group.reduce(into: Set<String>()) { $0.insert($1) }
                }
                #expect(claimed.count == 1, "\(claimed)")
                let tables = try await storage.tableNames()
                #expect(tables.filter { $0.lowercased() == "racea" } == Array(claimed), "\(tables)")
                #expect(tables.filter { $0.lowercased() == "notes" } == ["Notes"])
                await expectError(StorageError.self, .invalidTableName, "a name no table may have") {
                    try await storage.claimTable("bad name")
                }
            },
            .init("an undeclared field's first value fixes its kind; another kind is refused") { fixture async throws in
                let storage = fixture.storage
                _ = try await storage.insert(
                    into: todo, id: "1", content: ["n": 1, "s": "a", "b": true, "a": [1], "o": ["k": 1], "z": .null],
                    owner: nil)
                _ = try await storage.insert(
                    into: todo, id: "2", content: ["n": 2.5, "s": .null, "b": false, "a": [], "o": [:], "z": "now"],
                    owner: nil)
                for (field, value) in [
                    ("n", JSONValue.string("1")), ("s", 1), ("b", "true"), ("a", ["k": 1]), ("o", [1]), ("z", 3),
                ] {
                    await expectError(StorageError.self, .fieldKind, "\(field) = \(value)") {
                        try await storage.insert(into: todo, id: "bad-\(field)", content: [field: value], owner: nil)
                    }
                }
                let two = try #require(try await storage.item(in: todo, id: "2", owner: .all))
                await expectError(StorageError.self, .fieldKind, "replace with another kind") {
                    try await storage.replace(
                        in: todo, id: "2", expectedVersion: two.version, content: ["b": 0], deleted: false, owner: .all)
                }
                #expect(try await storage.query(todo, StorageQuery()).items.map(\.id) == ["1", "2"])
            },
            .init("declared fields are left to the schema; each table keeps its own kinds") { fixture async throws in
                let storage = fixture.storage
                let typed = StorageTable(name: "typed", schema: TableSchema(fields: ["when": .date]))
                _ = try await storage.insert(into: typed, id: "1", content: ["when": "2024-01-01"], owner: nil)
                _ = try await storage.insert(into: typed, id: "2", content: ["when": 5], owner: nil)
                _ = try await storage.insert(into: StorageTable(name: "a"), id: "1", content: ["x": 1], owner: nil)
                _ = try await storage.insert(into: StorageTable(name: "b"), id: "1", content: ["x": "one"], owner: nil)
            },
        ]
    }

    static var owners: [ServerStorageCheck] {
        [
            .init("an owner scope hides other owners' rows from reads, queries and writes") { fixture async throws in
                let storage = fixture.storage
                let alice = try await storage.insert(into: todo, id: "a", content: ["v": 1], owner: "alice")
                _ = try await storage.insert(into: todo, id: "b", content: ["v": 2], owner: "bob")
                _ = try await storage.insert(into: todo, id: "c", content: ["v": 3], owner: nil)
                #expect(try await storage.item(in: todo, id: "a", owner: .owner("bob")) == nil)
                #expect(try await storage.item(in: todo, id: "a", owner: .owner("alice")) == alice)
                let bobs = try await storage.query(todo, StorageQuery(includeTotalCount: true, owner: .owner("bob")))
                #expect(bobs.items.map(\.id) == ["b"])
                #expect(bobs.totalCount == 1)
                #expect(try await storage.query(todo, StorageQuery()).items.map(\.id) == ["a", "b", "c"])
                await expectError(StorageError.self, .notFound, "replace of another owner's row") {
                    try await storage.replace(
                        in: todo, id: "a", expectedVersion: alice.version, content: [:], deleted: false,
                        owner: .owner("bob"))
                }
                await expectError(StorageError.self, .notFound, "delete of another owner's row") {
                    try await storage.delete(from: todo, id: "a", expectedVersion: alice.version, owner: .owner("bob"))
                }
                let conflict = await expectError(StorageError.self, .conflict, "insert of an id another owner holds") {
                    try await storage.insert(into: todo, id: "a", content: [:], owner: "bob")
                }
                #expect(conflict?.current?.owner == "alice")
                #expect(try await storage.item(in: todo, id: "a", owner: .all) == alice)
            },
            .init("owners compare exactly: one the storage cannot hold is refused, never cut") { fixture async throws in
                let storage = fixture.storage
                let alice = try await storage.insert(into: todo, id: "a", content: ["v": 1], owner: "alice")
                let cut = "alice\u{0}mallory"
                await expectError(StorageError.self, .invalidName, "read with a NUL owner") {
                    try await storage.item(in: todo, id: "a", owner: .owner(cut))
                }
                await expectError(StorageError.self, .invalidName, "query with a NUL owner") {
                    try await storage.query(todo, StorageQuery(owner: .owner(cut)))
                }
                await expectError(StorageError.self, .invalidName, "insert with a NUL owner") {
                    try await storage.insert(into: todo, id: "m", content: [:], owner: cut)
                }
                await expectError(StorageError.self, .invalidName, "replace with a NUL owner") {
                    try await storage.replace(
                        in: todo, id: "a", expectedVersion: alice.version, content: [:], deleted: false,
                        owner: .owner(cut))
                }
                await expectError(StorageError.self, .invalidName, "delete with a NUL owner") {
                    try await storage.delete(from: todo, id: "a", expectedVersion: alice.version, owner: .owner(cut))
                }
                // Owners that differ only after a prefix, or in case, stay apart.
                _ = try await storage.insert(into: todo, id: "b", content: ["v": 2], owner: "alice2")
                _ = try await storage.insert(into: todo, id: "c", content: ["v": 3], owner: "Alice")
                for (owner, ids) in [("alice", ["a"]), ("alice2", ["b"]), ("Alice", ["c"]), ("alic", [])] {
                    let page = try await storage.query(todo, StorageQuery(owner: .owner(owner)))
                    #expect(page.items.map(\.id) == ids, "owner \(owner)")
                }
                #expect(try await storage.item(in: todo, id: "a", owner: .all) == alice)
            },
        ]
    }
}
