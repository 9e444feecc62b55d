import FerryServer
import Foundation
import Logging
import ServerStorageCore
import ServerStorageSQLite
import ServerTestSupport
import StoreLMDB
import StoreMemory
import StoreSQLite
import SyncCore
import Transport

/// The local stores the end-to-end tests run on.
enum StoreKind: String, CaseIterable, Sendable, CustomStringConvertible {
    case memory, sqlite, lmdb

    var description: String { rawValue }
    var persists: Bool { self != .memory }

    /// Opens the store called `name` in `directory` (memory stores are always new).
    func open(_ directory: URL, _ name: String) throws -> any LocalStore {
        switch self {
        case .memory: MemoryStore()
        case .sqlite: try SQLiteStore(path: directory.appendingPathComponent(name + ".sqlite").path)
        case .lmdb: try LMDBStore(path: directory.appendingPathComponent(name + ".lmdb").path)
        }
    }
}

/// A scratch directory removed at the end of a test, and the server's database: a SQLite file in
/// the directory, or a fresh schema of the test PostgreSQL (skipping the test, with the reason,
/// when there is none; the schemas are dropped by the next test run).
struct Scratch: Sendable {
    let url: URL
    let database: TestDatabase

    init(_ backend: ServerBackend = .sqlite) async throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-e2e-" + UUID().uuidString)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        switch backend {
        case .sqlite: database = .sqlite(path: url.appendingPathComponent("server.sqlite").path)
        case .postgreSQL: database = try await backend.database()
        }
    }

    func remove() { try? FileManager.default.removeItem(at: url) }
}

/// The reference server on loopback, on the scratch's database; dynamic tables soft-delete, as sync
/// needs.
struct TestServer: Sendable {
    let server: ReferenceServer
    let databasePath: String

    static func start(
        in scratch: Scratch, port: Int = 0, pageSize: Int = 100, pushExtensions: Bool = true,
        limits: RequestLimits = RequestLimits(), trustsForwardedHeaders: Bool = false,
        attachments: AttachmentLimits? = nil
    ) async throws -> TestServer {
        var logger = Logger(label: "ferry.e2e")
        logger.logLevel = .critical
        var configuration = ServerConfiguration(host: "127.0.0.1", port: port, limits: limits, logger: logger)
        configuration.offersPushExtensions = pushExtensions
        configuration.trustsForwardedHeaders = trustsForwardedHeaders
        configuration.dynamicTableDefaults = TableSettings(name: "*", softDelete: true, pageSize: pageSize)
        configuration.attachments = attachments
        let path = scratch.url.appendingPathComponent("server.sqlite").path
        // A server started again on its old port may find it taken for a moment: the system hands the
        // same range of ports to other tests' client connections.
        for attempt in 1... {
            do {
                let storage = try await scratch.database.open(logger: logger)
                // Attachments' content in the items' database, as `ferry serve --attachments` keeps it.
                if attachments != nil { configuration.blobStorage = storage.blobStorage() }
                let server = try await ReferenceServer.start(configuration, storage: storage, ownsStorage: true)
                return TestServer(server: server, databasePath: path)
            } catch let error as ServerStartError where port != 0 && attempt < 100 && error.message.contains("in use") {
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        fatalError("unreachable")
    }

    var url: URL { URL(string: server.url)! }

    func stop() async throws { try await server.shutdown() }

    func remote(_ version: ProtocolVersion) -> HTTPRemote {
        Self.remote(url, version)
    }

    static func remote(_ url: URL, _ version: ProtocolVersion) -> HTTPRemote {
        HTTPRemote(
            HTTPRemote.Configuration(
                serverURL: url, protocolVersion: version, timeout: .seconds(20),
                retry: HTTPRemote.RetryPolicy(maximumAttempts: 1)))
    }

    /// Every live item of `table` on the server, by id.
    func items(_ table: String, _ version: ProtocolVersion) async throws -> [String: JSONObject] {
        // A table nobody has written to yet is an empty page.
        let items = try await remote(version).onlineTable(table).all(TableQuery())
        return Dictionary(uniqueKeysWithValues: items.map { ($0.id ?? "", $0) })
    }
}

/// A free loopback port: bound by a server that then stops.
func freePort(in scratch: Scratch) async throws -> Int {
    let probeScratch = try await Scratch()
    defer { probeScratch.remove() }
    let probe = try await TestServer.start(in: probeScratch)
    let port = probe.server.port
    try await probe.stop()
    return port
}

/// The app's fields of an item (no system properties), for comparing devices and server.
func appFields(_ item: JSONObject) -> JSONObject {
    item.filter { !["updatedAt", "createdAt", "version", "deleted"].contains($0.key) }
}

extension ProtocolVersion {
    static let both: [ProtocolVersion] = [.v2, .v3]
}
