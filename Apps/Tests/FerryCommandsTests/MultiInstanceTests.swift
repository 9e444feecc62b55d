import Foundation
import ServerTestSupport
import StoreMemory
import SyncCore
import Synchronization
import Testing
import Transport

/// Issue 16's acceptance test: three `ferry serve` processes on one PostgreSQL database, writers
/// spread over all of them, Ferry clients pulling incrementally through different instances while
/// the writes go on. Every client must end with exactly the server's rows: none missed, none
/// delivered more often than it was written.
@Suite(
    "Several ferry serve instances on one PostgreSQL database",
    .enabled(if: TestPostgreSQL.isAvailable, TestPostgreSQL.skipReason), .timeLimit(.minutes(10)))
struct MultiInstanceTests {
    /// A `ferry serve` child process and its URL.
    struct Instance {
        let process: Process
        let url: URL

        static func start(_ executable: String, database: String) async throws -> Instance {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = ["serve", "--port", "0", "--log-level", "error"]
            // The URL (with its password) goes through the environment, as in production.
            process.environment = ProcessInfo.processInfo.environment.merging(["FERRY_DATABASE_URL": database]) {
                $1
            }
            let output = Pipe()
            process.standardOutput = output
            process.standardError = FileHandle.nullDevice
            try process.run()
            let line = try await ServeCommandTests.firstLine(of: output.fileHandleForReading, from: process)
            guard let url = line.split(separator: " ").first(where: { $0.hasPrefix("http://") }).map(String.init) else {
                process.terminate()
                throw InstanceStartError(description: "ferry serve did not say its URL; it said: \(line)")
            }
            return Instance(process: process, url: URL(string: url)!)
        }

        /// Asks the instance to stop; its graceful stop is not waited for (that could hold a thread
        /// of the tests' pool for seconds).
        func stop() {
            process.terminate()
        }
    }

    /// Rounds of writes and pulls, each with its own random timing.
    static let rounds = 12

    enum Outcome: Sendable {
        case wrote(Int)
        case pulled(device: Int, rows: Int)
    }

    static func remote(_ url: URL) -> HTTPRemote {
        HTTPRemote(
            HTTPRemote.Configuration(
                serverURL: url, protocolVersion: .v3, timeout: .seconds(20),
                retry: HTTPRemote.RetryPolicy(maximumAttempts: 1)))
    }

    /// How often each `id@version` reached one device.
    final class Seen: Sendable {
        let counts = Mutex<[String: Int]>([:])
    }

    /// A table that records the `(id, version)` of every row its queries bring, by device.
    struct RecordingTable: RemoteTable {
        let inner: any RemoteTable
        let seen: Seen

        func insert(_ item: JSONObject) async throws(RemoteError) -> JSONObject { try await inner.insert(item) }
        func update(_ item: JSONObject, ifVersion version: String?) async throws(RemoteError) -> JSONObject {
            try await inner.update(item, ifVersion: version)
        }
        func delete(id: String, ifVersion version: String?) async throws(RemoteError) {
            try await inner.delete(id: id, ifVersion: version)
        }
        func item(id: String) async throws(RemoteError) -> JSONObject? { try await inner.item(id: id) }
        func query(_ query: TableQuery) async throws(RemoteError) -> RemotePage {
            let page = try await inner.query(query)
            seen.counts.withLock { seen in
                for row in page.items { seen["\(row.id ?? "?")@\(row.version ?? "?")", default: 0] += 1 }
            }
            return page
        }
    }

    /// A remote whose tables record what their queries bring (``RecordingTable``).
    struct RecordingRemote: RemoteService {
        let inner: HTTPRemote
        let seen: Seen

        func table(_ name: String) -> any RemoteTable { RecordingTable(inner: inner.table(name), seen: seen) }
    }

