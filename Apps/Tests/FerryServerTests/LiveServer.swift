import FerryServer
import Foundation
import Logging
import ServerStorageCore
import ServerStorageSQLite
import ServerTestSupport
import SyncCore

/// A reference server running in-process on a free loopback port, and a real HTTP client for it.
struct LiveServer: Sendable {
    let server: ReferenceServer
    /// The test database on PostgreSQL (a schema), removed when the server stops.
    var database: TestDatabase?
    static let secret = "ferry-test-secret-0123456789"

    /// Starts a server on a fresh database (in-memory SQLite, or a new schema of the test
    /// PostgreSQL), after `seed` has filled it, or on the database of `sharing` (a second instance;
    /// it must be on PostgreSQL). On PostgreSQL without `FERRY_TEST_POSTGRES_URL` the test is
    /// skipped with the reason. The server takes tokens signed with ``secret`` unless `authSecret`
    /// says otherwise (`nil`: no tokens, every caller anonymous).
    static func start(
        tables: [TableSettings], allowsDynamicTables: Bool = true,
        dynamicDefaults: TableSettings = TableSettings(name: "*"), limits: RequestLimits = RequestLimits(),
        backend: ServerBackend = .sqlite, sharing: LiveServer? = nil, logger: Logger = .quietTest,
        attachments: AttachmentLimits? = nil, authSecret: String? = LiveServer.secret,
        connections: ConnectionLimits = ConnectionLimits(), compressesAnswers: Bool = false,
        publicURL: String? = nil, trustsForwardedHeaders: Bool = false,
        seed: @Sendable (any ServerStorage) async throws -> Void = { _ in }
    ) async throws -> LiveServer {
        var configuration = ServerConfiguration(host: "127.0.0.1", port: 0, tables: tables, logger: logger)
        configuration.allowsDynamicTables = allowsDynamicTables
        configuration.dynamicTableDefaults = dynamicDefaults
        configuration.authSecret = authSecret
        configuration.limits = limits
        configuration.attachments = attachments
        configuration.connections = connections
        configuration.compressesAnswers = compressesAnswers
        configuration.publicURL = publicURL
        configuration.trustsForwardedHeaders = trustsForwardedHeaders
        var database: TestDatabase?
        let storage: any ServerStorage
        if let shared = sharing?.database {
            // A second instance on the other server's database (which that server removes).
            storage = try await shared.open(logger: configuration.logger)
        } else {
            switch backend {
            case .sqlite:
                storage = try sqliteStorage(.memory, logger: configuration.logger)
            case .postgreSQL:
                let schema = try await backend.database()
                database = schema
                storage = try await schema.open(logger: configuration.logger)
            }
        }
        try await storage.prepare(tables.map { StorageTable(name: $0.name, schema: $0.schema) })
        try await seed(storage)
        if attachments != nil { configuration.blobStorage = storage.blobStorage() }
        let server = try await ReferenceServer.start(configuration, storage: storage, ownsStorage: true)
        return LiveServer(server: server, database: database)
    }

    func stop() async throws {
        try await server.shutdown()
        await database?.remove()
    }

    /// A token for `subject`, valid for an hour.
    static func token(_ subject: String, secret: String = LiveServer.secret, expired: Bool = false) -> String {
        TokenVerifier(secret: secret).sign(
            subject: subject, expiresAt: Date().addingTimeInterval(expired ? -60 : 3600))
    }

    struct Reply: Sendable {
        var status: Int
        var headers: [String: String]
        var body: [UInt8]

        var text: String { String(decoding: body, as: UTF8.self) }
        var json: JSONValue? { body.isEmpty ? nil : try? JSONValue(parsingUTF8: body) }
        func header(_ name: String) -> String? { headers[name.lowercased()] }
    }

    /// Sends one request over a new loopback connection. `target` is the path and query, already
    /// percent-encoded.
    func send(
        _ method: String, _ target: String, headers: [(String, String)] = [], body: [UInt8]? = nil
    ) async throws -> Reply {
        let response = try await LoopbackHTTP.send(
            port: server.port, method: method, target: target, headers: headers, body: body)
        return Reply(status: response.status, headers: response.headers, body: response.body)
    }

    func send(_ method: String, _ target: String, headers: [(String, String)] = [], json: JSONValue) async throws
        -> Reply
    {
        try await send(
            method, target, headers: [("Content-Type", "application/json")] + headers, body: json.serializedUTF8())
    }
}

extension Logger {
    /// A logger for test servers: only critical failures.
    static var quietTest: Logger {
        var logger = Logger(label: "ferry.test")
        logger.logLevel = .critical
        return logger
    }
}

/// A SQLite storage for a test server (the server library takes an opened storage; `ferry serve`
/// opens one from `--db`), logging where the server logs.
func sqliteStorage(_ location: SQLiteServerStorage.Location, logger: Logger) throws -> any ServerStorage {
    var configuration = SQLiteServerStorage.Configuration()
    configuration.logger = logger
    return try SQLiteServerStorage(location: location, configuration: configuration)
}

extension ReferenceServer {
    /// Starts a server on a fresh in-memory SQLite storage, which it closes when it stops.
    static func startInMemory(_ configuration: ServerConfiguration) async throws -> ReferenceServer {
        try await start(
            configuration, storage: try sqliteStorage(.memory, logger: configuration.logger), ownsStorage: true)
    }
}

/// Percent-encodes a raw OData query string parameter by parameter.
func encodedQuery(_ raw: String) -> String {
    ODataParameters(parsing: raw).percentEncodedQueryString
}
