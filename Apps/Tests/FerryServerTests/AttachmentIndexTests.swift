import Logging
import ServerStorageCore
import ServerStorageSQLite
import ServerTestSupport
import SyncCore
import Testing

@testable import FerryServer

/// The attachment index: rows of the system table `__attachments`, on both storages.
@Suite("Attachment index", .timeLimit(.minutes(2)))
struct AttachmentIndexTests {
    static func attachment(_ item: String, _ name: String, sha: String = "aa", size: Int64 = 10) -> StoredAttachment {
        StoredAttachment(table: "todo", item: item, name: name, sha256: sha, size: size, contentType: "image/jpeg")
    }

    @Test(arguments: ServerBackend.allCases)
    func putListReplaceAndRemove(_ backend: ServerBackend) async throws {
        let database = try await backend.database()
        let storage = try await database.open(logger: .quietTest)
        let index = AttachmentIndex(storage: storage)
        #expect(try await index.attachments(table: "todo", item: "1", owner: .all).isEmpty, "no table yet")

        let first = try await index.put(Self.attachment("1", "photo.jpg"), owner: "alice")
        _ = try await index.put(Self.attachment("1", "scan.pdf", sha: "bb", size: 5), owner: "alice")
        _ = try await index.put(Self.attachment("2", "photo.jpg"), owner: "bob")
        #expect(
            try await index.attachments(table: "todo", item: "1", owner: .all).map(\.name) == ["photo.jpg", "scan.pdf"])
        #expect(
            try await index.attachments(table: "todo", item: "1", owner: .owner("bob")).isEmpty, "alice's, not bob's")
        #expect(
            try await index.attachment(table: "todo", item: "1", name: "photo.jpg", owner: .owner("alice")) == first)

        // New content under the same name replaces the row (a new version), whoever asks.
        let replaced = try await index.put(Self.attachment("1", "photo.jpg", sha: "cc", size: 7), owner: "alice")
        #expect(replaced.sha256 == "cc" && replaced.version > first.version)
        #expect(try await index.bytesUsed(by: .owner("alice")) == 12)
        #expect(try await index.bytesUsed(table: "todo", item: "1") == 12)

        // Content is skipped only within the scope: the user's own, or the table's when not per user.
        #expect(try await index.holds(sha256: "cc", table: "todo", owner: .owner("alice")))
        #expect(try await !index.holds(sha256: "cc", table: "todo", owner: .owner("bob")))
        #expect(try await index.holds(sha256: "cc", table: "todo", owner: .all))
        #expect(try await !index.holds(sha256: "cc", table: "notes", owner: .all))

        // Removal leaves a tombstone: devices pulling the table's rows learn of it.
        #expect(try await !index.remove(table: "todo", item: "1", name: "photo.jpg", owner: .owner("bob")))
        #expect(try await index.remove(table: "todo", item: "1", name: "photo.jpg", owner: .owner("alice")))
        #expect(try await !index.remove(table: "todo", item: "1", name: "photo.jpg", owner: .owner("alice")))
        #expect(try await index.attachments(table: "todo", item: "1", owner: .all).map(\.name) == ["scan.pdf"])
        let tombstones = try await storage.query(
            AttachmentIndex.table, StorageQuery(filter: AttachmentIndex.equal(["sha256": "cc"]), includeDeleted: true))
        #expect(tombstones.items.map(\.deleted) == [true])
        guard case .removed = try await index.reference(to: "cc") else {
            Issue.record("a tombstone names the content: the retention counts from its removal")
            return
        }

        // Attaching again revives the row.
        _ = try await index.put(Self.attachment("1", "photo.jpg", sha: "dd"), owner: "alice")
        #expect(try await index.attachments(table: "todo", item: "1", owner: .all).count == 2)

        // An item's purge removes its rows for good.
        try await index.purge(table: "todo", item: "1")
        #expect(try await index.attachments(table: "todo", item: "1", owner: .all).isEmpty)
        #expect(try await index.reference(to: "dd") == AttachmentIndex.Reference.none)
        #expect(try await index.reference(to: "aa") == .attached)

        try await storage.close()
        await database.remove()
    }

    /// The system table is the storage's, never a client's: the protocol's name check refuses it.
    @Test func clientsCannotNameTheSystemTable() throws {
        #expect(throws: StoreError.self) { try StoreValidation.validateTableName(StorageTable.attachmentsTableName) }
        try StorageTable.validateName(StorageTable.attachmentsTableName)
        #expect(throws: StorageError.self) { try StorageTable.validateName("__other") }
    }

    /// The system table is neither listed nor served as an app table.
    @Test func theSystemTableIsNotAnAppTable() async throws {
        let server = try await ReferenceServer.start(
            ServerConfiguration(host: "127.0.0.1", port: 0, logger: .quietTest),
            storage: try sqliteStorage(.memory, logger: .quietTest), ownsStorage: true)
        _ = try await AttachmentIndex(storage: server.storage).put(Self.attachment("1", "a.jpg"), owner: nil)
        let list = try await LoopbackHTTP.send(
            port: server.port, method: "GET", target: "/tables", headers: [], body: nil)
        #expect(list.status == 200)
        #expect(
            !String(decoding: list.body, as: UTF8.self).contains("__"), "\(String(decoding: list.body, as: UTF8.self))")
        for target in ["/tables/__attachments", "/tables/__attachments/x"] {
            let answer = try await LoopbackHTTP.send(
                port: server.port, method: "GET", target: target, headers: [], body: nil)
            #expect(answer.status == 404, "\(target): \(answer.status)")
        }
        try await server.shutdown()
    }
}
