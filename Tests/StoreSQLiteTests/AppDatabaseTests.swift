import Foundation
import GRDB
import StoreConformance
import SyncCore
import SyncTesting
import Testing

@testable import StoreSQLite

/// Issue 29: Ferry's store inside the app's own GRDB database, beside the app's tables.
enum AppDatabase {
    /// The app's own migrations: a `notes` table with a row, under the identifier "v1", which is
    /// also the name of Ferry's first migration in a store file.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(sql: "CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)")
            try db.execute(sql: "INSERT INTO notes (text) VALUES ('the app''s own row')")
        }
        return migrator
    }

    /// The database as an app opens it, a pool or (`open(path) { try DatabaseQueue(path: $0,
    /// configuration: $1) }`) a queue: prepared for Ferry, with its own migrations applied.
    static func open<Writer: DatabaseWriter>(
        _ path: String,
        _ make: (String, Configuration) throws -> Writer = { try DatabasePool(path: $0, configuration: $1) }
    ) throws -> Writer {
        var configuration = Configuration()
        SQLiteStore.prepare(&configuration)
        let database = try make(path, configuration)
        try migrator.migrate(database)
        return database
    }
}

@Suite("SQLiteStore conformance, inside an app's GRDB database")
struct SQLiteAppDatabaseConformanceTests {
    @Test(arguments: StoreConformanceSuite.all)
    func conformance(_ check: StoreConformanceCheck) async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let pool = try AppDatabase.open(directory.path + "/app.sqlite")
        try await check.run { StoreFixture(store: try SQLiteStore(database: pool)) }
        try pool.close()
    }

    @Test(arguments: StoreConformanceSuite.all)
    func conformanceInADatabaseQueue(_ check: StoreConformanceCheck) async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let queue = try AppDatabase.open(directory.path + "/app.sqlite") {
            try DatabaseQueue(path: $0, configuration: $1)
        }
        try await check.run { StoreFixture(store: try SQLiteStore(database: queue)) }
        try queue.close()
    }
}

@Suite("SQLiteStore inside an app's GRDB database", .timeLimit(.minutes(2)))
struct AppDatabaseTests {
    @Test func theAppsTablesAndMigrationsAreUntouchedAndFerrysAreApart() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let pool = try AppDatabase.open(directory.path + "/app.sqlite")
        let store = try SQLiteStore(database: pool)
        try await store.upsert("todo", [["id": "a", "title": "Milk"]])
        // Opening again (the app's next launch) applies nothing twice.
        let again = try SQLiteStore(database: pool)
        #expect(try await again.item("todo", id: "a")?["title"] == "Milk")
        try await store.close()
        try await again.close()

        // Closing the store left the app's database open, its migrations and rows as they were.
        try await pool.read { db in
            #expect(try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations") == ["v1"])
            #expect(try String.fetchAll(db, sql: "SELECT text FROM notes") == ["the app's own row"])
            let tables = try String.fetchAll(
                db,
                sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
            #expect(tables.filter { !$0.hasPrefix("ferry_") } == ["grdb_migrations", "notes"], "\(tables)")
            #expect(tables.contains("ferry_items_1"), "\(tables)")
        }
        #expect(try await pool.read { db in try AppDatabase.migrator.hasCompletedMigrations(db) })
        try pool.close()
    }

    @Test func aDatabaseNotPreparedOrFromANewerFerryIsRefusedWithOneLine() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let plain = try DatabaseQueue(path: directory.path + "/plain.sqlite")
        let refused = #expect(throws: StoreError.self) { try SQLiteStore(database: plain) }
        #expect(
            refused?.message.contains("SQLiteStore.prepare(&configuration)") == true, "\(String(describing: refused))")
        try plain.close()

        let pool = try AppDatabase.open(directory.path + "/app.sqlite")
        _ = try SQLiteStore(database: pool)
        try await pool.write { db in try db.execute(sql: "UPDATE ferry_meta SET value = 99 WHERE key = 'schemaVersion'")
        }
        let newer = #expect(throws: StoreError.self) { try SQLiteStore(database: pool) }
        #expect(newer?.code == .corrupt)
        #expect(newer?.message.contains("newer than this version of Ferry") == true, "\(String(describing: newer))")
        try pool.close()
    }

    @Test func theAppsValueObservationSeesAPulledRowAndFerrysWritesAreQueued() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let pool = try AppDatabase.open(directory.path + "/app.sqlite")
        let store = try SQLiteStore(database: pool)
        let server = ModelServer()
        let context = SyncContext(store: store, remote: server.remote())
        server.seed("todo", [["id": "s1", "title": "From the server"]])
        try await context.table("todo").pull()
        let table = try #require(try await store.sqlTableName(of: "todo"))

        // The app observes Ferry's table with its own request.
        let titles = ValueObservation.tracking { db in
            try String.fetchAll(db, sql: "SELECT json_extract(item, '$.title') FROM \(table) ORDER BY id")
        }
        .removeDuplicates()
        var values = titles.values(in: pool).makeAsyncIterator()
        #expect(try await values.next() == ["From the server"])
        server.seed("todo", [["id": "s2", "title": "Pulled later"]])
        try await context.table("todo").pull()
        #expect(try await values.next() == ["From the server", "Pulled later"])

        // A write through Ferry's API is queued as usual, and the app's request sees it too.
        _ = try await context.table("todo").insert(["id": "local", "title": "Written here"])
        #expect(try await context.queuedOperationCount(table: "todo") == 1)
        #expect(try await values.next() == ["Written here", "From the server", "Pulled later"])
        #expect(try await context.push().pushed == 1)
        #expect(server.row("todo", id: "local") != nil)
        try await store.close()
        try pool.close()
    }
}
