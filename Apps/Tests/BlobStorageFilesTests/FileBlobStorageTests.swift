import BlobStorageConformance
import BlobStorageFiles
import Foundation
import ServerStorageCore
import StoreConformance
import Testing

@Suite("FileBlobStorage", .timeLimit(.minutes(10)))
struct FileBlobStorageTests {
    static let chunkSize = BlobStorageLimits.defaultChunkSize

    static func open(_ path: String, chunkSize: Int = chunkSize) throws -> FileBlobStorage {
        try FileBlobStorage(directory: path, configuration: .init(chunkSize: chunkSize))
    }

    @Test("on the file system", arguments: BlobStorageConformanceSuite.checks)
    func files(_ check: BlobStorageCheck) async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try await check.run {
            BlobStorageFixture(
                storage: try Self.open(directory.path), chunkSize: Self.chunkSize,
                openAnother: { OpenedBlobStorage(storage: try Self.open(directory.path)) })
        }
    }

    @Test func everyCheckRunsOnTheFileSystem() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let fixture = BlobStorageFixture(
            storage: try Self.open(directory.path), chunkSize: Self.chunkSize,
            openAnother: { OpenedBlobStorage(storage: try Self.open(directory.path)) })
        let skipped = await BlobStorageCheck.skipped(BlobStorageConformanceSuite.checks, by: fixture)
        #expect(skipped.isEmpty, "skipped: \(skipped)")
    }

    @Test func anUploadKilledMidAppendResumesToTheRightBlob() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path
        try await BlobCrashTest.expectResumableAfterKills(spec: "files:\(path)", seed: 12) {
            OpenedBlobStorage(storage: try Self.open(path, chunkSize: 16 * 1024))
        } storedPrefix: { count in
            let data = try Data(contentsOf: URL(fileURLWithPath: "\(path)/uploads/\(BlobCrashTest.uploadID).data"))
            return Array(data.prefix(Int(count)))
        }
    }

    @Test func aBlobIsAPlainFileNamedByItsHashAndNothingElseIsLeft() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let blobs = try Self.open(directory.path)
        #expect(blobs.location == "files:\(directory.path)")
        let bytes = BlobTestData.bytes(Self.chunkSize + 3, seed: 1)
        let blob = try await BlobTestData.store(bytes, id: "plain", in: blobs)
        let sha = blob.sha256
        let file = "\(directory.path)/blobs/\(sha.prefix(2))/\(sha.dropFirst(2))"
        #expect(try Data(contentsOf: URL(fileURLWithPath: file)) == Data(bytes))
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path + "/uploads") == ["plain.state"])
        try await blobs.abortUpload(id: "plain")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path + "/uploads").isEmpty)
        #expect(try directory.contents() == ["blobs", "uploads"])
    }

    @Test func aTornStateSlotFallsBackToTheOffsetBeforeIt() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let blobs = try Self.open(directory.path, chunkSize: 4096)
        let bytes = BlobTestData.bytes(4096 * 3, seed: 2)
        _ = try await blobs.createUpload(id: "torn", length: Int64(bytes.count))
        // Records 1 (created), 2 (4096 bytes), 3 (8192 bytes) go to slots 1, 0, 1.
        #expect(try await blobs.append(id: "torn", at: 0, Pieces(Array(bytes[..<8192]), size: 8192)) == 8192)
        let state = URL(fileURLWithPath: directory.path + "/uploads/torn.state")
        var raw = try Data(contentsOf: state)
        raw[4096 + 30] ^= 0xFF  // the newest record, torn
        try raw.write(to: state)
        #expect(try await blobs.uploadState(id: "torn")?.offset == 4096)
        // The bytes past that offset in the data file were never counted: the next append replaces them.
        let offset = try await blobs.append(id: "torn", at: 4096, Pieces(Array(bytes[4096...]), size: 1000))
        #expect(offset == Int64(bytes.count))
        let blob = try await blobs.completeUpload(id: "torn", sha256: BlobTestData.sha256(bytes))
        #expect(try await BlobTestData.readAll(blobs, blob.sha256).bytes == bytes)
    }

    @Test func bytesPastTheOffsetAreTruncatedBeforeTheNextAppend() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let blobs = try Self.open(directory.path)
        let bytes = BlobTestData.bytes(3000, seed: 3)
        _ = try await blobs.createUpload(id: "tail", length: 3000)
        _ = try await blobs.append(id: "tail", at: 0, Pieces(Array(bytes[..<1000]), size: 1000))
        // A crash after the data was written but before the state moved leaves garbage past the offset.
        let data = try FileHandle(forWritingTo: URL(fileURLWithPath: directory.path + "/uploads/tail.data"))
        try data.seekToEnd()
        try data.write(contentsOf: Data(repeating: 0xEE, count: 5000))
        try data.close()
        #expect(try await blobs.uploadState(id: "tail")?.offset == 1000)
        _ = try await blobs.append(id: "tail", at: 1000, Pieces(Array(bytes[1000...]), size: 700))
        let blob = try await blobs.completeUpload(id: "tail", sha256: BlobTestData.sha256(bytes))
        #expect(blob.size == 3000)
        #expect(try await BlobTestData.readAll(blobs, blob.sha256).bytes == bytes)
    }

    @Test func aCompletionCutAfterItsRenameFindsItsBlobWhenCalledAgain() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let blobs = try Self.open(directory.path)
        let bytes = BlobTestData.bytes(2000, seed: 4)
        let sha = BlobTestData.sha256(bytes)
        _ = try await blobs.createUpload(id: "cut", length: 2000)
        _ = try await blobs.append(id: "cut", at: 0, Pieces(bytes, size: 2000))
        // What a completion killed between its rename and its record leaves.
        let folder = "\(directory.path)/blobs/\(sha.prefix(2))"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try FileManager.default.moveItem(
            atPath: directory.path + "/uploads/cut.data", toPath: "\(folder)/\(sha.dropFirst(2))")
        #expect(try await blobs.uploadState(id: "cut")?.isCompleted == false)
        let blob = try await blobs.completeUpload(id: "cut", sha256: sha)
        #expect(blob.size == 2000)
        #expect(try await blobs.uploadState(id: "cut")?.completedSHA256 == sha)
        #expect(try await BlobTestData.readAll(blobs, sha).bytes == bytes)
    }

    @Test func expiringRemovesLeftoverFilesOfUploadsNeverCreated() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let blobs = try Self.open(directory.path)
        let uploads = directory.path + "/uploads"
        // A state file created but never written, and a data file whose state is gone.
        #expect(FileManager.default.createFile(atPath: uploads + "/empty.state", contents: Data()))
        #expect(FileManager.default.createFile(atPath: uploads + "/orphan.data", contents: Data([1, 2, 3])))
        #expect(FileManager.default.createFile(atPath: uploads + "/not-an..id.data", contents: Data([1])))
        #expect(try await blobs.uploadState(id: "empty") == nil)
        #expect(try await blobs.expireUploads(inactiveSince: Date().addingTimeInterval(-3600)) == 0)
        #expect(try await blobs.expireUploads(inactiveSince: Date().addingTimeInterval(3600)) == 0)
        #expect(try FileManager.default.contentsOfDirectory(atPath: uploads) == ["not-an..id.data"])
        // An id that was only ever a leftover can be created afresh.
        #expect(try await blobs.createUpload(id: "orphan", length: 4).offset == 0)
    }
}
