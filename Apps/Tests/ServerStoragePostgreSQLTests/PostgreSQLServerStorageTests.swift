import Foundation
import InMemoryTracing
import PostgresNIO
import ServerStorageConformance
import ServerStorageCore
import ServerStoragePostgreSQL
import ServerTestSupport
import StoreConformance
import SyncCore
import Testing
import Tracing

/// What only a shared database can show: several instances, migrations racing, the change stream
/// across instances and reconnections, and the faults of a server over the network.
@Suite(
    "PostgreSQLServerStorage", .enabled(if: TestPostgreSQL.isAvailable, TestPostgreSQL.skipReason),
    .timeLimit(.minutes(10)))
struct PostgreSQLServerStorageTests {
    static let todo = StorageTable(name: "todo")

    /// Runs `body` with a fresh schema, dropped afterwards.
    func withSchema(_ body: (String) async throws -> Void) async throws {
        let schema = await TestPostgreSQL.freshSchema()
        do {
            try await body(schema)
        } catch {
            await TestPostgreSQL.drop(schema: schema)
            throw error
        }
        await TestPostgreSQL.drop(schema: schema)
    }

    @Test func instancesStartingTogetherApplyEachMigrationOnce() async throws {
        try await withSchema { schema in
            let storages = try await withThrowingTaskGroup(of: PostgreSQLServerStorage.self) { group in
                for _ in 0..<4 { group.addTask { try await TestPostgreSQL.open(schema: schema, connections: 2) } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            let versions = try await TestPostgreSQL.execute(
                "SELECT version::text FROM \(schema).ferry_migrations ORDER BY version")
            #expect(versions == ["1", "2", "3"], "each migration once, in order")
            for storage in storages { try await storage.close() }
        }
    }

    @Test func twoInstancesKeepOneCommitOrderAndHearEachOthersWrites() async throws {
        try await withSchema { schema in
            let first = try await TestPostgreSQL.open(schema: schema)
            let second = try await TestPostgreSQL.open(schema: schema)
            let heard = second.changes()
            let perWriter = 60
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (index, storage) in [first, second, first, second].enumerated() {
                    group.addTask {
                        for step in 0..<perWriter {
                            _ = try await storage.insert(
                                into: Self.todo, id: "w\(index)-\(step)", content: ["step": .int(Int64(step))],
                                owner: nil)
                        }
                    }
                }
                try await group.waitForAll()
            }
            let rows = try await first.query(Self.todo, StorageQuery()).items
            #expect(rows.count == 4 * perWriter)
            #expect(Set(rows.map(\.version)).count == rows.count, "versions are not unique across instances")
            #expect(Set(rows.map(\.updatedAt)).count == rows.count, "updatedAt values are not unique")
            #expect(
                rows.sorted { $0.version < $1.version }.map(\.id)
                    == rows.sorted { $0.updatedAt < $1.updatedAt }.map(\.id))
            let newest = rows.map(\.version).max() ?? 0
            let (changes, _) = await ServerStorageConformanceSuite.collectChanges(heard) { changes in
                changes.contains { $0.version == newest }
            }
            #expect(changes.contains { $0.table == "todo" && $0.version == newest }, "instance 2 missed writes")
            try await first.close()
            try await second.close()
        }
    }

