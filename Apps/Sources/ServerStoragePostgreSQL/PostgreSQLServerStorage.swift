import Foundation
public import Logging
import PostgresNIO
import QuerySQL
public import ServerStorageCore
import SyncCore
import Synchronization
public import Tracing

/// The reference server's storage for several instances: PostgreSQL through postgres-nio.
///
/// Any number of `ferry serve` processes can share one database: stamps stay commit-ordered per
/// table across all of them, and every instance hears every write through ``changes()``.
///
/// ```swift
/// let url = try PostgreSQLURL("postgres://ferry:ferry@127.0.0.1:5432/ferry")
/// let storage = try await PostgreSQLServerStorage.open(url)
/// let todo = StorageTable(name: "todo")
/// let item = try await storage.insert(into: todo, id: "1", content: ["title": "Milk"], owner: nil)
/// print(item.updatedAt, item.versionTag)
/// try await storage.close()
/// ```
///
/// ## Layout
///
/// The same as `SQLiteServerStorage`'s (`ServerSQLLayout`): each table is one SQL table `ferry_items_<n>` named by its
/// catalog number: `id` (`text COLLATE "C"`, the primary key), `item` (`jsonb`, the item's own
/// fields), `created_at` and `updated_at` (`bigint` milliseconds, `updated_at` unique), `version`
/// (`bigint`), `deleted` (`boolean`) and `owner` (`text`, indexed with `updated_at`). The catalog
/// `ferry_tables` holds each table's number and write sequence; `ferry_fields` the JSON kind of each
/// undeclared field; `ferry_migrations` the schema versions applied. Migrations run at
/// ``open(_:configuration:)`` under a transaction-scoped advisory lock, so instances starting
/// together apply each one once.
///
/// ## Commit order
///
/// Every write updates the table's row in `ferry_tables` (`last_version + 1`, `updatedAt =
/// max(now, last + 1 ms)`) in the same transaction as the change, as late as possible and most often
/// in one statement. The row lock serializes the writes of one table until they commit, across every
/// instance, so stamps are unique and follow commit order: a client paging by `(updatedAt, id)`
/// never misses a row that commits late. Writes to different tables do not wait for each other.
/// The cost is one commit at a time per table (docs/server.md gives the figures).
///
/// ## Faults
///
/// Every statement runs under `statement_timeout`; a request waits at most
/// ``Configuration/connectionWait`` for one of ``Configuration/maximumConnections`` connections.
/// Both fail with `StorageError.Code.busy`; an unreachable or restarting server fails with
/// `StorageError.Code.unavailable` (the reference server answers 503 with `Retry-After`), also a
/// wait for a connection that ends with room in the pool and no lease meanwhile (the pool could
/// open none), and the pool reconnects by itself. A transaction either commits whole or not at all.
public final class PostgreSQLServerStorage: ServerStorage {
    /// How the storage connects, waits and tells time.
    public struct Configuration: Sendable {
        /// The most connections the pool opens.
        public var maximumConnections: Int
        /// The connections the pool keeps open while idle (opened at the start, and again after a
        /// failure), at most ``maximumConnections``; 0 (the default) opens them on demand and closes
        /// each after 60 s idle. postgres-nio 1.33.2 arms an idle timer (three tasks and a dispatch
        /// timer) each time a connection above this number goes back to the pool: the reference
        /// server keeps all of them open (docs/server.md gives the figures).
        public var minimumConnections: Int
        /// How long a pooled connection stays idle before it runs `SELECT 1` to find out it died
        /// before a request does; `nil` (the default) for never: like the idle timer, postgres-nio
        /// arms this timer each time a connection goes back to the pool. A connection that died
        /// is then found by the request that uses it: a closed one at once (503 `unavailable`), a
        /// silent one after ``statementTimeout`` and 5 s (503, and the connection is replaced).
        public var keepAlive: Duration?
        /// How long a request waits for a free connection before failing with
        /// `StorageError.Code.busy` (or `unavailable` when the pool could open no connection).
        public var connectionWait: Duration
        /// The longest a statement may run (PostgreSQL's `statement_timeout`).
        public var statementTimeout: Duration
        /// How long opening a connection may take.
        public var connectTimeout: Duration
        /// The clock stamps come from, in milliseconds since 1970 (tests inject their own).
        public var now: @Sendable () -> Int64
        /// Where the storage logs, as its caller chose; `nil` for nowhere.
        public var logger: Logger?
        /// The PostgreSQL schema the tables live in, created when absent; `nil` for the URL's
        /// `schema` parameter, or else the role's default (`public`). Several Ferry servers can share one database in different schemas.
        /// A name of 1 to 48 characters of `a-z 0-9 _`, not starting with a digit.
        public var schema: String?
        /// The tracer each statement's span goes to, when it runs inside a span (a request's, on
        /// the reference server); `nil` (the default) traces none. The span is named by the
        /// statement's operation (`SELECT` …) and carries `db.system.name` `postgresql` and
        /// `db.query.text`, the SQL with its `$1` placeholders, never the values bound to them.
        public var tracer: (any Tracer)?

