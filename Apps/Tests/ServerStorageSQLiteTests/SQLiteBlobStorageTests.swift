import BlobStorageConformance
import Foundation
import GRDB
import ServerStorageCore
import ServerStorageSQLite
import StoreConformance
import SyncCore
import Testing

@Suite("SQLiteBlobStorage", .timeLimit(.minutes(10)))
struct SQLiteBlobStorageTests {
    static let chunkSize = BlobStorageLimits.defaultChunkSize

    static func open(_ location: SQLiteServerStorage.Location) throws -> (SQLiteServerStorage, SQLiteBlobStorage) {
        let storage = try SQLiteServerStorage(location: location, configuration: .init(busyTimeout: 60))
        return (storage, SQLiteBlobStorage(storage: storage, configuration: .init(chunkSize: chunkSize)))
    }

    @Test("in memory", arguments: BlobStorageConformanceSuite.checks)
    func memory(_ check: BlobStorageCheck) async throws {
        try await check.run {
            let (storage, blobs) = try Self.open(.memory)
            return BlobStorageFixture(
                storage: blobs, chunkSize: Self.chunkSize, onClose: { try? await storage.close() })
        }
    }

    @Test("in a file", arguments: BlobStorageConformanceSuite.checks)
    func file(_ check: BlobStorageCheck) async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/server.sqlite"
        try await check.run {
            let (storage, blobs) = try Self.open(.file(path))
            return BlobStorageFixture(
                storage: blobs, chunkSize: Self.chunkSize,
                openAnother: {
                    let (other, otherBlobs) = try Self.open(.file(path))
                    return OpenedBlobStorage(storage: otherBlobs, close: { try? await other.close() })
                },
                onClose: { try? await storage.close() })
        }
    }

    @Test func inMemoryOnlyTheSharedCheckIsSkipped() async throws {
        let (storage, blobs) = try Self.open(.memory)
        let skipped = await BlobStorageCheck.skipped(
            BlobStorageConformanceSuite.checks,
            by: BlobStorageFixture(storage: blobs, chunkSize: Self.chunkSize, onClose: { try? await storage.close() }))
        #expect(
            skipped.map(\.name) == ["an upload made through one storage is resumed, completed and read through another"]
        )
    }

    @Test func anUploadKilledMidAppendResumesToTheRightBlob() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/server.sqlite"
        try await BlobCrashTest.expectResumableAfterKills(spec: "sqlite:\(path)", seed: 11) {
            let (storage, blobs) = try Self.open(.file(path))
            return OpenedBlobStorage(storage: blobs, close: { try? await storage.close() })
        } storedPrefix: { count in
            let database = try DatabaseQueue(path: path)
            defer { try? database.close() }
            return try await database.read { db in
                var bytes: [UInt8] = []
                let rows = try Row.fetchCursor(
                    db,
                    sql: """
                        SELECT c.start, c.bytes FROM ferry_blob_chunks c JOIN ferry_uploads u ON c.content = u.number
                        WHERE u.id = ? ORDER BY c.start
                        """, arguments: [BlobCrashTest.uploadID])
                while let row = try rows.next(), Int64(bytes.count) < count {
                    let start: Int64 = row["start"]
                    let chunk: Data = row["bytes"]
                    guard start == Int64(bytes.count) else { break }  // a gap: the comparison fails
                    bytes += chunk
                }
                return Array(bytes.prefix(Int(count)))
            }
        }
    }

    @Test func blobsShareTheRecordsFileAndJoinItsTransactions() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/server.sqlite"
        let (storage, blobs) = try Self.open(.file(path))
        let todo = StorageTable(name: "todo")
        let bytes = BlobTestData.bytes(1000, seed: 1)
        _ = try await storage.insert(into: todo, id: "1", content: ["title": "Milk"], owner: nil)
        // A records transaction that fails takes the upload it created with it.
        await #expect(throws: SenderCut.self) {
            try await storage.transaction { () async throws -> Void in
                _ = try await blobs.createUpload(id: "in-tx", length: 1000)
                throw SenderCut()
            }
        }
        #expect(try await blobs.uploadState(id: "in-tx") == nil)
        let blob = try await BlobTestData.store(bytes, id: "file", in: blobs)
        try await storage.close()
        let (reopened, blobsAgain) = try Self.open(.file(path))
        #expect(try await blobsAgain.blob(sha256: blob.sha256) == blob)
        #expect(try await BlobTestData.readAll(blobsAgain, blob.sha256).bytes == bytes)
        #expect(try await reopened.item(in: todo, id: "1", owner: .all) != nil)
        #expect(blobsAgain.location == "sqlite:\(path)")
        try await reopened.close()
        await expectError(BlobStorageError.self, .closed, "reading once the records storage is closed") {
            try await blobsAgain.blob(sha256: blob.sha256)
        }
    }
}