    @Test func concurrentInsertsShareStatementsYetEachGetsItsOwnOutcome() async throws {
        try await withSchema { schema in
            let storage = try await TestPostgreSQL.open(schema: schema)
            // Eight writers insert the same 60 ids at once: every id is inserted exactly once, the
            // others get a conflict carrying the row that won.
            let outcomes = try await withThrowingTaskGroup(of: [(String, StoredItem?, StorageError?)].self) { group in
                for writer in 0..<8 {
                    group.addTask {
                        var results: [(String, StoredItem?, StorageError?)] = []
                        for step in 0..<60 {
                            let id = "k\((step * 7 + writer) % 60)"
                            do {
                                let stored = try await storage.insert(
                                    into: Self.todo, id: id, content: ["writer": .int(Int64(writer))],
                                    owner: "u\(writer)")
                                results.append((id, stored, nil))
                            } catch let error as StorageError {
                                results.append((id, nil, error))
                            }
                        }
                        return results
                    }
                }
                return try await group.reduce(into: []) { $0 += $1 }
            }
            let wins = outcomes.compactMap { $0.1 }
            #expect(wins.count == 60)
            #expect(Set(wins.map(\.id)).count == 60)
            #expect(Set(wins.map(\.version)).count == 60)
            #expect(Set(wins.map(\.updatedAt)).count == 60)
            let byID = Dictionary(uniqueKeysWithValues: wins.map { ($0.id, $0) })
            for (id, _, error) in outcomes {
                guard let error else { continue }
                #expect(error.code == .conflict)
                #expect(error.current?.id == id)
                #expect(error.current?.version == byID[id]?.version)
            }
            let rows = try await storage.query(Self.todo, StorageQuery()).items
            #expect(Set(rows) == Set(wins), "what the winners were told differs from what was stored")
            try await storage.close()
        }
    }

