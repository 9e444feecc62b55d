import Foundation
public import SyncCore

/// Where the reference server keeps its tables: one protocol, several database backends.
///
/// The server speaks the table protocol; a `ServerStorage` keeps the rows and assigns what the
/// database must assign. Ferry ships `SQLiteServerStorage` (module ServerStorageSQLite: a file, or
/// in memory); the protocol is shaped so that a PostgreSQL backend fits beside it (every method is
/// `async`, each write is one transaction, and no transaction is held across the caller's code).
///
/// ```swift
/// let storage = try SQLiteServerStorage(location: .memory)
/// let movies = StorageTable(name: "movies")
/// try await storage.prepare([movies])
/// let stored = try await storage.insert(into: movies, id: "m1", content: ["title": "Alien"], owner: nil)
/// let page = try await storage.query(movies, StorageQuery(limit: 50))
/// print(stored.version, page.items.count)
/// ```
///
/// ## The contract (checked by the shared suite in `Tests/ServerStorageConformance`)
///
/// - **Commit-ordered stamps.** Every write (insert, replace, delete) takes the next value of the
///   table's write sequence, in one transaction with the change: ``StoredItem/version`` is the
///   table's sequence number (strictly increasing per table, in commit order, never reused) and
///   ``StoredItem/updatedAt`` is `max(now, previous updatedAt of the table + 1 ms)`, so it too is
///   unique per table and increases in commit order. A reader that pages with a keyset cursor on
///   `(updatedAt, id)` can therefore never miss a row that commits after it read a page.
/// - **Compare and set.** ``replace(in:id:expectedVersion:content:deleted:owner:)`` and
///   ``delete(from:id:expectedVersion:owner:)`` change a row only while its version is still the one
///   the caller read; otherwise they fail with ``StorageError/Code/versionMismatch`` carrying the
///   current row, so the caller can re-check its preconditions and retry.
/// - **Queries** mean exactly what `QueryEvaluator` gives over ``StoredItem/queryable`` with the
///   table's schema, with the `id` tie-breaker, soft-deleted rows left out unless asked for, and the
///   owner scope applied. A backend may compile queries to its own language, and must fall back to
///   the evaluator for what it cannot compile exactly.
/// - **Dynamic tables and fields.** Writing to a table that does not exist creates it. The JSON kind
///   of each undeclared field (``FieldKind``) is fixed by its first non-null value; a later value of
///   another kind fails with ``StorageError/Code/fieldKind``.
/// - **Owners.** A row may carry an owner (the subject of a per-user table). With
///   ``OwnerScope/owner(_:)`` every read, query and write sees only that owner's rows.
/// - Errors are ``StorageError``s.
public protocol ServerStorage: Sendable {
    /// A one-line description for logs, such as `sqlite:/var/ferry.sqlite`.
    var location: String { get }

    /// Creates the declared tables that do not exist yet (idempotent).
    func prepare(_ tables: [StorageTable]) async throws

    /// The names of every table, declared or created by a write, sorted.
    func tableNames() async throws -> [String]

    /// The table a first write into `name` goes to: `name` when it exists; else the table whose
    /// name differs from it only in the case of its letters (the first by name); else `name`,
    /// created now. One table for every spelling, even for writes racing from several instances
    /// (PostgreSQL takes a lock on the lower-cased name), so that `TodoItem` and `todoitem`
    /// written at the same moment never become two tables.
    ///
    /// ```swift
    /// let name = try await storage.claimTable("TodoItem")   // "todoitem" when that exists
    /// ```
    func claimTable(_ name: String) async throws -> String

    /// Whether `table` exists.
    func tableExists(_ table: String) async throws -> Bool

    /// The newest write of each table, from the catalog (one read, whatever the number of tables):
    /// of the tables in `names` (`nil`: every table), and with `changedSince`, only those whose
    /// newest write has an `updatedAt` at or after it (milliseconds since 1970), sorted by name.
    /// Tables that do not exist are left out.
    func tableStamps(named names: Set<String>?, changedSince: Int64?) async throws -> [StorageChange]

    /// The row `id` of `table` within `owner`'s scope, soft-deleted or not; `nil` when absent.
    func item(in table: StorageTable, id: String, owner: OwnerScope) async throws -> StoredItem?

    /// One page of a query. Fails with ``StorageError/Code/noSuchTable`` for a table that does not
    /// exist and ``StorageError/Code/invalidQuery`` for a query the schema rejects.
    func query(_ table: StorageTable, _ query: StorageQuery) async throws -> StoragePage

    /// Inserts a new row, creating the table when needed. Fails with
    /// ``StorageError/Code/conflict`` (and the existing row in ``StorageError/current``) when the id
    /// exists, soft-deleted or not, whoever owns it.
    func insert(into table: StorageTable, id: String, content: JSONObject, owner: String?) async throws -> StoredItem

