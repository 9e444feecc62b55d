// swift-tools-version: 6.2
//
// The Ferry tools package: the reference server, its storage backends and the `ferry` command.
// It depends on the SDK package by path, so that an app that adds Ferry never resolves a web server.
import PackageDescription

let package = Package(
    name: "FerryApps",
    platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11), .visionOS(.v2)],
    products: [
        .library(name: "ServerStorageCore", targets: ["ServerStorageCore"]),
        .library(name: "ServerStorageSQLite", targets: ["ServerStorageSQLite"]),
        .library(name: "ServerStoragePostgreSQL", targets: ["ServerStoragePostgreSQL"]),
        .library(name: "BlobStorageFiles", targets: ["BlobStorageFiles"]),
        .library(name: "FerryServer", targets: ["FerryServer"]),
        .library(name: "FerryCommands", targets: ["FerryCommands"]),
        .library(name: "FerryClient", targets: ["FerryClient"]),
        .library(name: "FerryConsole", targets: ["FerryConsole"]),
        .executable(name: "ferry", targets: ["ferry"]),
    ],
    dependencies: [
        .package(name: "Ferry", path: ".."),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.3"),
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.35.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        // PreparedStatements.swift relies on `execute(_:logger:)` reading a prepared statement's static
        // name and SQL when it starts (true of 1.33.2; PostgreSQLPreparedStatementTests fail otherwise).
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        // ferry serve's settings: flags, environment and a JSON file with one precedence (JSON is
        // its default trait; no YAML, no reloading).
        .package(url: "https://github.com/apple/swift-configuration", from: "1.4.0"),
        .package(url: "https://github.com/apple/swift-system", from: "1.8.1"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        // Spans (the server, its storages), and the OTLP exporter `ferry serve` sends them with.
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
        // OTLP over HTTP only: the default traits add the gRPC exporter, which pulls grpc-swift 2
        // and its transports into every build.
        .package(url: "https://github.com/swift-otel/swift-otel", from: "1.6.0", traits: ["OTLPHTTP"]),
    ],
    targets: [
        // The server-storage protocol: what the reference server needs from a database.
        .target(
            name: "ServerStorageCore",
            dependencies: [
                .product(name: "SyncCore", package: "Ferry"),
                // The table layout and query limits the SQL backends share (ServerSQLLayout).
                .product(name: "QuerySQL", package: "Ferry"),
                .product(name: "Logging", package: "swift-log"),
                // SHA-256 of blobs (BlobDigest), for every blob-storage backend.
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            path: "Sources/ServerStorageCore"
        ),
        // The embedded default backend: SQLite through GRDB, in a file or in memory.
        .target(
            name: "ServerStorageSQLite",
            dependencies: [
                "ServerStorageCore",
                .product(name: "SyncCore", package: "Ferry"),
                .product(name: "QuerySQL", package: "Ferry"),
                .product(name: "QuerySQLite", package: "Ferry"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            path: "Sources/ServerStorageSQLite"
        ),
        // The backend for several server instances: PostgreSQL through postgres-nio (a pool, bound
        // parameters, LISTEN/NOTIFY for the change stream).
        .target(
            name: "ServerStoragePostgreSQL",
            dependencies: [
                "ServerStorageCore",
                .product(name: "SyncCore", package: "Ferry"),
                .product(name: "QuerySQL", package: "Ferry"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            path: "Sources/ServerStoragePostgreSQL"
        ),
        // Attachment bytes as files in a directory (the blob-storage backend beside the two
        // database ones, which live in ServerStorageSQLite and ServerStoragePostgreSQL).
        .target(
            name: "BlobStorageFiles",
            dependencies: [
                "ServerStorageCore",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Sources/BlobStorageFiles"
        ),
        // The blob-storage conformance suite and crash test, run by every blob backend's tests.
        .target(
            name: "BlobStorageConformance",
            dependencies: [
                "ServerStorageCore",
                .product(name: "StoreConformance", package: "Ferry"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            path: "Tests/BlobStorageConformance"
        ),
        // The child process of the blob crash test: appends to an upload until it is killed.
        .executableTarget(
            name: "BlobCrashWriter",
            dependencies: ["ServerStorageCore", "ServerStorageSQLite", "BlobStorageFiles"],
            path: "Tests/BlobCrashWriter"
        ),
        // The server-storage conformance suite, run by every backend's tests.
        .target(
            name: "ServerStorageConformance",
            dependencies: [
                "ServerStorageCore",
                .product(name: "SyncCore", package: "Ferry"),
                .product(name: "StoreConformance", package: "Ferry"),
            ],
            path: "Tests/ServerStorageConformance"
        ),
        // Line editing with history and completion, and text tables: the REPL's terminal side.
        .target(
            name: "FerryConsole", dependencies: [.product(name: "Logging", package: "swift-log")],
            path: "Sources/FerryConsole"),
        // Devices (a store, a sync context, a switchable connection) and result rendering, shared by
        // the CLI, the REPL and the demo.
        .target(
            name: "FerryClient",
            dependencies: [
                "FerryConsole",
                .product(name: "SyncCore", package: "Ferry"),
                .product(name: "StoreSQLite", package: "Ferry"),
                .product(name: "StoreLMDB", package: "Ferry"),
                .product(name: "StoreMemory", package: "Ferry"),
                .product(name: "Transport", package: "Ferry"),
            ],
            path: "Sources/FerryClient"
        ),
        // The reference server: table protocol 2.0.0 and 3.0.0 over Hummingbird, on any ServerStorage
        // it is given (it never chooses a database: FerryCommands does).
        .target(
            name: "FerryServer",
            dependencies: [
                "ServerStorageCore",
                .product(name: "SyncCore", package: "Ferry"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "NIOHTTPCompression", package: "swift-nio-extras"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                // Metrics through swift-metrics with a factory from the configuration (never the
                // global MetricsSystem), and the Prometheus registry `/metrics` renders.
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            path: "Sources/FerryServer"
        ),
        // The `ferry` command tree: the client commands, the REPL, and `ferry serve`, which opens the
        // storage `--db` names (the backends the executable is built with).
        .target(
            name: "FerryCommands",
            dependencies: [
                "FerryServer", "FerryClient", "FerryConsole", "ServerStorageCore", "ServerStorageSQLite",
                "ServerStoragePostgreSQL", "BlobStorageFiles",
                .product(name: "SyncCore", package: "Ferry"),
                .product(name: "Transport", package: "Ferry"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "SystemPackage", package: "swift-system"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "OTel", package: "swift-otel"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Sources/FerryCommands"
        ),
        .executableTarget(
            name: "ferry",
            dependencies: [
                "FerryCommands", "FerryConsole",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Sources/ferry"
        ),

        .testTarget(
            name: "ServerStorageSQLiteTests",
            dependencies: [
                "ServerStorageCore", "ServerStorageSQLite", "ServerStorageConformance", "BlobStorageConformance",
                .product(name: "SyncCore", package: "Ferry"),
                .product(name: "StoreConformance", package: "Ferry"),
                .product(name: "GRDB", package: "GRDB.swift"),
            ],
            path: "Tests/ServerStorageSQLiteTests"
        ),
        .testTarget(
            name: "BlobStorageFilesTests",
            dependencies: [
                "ServerStorageCore", "BlobStorageFiles", "BlobStorageConformance",
                .product(name: "StoreConformance", package: "Ferry"),
            ],
            path: "Tests/BlobStorageFilesTests"
        ),
        // Test databases for the server's tests: a SQLite file or a schema of the test PostgreSQL.
        .target(
            name: "ServerTestSupport",
            dependencies: [
                "ServerStorageCore", "ServerStorageSQLite", "ServerStoragePostgreSQL",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Tests/ServerTestSupport"
        ),
        .testTarget(
            name: "ServerStoragePostgreSQLTests",
            dependencies: [
                "ServerStorageCore", "ServerStoragePostgreSQL", "ServerStorageConformance", "ServerTestSupport",
                "BlobStorageConformance",
                .product(name: "SyncCore", package: "Ferry"),
                .product(name: "StoreConformance", package: "Ferry"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
            ],
            path: "Tests/ServerStoragePostgreSQLTests"
        ),
        .testTarget(
            name: "FerryServerTests",
            dependencies: [
                "FerryServer", "ServerStorageCore", "ServerStorageSQLite", "ServerTestSupport",
                .product(name: "SyncCore", package: "Ferry"),
                .product(name: "StoreConformance", package: "Ferry"),
                .product(name: "Transport", package: "Ferry"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTPCompression", package: "swift-nio-extras"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
            ],
            path: "Tests/FerryServerTests"
        ),
        .testTarget(
            name: "FerryConsoleTests",
            dependencies: ["FerryConsole", "ServerTestSupport", .product(name: "Logging", package: "swift-log")],
            path: "Tests/FerryConsoleTests"),
        .testTarget(
            name: "EndToEndTests",
            dependencies: [
                "FerryServer", "ServerStorageCore", "ServerStorageSQLite", "ServerTestSupport",
                .product(name: "SyncCore", package: "Ferry"),
                .product(name: "StoreSQLite", package: "Ferry"),
                .product(name: "StoreLMDB", package: "Ferry"),
                .product(name: "StoreMemory", package: "Ferry"),
                .product(name: "Transport", package: "Ferry"),
                .product(name: "StoreConformance", package: "Ferry"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            path: "Tests/EndToEndTests"
        ),
        .testTarget(
            name: "FerryCommandsTests",
            dependencies: [
                "FerryCommands", "ServerStoragePostgreSQL", "ServerTestSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "SyncCore", package: "Ferry"),
                .product(name: "StoreMemory", package: "Ferry"),
                .product(name: "StoreSQLite", package: "Ferry"),
                .product(name: "StoreLMDB", package: "Ferry"),
                .product(name: "Transport", package: "Ferry"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "OTel", package: "swift-otel"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            path: "Tests/FerryCommandsTests"
        ),
    ]
)

// One place for language settings, the same block as the SDK package: Swift 6 mode (tools 6.2) plus
// the upcoming features the server-side Swift packages use.
for target in package.targets where target.type != .system {
    var settings = target.swiftSettings ?? []
    settings += [
        .enableUpcomingFeature("ExistentialAny"),
        .enableUpcomingFeature("MemberImportVisibility"),
        .enableUpcomingFeature("InternalImportsByDefault"),
        .enableUpcomingFeature("NonisolatedNonsendingByDefault"),
        .enableUpcomingFeature("InferIsolatedConformances"),
    ]
    if target.type == .regular {
        settings.append(.treatWarning("ExplicitSendable", as: .error))
    }
    target.swiftSettings = settings
}
