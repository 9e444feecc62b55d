// swift-tools-version: 6.2
//
// The Ferry SDK package: what an app imports, and nothing heavier.
// Pick a backend: `import SyncCore` plus exactly one of StoreSQLite, StoreLMDB or StoreMemory.
// The server, CLI and REPL live in Apps/Package.swift so that an app never resolves them.
//
// Where each product builds (docs/architecture.md, "Where each product builds"):
//   SyncCore, StoreMemory, StoreSQLite, QuerySQL, QuerySQLite, Transport: every platform below and Linux.
//   StoreLMDB: Linux and macOS only. It links the system's liblmdb (CLMDB, found through pkg-config:
//   `liblmdb-dev` on Debian and Ubuntu, Homebrew's `lmdb` on macOS); iOS, tvOS, watchOS and
//   visionOS have no system liblmdb, so an app for them that adds StoreLMDB fails to link. SwiftPM
//   cannot put a platform condition on a product or a target (only on a target's dependencies), so
//   the product is declared for every platform and this comment is the rule: on those platforms,
//   pick StoreSQLite.
import PackageDescription

let package = Package(
    name: "Ferry",
    platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11), .visionOS(.v2)],
    products: [
        .library(name: "SyncCore", targets: ["SyncCore"]),
        .library(name: "StoreMemory", targets: ["StoreMemory"]),
        .library(name: "StoreSQLite", targets: ["StoreSQLite"]),
        // Linux and macOS only: needs the system's liblmdb (see the top of this file).
        .library(name: "StoreLMDB", targets: ["StoreLMDB"]),
        // The query-to-SQL compiler with its dialects, and its SQLite functions, for SQL stores.
        .library(name: "QuerySQL", targets: ["QuerySQL"]),
        .library(name: "QuerySQLite", targets: ["QuerySQLite"]),
        .library(name: "Transport", targets: ["Transport"]),
        // The conformance suite and the peer-data loaders, for the Apps package's tests.
        .library(name: "StoreConformance", targets: ["StoreConformance"]),
        // An in-process model of a table server with scripted faults, for sync tests.
        .library(name: "SyncTesting", targets: ["SyncTesting"]),
    ],
    dependencies: [
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        // Linux only (see the Transport target): an app on Apple platforms never builds NIO.
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        // Already a dependency of async-http-client; named for the limit of its decompression.
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.35.2"),
        // Trace context propagation (Transport's `instrument`): its Instrumentation product has no
        // dependency of its own, and AsyncHTTPClient already brings the package on Linux.
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
        // Linux only (see the Transport target): the streaming SHA-256 of attachment files
        // (DiskAttachmentFiles); Apple platforms use CryptoKit. Already in the graph through
        // AsyncHTTPClient; the range admits the Apps package's 3.x.
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"5.0.0"),
        // The benchmarks' command lines only (Tools/): no library product depends on it, so an app
        // that adds Ferry never resolves it (docs/architecture.md).
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
    ],
    targets: [
        .target(
            name: "SyncCore", dependencies: [.product(name: "Logging", package: "swift-log")], path: "Modules/SyncCore"),
        .target(name: "StoreMemory", dependencies: ["SyncCore"], path: "Modules/StoreMemory"),
        // One compiler from the query AST to SQL (SQLite and PostgreSQL dialects); no database.
        .target(name: "QuerySQL", dependencies: ["SyncCore"], path: "Modules/QuerySQL"),
        // The compiler's `ferry_*` SQLite functions and argument conversion, for GRDB connections.
        .target(
            name: "QuerySQLite",
            dependencies: ["SyncCore", "QuerySQL", .product(name: "GRDB", package: "GRDB.swift")],
            path: "Modules/QuerySQLite"
        ),
        .target(
            name: "StoreSQLite",
            dependencies: ["SyncCore", "QuerySQL", "QuerySQLite", .product(name: "GRDB", package: "GRDB.swift")],
            path: "Modules/StoreSQLite"
        ),

        // The system's liblmdb: Linux and macOS (Homebrew) have one; iOS, tvOS, watchOS and visionOS
        // do not, so StoreLMDB does not build for them.
        .systemLibrary(
            name: "CLMDB", path: "Modules/CLMDB", pkgConfig: "lmdb",
            providers: [.apt(["liblmdb-dev"]), .brew(["lmdb"])]
        ),
        .target(
            name: "StoreLMDB",
            dependencies: ["SyncCore", "CLMDB", .product(name: "Logging", package: "swift-log")],
            path: "Modules/StoreLMDB"
        ),
        .target(
            name: "Transport",
            dependencies: [
                "SyncCore", .product(name: "Logging", package: "swift-log"),
                .product(name: "Instrumentation", package: "swift-distributed-tracing"),
                // On Linux, requests and feeds go through AsyncHTTPClient: FoundationNetworking's
                // URLSession keeps a core busy while it waits (docs/transport.md).
                .product(name: "AsyncHTTPClient", package: "async-http-client", condition: .when(platforms: [.linux])),
                .product(name: "NIOCore", package: "swift-nio", condition: .when(platforms: [.linux])),
                .product(name: "NIOHTTP1", package: "swift-nio", condition: .when(platforms: [.linux])),
                .product(name: "NIOSSL", package: "swift-nio-ssl", condition: .when(platforms: [.linux])),
                .product(
                    name: "NIOHTTPCompression", package: "swift-nio-extras", condition: .when(platforms: [.linux])),
                .product(name: "Crypto", package: "swift-crypto", condition: .when(platforms: [.linux])),
            ],
            path: "Modules/Transport"
        ),

        // The shared store conformance suite: a regular library target kept under Tests/,
        // run by every store's test target.
        .target(name: "StoreConformance", dependencies: ["SyncCore"], path: "Tests/StoreConformance"),
        .target(name: "SyncTesting", dependencies: ["SyncCore"], path: "Tests/SyncTesting"),

        // The child process of the crash-atomicity tests: writes transactions until it is killed.
        .executableTarget(
            name: "StoreCrashWriter",
            dependencies: [
                "SyncCore", "StoreSQLite", "StoreLMDB",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Tools/StoreCrashWriter"
        ),

        // The local-store benchmark (Tools/README.md).
        .executableTarget(
            name: "StoreBenchmark",
            dependencies: [
                "SyncCore", "StoreSQLite", "StoreLMDB", "StoreMemory", "CLMDB",
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Tools/StoreBenchmark"
        ),
        // The sync benchmark (Tools/bench-sync.sh): an app's pull and push against a `ferry serve`
        // child process (the Apps package's executable, run by path, never linked).
        .executableTarget(
            name: "SyncBenchmark",
            dependencies: [
                "SyncCore", "StoreSQLite", "Transport", .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                // The fan-out benchmark's client: thousands of feeds read with epoll (CNIOLinux, which
                // comes with NIOPosix, declares it; Linux, like its /proc figures).
                .product(name: "NIOCore", package: "swift-nio", condition: .when(platforms: [.linux])),
                .product(name: "NIOPosix", package: "swift-nio", condition: .when(platforms: [.linux])),
            ],
            path: "Tools/SyncBenchmark"
        ),

        .testTarget(
            name: "SyncCoreTests",
            dependencies: ["SyncCore", "StoreConformance", "SyncTesting"],
            path: "Tests/SyncCoreTests"
        ),
        .testTarget(
            name: "SyncEngineTests",
            dependencies: ["SyncCore", "StoreMemory", "StoreSQLite", "StoreConformance", "SyncTesting", "Transport"],
            path: "Tests/SyncEngineTests"
        ),
        .testTarget(
            name: "StoreLMDBTests",
            dependencies: ["StoreLMDB", "StoreConformance", "SyncCore", "CLMDB"],
            path: "Tests/StoreLMDBTests"
        ),
        // The examples of the DocC catalogs and doc comments, compiled and run.
        .testTarget(
            name: "DocumentationTests",
            dependencies: [
                "SyncCore", "StoreMemory", "StoreSQLite", "StoreLMDB", "Transport", "StoreConformance", "SyncTesting",
            ],
            path: "Tests/DocumentationTests"
        ),
        .testTarget(
            name: "TransportTests",
            dependencies: [
                "Transport", "SyncCore", .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
            ],
            path: "Tests/TransportTests"
        ),
        .testTarget(
            name: "StoreMemoryTests",
            dependencies: ["StoreMemory", "StoreConformance", "SyncCore"],
            path: "Tests/StoreMemoryTests"
        ),
        .testTarget(
            name: "QuerySQLTests",
            dependencies: ["QuerySQL", "SyncCore"],
            path: "Tests/QuerySQLTests"
        ),
        .testTarget(
            name: "StoreSQLiteTests",
            dependencies: [
                "StoreSQLite", "StoreConformance", "SyncCore", "SyncTesting", "QuerySQL", "QuerySQLite",
                .product(name: "GRDB", package: "GRDB.swift"),
            ],
            path: "Tests/StoreSQLiteTests"
        ),
    ]
)

// One place for language settings: Swift 6 mode (tools 6.2) plus the upcoming features the
// server-side Swift packages use.
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
