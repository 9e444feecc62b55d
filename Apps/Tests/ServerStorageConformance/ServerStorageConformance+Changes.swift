public import ServerStorageCore
import StoreConformance
import SyncCore
import Testing

extension ServerStorageConformanceSuite {
    static var changes: [ServerStorageCheck] {
        [
            .init("every committed write is announced with its table and stamp; a refused one is not") {
                fixture async throws in
                let storage = fixture.storage
                let stream = storage.changes()
                let other = StorageTable(name: "other")
                let first = try await storage.insert(into: todo, id: "a", content: ["n": 1], owner: nil)
                let second = try await storage.replace(
                    in: todo, id: "a", expectedVersion: first.version, content: ["n": 2], deleted: false, owner: .all)
                await expectError(StorageError.self, .conflict, "a second insert of the same id") {
                    _ = try await storage.insert(into: todo, id: "a", content: [:], owner: nil)
                }
                try await storage.delete(from: todo, id: "a", expectedVersion: second.version, owner: .all)
                let last = try await storage.item(in: todo, id: "a", owner: .all)
                #expect(last == nil)
                let elsewhere = try await storage.insert(into: other, id: "b", content: [:], owner: nil)
                let (seen, _) = await collectChanges(stream) { changes in
                    changes.contains { $0.table == "other" && $0.version >= elsewhere.version }
                        && changes.contains { $0.table == "todo" && $0.version > second.version }
                }
                let todoVersions = seen.filter { $0.table == "todo" }.map(\.version)
                #expect(todoVersions.max().map { $0 > second.version } == true, "the delete was not announced: \(seen)")
                #expect(todoVersions == todoVersions.sorted(), "announcements of one table out of order: \(seen)")
                #expect(seen.contains { $0.table == "other" && $0.updatedAt == elsewhere.updatedAt })
                #expect(seen.allSatisfy { $0.table == "todo" || $0.table == "other" })
            },
            .init("the catalog gives each table's newest write, by name and since a time") { fixture async throws in
                let storage = fixture.storage
                fixture.clock.set(10_000)
                let old = try await storage.insert(into: todo, id: "1", content: [:], owner: nil)
                fixture.clock.set(20_000)
                let other = StorageTable(name: "other")
                let first = try await storage.insert(into: other, id: "1", content: [:], owner: nil)
                try await storage.delete(from: other, id: "1", expectedVersion: first.version, owner: .all)
                let all = try await storage.tableStamps(named: nil, changedSince: nil)
                #expect(all.map(\.table) == ["other", "todo"])
                #expect(all.first?.version == first.version + 1, "a delete is the table's newest write")
                #expect(all.last == StorageChange(table: "todo", version: old.version, updatedAt: old.updatedAt))
                #expect(try await storage.tableStamps(named: nil, changedSince: 20_000).map(\.table) == ["other"])
                #expect(
                    try await storage.tableStamps(named: ["todo", "none"], changedSince: nil).map(\.table) == ["todo"])
                #expect(try await storage.tableStamps(named: [], changedSince: nil).isEmpty)
            },
            .init("closing the storage ends its change streams") { fixture async throws in
                let stream = fixture.storage.changes()
                try await fixture.storage.close()
                let (seen, ended) = await collectChanges(stream) { _ in false }
                #expect(ended, "the stream was still open 10 s after closing")
                #expect(seen.isEmpty)
            },
        ]
    }

    /// Reads `stream` until `done` holds for what arrived, the stream ends (`ended`), or 10 seconds
    /// pass (what arrived so far is lost then: the check fails on it).
    public static func collectChanges(
        _ stream: AsyncStream<StorageChange>, until done: @escaping @Sendable ([StorageChange]) -> Bool
    ) async -> (changes: [StorageChange], ended: Bool) {
        await withTaskGroup(of: (changes: [StorageChange], ended: Bool)?.self) { group in
            group.addTask {
                var seen: [StorageChange] = []
                for await change in stream {
                    seen.append(change)
                    if done(seen) { return (seen, false) }
                }
                return (seen, !Task.isCancelled)
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(10))
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first ?? ([], false)
        }
    }
}