        /// A configuration; see the properties.
        public init(
            maximumConnections: Int = 16, connectionWait: Duration = .seconds(5),
            statementTimeout: Duration = .seconds(30), connectTimeout: Duration = .seconds(5),
            now: @escaping @Sendable () -> Int64 = PostgreSQLServerStorage.systemMilliseconds, logger: Logger? = nil,
            schema: String? = nil, tracer: (any Tracer)? = nil, minimumConnections: Int = 0,
            keepAlive: Duration? = nil
        ) {
            self.minimumConnections = minimumConnections
            self.keepAlive = keepAlive
            self.tracer = tracer
            self.schema = schema
            self.maximumConnections = maximumConnections
            self.connectionWait = connectionWait
            self.statementTimeout = statementTimeout
            self.connectTimeout = connectTimeout
            self.now = now
            self.logger = logger
        }
    }

    /// The system clock in milliseconds since 1970 (the default ``Configuration/now``).
    @Sendable public static func systemMilliseconds() -> Int64 { StorageClock.systemMilliseconds() }

    /// The URL without its password.
    public let location: String
    let url: PostgreSQLURL
    let configuration: Configuration
    let client: PostgresClient
    let logger: Logger
    /// The lines an outage repeats (the listener's retries, the pool's failed connections): the
    /// first of each, then a count at most once a minute, and one line when it is over.
    let outageLines = RepeatedLogLines()
    private let tasks = Mutex<[Task<Void, Never>]>([])
    /// Table numbers already looked up (a table's number never changes).
    let numbers = Mutex<[String: Int64]>([:])
    /// Field kinds already fixed (a kind never changes once fixed).
    let kinds = Mutex<[String: [String: FieldKind]]>([:])
    private let closed = Mutex(false)
    let announcements = StorageChanges()
    let insertBatches: InsertBatches
    /// Concurrent reads by id of one table, coalesced (``item(in:id:owner:)``).
    let readBatches: ReadBatches
    /// Where waits for a pooled connection and for a group commit are reported (``observe(_:)``).
    let observers: StorageObserverSlot
    /// Ends the statement of a connection that closes (``PostgreSQLSession``).
    let watch = ConnectionWatch()
    /// The pool's connections in use, and when one was last leased: tells a wait that timed out
    /// because every connection was busy from one that timed out because none could be opened.
    let poolUse = PoolUse()
    /// The channel writes notify on (one per schema: notifications are per database).
    let channel: String
    /// The statements prepared once per connection (``PostgreSQLSession/preparedRows(_:)``).
    let statementNames: StatementNames

    private init(url: PostgreSQLURL, configuration: Configuration) {
        self.url = url
        self.configuration = configuration
        var shown = url
        shown.schema = configuration.schema
        location = shown.description
        channel = "ferry_changes" + (configuration.schema.map { "_" + $0 } ?? "")
        statementNames = StatementNames()
        let observers = StorageObserverSlot()
        self.observers = observers
        insertBatches = InsertBatches(maximumWait: configuration.connectionWait) { since, outcome in
            observers.report(.insertQueue, since: since, outcome)
        }
        // One statement per table at a time: on 2 cores, 16 clients reading by id got 12,714
        // reads/s with 1 (about 8 ids per statement), 11,619 with 2, 10,324 with 4, and 6,105 with
        // every read alone.
        readBatches = ReadBatches(maximumRunning: 1)
        logger =
            configuration.logger
            ?? Logger(label: "ferry.storage.postgresql", factory: { _ in SwiftLogNoOpLogHandler() })
        let outageLines = outageLines
        let handler = logger.handler
        client = PostgresClient(
            configuration: Self.clientConfiguration(url, configuration),
            backgroundLogger: Logger(label: logger.label) { _ in RepeatLimitedLogHandler(handler, lines: outageLines) })
    }

