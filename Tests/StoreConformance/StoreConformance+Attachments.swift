import SyncCore
import Testing

extension StoreConformanceSuite {
    /// The attachment queue (rows of Ferry's `__attachments` system table) commits in the same
    /// transactions as the items and operations written beside it.
    static var attachments: [StoreConformanceCheck] {
        [
            .init("an attachment commits with its item and its operation, and a failed write leaves none of them") {
                fixture async throws in
                let context = SyncContext(store: fixture.store) { _ in ConflictingTable() }
                let file = ImportedFile(sha256: String(repeating: "ab", count: 32), size: 3)
                let item = try await context.write { writes in
                    let item = try writes.insert(["title": "scan"], into: "notes")
                    try writes.attach(file, to: item.id!, in: "notes", name: "scan.pdf", contentType: "application/pdf")
                    return item
                }
                let id = try #require(item.id)
                let stored = try await context.table("notes").attachments(of: id)
                #expect(stored.map(\.name) == ["scan.pdf"])
                #expect(stored.first?.state == .pendingUpload && stored.first?.sha256 == file.sha256)
                #expect(stored.first?.size == 3 && stored.first?.contentType == "application/pdf")
                #expect(try await context.queuedOperations(table: "notes").map(\.kind) == [.insert])

                struct GaveUp: Error {}
                await #expect(throws: GaveUp.self) {
                    try await context.write { writes in
                        try writes.insert(["id": "lost", "title": "never"], into: "notes")
                        try writes.attach(file, to: "lost", in: "notes", name: "a.txt")
                        throw GaveUp()
                    }
                }
                #expect(try await fixture.store.item("notes", id: "lost") == nil)
                #expect(try await context.table("notes").attachments(of: "lost").isEmpty)
                #expect(try await context.queuedOperations(table: "notes").count == 1)
                // An attachment needs its item.
                await #expect(throws: SyncError.self) {
                    try await context.write { writes in try writes.attach(file, to: "absent", in: "notes", name: "a") }
                }
                #expect(try await context.table("notes").attachments(of: "absent").isEmpty)
            },
            .init("the store accepts Ferry's local system tables and refuses other reserved names") { fixture in
                let store = fixture.store
                try await store.write { tx in try tx.upsert("__attachments", [["id": "r1", "name": "a"]]) }
                #expect(try await store.item("__attachments", id: "r1")?["name"] == "a")
                await #expect(throws: StoreError.self) {
                    try await store.write { tx in try tx.upsert("__other", [["id": "r1"]]) }
                }
                // An app's table API refuses the system table.
                let context = SyncContext(store: store) { _ in ConflictingTable() }
                await #expect(throws: SyncError.self) {
                    try await context.table("__attachments").insert(["id": "r2"])
                }
            },
            .init("attachment rows survive closing and reopening the store", requires: [.persistent, .openingAtAPath]) {
                fixture async throws in
                let context = SyncContext(store: fixture.store) { _ in ConflictingTable() }
                let file = ImportedFile(sha256: String(repeating: "cd", count: 32), size: 10)
                try await context.write { writes in
                    try writes.insert(["id": "n1"], into: "notes")
                    try writes.attach(file, to: "n1", in: "notes", name: "voice.m4a")
                }
                try await fixture.store.close()
                let reopened = SyncContext(store: try fixture.reopen()) { _ in ConflictingTable() }
                #expect(try await reopened.table("notes").attachments(of: "n1").map(\.sha256) == [file.sha256])
                try await reopened.store.close()
            },
        ]
    }
}
