import Foundation
import GRDB
import ServerStorageCore
import ServerStorageSQLite
import StoreConformance
import SyncCore
import Synchronization
import Testing

@Suite("SQLiteServerStorage specifics", .timeLimit(.minutes(10)))
struct SQLiteServerStorageTests {
    @Test func refusesFilesThatAreNotItsDatabases() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let garbage = directory.path + "/garbage.sqlite"
        try Data(repeating: 0x5A, count: 4096).write(to: URL(fileURLWithPath: garbage))
        #expect {
            try SQLiteServerStorage(location: .file(garbage))
        } throws: { error in
            (error as? StorageError)?.code == .corrupt
        }
        let foreign = directory.path + "/foreign.sqlite"
        let queue = try DatabaseQueue(path: foreign)
        try await queue.write { db in try db.execute(sql: "CREATE TABLE customers (id INTEGER PRIMARY KEY)") }
        try queue.close()
        #expect {
            try SQLiteServerStorage(location: .file(foreign))
        } throws: { error in
            (error as? StorageError)?.code == .corrupt && "\(error)".contains("another application")
        }
        // Its own file opens again.
        let own = directory.path + "/own.sqlite"
        try await SQLiteServerStorage(location: .file(own)).close()
        try await SQLiteServerStorage(location: .file(own)).close()
    }

    @Test func recordsTheKindOfEachUndeclaredField() async throws {
        let storage = try SQLiteServerStorage(location: .memory)
        let table = StorageTable(name: "t", schema: TableSchema(fields: ["declared": .string]))
        _ = try await storage.insert(
            into: table, id: "1", content: ["a": 1, "b": "x", "c": .null, "declared": 5, "d": [1]], owner: nil)
        #expect(try await storage.fieldKinds(of: "t") == ["a": .number, "b": .string, "d": .array])
        try await storage.close()
    }

    @Test func aTransactionThatFailsKeepsNotEvenTheKindsOfItsFields() async throws {
        let storage = try SQLiteServerStorage(location: .memory)
        let table = StorageTable(name: "t")
        struct Abandoned: Error {}
        let refusedInBatch = Mutex<StorageError.Code?>(nil)
        await #expect(throws: Abandoned.self) {
            try await storage.transaction {
                _ = try await storage.insert(into: table, id: "r1", content: ["tag": "text"], owner: nil)
                // The second write knows the field's kind from the first one.
                do {
                    _ = try await storage.insert(into: table, id: "r2", content: ["tag": 1], owner: nil)
                } catch let error as StorageError {
                    refusedInBatch.withLock { $0 = error.code }
                }
                throw Abandoned()
            }
        }
        #expect(refusedInBatch.withLock { $0 } == .fieldKind)
        #expect(try await storage.item(in: table, id: "r1", owner: .all) == nil)
        #expect(try await storage.fieldKinds(of: "t")["tag"] == nil)
        // The kind met in the abandoned batch went with it, in memory too: the next write of the
        // field records its kind again, and holds every later write to it.
        _ = try await storage.insert(into: table, id: "r3", content: ["tag": "again"], owner: nil)
        #expect(try await storage.fieldKinds(of: "t")["tag"] == .string)
        await #expect(throws: StorageError.self) {
            try await storage.insert(into: table, id: "r4", content: ["tag": 7], owner: nil)
        }
        try await storage.close()
    }

    @Test func queriesOnIndexedColumnsUseTheDatabasePlan() async throws {
        let storage = try SQLiteServerStorage(location: .memory)
        let table = StorageTable(name: "feed")
        for index in 0..<30 {
            _ = try await storage.insert(into: table, id: "r\(index)", content: ["n": .int(Int64(index))], owner: nil)
        }
        let keyset = try await storage.query(
            table,
            StorageQuery(
                filter: .binary(
                    .greaterThan, .field("updatedAt"), .literal(.dateTimeOffset(Timestamp(millisecondsSince1970: 0)))),
                orderBy: [.field("updatedAt")], limit: 10))
        #expect(keyset.plan == .database)
        #expect(keyset.items.count == 10 && keyset.hasMore)
        let computed = try await storage.query(
            table,
            StorageQuery(filter: .binary(.equal, .binary(.modulo, .field("n"), .literal(.int(7))), .literal(.int(0)))))
        #expect(computed.plan == .database)
        #expect(computed.items.map(\.id) == ["r0", "r14", "r21", "r28", "r7"])
        // The version's number does not sort like its tag: the evaluator orders by the tag.
        let byVersion = try await storage.query(table, StorageQuery(orderBy: [.field("version")], limit: 3))
        #expect(byVersion.plan == .evaluator)
        let all = try await storage.query(table, StorageQuery()).items
        #expect(byVersion.items.map(\.id) == all.sorted { $0.versionTag < $1.versionTag }.prefix(3).map(\.id))
        try await storage.close()
    }

    /// Hostile queries (every function, casts, arithmetic at the limits, deep nesting) over rows
    /// holding extreme values, through the shared compiler on the server's layout: the storage gives
    /// the evaluator's ids, order and count, or refuses, and most run wholly in SQLite.
    @Test func hostileQueriesThroughTheSharedCompilerAgreeWithTheEvaluator() async throws {
        var random = SeededRandom(seed: 0x5EED_5E4F)
        let storage = try SQLiteServerStorage(location: .memory)
        let tables = [
            StorageTable(name: "plain"), StorageTable(name: "typed", schema: HostileQueries.typedSchema),
        ]
        var rows: [String: [JSONObject]] = [:]
        for table in tables {
            for item in HostileQueries.items(&random, count: 30) {
                var content = item
                for name in ["id", "createdAt", "updatedAt", "version", "deleted"] { content[name] = nil }
                guard case .string(let id)? = item["id"] else { continue }
                guard let stored = try? await storage.insert(into: table, id: id, content: content, owner: nil)
                else { continue }
                rows[table.name, default: []].append(stored.queryable)
            }
        }
        var plans: [QueryPlan: Int] = [:]
        var failures: [String] = []
        for round in 0..<300 {
            let generated = HostileQueries.query(&random)
            for table in tables {
                let query = StorageQuery(
                    filter: generated.filter, orderBy: generated.orderBy, skip: max(0, generated.skip ?? 0),
                    limit: generated.top.map { max(0, $0) }, includeDeleted: true, includeTotalCount: true)
                var check = TableQuery(filter: query.filter, orderBy: query.orderBy)
                check.skip = query.skip
                check.top = query.limit
                check.includeTotalCount = true
                check.includeDeleted = true
                let sorted = (rows[table.name] ?? []).sorted { $0.id! < $1.id! }
                guard let expected = try? QueryEvaluator(schema: table.schema).evaluate(check, over: sorted) else {
                    continue
                }
                guard let page = try? await storage.query(table, query) else { continue }
                plans[page.plan, default: 0] += 1
                if page.items.map(\.id) != expected.items.compactMap(\.id) || page.totalCount != expected.totalCount {
                    failures.append(
                        "round \(round) on \(table.name) [\(page.plan)]: \(check.odataQueryString(protocolVersion: .v3))\n  storage:   \(page.items.map(\.id))\n  evaluator: \(expected.items.compactMap(\.id))"
                    )
                }
            }
        }
        for failure in failures.prefix(10) { Issue.record("\(failure)") }
        #expect(failures.isEmpty, "\(failures.count) queries disagree: \(plans)")
        // Deep nesting, casts to dates and NaN-making arithmetic stay in the evaluator; the rest runs
        // in SQLite (the server's former compiler ran none of the functions, casts or arithmetic).
        #expect((plans[.database] ?? 0) >= 200, "\(plans)")
        try await storage.close()
    }
}
