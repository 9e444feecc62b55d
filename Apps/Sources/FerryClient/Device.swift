import Foundation
public import SyncCore
import Synchronization
import Transport

/// One device: a local store, its sync context, a connection that can be switched off, and the
/// client operations the CLI and the REPL run.
///
/// ```swift
/// let phone = try Device(name: "phone", store: .sqlite("phone.ferry"), server: settings)
/// _ = try await phone.insert("todo", ["title": "Milk"])
/// let result = try await phone.push()
/// ```
public actor Device {
    public let name: String
    public let location: StoreLocation
    public let server: ServerSettings?
    public let policy: ConflictPolicy
    let connectivity: Connectivity
    /// What automatic sync is told of the simulated connection.
    private let network = ManualConnectivity()
    private var store: any LocalStore
    var context: SyncContext
    /// Where attachment files live: `<store>.attachments/` beside a file store, a temporary
    /// directory (removed on close) for a memory store; `nil` for a device made for tests.
    let attachmentFiles: StoreAttachmentFiles?
    /// Whether ``context`` was given the attachment configuration yet (it is async; see ``prepared()``).
    var attachmentsConfigured = false
    /// The tables automatic sync keeps pulled, while it runs.
    public private(set) var automaticTables: [String]?

    public init(
        name: String, store location: StoreLocation, server: ServerSettings?, policy: ConflictPolicy = .keep
    ) throws {
        self.name = name
        self.location = location
        self.server = server
        self.policy = policy
        let remote: HTTPRemote? = server.map { $0.remote() }
        connectivity = Connectivity(remote)
        store = try location.open()
        context = SyncContext(
            store: store, remote: connectivity, conflictHandler: policy.handler,
            pushLeaseLifetime: Self.pushLeaseLifetime)
        attachmentFiles = StoreAttachmentFiles(location.attachmentsDirectory ?? StoreAttachmentFiles.temporary())
    }

    /// For tests: a device on any store and remote.
    public init(name: String, store: any LocalStore, remote: any RemoteService, policy: ConflictPolicy = .keep) {
        self.name = name
        location = .memory
        server = nil
        self.policy = policy
        connectivity = Connectivity(remote)
        self.store = store
        attachmentFiles = nil
        context = SyncContext(
            store: store, remote: connectivity, conflictHandler: policy.handler,
            pushLeaseLifetime: Self.pushLeaseLifetime)
    }

    /// Whether the device talks to the server.
    public var isOnline: Bool { connectivity.online.withLock { $0 } }

    /// Switches the simulated connection.
    public func setOnline(_ online: Bool) {
        connectivity.online.withLock { $0 = online }
        network.isOnline = online
    }

    /// Starts syncing `tables` by itself (``SyncContext/startAutomaticSync(_:configuration:connectivity:)``):
    /// pushes soon after local writes, pulls when the server's change feed says a table changed (or
    /// every `pollInterval` without a feed).
    /// How long a push of a `ferry` that was killed (SIGKILL) keeps the next push waiting: short,
    /// since a command's push is renewed every second while it runs.
    static let pushLeaseLifetime = Duration.seconds(3)

    public func startAutomaticSync(_ tables: [String], pollInterval: Duration = .seconds(10)) async throws {
        guard server != nil else {
            throw ClientError(.usage, "automatic sync needs a server", hint: "give --server URL (or FERRY_SERVER)")
        }
        for table in tables {
            do {
                try StoreValidation.validateTableName(table)
            } catch {
                throw ClientError(.usage, error.message)
            }
        }
        await prepared().startAutomaticSync(
            tables.map { SyncSubscription(table: $0, queryID: "automatic") },
            configuration: AutomaticSyncConfiguration(pollInterval: pollInterval), connectivity: network)
        automaticTables = tables
    }

    /// Stops automatic sync (and waits for its work to stop).
    public func stopAutomaticSync() async {
        await context.stopAutomaticSync()
        automaticTables = nil
    }

    /// Where sync stands (automatic sync keeps it current).
    public var syncStatus: SyncStatus.Snapshot { context.status.snapshot }

    /// Where sync stands now, then each change, until the stream is dropped.
    public func syncStatusUpdates() -> AsyncStream<SyncStatus.Snapshot> { context.status.updates() }

    /// Whether the server answers now, asked with one request that waits at most `timeout`; `nil`
    /// without a server, or while the device is offline. Any answer counts (a server of the family
    /// that does not list its tables answers 404); a 401 or 403 is a refusal of the token; a web
    /// page or Ferry's "no such resource" is no table endpoint (a wrong path in the URL).
    public func checkServer(timeout: Duration = .seconds(5)) async -> ServerReachability? {
        guard let server, isOnline else { return nil }
        let probe = server.remote(timeout: timeout, retry: .init(maximumAttempts: 1))
        let now = Timestamp(millisecondsSince1970: Int64((Date().timeIntervalSince1970 * 1000).rounded(.down)))
        do {
            _ = try await probe.tableNames()
        } catch  where error.code == .noEndpoint {
            // Something answers, but it is no table-protocol server (a wrong path, a web page).
            return .unreachable(since: now, reason: SyncProblem(error))
        } catch  where error.code == .notFound || error.code == .badRequest {
            // An answer, even a refusal of the path: the server is there.
        } catch  where error.status.map({ $0 < 500 && $0 != 401 && $0 != 403 && $0 != 429 }) ?? false {
            // Likewise.
        } catch {
            return .unreachable(since: now, reason: SyncProblem(error))
        }
        return .reachable(since: now)
    }

    /// The results of a query, now and after every change (local, pulled, pushed).
    public func observe(_ table: String, query: TableQuery) -> AsyncThrowingStream<[JSONObject], any Error> {
        context.table(table).observe(query)
    }

    /// Closes and reopens the store, as an app restart would (a memory store starts empty again).
    public func restart() async throws {
        await stopAutomaticSync()
        try await store.close()
        store = try location.open()
        context = SyncContext(
            store: store, remote: connectivity, conflictHandler: policy.handler,
            pushLeaseLifetime: Self.pushLeaseLifetime)
        attachmentsConfigured = false
    }

    /// Closes the store (after stopping automatic sync); a memory store's attachment files go with it.
    public func close() async throws {
        await stopAutomaticSync()
        try await store.close()
        if location == .memory { attachmentFiles?.removeDirectory() }
    }

    /// Progress events of this device's sync work.
    public func events() -> AsyncStream<SyncEvent> { context.events(bufferingNewest: 1_000) }

    // MARK: Local data

    public func insert(_ table: String, _ item: JSONObject) async throws -> JSONObject {
        try await context.table(table).insert(item)
    }

    /// Inserts `items` into `table` and queues their inserts, all in one transaction: every item is
    /// imported, or none is. `progress` is called with the count so far every 1,000 items.
    ///
    /// - Throws: The first item's failure, as a `ClientError` naming it by `names(index)` (its line
    ///   or its position), after which nothing was imported.
    public func importItems(
        _ table: String, _ items: [JSONObject], names: @escaping @Sendable (Int) -> String,
        progress: @escaping @Sendable (Int) -> Void
    ) async throws -> Int {
        do {
            return try await context.write { writes in
                var start = 0
                while start < items.count {
                    let chunk = Array(items[start..<min(items.count, start + 1_000)])
                    do throws(SyncError) {
                        try writes.insert(contentsOf: chunk, into: table)
                    } catch {
                        // Which item: one by one (the transaction is rolled back in any case).
                        for (offset, item) in chunk.enumerated() {
                            do throws(SyncError) {
                                try writes.insert(item, into: table)
                            } catch {
                                throw ImportFailure(index: start + offset, error: error)
                            }
                        }
                        throw ImportFailure(index: start, error: error)
                    }
                    start += chunk.count
                    progress(start)
                }
                return items.count
            }
        } catch let failure as ImportFailure {
            throw ClientError(
                .usage, "\(names(failure.index)) was not imported: \(failure.error.message)",
                hint: "nothing was imported; fix it and run the import again")
        }
    }

    /// Merges `changes` into the local item (which must exist) and queues the update.
    public func update(_ table: String, id: String, changes: JSONObject) async throws -> JSONObject {
        // An update that would do nothing, or not what it says, is refused rather than passed over.
        if let given = changes["id"], given != .string(id) {
            throw ClientError(
                .usage, "the change names the id \(given.serialized()), but the item is '\(id)': an id cannot change",
                hint: "insert an item with the new id, and delete this one")
        }
        if changes["deleted"] == .bool(true) {
            throw ClientError(.usage, "an update cannot delete an item", hint: "`delete \(table) \(id)` does")
        }
        guard changes.keys.contains(where: { $0 != "id" && !Rendering.systemColumns.contains($0) }) else {
            throw ClientError(
                .usage, "nothing to change: the change holds no field of the item",
                hint: #"give the fields to change, for example '{"done":true}'"#)
        }
        let handle = context.table(table)
        guard var item = try await handle.item(id: id) else {
            throw ClientError(
                .notFound, "no item '\(id)' in '\(table)' on \(name)", hint: "`get` or `query` lists them")
        }
        for (key, value) in changes where key != "id" { item[key] = value }
        return try await handle.update(item)
    }

    public func delete(_ table: String, id: String) async throws {
        try await context.table(table).delete(id: id)
    }

    /// The local item with `id` in `table`, or `nil`.
    public func item(_ table: String, id: String) async throws -> JSONObject? {
        try await context.table(table).item(id: id)
    }

    public func query(_ table: String, _ query: TableQuery) async throws -> QueryResult {
        try await context.table(table).query(query)
    }

    /// The tables the store knows, for completion and `status`.
    public func tableNames() async throws -> [String] {
        try await store.read { try $0.tableNames() }.filter { !$0.hasPrefix("__") }
    }

    // MARK: Sync

    public func push() async throws -> PushResult { try await prepared().push() }

    /// Pulls `table`; with `countsTotal` the server counts what the pull will bring (for progress
    /// with a total: `SyncEvent.pullCounted`).
    public func pull(_ table: String, query: TableQuery, queryID: String?, pageSize: Int, countsTotal: Bool = false)
        async throws -> PullResult
    {
        let result = try await prepared().pull(
            table, query: query, queryID: queryID, options: PullOptions(pageSize: pageSize, countsTotal: countsTotal))
        try await keepTable(table)
        return result
    }

    public func purge(_ table: String, query: TableQuery, force: Bool) async throws -> Int {
        let had = try await tableNames().contains(table)
        let purged = try await context.purge(table, query: query, force: force)
        // Purged of every item, the table is still the device's: `query` says it has no items.
        if had { try await keepTable(table) }
        return purged
    }

    /// Defines `table` (schemaless, no index) when the store does not list it: a store has a table
    /// from its first item, so one pulled empty or purged whole would otherwise be "no table" to
    /// `query`, where it is a table without items.
    private func keepTable(_ table: String) async throws {
        if try await !store.read({ try $0.tableNames().contains(table) }) {
            try await store.write { tx in
                if try !tx.tableNames().contains(table) { try tx.define(TableDefinition(name: table)) }
            }
        }
    }

    /// How many operations of `table` wait in the queue.
    /// The operations queued in every table, not yet accepted by the server.
    public func queuedOperationCount() async throws -> Int { try await context.queuedOperationCount() }

    public func queuedOperationCount(_ table: String) async throws -> Int {
        try await store.operationCount(table: table)
    }

    /// Queued operations per table, the errors, and the delta tokens.
    public func status() async throws -> DeviceStatus {
        let operations = try await context.queuedOperations()
        let errors = try await context.operationErrors()
        let tables = Set(try await tableNames()).union(operations.map(\.table))
        var tokens: [String: [String: String]] = [:]
        for table in tables {
            let entries = try await store.read { try $0.deltaTokens(table: table) }
            if !entries.isEmpty { tokens[table] = entries }
        }
        var queued: [String: Int] = [:]
        for operation in operations { queued[operation.table, default: 0] += 1 }
        var status = DeviceStatus(
            device: name, store: location.description, online: isOnline, queued: queued,
            operations: operations, errors: errors, deltaTokens: tokens)
        status.lastSyncedAt = try await context.lastSyncedAt()
        status.unfinishedPulls = try await context.unfinishedPulls()
        status.queuedAttachments = try await queuedAttachmentCount()
        status.automaticTables = automaticTables
        status.server = server?.url.absoluteString
        if automaticTables != nil {
            let sync = context.status.snapshot
            status.sync = sync
            // Automatic sync knows; without it, the server is asked.
            status.reachability = sync.reachability == .unknown ? await checkServer() : sync.reachability
        } else {
            status.reachability = await checkServer()
        }
        return status
    }

    public func conflicts() async throws -> [OperationErrorRecord] { try await context.operationErrors() }

    /// The item each failed operation started from (what the device last had from the server), by
    /// operation id: the "base" column of the conflict view. Inserts have none.
    public func conflictBases() async throws -> [Int64: JSONObject] {
        var bases: [Int64: JSONObject] = [:]
        for operation in try await context.queuedOperations() {
            if let base = operation.baseItem { bases[operation.id] = base }
        }
        return bases
    }

    /// Resolves a recorded error; returns the resolution applied (the server's deletion wins over
    /// keeping the local item: ``SyncContext/resolveError(_:_:)``).
    @discardableResult
    public func resolve(_ errorID: String, _ resolution: ErrorResolution) async throws -> ErrorResolution {
        try await context.resolveError(errorID, resolution)
    }
}

/// What `status` shows.
public struct DeviceStatus: Sendable {
    public var device: String
    public var store: String
    public var online: Bool
    /// The number of queued operations per table.
    public var queued: [String: Int]
    public var operations: [QueuedOperation]
    public var errors: [OperationErrorRecord]
    /// Delta tokens per table and query id.
    public var deltaTokens: [String: [String: String]]
    /// When the device last pushed or pulled successfully.
    public var lastSyncedAt: Timestamp?
    /// The tables whose last pull stopped before its end (not everything is synced then).
    public var unfinishedPulls: [String] = []
    /// The tables automatic sync keeps in sync, when it runs.
    public var automaticTables: [String]?
    /// The server's URL, when the device has one.
    public var server: String?
    /// Whether the server answered when the status was taken (`nil`: no server, or offline).
    public var reachability: ServerReachability?
    /// Where automatic sync stands, while it runs.
    public var sync: SyncStatus.Snapshot?
    /// Attachment uploads and deletes waiting for a push.
    public var queuedAttachments = 0

    /// A status; see the properties.
    public init(
        device: String, store: String, online: Bool, queued: [String: Int], operations: [QueuedOperation],
        errors: [OperationErrorRecord], deltaTokens: [String: [String: String]]
    ) {
        self.device = device
        self.store = store
        self.online = online
        self.queued = queued
        self.operations = operations
        self.errors = errors
        self.deltaTokens = deltaTokens
    }
}

/// Which item of an import failed, and why.
private struct ImportFailure: Error {
    var index: Int
    var error: SyncError
}
