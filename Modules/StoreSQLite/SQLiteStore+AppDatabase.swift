public import GRDB
import QuerySQLite
import SyncCore

extension SQLiteStore {
    /// Opens Ferry's store inside a GRDB database the app opened and owns, beside the app's own
    /// tables: one file, one `DatabasePool` (or `DatabaseQueue`), one set of connections.
    ///
    /// Ferry's tables are all named `ferry_…` (its item tables `ferry_items_<n>`), so they cannot
    /// collide with the app's. Ferry applies its own migrations, in one transaction, and records its
    /// version in `ferry_meta`: the app's `grdb_migrations` and tables are left as they are, and
    /// the app's `DatabaseMigrator` never sees Ferry's migrations. The app's `ValueObservation`s see
    /// the rows Ferry writes (a pull, a local write through Ferry's API), since they go through the
    /// same database; ``sqlTableName(of:)`` names the SQL table of a Ferry table for them.
    ///
    /// The database's connections need Ferry's SQL functions: call ``prepare(_:)`` on the
    /// configuration before opening the database.
    ///
    /// ```swift
    /// var configuration = Configuration()
    /// SQLiteStore.prepare(&configuration)
    /// let dbPool = try DatabasePool(path: path, configuration: configuration)
    /// try appMigrator.migrate(dbPool)                  // the app's own tables
    /// let store = try SQLiteStore(database: dbPool)    // Ferry's, beside them
    /// let context = SyncContext(store: store, remote: remote)
    /// ```
    ///
    /// ``close()`` leaves the database open: it is the app's.
    ///
    /// - Throws: `StoreError` — `corrupt` when the database holds a newer Ferry schema or a
    ///   `ferry_meta` table that is not Ferry's; `io` when ``prepare(_:)`` was not called.
    public convenience init(database: any DatabaseWriter, configuration: Configuration = Configuration()) throws {
        let path = database.path
        let place = "the Ferry store in the app's database at '\(path)'"
        do {
            try database.write { db in
                guard try SQLiteQueryFunctions.areRegistered(db) else {
                    throw StoreError(
                        .io,
                        "cannot open \(place): its connections lack Ferry's SQL functions; call SQLiteStore.prepare(&configuration) before opening the database"
                    )
                }
                try StoreSchema.migrateInAppDatabase(db, place: place)
            }
        } catch {
            throw StoreErrors.mapIfNeeded(error, "opening", place)
        }
        let inMemory = path.isEmpty || path == ":memory:"
        try self.init(
            database: database, location: inMemory ? .memory : .file(path), place: place,
            capabilities: database is DatabasePool ? [.concurrentReaders, .declaredIndexes] : [.declaredIndexes],
            ownsDatabase: false, configuration: configuration)
    }

    /// Gives the connections of a database the app opens the SQL functions Ferry's queries use;
    /// call it before opening the database for ``init(database:configuration:)``.
    ///
    /// ```swift
    /// var configuration = Configuration()
    /// SQLiteStore.prepare(&configuration)
    /// ```
    public static func prepare(_ configuration: inout GRDB.Configuration) {
        configuration.prepareDatabase { db in try SQLiteQueryFunctions.register(db) }
    }

    /// The SQL table that holds the items of Ferry table `table`, or `nil` while it has none: for
    /// the app's own requests and `ValueObservation`s (`item` holds each item's JSON text).
    ///
    /// ```swift
    /// if let todo = try await store.sqlTableName(of: "todo") {
    ///     let titles = ValueObservation.tracking { db in
    ///         try String.fetchAll(db, sql: "SELECT item ->> '$.title' FROM \(todo) WHERE deleted = 0")
    ///     }
    /// }
    /// ```
    public func sqlTableName(of table: String) async throws -> String? {
        try await read { reader in try (reader as? SQLiteReader)?.sqlName(of: table) }
    }
}

extension SQLiteTransaction {
    /// Tells GRDB's transaction observers (the app's `ValueObservation`s) which of Ferry's SQL
    /// tables `commit` changed, before it commits.
    func notifyGRDBObservers(of commit: StoreCommit) throws {
        for table in commit.tables {
            guard let entry = try entry(table) else { continue }
            try db.notifyChanges(in: Table(ItemTable.name(entry.key, layout: entry.layout)))
        }
        if commit.queue {
            try db.notifyChanges(in: Table("ferry_operations"))
            try db.notifyChanges(in: Table("ferry_errors"))
        }
    }
}