    /// Connects, applies the migrations the database lacks and starts the pool and the change
    /// listener.
    ///
    /// - Parameters:
    ///   - url: Where the database is.
    ///   - configuration: How to connect, wait and stamp.
    /// - Returns: The open storage; ``close()`` releases it.
    /// - Throws: `StorageError`: `unavailable` with one line naming the URL (without its password)
    ///   when PostgreSQL cannot be reached or refuses the login; `corrupt` when the database holds a
    ///   newer Ferry schema than this version knows.
    public static func open(_ url: PostgreSQLURL, configuration: Configuration = Configuration()) async throws
        -> PostgreSQLServerStorage
    {
        var configuration = configuration
        if configuration.schema == nil { configuration.schema = url.schema }
        if let schema = configuration.schema, let problem = PostgreSQLURL.problem(ofSchema: schema) {
            throw StorageError(.invalidName, "the schema name \(problem)")
        }
        let storage = PostgreSQLServerStorage(url: url, configuration: configuration)
        let baseline: [String: StorageChange]
        do {
            // Migrations wait for each other's advisory lock: not bound by the statement timeout.
            let connection = try await storage.connect(
                id: 0, applicationName: "ferry-migrations", statementTimeout: .seconds(600))
            do {
                let session = storage.session(connection, limit: .seconds(605))
                try await PostgreSQLMigrations.apply(on: session, schema: configuration.schema)
                baseline = try await sequences(session)
                try? await connection.close()
            } catch {
                try? await connection.close()
                throw error
            }
        } catch {
            throw storage.mapped(error, "opening")
        }
        storage.start(baseline)
        return storage
    }

    private func start(_ baseline: [String: StorageChange]) {
        let client = client
        let runner = Task { await client.run() }
        let listener = Task { [weak self] in
            guard let self else { return }
            await self.listen(from: baseline)
        }
        tasks.withLock { $0 = [runner, listener] }
    }

    static func startupParameters(_ configuration: Configuration, applicationName: String) -> [(String, String)] {
        var parameters = [
            ("statement_timeout", "\(milliseconds(configuration.statementTimeout))"),
            ("idle_in_transaction_session_timeout", "\(milliseconds(configuration.statementTimeout) * 2)"),
            ("application_name", applicationName),
        ]
        if let schema = configuration.schema { parameters.append(("search_path", schema)) }
        return parameters
    }

    /// The name PostgreSQL shows for a connection (`pg_stat_activity.application_name`): its role,
    /// and the schema when there is one.
    static func applicationName(_ role: String, _ configuration: Configuration) -> String {
        configuration.schema.map { "\(role):\($0)" } ?? role
    }

    static func milliseconds(_ duration: Duration) -> Int64 {
        max(1, duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000)
    }

    static func clientConfiguration(_ url: PostgreSQLURL, _ configuration: Configuration)
        -> PostgresClient.Configuration
    {
        var result = PostgresClient.Configuration(
            host: url.host, port: url.port, username: url.user, password: url.password, database: url.database,
            tls: clientTLS(url.tlsMode))
        result.options.maximumConnections = max(1, configuration.maximumConnections)
        result.options.minimumConnections = min(
            max(0, configuration.minimumConnections), result.options.maximumConnections)
        result.options.keepAliveBehavior = configuration.keepAlive.map { .init(frequency: $0) }
        result.options.connectTimeout = configuration.connectTimeout
        result.options.additionalStartupParameters = startupParameters(
            configuration, applicationName: applicationName("ferry", configuration))
        return result
    }

    static func clientTLS(_ mode: PostgreSQLURL.TLSMode) -> PostgresClient.Configuration.TLS {
        var unverified = TLSConfiguration.makeClientConfiguration()
        unverified.certificateVerification = .none
        switch mode {
        case .disable: return .disable
        case .prefer: return .prefer(unverified)
        case .require: return .require(unverified)
        case .verifyFull: return .require(.makeClientConfiguration())
        }
    }

    /// The TLS of a connection outside the pool. A TLS context that cannot be built is an error,
    /// never a silent downgrade to no TLS.
    static func connectionTLS(_ mode: PostgreSQLURL.TLSMode) throws -> PostgresConnection.Configuration.TLS {
        var unverified = TLSConfiguration.makeClientConfiguration()
        unverified.certificateVerification = .none
        do {
            switch mode {
            case .disable: return .disable
            case .prefer: return .prefer(try NIOSSLContext(configuration: unverified))
            case .require: return .require(try NIOSSLContext(configuration: unverified))
            case .verifyFull: return .require(try NIOSSLContext(configuration: .makeClientConfiguration()))
            }
        } catch {
            throw StorageError(
                .unavailable, "cannot set up TLS (sslmode=\(mode.rawValue)): \(oneLine("\(error)"))", underlying: error)
        }
    }