    /// Two instances write the first rows of a new table at once, both with a field never seen
    /// before: the second's recording of its kind waits for the first's commit, then finds it
    /// recorded with the same kind and goes on. (It failed as busy, and every writer of a new
    /// table's first rows but one retried, one commit after the other.) A different kind is still
    /// refused.
    @Test func setsFixingTheSameNewFieldAtOnceAllGoIn() async throws {
        try await withSchema { schema in
            let first = try await TestPostgreSQL.open(schema: schema)
            let second = try await TestPostgreSQL.open(schema: schema)
            let table = StorageTable(name: "fresh")
            let rows: @Sendable (String, JSONValue) -> [StorageInsert] = { prefix, color in
                (0..<20).map { StorageInsert(id: "\(prefix)\($0)", content: ["color": color, "n": .int(Int64($0))]) }
            }
            _ = try await first.insert(into: table, [StorageInsert(id: "seed", content: [:])])
            let firstInserted = AsyncStream<Void>.makeStream()
            let waiting = "SELECT count(*)::text FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            let held = Task {
                try await first.transaction {
                    let results = try await first.insert(into: table, rows("a", .string("red")))
                    firstInserted.continuation.yield()
                    // Commits once the other instance waits for this transaction's kinds.
                    let deadline = ContinuousClock.now + .seconds(20)
                    while try await TestPostgreSQL.execute(waiting).first == "0", ContinuousClock.now < deadline {
                        try await Task.sleep(for: .milliseconds(20))
                    }
                    return results
                }
            }
            var started = firstInserted.stream.makeAsyncIterator()
            _ = await started.next()
            let secondResults = try await second.insert(into: table, rows("b", .string("blue")))
            let firstResults = try await held.value
            for result in firstResults + secondResults {
                if case .failure(let error) = result { Issue.record("a row failed: \(error)") }
            }
            let stored = try await first.query(table, StorageQuery()).items
            #expect(stored.count == 41)
            // A different kind for the same field is still a kind error, for every row that has it.
            let other = try await second.insert(into: table, rows("c", .int(3)))
            #expect(other.allSatisfy { if case .failure(let error) = $0 { error.code == .fieldKind } else { false } })
            try await first.close()
            try await second.close()
        }
    }

    /// A transaction that inserted into a table (holding its sequence row) and then updates an
    /// item, against an update of that item alone: every writer takes the table's lock before the
    /// item's row, so the second waits for the first instead of deadlocking with it (16 of 30 such
    /// races over HTTP were a 503 after PostgreSQL's one-second deadlock check).
    @Test func aTransactionHoldingTheTableAndAnUpdateOfItsItemDoNotDeadlock() async throws {
        try await withSchema { schema in
            let storage = try await TestPostgreSQL.open(schema: schema)
            let table = StorageTable(name: "locks")
            let x = try await storage.insert(into: table, id: "x", content: ["n": .int(0)], owner: nil)
            let firstInserted = AsyncStream<Void>.makeStream()
            let waiting = "SELECT count(*)::text FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            let batch = Task {
                try await storage.transaction {
                    _ = try await storage.insert(into: table, id: "a", content: ["n": .int(1)], owner: nil)
                    firstInserted.continuation.yield()
                    // Updates x once the update alone waits (for x's row before, now for the table).
                    let deadline = ContinuousClock.now + .seconds(10)
                    while try await TestPostgreSQL.execute(waiting).first == "0", ContinuousClock.now < deadline {
                        try await Task.sleep(for: .milliseconds(10))
                    }
                    return try await storage.replace(
                        in: table, id: "x", expectedVersion: x.version, content: ["n": .int(2)], deleted: false,
                        owner: .all)
                }
            }
            var started = firstInserted.stream.makeAsyncIterator()
            _ = await started.next()
            let alone: Result<StoredItem, StorageError>
            do {
                alone = .success(
                    try await storage.replace(
                        in: table, id: "x", expectedVersion: x.version, content: ["n": .int(3)], deleted: false,
                        owner: .all))
            } catch let error as StorageError {
                alone = .failure(error)
            }
            let updated = try await batch.value
            #expect(updated.content["n"] == .int(2))
            // The update alone came second: x had changed since it was read.
            switch alone {
            case .success(let item): Issue.record("both updates of one version went in: \(item)")
            case .failure(let error): #expect(error.code == .versionMismatch, "\(error)")
            }
            try await storage.close()
        }
    }

    @Test func concurrentReadsShareStatementsYetEachGetsItsOwnItem() async throws {
        try await withSchema { schema in
            let url = try #require(TestPostgreSQL.url)
            let tracer = InMemoryTracer()
            let storage = try await PostgreSQLServerStorage.open(
                url, configuration: .init(maximumConnections: 4, schema: schema, tracer: tracer))
            var stored: [String: StoredItem] = [:]
            for index in 0..<30 {
                let id = "r\(index)"
                stored[id] = try await storage.insert(
                    into: Self.todo, id: id, content: ["n": .int(Int64(index))], owner: "u\(index % 2)")
            }
            stored["r3"] = try await storage.replace(
                in: Self.todo, id: "r3", expectedVersion: stored["r3"]!.version, content: [:], deleted: true,
                owner: .all)
            // Sixteen readers at once, each for an owner or for everyone, of ids that exist, that
            // another owner holds, that were deleted (a tombstone), that never existed, and the same
            // id more than once in a row.
            let reads = 16 * 40
            let expected = stored
            let mismatches = try await withThrowingTaskGroup(of: [String].self) { group in
                for reader in 0..<16 {
                    group.addTask {
                        let scope: OwnerScope = reader % 3 == 0 ? .all : .owner("u\(reader % 2)")
                        var wrong: [String] = []
                        try await tracer.withSpan("reader \(reader)") { _ in
                            for step in 0..<40 {
                                let id = "r\((step / 2 * 7 + reader) % 34)"
                                let item = try await storage.item(in: Self.todo, id: id, owner: scope)
                                var seen = expected[id]
                                if case .owner(let subject) = scope, seen?.owner != subject { seen = nil }
                                if item != seen { wrong.append("\(scope) \(id): \(String(describing: item))") }
                            }
                        }
                        return wrong
                    }
                }
                return try await group.reduce(into: []) { $0 += $1 }
            }
            try await storage.close()
            #expect(mismatches.isEmpty, "\(mismatches.prefix(5))")
            let statements = tracer.finishedSpans.filter { span in
                guard case .string(let text)? = span.attributes.get("db.query.text") else { return false }
                return text.hasPrefix("SELECT") && text.contains("FROM ferry_items_")
            }
            #expect(statements.count < reads, "\(statements.count) statements for \(reads) reads")
        }
    }

    @Test func theChangeListenerCatchesUpAfterLosingItsConnection() async throws {
        try await withSchema { schema in
            let writer = try await TestPostgreSQL.open(schema: schema)
            let listener = try await TestPostgreSQL.open(schema: schema)
            let heard = listener.changes()
            var last = try await writer.insert(into: Self.todo, id: "before", content: [:], owner: nil)
            let listeners = "FROM pg_stat_activity WHERE application_name = 'ferry-listener:\(schema)'"
            for round in 0..<3 {
                // Both listeners are connected again (they reconnect within a few hundred ms)...
                var connected = 0
                for _ in 0..<100 where connected < 2 {
                    connected = try await TestPostgreSQL.execute("SELECT pid::text \(listeners)").count
                    if connected < 2 { try await Task.sleep(for: .milliseconds(50)) }
                }
                #expect(connected == 2, "round \(round): \(connected) listeners connected")
                // ...then lose their connections, and these writes happen while they reconnect:
                // only the catch-up can announce them.
                try await TestPostgreSQL.execute("SELECT pg_terminate_backend(pid)::text \(listeners)")
                for step in 0..<5 {
                    last = try await writer.insert(into: Self.todo, id: "r\(round)-\(step)", content: [:], owner: nil)
                }
            }
            let newest = last.version
            let (changes, _) = await ServerStorageConformanceSuite.collectChanges(heard) { changes in
                changes.contains { $0.version == newest }
            }
            #expect(changes.contains { $0.version == newest }, "the last write was never announced: \(changes)")
            try await writer.close()
            try await listener.close()
        }
    }

    @Test func anUnreachableServerIsOneLineWithoutThePassword() async throws {
        let url = try PostgreSQLURL("postgres://ferry:hunter2secret@127.0.0.1:1/nowhere")
        await expectError(StorageError.self, .unavailable, "opening on a closed port") {
            _ = try await PostgreSQLServerStorage.open(url, configuration: .init(connectTimeout: .seconds(2)))
        }
        do {
            _ = try await PostgreSQLServerStorage.open(url, configuration: .init(connectTimeout: .seconds(2)))
        } catch let error as StorageError {
            #expect(error.message.contains("postgres://ferry@127.0.0.1:1/nowhere"), "\(error.message)")
            #expect(!error.message.contains("hunter2"))
            #expect(!error.message.contains("\n"))
        }
    }

    /// Holds the lock on `table`'s sequence row from outside the storage until `release`.
    @discardableResult
    func holdingTheSequence<T>(_ schema: String, _ table: String, _ body: () async throws -> T) async throws -> T {
        guard let url = TestPostgreSQL.url else { throw StorageError(.unavailable, "no test database") }
        let connection = try await TestPostgreSQL.connect(url)
        let logger = Logger(label: "ferry.test")
        try await connection.query("BEGIN", logger: logger)
        try await connection.query(
            PostgresQuery(unsafeSQL: "SELECT 1 FROM \(schema).ferry_tables WHERE name = '\(table)' FOR UPDATE"),
            logger: logger)
        do {
            let result = try await body()
            try await connection.query("ROLLBACK", logger: logger)
            try await connection.close()
            return result
        } catch {
            try? await connection.close()
            throw error
        }
    }

    @Test func aFullDiskIsTheFullCodeAndOverloadsAreBusyOrUnavailable() {
        // PostgreSQL's disk cannot be filled here; its codes are mapped as the server needs them.
        #expect(PostgreSQLServerStorage.code(forSQLState: "53100") == .full, "disk_full")
        #expect(PostgreSQLServerStorage.code(forSQLState: "53200") == .busy, "out_of_memory")
        #expect(PostgreSQLServerStorage.code(forSQLState: "53300") == .unavailable, "too_many_connections")
        #expect(PostgreSQLServerStorage.code(forSQLState: "08006") == .unavailable, "connection_failure")
        #expect(PostgreSQLServerStorage.code(forSQLState: "40P01") == .busy, "deadlock_detected")
        #expect(PostgreSQLServerStorage.code(forSQLState: "23505") == .io, "anything else")
    }

    @Test func aStatementPastItsTimeoutIsBusyAndWritesNothing() async throws {
        try await withSchema { schema in
            let storage = try await TestPostgreSQL.open(schema: schema, statementTimeout: .milliseconds(400))
            _ = try await storage.insert(into: Self.todo, id: "first", content: [:], owner: nil)
            try await holdingTheSequence(schema, "todo") {
                await expectError(StorageError.self, .busy, "an insert waiting on a held lock") {
                    _ = try await storage.insert(into: Self.todo, id: "blocked", content: [:], owner: nil)
                }
            }
            #expect(try await storage.item(in: Self.todo, id: "blocked", owner: .all) == nil)
            _ = try await storage.insert(into: Self.todo, id: "blocked", content: [:], owner: nil)
            try await storage.close()
        }
    }

    @Test func anExhaustedPoolMakesRequestsWaitABoundedTimeThenBusy() async throws {
        try await withSchema { schema in
            let storage = try await TestPostgreSQL.open(
                schema: schema, connections: 1, connectionWait: .milliseconds(300), statementTimeout: .seconds(20))
            // The pool's one connection is opened by the first request, within the same 300 ms: on a
            // loaded machine that can take longer, so a read is tried until the connection is open.
            var connected = false
            for _ in 0..<40 where !connected {
                do {
                    _ = try await storage.tableExists("todo")
                    connected = true
                } catch let error as StorageError where error.code == .busy || error.code == .unavailable {
                    // Not open yet within the wait: `unavailable` (no lease, room in the pool).
                    try await Task.sleep(for: .milliseconds(250))
                }
            }
            try #require(connected, "the pool never opened its connection")
            _ = try await storage.insert(into: Self.todo, id: "first", content: [:], owner: nil)
            let started = ContinuousClock.now
            let stuck = try await holdingTheSequence(schema, "todo") {
                // The only connection waits on the held lock...
                let stuck = Task { try await storage.insert(into: Self.todo, id: "stuck", content: [:], owner: nil) }
                try await Task.sleep(for: .milliseconds(200))
                // ...so the next request finds no connection and gives up after the bounded wait.
                await expectError(StorageError.self, .busy, "a read while the pool is exhausted") {
                    _ = try await storage.item(in: Self.todo, id: "first", owner: .all)
                }
                #expect(ContinuousClock.now - started < .seconds(15))
                return stuck
            }
            // Once the lock is gone the stuck insert completes (awaited: a fixed pause was too short
            // on a loaded machine) and the pool serves again.
            _ = try await stuck.value
            #expect(try await storage.item(in: Self.todo, id: "first", owner: .all) != nil)
            try await storage.close()
        }
    }

    @Test func cutConnectionsFailAsUnavailableThenThePoolRecovers() async throws {
        try await withSchema { schema in
            let storage = try await TestPostgreSQL.open(schema: schema)
            for index in 0..<20 {
                _ = try await storage.insert(into: Self.todo, id: "i\(index)", content: [:], owner: nil)
            }
            let cut = try await TestPostgreSQL.execute(
                "SELECT pg_terminate_backend(pid)::text FROM pg_stat_activity WHERE application_name = 'ferry:\(schema)'"
            )
            #expect(cut.contains("true"), "no pool connection was cut: \(cut)")
            var failures: [StorageError.Code] = []
            var recovered = false
            for _ in 0..<50 {
                do {
                    let page = try await storage.query(Self.todo, StorageQuery())
                    #expect(page.items.count == 20)
                    recovered = true
                    break
                } catch let error as StorageError {
                    failures.append(error.code)
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
            #expect(recovered, "the storage never recovered: \(failures)")
            #expect(failures.allSatisfy { $0 == .unavailable || $0 == .busy }, "\(failures)")
            try await storage.close()
        }
    }

    @Test func textPostgreSQLCannotHoldIsRefusedWithoutStoringAnything() async throws {
        try await withSchema { schema in
            let storage = try await TestPostgreSQL.open(schema: schema)
            for content: JSONObject in [["title": "a\u{0}b"], ["a\u{0}": 1], ["nested": ["x": ["\u{0}"]]]] {
                await expectError(StorageError.self, .fieldKind, "U+0000 in \(content)") {
                    _ = try await storage.insert(into: Self.todo, id: "nul", content: content, owner: nil)
                }
            }
            #expect(try await storage.item(in: Self.todo, id: "nul", owner: .all) == nil)
            try await storage.close()
        }
    }
}
