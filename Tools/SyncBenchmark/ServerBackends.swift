import Foundation
import SyncCore
import Transport

/// Where a benchmark's `ferry serve` keeps its rows.
enum ServerBackend: Equatable {
    /// A SQLite file, seeded directly in the server's layout.
    case sqlite
    /// A PostgreSQL database (`--postgres URL`): a fresh schema per server, seeded over HTTP.
    case postgres(String)

    var label: String {
        switch self {
        case .sqlite: "SQLite"
        case .postgres: "PostgreSQL"
        }
    }
}

/// A schema of its own on the benchmark's PostgreSQL database, for one server.
struct PostgresSchema {
    /// The URL `ferry serve --db` takes: the database's, with `schema=`.
    var url: String
    var base: String
    var name: String

    static func fresh(in base: String) -> PostgresSchema {
        let name = "ferry_syncbench_\(getpid())_\(UInt32.random(in: 0...UInt32.max))"
        return PostgresSchema(url: base + (base.contains("?") ? "&" : "?") + "schema=" + name, base: base, name: name)
    }

    /// Drops the schema with `psql`, when it is installed (otherwise it stays; the names say whose).
    func drop() {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        let database = base.split(separator: "?", maxSplits: 1).first.map(String.init) ?? base
        process.arguments = ["psql", "-q", database, "-c", "DROP SCHEMA IF EXISTS \(name) CASCADE"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try? process.run()
        process.waitUntilExit()
    }
}

extension Seeder {
    /// Seeds a running server over HTTP, in batches of 1,000 inserts: the rows of ``Workload``,
    /// after one row inserted and soft-deleted (what ``seed(database:rows:directory:)`` leaves).
    static func seed(server url: URL, rows: Int) async throws {
        let remote = HTTPRemote(HTTPRemote.Configuration(serverURL: url))
        _ = try await remote.onlineTable("bench").insert([
            "id": "seed", "title": "seed", "done": false, "priority": 0, "note": "seed",
        ])
        try await remote.onlineTable("bench").delete(id: "seed", ifVersion: nil)
        var start = 0
        while start < rows {
            let end = min(rows, start + 1_000)
            let writes = (start..<end).map { index in
                let item = Workload.item(index)
                return RemoteWrite(table: "bench", kind: .insert, itemID: item["id"]!.stringValue!, body: item)
            }
            for result in try await remote.sendBatch(writes) { _ = try result.get() }
            start = end
        }
    }
}