    /// Inserts `rows` in their order, as many ``insert(into:id:content:owner:)`` calls in one
    /// transaction would, and answers each row's own outcome in the same order: its stored item,
    /// or the error that insert alone would have thrown (``StorageError/Code/conflict`` with the
    /// current row for an id that exists, or that an earlier row of `rows` took;
    /// ``StorageError/Code/fieldKind``, ``StorageError/Code/invalidName`` …). A row that fails
    /// leaves nothing, and the next goes on. The rows that succeed take consecutive stamps of the
    /// table's sequence, in order, and are announced once.
    ///
    /// It throws only when the set as a whole could not run (the database is busy or unreachable),
    /// and then keeps none of it. Inside a ``transaction(_:)`` it is part of that transaction. A
    /// backend writes the set with a few statements whatever its size; the default implementation
    /// (for a backend without one) makes one insert after the other in a transaction.
    ///
    /// ```swift
    /// let results = try await storage.insert(
    ///     into: todo, [StorageInsert(id: "a", content: ["title": "Milk"]), StorageInsert(id: "a", content: [:])])
    /// // results[0]: .success(the stored "a"); results[1]: .failure(conflict, current: the stored "a")
    /// ```
    func insert(into table: StorageTable, _ rows: [StorageInsert]) async throws -> [Result<StoredItem, StorageError>]

    /// Replaces a row's content and deleted flag if its version is still `expectedVersion`.
    /// Fails with ``StorageError/Code/notFound`` when the row is absent (or outside `owner`'s scope)
    /// and ``StorageError/Code/versionMismatch`` when it changed.
    func replace(
        in table: StorageTable, id: String, expectedVersion: Int64, content: JSONObject, deleted: Bool,
        owner: OwnerScope
    ) async throws -> StoredItem

    /// Removes a row for good if its version is still `expectedVersion`; errors as for
    /// ``replace(in:id:expectedVersion:content:deleted:owner:)``.
    func delete(from table: StorageTable, id: String, expectedVersion: Int64, owner: OwnerScope) async throws

    /// Announcements of committed writes, from this process and (for a shared database) from every
    /// other one: each says "table T changed, up to this stamp".
    ///
    /// The stream starts with the writes committed after the call and ends when the storage closes.
    /// Announcements are hints, not the changes themselves: a listener reads the rows with a
    /// query. A listener that falls far behind loses the oldest announcements it has not read
    /// (``StorageChanges/bufferLimit``), never the newest.
    func changes() -> AsyncStream<StorageChange>

    /// The outcome recorded for `key` within `scope`, or `nil` when none is (never recorded, or
    /// forgotten).
    func recordedOutcome(scope: String, key: String) async throws -> RecordedOutcome?

    /// Claims an idempotency key for the current ``transaction(_:)``: returns the outcome recorded
    /// for `key` within `scope` when there is one, or `nil` when there is none, and the transaction
    /// then holds the key until it ends. Another transaction claiming the same key meanwhile, in
    /// this process or another one on the same database, waits until this one ends, then sees the
    /// outcome it recorded (or claims the key itself if it rolled back). So a key has at most one
    /// effect: claim, write, ``recordOutcome(_:)``, all in one transaction. Outside a transaction
    /// it is ``recordedOutcome(scope:key:)``.
    func claimOutcome(scope: String, key: String) async throws -> RecordedOutcome?

    /// ``claimOutcome(scope:key:)`` for several keys of one scope at once: the outcomes recorded for
    /// those that have one, by key; the current transaction holds every other key until it ends.
    /// Keys are claimed in a fixed order (sorted), so two transactions claiming overlapping sets
    /// wait for each other instead of deadlocking. A key given twice is claimed once.
    func claimOutcomes(scope: String, keys: [String]) async throws -> [String: RecordedOutcome]

    /// ``recordOutcome(_:)`` for several outcomes at once, in one statement or a few: answers, in
    /// order, the outcome kept for each (the first recorded for its scope and key wins, an earlier
    /// one of `outcomes` included).
    func recordOutcomes(_ outcomes: [RecordedOutcome]) async throws -> [RecordedOutcome]

    /// Records an outcome (in the current transaction, if any). The first outcome of a scope and
    /// key wins: recording another one for them keeps the first and returns it; otherwise returns
    /// `outcome`. Fails with ``StorageError/Code/invalidName`` for a key
    /// ``RecordedOutcome/validateKey(_:)`` refuses.
    @discardableResult
    func recordOutcome(_ outcome: RecordedOutcome) async throws -> RecordedOutcome

    /// Forgets the outcomes recorded before `milliseconds` (since 1970) and returns how many.
    @discardableResult
    func forgetOutcomes(recordedBefore milliseconds: Int64) async throws -> Int

