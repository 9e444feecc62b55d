import Foundation
import ServerStorageConformance
import ServerStorageCore
import ServerStoragePostgreSQL
import ServerTestSupport
import Synchronization
import SyncCore
import Testing

/// Faults injected in a loop under concurrent writers: every wait ends, every failure is one a
/// client retries, nothing acknowledged is lost, nothing answered as failed was applied, and the
/// storage recovers by itself.
@Suite(
    "PostgreSQLServerStorage under injected faults",
    .enabled(if: TestPostgreSQL.isAvailable, TestPostgreSQL.skipReason),
    .timeLimit(.minutes(3)))
struct PostgreSQLFaultTests {
    static let table = StorageTable(name: "faults")

    /// The state the writers share.
    final class Writers: Sendable {
        let stop = Mutex(false)
        let acknowledged = Mutex<Set<String>>([])
        /// Inserts answered `unavailable` as rolled back (not "whether … is unknown").
        let refused = Mutex<Set<String>>([])
        let failures = Mutex<[String]>([])
        let answers = Mutex(0)
    }

    /// Four writers insert into one table while the pool's connections and the change listener's
    /// are terminated every 200 ms for 25 rounds. Before, an insert written to a connection that was
    /// just terminated waited for ever (postgres-nio dropped it), and every insert into that table
    /// queued behind it.
    @Test func everyInsertEndsAndTheStorageRecoversWhileItsConnectionsAreTerminatedAgainAndAgain() async throws {
        do {
            try await terminateConnectionsUnderWriters()
        } catch {
            Issue.record("\(String(reflecting: error).prefix(500))")
        }
    }

    func terminateConnectionsUnderWriters() async throws {
        let schema = await TestPostgreSQL.freshSchema()
        defer { Task { await TestPostgreSQL.drop(schema: schema) } }
        let storage = try await TestPostgreSQL.open(
            schema: schema, connections: 4, connectionWait: .seconds(2), statementTimeout: .seconds(5))
        let writers = Writers()
        let tasks = (0..<4).map { writer in
            Task {
                var index = 0
                while !writers.stop.withLock({ $0 }) {
                    index += 1
                    let id = "w\(writer)-\(index)"
                    let number = Int64(index)
                    do {
                        _ = try await within(.seconds(30), "an insert during the faults") {
                            try await storage.insert(into: Self.table, id: id, content: ["n": .int(number)], owner: nil)
                        }
                        writers.acknowledged.withLock { _ = $0.insert(id) }
                    } catch let error as StorageError where error.code == .busy || error.code == .unavailable {
                        // What a server answers 503 with Retry-After; the client retries.
                        if !error.message.contains("is unknown") { writers.refused.withLock { _ = $0.insert(id) } }
                    } catch {
                        writers.failures.withLock { $0.append("\(id): \(error)") }
                        if error is LivenessFailure { return }
                    }
                    writers.answers.withLock { $0 += 1 }
                }
            }
        }
        var terminated = 0
        var refused: [String] = []
        for _ in 0..<25 {
            try await Task.sleep(for: .milliseconds(200))
            do {
                terminated += try await TestPostgreSQL.execute(
                    """
                    SELECT pg_terminate_backend(pid)::text FROM pg_stat_activity
                    WHERE application_name IN ('ferry:\(schema)', 'ferry-listener:\(schema)')
                    """
                ).filter { $0 == "true" }.count
            } catch {
                // The test's own connection can be refused while every suite runs at once.
                refused.append(String(reflecting: error).prefix(200).description)
            }
        }
        writers.stop.withLock { $0 = true }
        for task in tasks { await task.value }

        #expect(terminated >= 20, "the faults landed: \(terminated) connections terminated; \(refused)")
        #expect(writers.failures.withLock { $0 }.isEmpty, "\(writers.failures.withLock { $0.prefix(5) })")
        #expect(writers.answers.withLock { $0 } > 0)

        // It recovers by itself: a write goes through, and the change listener announces it.
        let changes = storage.changes()
        let version = try await within(.seconds(60), "an insert after the faults") {
            while true {
                if let after = try? await storage.insert(into: Self.table, id: "after", content: [:], owner: nil) {
                    return after.version
                }
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        let (heard, _) = await ServerStorageConformanceSuite.collectChanges(changes) {
            $0.contains { $0.table == Self.table.name && $0.version >= version }
        }
        #expect(heard.contains { $0.version >= version }, "the listener never announced the write after the faults")

        // Nothing acknowledged is lost.
        let stored = try await within(.seconds(30), "a query after the faults") {
            Set(try await storage.query(Self.table, StorageQuery()).items.map(\.id))
        }
        let lost = writers.acknowledged.withLock { $0 }.subtracting(stored)
        #expect(lost.isEmpty, "\(lost.count) acknowledged inserts lost: \(lost.prefix(5))")
        // Nothing answered as failed is stored: a COMMIT whose answer the terminated connection lost
        // had committed, and its 503 made the client write it again (a 409, or a second row).
        let failed = writers.refused.withLock { $0 }
        let appliedAfterAll = failed.intersection(stored)
        #expect(
            appliedAfterAll.isEmpty,
            "\(appliedAfterAll.count) of \(failed.count) inserts answered as failed were stored: \(appliedAfterAll.sorted().prefix(5))"
        )
        try await storage.close()
    }
}
