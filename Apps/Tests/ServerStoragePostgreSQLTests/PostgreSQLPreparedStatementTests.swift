import ServerStorageCore
@testable import ServerStoragePostgreSQL
import ServerTestSupport
import SyncCore
import Testing

/// Reads by id run as statements prepared once per connection: they must survive what makes a
/// prepared statement fail, a table whose result type changed and a connection replaced.
@Suite(
    "PostgreSQL prepared statements", .enabled(if: TestPostgreSQL.isAvailable, TestPostgreSQL.skipReason),
    .timeLimit(.minutes(5)))
struct PostgreSQLPreparedStatementTests {
    static let todo = StorageTable(name: "todo")

    func withStorage(_ body: (PostgreSQLServerStorage, String) async throws -> Void) async throws {
        let schema = await TestPostgreSQL.freshSchema()
        // One connection: the second read runs where the first prepared its statement.
        let storage = try await TestPostgreSQL.open(schema: schema, connections: 1)
        do {
            try await body(storage, schema)
        } catch {
            try? await storage.close()
            await TestPostgreSQL.drop(schema: schema)
            throw error
        }
        try await storage.close()
        await TestPostgreSQL.drop(schema: schema)
    }

    @Test func aReadAfterTheTableChangedItsColumnsPreparesItsStatementAgain() async throws {
        try await withStorage { storage, schema in
            _ = try await storage.insert(into: Self.todo, id: "a", content: ["title": "Milk"], owner: "ann")
            #expect(try await storage.item(in: Self.todo, id: "a", owner: .all)?.owner == "ann")
            #expect(storage.statementNames.counts.named == 1)
            // The prepared plan's result type goes stale: PostgreSQL refuses it (0A000).
            let number = try await TestPostgreSQL.execute(
                "SELECT number::text FROM \(schema).ferry_tables WHERE name = 'todo'")
            let table = "\(schema).ferry_items_\(number.first!!)"
            try await TestPostgreSQL.execute("ALTER TABLE \(table) ALTER COLUMN owner TYPE varchar(200)")
            let item = try await storage.item(in: Self.todo, id: "a", owner: .all)
            #expect(item?.owner == "ann")
            #expect(item?.content["title"] == "Milk")
            #expect(storage.statementNames.counts.retired == 1, "the stale statement was not prepared again")
            // And the statement prepared again serves the next reads.
            #expect(try await storage.item(in: Self.todo, id: "a", owner: .owner("ann")) != nil)
            #expect(try await storage.item(in: Self.todo, id: "a", owner: .owner("bob")) == nil)
        }
    }

    @Test func aReplacedConnectionPreparesItsStatementsAgain() async throws {
        try await withStorage { storage, schema in
            _ = try await storage.insert(into: Self.todo, id: "a", content: ["title": "Milk"], owner: nil)
            #expect(try await storage.item(in: Self.todo, id: "a", owner: .all) != nil)
            let cut = try await TestPostgreSQL.execute(
                "SELECT pg_terminate_backend(pid)::text FROM pg_stat_activity WHERE application_name = 'ferry:\(schema)'"
            )
            #expect(cut.contains("true"), "no pool connection was cut: \(cut)")
            var failures: [StorageError.Code] = []
            var read: StoredItem?
            for _ in 0..<50 {
                do {
                    read = try await storage.item(in: Self.todo, id: "a", owner: .all)
                    break
                } catch let error as StorageError {
                    failures.append(error.code)
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
            #expect(read?.content["title"] == "Milk", "the storage never read again: \(failures)")
            #expect(failures.allSatisfy { $0 == .unavailable || $0 == .busy }, "\(failures)")
        }
    }
}