    /// Runs `body` as one transaction: the writes it makes through this storage (from its own
    /// task) commit together when it returns, and none is kept when it throws (its error is thrown
    /// as it is). Within a transaction each write still succeeds or fails on its own (a failed write
    /// leaves nothing, and the next one goes on), reads see the transaction's writes, other writers
    /// of the same rows wait, and announcements and caches follow the commit. Called inside another
    /// transaction of this storage, it is a savepoint: it rolls back alone, and commits with the
    /// outer one. A batch of many writes costs one durable commit instead of one each.
    ///
    /// ```swift
    /// let stored = try await storage.transaction {
    ///     if let earlier = try await storage.claimOutcome(scope: "", key: "k-1") { return earlier.status }
    ///     _ = try await storage.insert(into: todo, id: "a", content: ["title": "Milk"], owner: nil)
    ///     try await storage.recordOutcome(outcome)   // commits with the insert
    ///     return 201
    /// }
    /// ```
    func transaction<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T

    /// Takes the write locks of `tables` for the rest of the current transaction, in one order
    /// (by name), before the idempotency keys and rows the transaction writes: writers of a table
    /// then wait for each other in one order and never deadlock. Outside a transaction it does
    /// nothing; so does the default, for a storage whose transaction excludes every other writer
    /// already (SQLite's holds the database's one writer). PostgreSQL locks the tables' sequence
    /// rows: a batch that inserted into a table, then updated an item of it, against an update of
    /// that item alone, deadlocked (16 of 30 such races, each answered 503 after a second).
    ///
    /// ```swift
    /// try await storage.transaction {
    ///     try await storage.lockTables(["todo"])
    ///     if let earlier = try await storage.claimOutcome(scope: "", key: "k-1") { return earlier.status }
    ///     …
    /// }
    /// ```
    func lockTables(_ tables: [String]) async throws

    /// Runs `body` as one ``transaction(_:)`` that excludes every other holder of `lock` on this
    /// database, in this process or another (several instances on one PostgreSQL database): two
    /// bodies holding the same lock never overlap. The reference server holds
    /// ``StorageLock/attachmentRoom`` while it checks the attachment limits and reserves room, so
    /// that uploads through several instances stay within them.
    ///
    /// SQLite's transaction holds the database's one writer, which other processes wait for too:
    /// the default, a plain ``transaction(_:)``, excludes already. PostgreSQL takes a
    /// transaction-scoped advisory lock first.
    ///
    /// ```swift
    /// let room = try await storage.exclusiveTransaction(.attachmentRoom) {
    ///     try await checkAndReserve()   // no other instance checks meanwhile
    /// }
    /// ```
    func exclusiveTransaction<T: Sendable>(_ lock: StorageLock, _ body: @escaping @Sendable () async throws -> T)
        async throws -> T

    /// Releases the storage. Later calls fail with ``StorageError/Code/closed``.
    func close() async throws

    /// A blob storage that keeps attachment content in this storage's own database (the same SQLite
    /// file, the same PostgreSQL schema), or `nil` when this kind of storage has none (the default).
    func blobStorage() -> (any BlobStorage)?

    /// Reports the storage's waits for shared resources (a pooled connection, the writer) to
    /// `observer` from now on, instead of to the one before; `nil` for nobody. The reference
    /// server attaches its metrics here when it starts. A storage without such waits may ignore it
    /// (the default does).
    func observe(_ observer: (any StorageObserver)?)

    /// The resources this storage waits for and reports to its observer (SQLite: the writer;
    /// PostgreSQL: a pooled connection and an insert's turn); none by default. The server's
    /// metrics export the wait series of these only.
    var waitResources: [StorageWait.Resource] { get }
}

/// The wall clock every backend stamps with by default (their configurations take another, for
/// tests).
package enum StorageClock {
    /// The system clock in milliseconds since 1970.
    @Sendable package static func systemMilliseconds() -> Int64 {
        Int64((Date().timeIntervalSince1970 * 1000).rounded(.down))
    }
}

/// A lock that ``ServerStorage/exclusiveTransaction(_:_:)`` holds across every instance on one
/// database.
public struct StorageLock: Sendable, Hashable {
    /// Its name, the same in every instance.
    public var name: String

    public init(_ name: String) { self.name = name }

    /// Checking the attachment limits and reserving room for an upload (its creation and completion).
    public static let attachmentRoom = StorageLock("ferry.attachment-room")
}

extension ServerStorage {
    public func blobStorage() -> (any BlobStorage)? { nil }

    public func lockTables(_ tables: [String]) async throws {}

    public func exclusiveTransaction<T: Sendable>(
        _ lock: StorageLock, _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        try await transaction(body)
    }
}