    /// One connection outside the pool (migrations, the change listener), bounded by the connect
    /// timeout.
    func connect(id: Int, applicationName: String, statementTimeout: Duration? = nil) async throws
        -> PostgresConnection
    {
        var configuration = configuration
        if let statementTimeout { configuration.statementTimeout = statementTimeout }
        var connection = PostgresConnection.Configuration(
            host: url.host, port: url.port, username: url.user, password: url.password, database: url.database,
            tls: try Self.connectionTLS(url.tlsMode))
        connection.options.connectTimeout = .init(configuration.connectTimeout)
        connection.options.additionalStartupParameters = Self.startupParameters(
            configuration, applicationName: Self.applicationName(applicationName, configuration))
        let logger = logger
        return try await PostgresConnection.connect(configuration: connection, id: id, logger: logger)
    }

    // MARK: - Lifecycle

    public func changes() -> AsyncStream<StorageChange> {
        announcements.subscribe()
    }

    /// Reports each wait for a pooled connection (`StorageWait.Resource.connection`) and for an
    /// insert's turn in its table's group commit (`StorageWait.Resource.insertQueue`) to `observer`.
    public func observe(_ observer: (any StorageObserver)?) { observers.set(observer) }

    /// A pooled connection, and an insert's turn in its table's group commit.
    public var waitResources: [StorageWait.Resource] { [.connection, .insertQueue] }

    /// Attachment content in this schema's own tables (``PostgreSQLBlobStorage``).
    public func blobStorage() -> (any BlobStorage)? { PostgreSQLBlobStorage(storage: self) }

    public func close() async throws {
        let wasClosed = closed.withLock { flag in
            defer { flag = true }
            return flag
        }
        if wasClosed { return }
        insertBatches.close(StorageError(.closed, "the storage \(location) is closed"))
        readBatches.close(StorageError(.closed, "the storage \(location) is closed"))
        announcements.finish()
        let running = tasks.withLock { $0 }
        for task in running { task.cancel() }
        // The pool and the listener end on cancellation; a driver that ignores it does not keep
        // the caller (a server shutting down) waiting more than a few seconds.
        _ = try? await BoundedWait.run(within: .seconds(3), timeout: { CancellationError() }) {
            for task in running { await task.value }
        }
    }

    func ensureOpen() throws {
        if closed.withLock({ $0 }) { throw StorageError(.closed, "the storage \(location) is closed") }
    }

    // MARK: - Errors

    /// A failure as a `StorageError` naming the action and the database (never its password).
    func mapped(_ error: any Error, _ action: String) -> StorageError {
        Self.mapped(error, action, location)
    }

    static func mapped(_ error: any Error, _ action: String, _ place: String) -> StorageError {
        if let error = error as? StorageError { return error }
        if let error = error as? PostgresTransactionError {
            // The transaction rolled back: report why (a failed commit counts, the write is gone).
            if let cause = error.closureError ?? error.beginError ?? error.commitError {
                return mapped(cause, action, place)
            }
        }
        if error is CancellationError {
            return StorageError(.unavailable, "\(action) \(place) was cancelled")
        }
        guard let error = error as? PSQLError else {
            return StorageError(.unavailable, "\(action) \(place) failed: \(oneLine("\(error)"))")
        }
        switch error.code {
        case .server:
            let state = error.serverInfo?[.sqlState] ?? ""
            let message = oneLine(error.serverInfo?[.message] ?? "an error")
            let line = "\(action) \(place) failed (PostgreSQL \(state): \(message))"
            return StorageError(code(forSQLState: state), line, underlying: error)
        default:
            return StorageError(.unavailable, "\(action) \(place) failed: \(reason(error))", underlying: error)
        }
    }

    /// Why `error` happened, in words: PostgreSQL's own when it sent some (also for an error
    /// wrapped in another: its description is postgres-nio's "Generic description to prevent
    /// accidental leakage of sensitive data"), the connection's failure, or postgres-nio's code.
    static func reason(_ error: PSQLError) -> String {
        if let message = error.serverInfo?[.message] {
            return "PostgreSQL \(error.serverInfo?[.sqlState] ?? "?"): \(oneLine(message))"
        }
        guard let underlying = error.underlying else { return "\(error.code)" }
        if let inner = underlying as? PSQLError { return reason(inner) }
        return ConnectionFailure.reason(underlying) ?? oneLine("\(underlying)")
    }

    /// The storage's code for a PostgreSQL error (SQLSTATE).
    package static func code(forSQLState state: String) -> StorageError.Code {
        switch state {
        case "57014", "55P03", "40001", "40P01", "53200": .busy
        case "53300", "57P01", "57P02", "57P03", "28000", "28P01", "3D000": .unavailable
        case _ where state.hasPrefix("08"): .unavailable
        case "53100": .full  // disk_full
        case "22P05", "22021", "54000": .fieldKind
        default: .io
        }
    }

    static func oneLine(_ text: String) -> String {
        String(text.map { $0.isNewline ? " " : $0 })
    }
}