    @Test func threeInstancesWritersAndPullersMissNothingAndRepeatNothing() async throws {
        let executable = try #require(ServeCommandTests.executable, "the ferry executable is not built")
        let database = try await ServerBackend.postgreSQL.database()
        var instances: [Instance] = []
        // Before the starts: an instance that started is stopped even when a later start fails.
        defer { for instance in instances { instance.stop() } }
        for _ in 0..<3 { instances.append(try await Instance.start(executable, database: database.serveArgument)) }
        let urls = instances.map(\.url)
        let devices = (0..<3).map { _ in MemoryStore() }
        // Every row version each device's pulls brought, with how often.
        let seen = (0..<3).map { _ in Seen() }
        var written = 0
        var received = Array(repeating: 0, count: devices.count)

        for round in 0..<Self.rounds {
            // Writers: one per instance, inserts and updates with random pauses.
            let outcomes = try await withThrowingTaskGroup(of: Outcome.self) { group in
                for (writer, url) in urls.enumerated() {
                    group.addTask {
                        var random = SystemRandomNumberGenerator()
                        let table = Self.remote(url).onlineTable("feed")
                        var count = 0
                        var last: JSONObject?
                        for step in 0..<25 {
                            if step % 5 == 4, let item = last {
                                var changed = item
                                changed["step"] = .int(Int64(step))
                                last = try await table.update(changed, ifVersion: nil)
                            } else {
                                last = try await table.insert([
                                    "id": .string("r\(round)-w\(writer)-\(step)"), "step": .int(Int64(step)),
                                ])
                            }
                            count += 1
                            try await Task.sleep(for: .milliseconds(Int.random(in: 0...3, using: &random)))
                        }
                        return .wrote(count)
                    }
                }
                // Pullers: each device pulls through another instance every round, while the writes go on.
                for (index, store) in devices.enumerated() {
                    let url = urls[(index + round) % urls.count]
                    group.addTask {
                        var random = SystemRandomNumberGenerator()
                        let device = SyncContext(
                            store: store, remote: RecordingRemote(inner: Self.remote(url), seen: seen[index]))
                        var pulledRows = 0
                        for _ in 0..<4 {
                            pulledRows += try await device.pull("feed", queryID: "all").items.received
                            try await Task.sleep(for: .milliseconds(Int.random(in: 0...20, using: &random)))
                        }
                        return .pulled(device: index, rows: pulledRows)
                    }
                }
                return try await group.reduce(into: [Outcome]()) { $0.append($1) }
            }
            for outcome in outcomes {
                switch outcome {
                case .wrote(let count): written += count
                case .pulled(let device, let rows): received[device] += rows
                }
            }
        }
        // Once the writes are over, each device pulls through yet another instance to catch up.
        for (index, store) in devices.enumerated() {
            let device = SyncContext(
                store: store,
                remote: RecordingRemote(inner: Self.remote(urls[(index + 1) % urls.count]), seen: seen[index]))
            received[index] += try await device.pull("feed", queryID: "all").items.received
        }

        let server = try await Self.remote(urls[0]).onlineTable("feed").all(TableQuery())
        #expect(server.count == Self.rounds * 3 * 20)
        let serverRows = Dictionary(uniqueKeysWithValues: server.map { ($0.id ?? "", $0) })
        for (index, store) in devices.enumerated() {
            let local = try await SyncContext(store: store, remote: Self.remote(urls[0])).table("feed").query().items
            let localRows = Dictionary(uniqueKeysWithValues: local.map { ($0.id ?? "", $0) })
            let missed = Set(serverRows.keys).subtracting(localRows.keys)
            let stale = serverRows.filter { localRows[$0.key]?["version"] != $0.value["version"] }.map(\.key)
            #expect(missed.isEmpty, "device \(index) missed \(missed.count) rows: \(missed.sorted().prefix(5))")
            #expect(stale.isEmpty, "device \(index) holds \(stale.count) stale rows: \(stale.sorted().prefix(5))")
            #expect(localRows.count == serverRows.count, "device \(index) holds rows the server does not")
            // Each version of a row reaches a device at most once: an incremental pull never brings
            // back what an earlier one brought (before, only "no more rows than writes" was checked,
            // which left room for about 180 repeats).
            let repeats = seen[index].counts.withLock { $0.filter { $0.value > 1 } }
            #expect(
                repeats.isEmpty, "device \(index) was brought \(repeats.count) versions twice: \(repeats.prefix(5))")
            #expect(received[index] >= serverRows.count)
        }
        #expect(written == Self.rounds * 3 * 25)
        await database.remove()
    }
}

struct InstanceStartError: Error, CustomStringConvertible {
    var description: String
}
