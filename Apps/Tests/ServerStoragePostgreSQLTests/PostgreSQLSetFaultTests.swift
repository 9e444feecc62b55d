import Foundation
import ServerStorageConformance
import ServerStorageCore
import ServerStoragePostgreSQL
import ServerTestSupport
import Synchronization
import SyncCore
import Testing

/// Sets of writes (a batch's inserts with their keys) under terminated connections: each
/// transaction commits whole or not at all.
@Suite(
    "PostgreSQLServerStorage set writes under injected faults",
    .enabled(if: TestPostgreSQL.isAvailable, TestPostgreSQL.skipReason),
    .timeLimit(.minutes(3)))
struct PostgreSQLSetFaultTests {
    static let table = StorageTable(name: "setfaults")
    static let rowsPerSet = 40

    /// What the writers did: the sets acknowledged, and those whose transaction failed.
    final class Sets: Sendable {
        let stop = Mutex(false)
        let acknowledged = Mutex<[String]>([])
        let failed = Mutex<[String]>([])
        let unexpected = Mutex<[String]>([])
    }

    /// Three writers run transactions that claim 40 keys, insert 40 rows as one set and record 40
    /// outcomes, while the pool's connections are terminated every 150 ms for 20 rounds, then one
    /// set each once the faults are over. Every set is then all there (rows and outcomes, with
    /// consecutive versions) or not at all, and every acknowledged one is there.
    @Test func aTransactionOfSetsCommitsWholeOrNotAtAllWhileItsConnectionsAreTerminated() async throws {
        let schema = await TestPostgreSQL.freshSchema()
        defer { Task { await TestPostgreSQL.drop(schema: schema) } }
        let storage = try await TestPostgreSQL.open(
            schema: schema, connections: 4, connectionWait: .seconds(2), statementTimeout: .seconds(5))
        let sets = Sets()
        let writers = (0..<3).map { writer in
            Task {
                var round = 0
                while !sets.stop.withLock({ $0 }) {
                    round += 1
                    let name = "w\(writer)-\(round)"
                    do {
                        try await within(.seconds(30), "a set during the faults") {
                            try await Self.write(name, to: storage)
                        }
                        sets.acknowledged.withLock { $0.append(name) }
                    } catch let error as StorageError where error.code == .busy || error.code == .unavailable {
                        sets.failed.withLock { $0.append(name) }
                    } catch {
                        sets.unexpected.withLock { $0.append("\(name): \(error)") }
                        sets.failed.withLock { $0.append(name) }
                        if error is LivenessFailure { return }
                    }
                }
                // The faults are over: the storage recovers, and the next set goes in (on a busy
                // machine no set may have fitted between two terminations).
                let name = "w\(writer)-after"
                do {
                    try await within(.seconds(60), "a set after the faults") {
                        while true {
                            do {
                                return try await Self.write(name, to: storage)
                            } catch let error as StorageError where error.code == .busy || error.code == .unavailable {
                                try await Task.sleep(for: .milliseconds(100))
                            }
                        }
                    }
                    sets.acknowledged.withLock { $0.append(name) }
                } catch {
                    sets.unexpected.withLock { $0.append("\(name): \(error)") }
                }
            }
        }
        var terminated = 0
        for _ in 0..<20 {
            try await Task.sleep(for: .milliseconds(150))
            terminated +=
                (try? await TestPostgreSQL.execute(
                    """
                    SELECT pg_terminate_backend(pid)::text FROM pg_stat_activity
                    WHERE application_name = 'ferry:\(schema)'
                    """
                ).filter { $0 == "true" }.count) ?? 0
        }
        sets.stop.withLock { $0 = true }
        for writer in writers { await writer.value }

        let acknowledged = sets.acknowledged.withLock { $0 }
        let failed = sets.failed.withLock { $0 }
        #expect(terminated >= 10, "the faults landed: \(terminated) connections terminated")
        #expect(sets.unexpected.withLock { $0 }.isEmpty, "\(sets.unexpected.withLock { $0.prefix(3) })")
        #expect(
            !acknowledged.isEmpty && !failed.isEmpty, "\(acknowledged.count) sets acknowledged, \(failed.count) failed")

        let rows = try await within(.seconds(60), "reading the rows after the faults") {
            while true {
                if let page = try? await storage.query(Self.table, StorageQuery(limit: 100_000)) { return page.items }
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        var bySet: [String: [StoredItem]] = [:]
        for row in rows { bySet[String(row.id.split(separator: ":")[0]), default: []].append(row) }
        for name in acknowledged + failed {
            let present = bySet[name] ?? []
            let outcomes = try await storage.claimOutcomes(
                scope: "faults", keys: (0..<Self.rowsPerSet).map { "\(name):\($0)" })
            if acknowledged.contains(name) {
                #expect(present.count == Self.rowsPerSet, "acknowledged set \(name) has \(present.count) rows")
            }
            #expect(
                present.isEmpty || present.count == Self.rowsPerSet, "set \(name) is half there: \(present.count) rows")
            #expect(outcomes.count == present.count, "set \(name): \(present.count) rows, \(outcomes.count) outcomes")
            let versions = present.map(\.version).sorted()
            #expect(zip(versions, versions.dropFirst()).allSatisfy { $1 == $0 + 1 }, "set \(name): \(versions)")
        }
        try await storage.close()
    }

    /// One transaction: claims the set's keys, inserts its rows as one set, records their outcomes.
    static func write(_ name: String, to storage: PostgreSQLServerStorage) async throws {
        try await storage.transaction {
            let keys = (0..<rowsPerSet).map { "\(name):\($0)" }
            let recorded = try await storage.claimOutcomes(scope: "faults", keys: keys)
            guard recorded.isEmpty else { throw StorageError(.io, "set \(name) was recorded before it was written") }
            let results = try await storage.insert(
                into: table, keys.map { StorageInsert(id: $0, content: ["set": .string(name)]) })
            for result in results { _ = try result.get() }
            _ = try await storage.recordOutcomes(
                keys.map {
                    RecordedOutcome(
                        scope: "faults", key: $0, fingerprint: "POST /tables/setfaults", status: 201, headers: [:],
                        body: nil, recordedAt: 1_000)
                })
        }
    }
}
