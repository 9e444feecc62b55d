import Foundation
import Synchronization
import SyncCore
import Testing

extension StoreConformanceSuite {
    /// Every committed write is announced on the store's `commits`, whoever made it.
    static var commits: [StoreConformanceCheck] {
        [
            .init("every committed write reports the tables and queue it changed, and nothing else") { fixture in
                let store = fixture.store
                let todo = Wakes(store.commits.subscribe(tables: ["todo"]))
                let notes = Wakes(store.commits.subscribe(tables: ["notes"]))
                let queue = Wakes(store.commits.subscribe(tables: [], queue: true))
                let everything = Wakes(store.commits.subscribe(tables: nil))
                defer { for wakes in [todo, notes, queue, everything] { wakes.stop() } }

                // A direct write through the store's own API (no context involved).
                try await store.write { tx in try tx.upsert("todo", [["id": "1", "title": "milk"]]) }
                try await todo.reach(1, "an upsert to todo")
                try await everything.reach(1, "an upsert, for a subscriber of every table")
                // The store's convenience API is a write too.
                try await store.upsert("notes", [["id": "n"]])
                try await notes.reach(1, "an upsert to notes")
                try await everything.reach(2, "an upsert to notes, for a subscriber of every table")
                // The queue alone.
                _ = try await store.write { tx in
                    try tx.appendOperation(OperationDraft(table: "todo", itemID: "1", kind: .insert))
                }
                try await queue.reach(1, "a queued operation")
                // A write that rolls back, and writes that change nothing, are not announced.
                await #expect(throws: StoreError.self) {
                    try await store.write { tx in
                        try tx.upsert("notes", [["id": "lost"]])
                        throw StoreError(.io, "the body gave up")
                    }
                }
                _ = try await store.write { tx in try tx.delete("notes", ids: ["absent"]) }
                _ = try await store.write { tx in
                    try tx.setDeltaToken(table: "todo", queryID: "q", value: "token")
                    return try tx.item("todo", id: "1")
                }
                // A delete is a change of its table.
                _ = try await store.write { tx in try tx.delete("todo", ids: ["1"]) }
                try await todo.reach(2, "a delete from todo")
                try await everything.reach(3, "a delete, for a subscriber of every table")
                // Nothing else came (a late wake-up shows here on any machine: the counts are read
                // after every announced write above has been seen by its subscribers).
                try await Task.sleep(for: .milliseconds(100))
                #expect(notes.count == 1, "notes was woken \(notes.count) times")
                #expect(queue.count == 1, "the queue was woken \(queue.count) times")
                #expect(todo.count == 2 && everything.count == 3, "todo \(todo.count), every table \(everything.count)")
            },
            .init(
                "a commit by another store on the same path reaches this store's subscribers within seconds",
                requires: [.openingAtAPath]
            ) { fixture in
                guard let path = fixture.path else { return }
                let other = try fixture.open(at: path)
                let todo = Wakes(fixture.store.commits.subscribe(tables: ["todo"]))
                defer { todo.stop() }
                try await other.upsert("todo", [["id": "from-elsewhere"]])
                try await todo.reach(1, "a write by another store on the same path")
                #expect(try await fixture.store.item("todo", id: "from-elsewhere") != nil)
            },
        ]
    }
}

/// Counts the wake-ups of one subscription, consumed as they come.
final class Wakes: Sendable {
    private final class Counter: Sendable {
        let value = Mutex(0)
    }

    private let counter: Counter
    private let consumer: Task<Void, Never>

    init(_ stream: AsyncStream<Void>) {
        let counter = Counter()
        consumer = Task {
            for await _ in stream { counter.value.withLock { $0 += 1 } }
        }
        self.counter = counter
    }

    var count: Int { counter.value.withLock { $0 } }

    /// Waits (up to 20 s) until the count is at least `expected`; fails the check otherwise.
    func reach(_ expected: Int, _ what: String) async throws {
        for _ in 0..<2_000 where count < expected { try await Task.sleep(for: .milliseconds(10)) }
        guard count >= expected else {
            throw ConformanceFailure(
                description: "never woken for \(what) (woken \(count) times, expected \(expected))")
        }
    }

    func stop() { consumer.cancel() }
}
