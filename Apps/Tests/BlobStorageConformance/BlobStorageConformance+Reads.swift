import Foundation
import ServerStorageCore
import StoreConformance
import Testing

extension BlobStorageConformanceSuite {
    static var reads: [BlobStorageCheck] {
        [
            .init("ranges: first byte, last byte, across chunks, whole, empty at the end; outside fails") { fixture in
                let storage = fixture.storage
                let size = fixture.chunkSize * 3 + 11
                let bytes = BlobTestData.bytes(size, seed: 20)
                let blob = try await BlobTestData.store(bytes, id: "ranges", in: storage)
                let total = Int64(size)
                let chunk = Int64(fixture.chunkSize)
                let ranges: [Range<Int64>] = [
                    0..<1, (total - 1)..<total, (chunk - 5)..<(2 * chunk + 5), 0..<total, 7..<(total - 7),
                    chunk..<(chunk + 1), total..<total, 3..<3,
                ]
                for range in ranges {
                    let read = try await storage.read(sha256: blob.sha256, range: range)
                    #expect(read.range == range && read.blob == blob)
                    let got = try await BlobTestData.readAll(storage, blob.sha256, range: range).bytes
                    #expect(got == Array(bytes[Int(range.lowerBound)..<Int(range.upperBound)]), "range \(range)")
                }
                for range in [0..<(total + 1), (total - 1)..<(total + 10), (total + 1)..<(total + 2), -1..<4] {
                    let error = await expectError(BlobStorageError.self, .rangeNotSatisfiable, "range \(range)") {
                        try await storage.read(sha256: blob.sha256, range: range)
                    }
                    #expect(error?.message.contains("\(size)") == true)
                }
                await expectError(BlobStorageError.self, .blobNotFound, "an unknown blob") {
                    try await storage.read(sha256: BlobTestData.sha256([9]), range: nil)
                }
                #expect(try await storage.blob(sha256: BlobTestData.sha256([9])) == nil)
            },
            .init("a read streams chunks no larger than the chunk size, and can be iterated again") { fixture in
                let storage = fixture.storage
                let bytes = BlobTestData.bytes(fixture.chunkSize * 4 + 3, seed: 21)
                let blob = try await BlobTestData.store(bytes, id: "stream", in: storage, pieceSize: 65_000)
                let sequence = try await storage.read(sha256: blob.sha256, range: nil)
                for _ in 0..<2 {
                    var got: [UInt8] = []
                    var count = 0
                    for try await chunk in sequence {
                        #expect(!chunk.isEmpty && chunk.count <= fixture.chunkSize)
                        got += chunk
                        count += 1
                    }
                    #expect(got == bytes)
                    #expect(count >= 5, "\(bytes.count) bytes in chunks of at most \(fixture.chunkSize)")
                }
                // A consumer that stops early reads no further.
                var iterator = sequence.makeAsyncIterator()
                let first = try await iterator.next()
                #expect(first.map { Array(bytes.prefix($0.count)) } == first)
            },
            .init("blobs are listed page by page in the order of their names, deleted ones gone") { fixture in
                let storage = fixture.storage
                var stored: [BlobInfo] = []
                for seed in 0..<7 {
                    let bytes = BlobTestData.bytes(100 + seed, seed: UInt64(40 + seed))
                    stored.append(try await BlobTestData.store(bytes, id: "listed-\(seed)", in: storage))
                }
                #expect(try await storage.deleteBlob(sha256: stored[3].sha256))
                let expected = stored.enumerated().filter { $0.offset != 3 }.map(\.element).sorted {
                    $0.sha256 < $1.sha256
                }
                var listed: [BlobInfo] = []
                var after: String?
                while case let page = try await storage.blobs(after: after, limit: 2), !page.isEmpty {
                    #expect(page.count <= 2)
                    listed += page
                    after = page.last?.sha256
                    if listed.count > 20 { break }
                }
                #expect(listed.map(\.sha256) == expected.map(\.sha256))
                #expect(listed.map(\.size) == expected.map(\.size))
                #expect(
                    try await storage.blobs(after: expected[2].sha256, limit: 1).map(\.sha256) == [expected[3].sha256])
                #expect(try await storage.blobs(after: nil, limit: 0).isEmpty)
                await expectError(BlobStorageError.self, .invalidName, "listing after a name that is no SHA-256") {
                    try await storage.blobs(after: "../x", limit: 1)
                }
            },
            .init("deleting a blob removes it and its bytes; uploads completed as it stay completed") { fixture in
                let storage = fixture.storage
                let bytes = BlobTestData.bytes(fixture.chunkSize + 1, seed: 22)
                let blob = try await BlobTestData.store(bytes, id: "doomed", in: storage)
                let kept = try await BlobTestData.store(BlobTestData.bytes(10, seed: 23), id: "kept", in: storage)
                #expect(try await storage.deleteBlob(sha256: blob.sha256))
                #expect(try await storage.blob(sha256: blob.sha256) == nil)
                #expect(try await storage.deleteBlob(sha256: blob.sha256) == false)
                await expectError(BlobStorageError.self, .blobNotFound, "reading a deleted blob") {
                    try await storage.read(sha256: blob.sha256, range: nil)
                }
                #expect(try await storage.uploadState(id: "doomed")?.completedSHA256 == blob.sha256)
                await expectError(BlobStorageError.self, .blobNotFound, "completing again once it is deleted") {
                    try await storage.completeUpload(id: "doomed", sha256: blob.sha256)
                }
                let usage = try await storage.usage()
                #expect(usage.blobCount == 1 && usage.storedBytes == kept.size)
                // The same content can be stored again.
                let again = try await BlobTestData.store(bytes, id: "again", in: storage)
                #expect(again.sha256 == blob.sha256)
                #expect(try await BlobTestData.readAll(storage, again.sha256).bytes == bytes)
            },
        ]
    }

    static var lifecycle: [BlobStorageCheck] {
        [
            .init("aborting an upload removes it and its bytes; a completed one's blob stays") { fixture in
                let storage = fixture.storage
                let bytes = BlobTestData.bytes(fixture.chunkSize + 7, seed: 30)
                _ = try await storage.createUpload(id: "abort", length: Int64(bytes.count) + 10)
                _ = try await storage.append(id: "abort", at: 0, Pieces(bytes, size: 9000))
                #expect(try await storage.abortUpload(id: "abort"))
                #expect(try await storage.uploadState(id: "abort") == nil)
                #expect(try await storage.abortUpload(id: "abort") == false)
                await expectError(BlobStorageError.self, .uploadNotFound, "appending to an aborted upload") {
                    try await storage.append(id: "abort", at: Int64(bytes.count), Pieces([1], size: 1))
                }
                #expect(try await storage.usage().storedBytes == 0)
                let blob = try await BlobTestData.store(bytes, id: "finished", in: storage)
                #expect(try await storage.abortUpload(id: "finished"))
                #expect(try await storage.blob(sha256: blob.sha256) == blob)
                #expect(try await BlobTestData.readAll(storage, blob.sha256).bytes == bytes)
                // The id can be used again.
                #expect(try await storage.createUpload(id: "abort", length: 1).offset == 0)
            },
            .init("expiring removes the uploads untouched since the date, completed or not, and keeps blobs") {
                fixture in
                let storage = fixture.storage
                let bytes = BlobTestData.bytes(5000, seed: 31)
                _ = try await storage.createUpload(id: "idle", length: 10_000)
                _ = try await storage.append(id: "idle", at: 0, Pieces(bytes, size: 1000))
                let blob = try await BlobTestData.store(bytes, id: "done", in: storage)
                let state = try #require(try await storage.uploadState(id: "idle"))
                #expect(state.updatedAt >= state.createdAt)
                #expect(try await storage.expireUploads(inactiveSince: Date().addingTimeInterval(-3600)) == 0)
                #expect(try await storage.uploadState(id: "idle")?.offset == 5000)
                #expect(try await storage.expireUploads(inactiveSince: Date().addingTimeInterval(3600)) == 2)
                #expect(try await storage.uploadState(id: "idle") == nil)
                #expect(try await storage.uploadState(id: "done") == nil)
                #expect(try await storage.blob(sha256: blob.sha256) == blob)
                let usage = try await storage.usage()
                #expect(
                    usage == BlobUsage(blobCount: 1, blobBytes: 5000, uploadCount: 0, uploadBytes: 0, storedBytes: 5000)
                )
                #expect(try await storage.expireUploads(inactiveSince: Date().addingTimeInterval(3600)) == 0)
            },
            .init(
                "an upload made through one storage is resumed, completed and read through another",
                requires: [.sharedBlobs]
            ) { fixture in
                let opened = try #require(try await fixture.openAnother?())
                let (one, two) = (fixture.storage, opened.storage)
                do {
                    let bytes = BlobTestData.bytes(fixture.chunkSize * 2 + 3, seed: 32)
                    let half = bytes.count / 2
                    _ = try await one.createUpload(id: "shared", length: Int64(bytes.count))
                    _ = try await one.append(id: "shared", at: 0, Pieces(Array(bytes[..<half]), size: 5000))
                    #expect(try await two.uploadState(id: "shared")?.offset == Int64(half))
                    await expectError(BlobStorageError.self, .offsetMismatch, "the other side's stale offset") {
                        try await two.append(id: "shared", at: 0, Pieces(bytes, size: 5000))
                    }
                    _ = try await two.append(id: "shared", at: Int64(half), Pieces(Array(bytes[half...]), size: 5000))
                    let blob = try await two.completeUpload(id: "shared", sha256: BlobTestData.sha256(bytes))
                    #expect(try await one.blob(sha256: blob.sha256) == blob)
                    #expect(try await BlobTestData.readAll(one, blob.sha256).bytes == bytes)
                    #expect(try await one.completeUpload(id: "shared", sha256: blob.sha256) == blob)
                    #expect(try await two.deleteBlob(sha256: blob.sha256))
                    #expect(try await one.blob(sha256: blob.sha256) == nil)
                } catch {
                    await opened.close()
                    throw error
                }
                await opened.close()
            },
        ]
    }
}
