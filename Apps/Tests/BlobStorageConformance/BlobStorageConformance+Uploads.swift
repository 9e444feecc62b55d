import Foundation
import ServerStorageCore
import StoreConformance
import Testing

extension BlobStorageConformanceSuite {
    static var uploads: [BlobStorageCheck] {
        [
            .init("an upload created, filled and completed becomes a blob that reads back exactly") { fixture in
                let storage = fixture.storage
                let bytes = BlobTestData.bytes(fixture.chunkSize * 5 / 2 + 17, seed: 1)
                let created = try await storage.createUpload(id: "up-1", length: Int64(bytes.count))
                #expect(created.offset == 0 && created.length == Int64(bytes.count) && !created.isCompleted)
                #expect(try await storage.uploadState(id: "up-1") == created)
                let offset = try await storage.append(id: "up-1", at: 0, Pieces(bytes, size: 1000))
                #expect(offset == Int64(bytes.count))
                let sha = BlobTestData.sha256(bytes)
                let blob = try await storage.completeUpload(id: "up-1", sha256: sha)
                #expect(blob.sha256 == sha && blob.size == Int64(bytes.count))
                #expect(try await storage.blob(sha256: sha) == blob)
                #expect(try await BlobTestData.readAll(storage, sha).bytes == bytes)
                let state = try #require(try await storage.uploadState(id: "up-1"))
                #expect(state.completedSHA256 == sha && state.offset == state.length)
                let usage = try await storage.usage()
                #expect(usage.blobCount == 1 && usage.blobBytes == Int64(bytes.count) && usage.uploadCount == 1)
                #expect(usage.uploadBytes == 0 && usage.storedBytes == Int64(bytes.count))
            },
            .init("unfinished uploads are counted by id prefix, with the lengths they were created with") { fixture in
                let storage = fixture.storage
                #expect(
                    try await storage.unfinishedUploads(idPrefix: "alice_")
                        == UnfinishedUploads(count: 0, declaredBytes: 0))
                _ = try await storage.createUpload(id: "alice_1", length: 1000)
                _ = try await storage.createUpload(id: "alice_2", length: 2500)
                _ = try await storage.createUpload(id: "alicex3", length: 7)  // `_` is no wildcard
                _ = try await storage.createUpload(id: "bob_1", length: 40)
                let bytes = BlobTestData.bytes(300, seed: 9)
                _ = try await storage.createUpload(id: "alice_done", length: Int64(bytes.count))
                _ = try await storage.append(id: "alice_2", at: 0, Pieces(Array(bytes[..<100]), size: 100))
                #expect(
                    try await storage.unfinishedUploads(idPrefix: "alice_")
                        == UnfinishedUploads(count: 3, declaredBytes: 3800))
                _ = try await storage.append(id: "alice_done", at: 0, Pieces(bytes, size: 100))
                _ = try await storage.completeUpload(id: "alice_done", sha256: BlobTestData.sha256(bytes))
                _ = try await storage.abortUpload(id: "alice_1")
                #expect(
                    try await storage.unfinishedUploads(idPrefix: "alice_")
                        == UnfinishedUploads(count: 1, declaredBytes: 2500))
                #expect(
                    try await storage.unfinishedUploads(idPrefix: "alice")
                        == UnfinishedUploads(count: 2, declaredBytes: 2507))
                #expect(
                    try await storage.unfinishedUploads(idPrefix: "bob_1")
                        == UnfinishedUploads(count: 1, declaredBytes: 40))
                for prefix in ["", "a%", "../", String(repeating: "x", count: 129)] {
                    await expectError(BlobStorageError.self, .invalidName, "prefix '\(prefix)'") {
                        try await storage.unfinishedUploads(idPrefix: prefix)
                    }
                }
            },
            .init("creating is idempotent for the same length and refused for another; bad ids and lengths fail") {
                fixture in
                let storage = fixture.storage
                let first = try await storage.createUpload(id: "same", length: 10)
                #expect(try await storage.createUpload(id: "same", length: 10) == first)
                let conflict = await expectError(BlobStorageError.self, .uploadConflict, "another length") {
                    try await storage.createUpload(id: "same", length: 11)
                }
                #expect(conflict?.message.contains("same") == true)
                for id in ["", "../escape", "a/b", "a.b", "dot..", " space", "é", String(repeating: "x", count: 129)] {
                    await expectError(BlobStorageError.self, .invalidName, "create '\(id)'") {
                        try await storage.createUpload(id: id, length: 1)
                    }
                    await expectError(BlobStorageError.self, .invalidName, "state of '\(id)'") {
                        try await storage.uploadState(id: id)
                    }
                }
                await expectError(BlobStorageError.self, .invalidLength, "a negative length") {
                    try await storage.createUpload(id: "negative", length: -1)
                }
                #expect(try await storage.uploadState(id: "negative") == nil)
                #expect(try await storage.uploadState(id: String(repeating: "x", count: 128)) == nil)
            },
            .init("an append resumes at the stored offset; any other offset fails and tells the current one") {
                fixture in
                let storage = fixture.storage
                let bytes = BlobTestData.bytes(fixture.chunkSize * 2 + 5, seed: 2)
                let cut = fixture.chunkSize * 3 / 2 + 3
                _ = try await storage.createUpload(id: "resume", length: Int64(bytes.count))
                let first = try await storage.append(id: "resume", at: 0, Pieces(Array(bytes[..<cut]), size: 4096))
                #expect(first == Int64(cut))
                #expect(try await storage.uploadState(id: "resume")?.offset == Int64(cut))
                for wrong in [0, Int64(cut) - 1, Int64(cut) + 1] {
                    let error = await expectError(BlobStorageError.self, .offsetMismatch, "append at \(wrong)") {
                        try await storage.append(id: "resume", at: wrong, Pieces(Array(bytes[cut...]), size: 4096))
                    }
                    #expect(error?.currentOffset == Int64(cut))
                }
                let second = try await storage.append(
                    id: "resume", at: Int64(cut), Pieces(Array(bytes[cut...]), size: 777))
                #expect(second == Int64(bytes.count))
                _ = try await storage.completeUpload(id: "resume", sha256: BlobTestData.sha256(bytes))
                #expect(try await BlobTestData.readAll(storage, BlobTestData.sha256(bytes)).bytes == bytes)
                await expectError(BlobStorageError.self, .uploadNotFound, "append to no upload") {
                    try await storage.append(id: "nothing", at: 0, Pieces([1], size: 1))
                }
            },
            .init("an append cut by its sender keeps every byte received before the cut, then resumes") {
                fixture in
                let storage = fixture.storage
                let bytes = BlobTestData.bytes(fixture.chunkSize * 3, seed: 3)
                let cut = fixture.chunkSize + fixture.chunkSize / 3
                _ = try await storage.createUpload(id: "cut", length: Int64(bytes.count))
                do {
                    _ = try await storage.append(
                        id: "cut", at: 0, Pieces(Array(bytes[..<cut]), size: 1500, ending: .fail))
                    Issue.record("the sender's failure was not thrown")
                } catch is SenderCut {}
                #expect(try await storage.uploadState(id: "cut")?.offset == Int64(cut))
                #expect(try await storage.usage().uploadBytes == Int64(cut))
                _ = try await storage.append(id: "cut", at: Int64(cut), Pieces(Array(bytes[cut...]), size: 1500))
                let blob = try await storage.completeUpload(id: "cut", sha256: BlobTestData.sha256(bytes))
                #expect(blob.size == Int64(bytes.count))
                #expect(try await BlobTestData.readAll(storage, blob.sha256).bytes == bytes)
            },
            .init("bytes past the length are refused, those up to it kept") { fixture in
                let storage = fixture.storage
                let bytes = BlobTestData.bytes(150, seed: 4)
                _ = try await storage.createUpload(id: "long", length: 100)
                let error = await expectError(BlobStorageError.self, .exceedsLength, "150 bytes into 100") {
                    try await storage.append(id: "long", at: 0, Pieces(bytes, size: 40))
                }
                #expect(error?.message.contains("100") == true)
                #expect(try await storage.uploadState(id: "long")?.offset == 100)
                await expectError(BlobStorageError.self, .exceedsLength, "a byte into a full upload") {
                    try await storage.append(id: "long", at: 100, Pieces([1], size: 1))
                }
                #expect(try await storage.append(id: "long", at: 100, Pieces([], size: 1)) == 100)
                let blob = try await storage.completeUpload(id: "long", sha256: BlobTestData.sha256(bytes[..<100]))
                #expect(try await BlobTestData.readAll(storage, blob.sha256).bytes == Array(bytes[..<100]))
            },
            .init("an empty upload completes as the empty blob") { fixture in
                let storage = fixture.storage
                _ = try await storage.createUpload(id: "empty", length: 0)
                #expect(try await storage.append(id: "empty", at: 0, Pieces([], size: 1)) == 0)
                let sha = BlobTestData.sha256([UInt8]())
                let blob = try await storage.completeUpload(id: "empty", sha256: sha)
                #expect(blob.size == 0)
                let read = try await BlobTestData.readAll(storage, sha)
                #expect(read.bytes.isEmpty && read.chunks.isEmpty)
                #expect(try await BlobTestData.readAll(storage, sha, range: 0..<0).bytes.isEmpty)
                await expectError(BlobStorageError.self, .rangeNotSatisfiable, "a byte of the empty blob") {
                    try await storage.read(sha256: sha, range: 0..<1)
                }
            },
        ]
    }

    static var completion: [BlobStorageCheck] {
        [
            .init("completing with a wrong digest fails and discards the upload and its bytes") { fixture in
                let storage = fixture.storage
                let bytes = BlobTestData.bytes(fixture.chunkSize + 99, seed: 5)
                _ = try await storage.createUpload(id: "wrong", length: Int64(bytes.count))
                _ = try await storage.append(id: "wrong", at: 0, Pieces(bytes, size: 5000))
                let claimed = BlobTestData.sha256(bytes.reversed())
                let error = await expectError(BlobStorageError.self, .digestMismatch, "a wrong digest") {
                    try await storage.completeUpload(id: "wrong", sha256: claimed)
                }
                #expect(error?.message.contains(BlobTestData.sha256(bytes)) == true)
                #expect(try await storage.uploadState(id: "wrong") == nil)
                #expect(try await storage.blob(sha256: claimed) == nil)
                #expect(try await storage.blob(sha256: BlobTestData.sha256(bytes)) == nil)
                #expect(
                    try await storage.usage()
                        == BlobUsage(blobCount: 0, blobBytes: 0, uploadCount: 0, uploadBytes: 0, storedBytes: 0))
                await expectError(BlobStorageError.self, .uploadNotFound, "completing it again") {
                    try await storage.completeUpload(id: "wrong", sha256: BlobTestData.sha256(bytes))
                }
            },
            .init("completing before the upload is full fails and keeps it") { fixture in
                let storage = fixture.storage
                let bytes = BlobTestData.bytes(1000, seed: 6)
                _ = try await storage.createUpload(id: "partial", length: 1000)
                _ = try await storage.append(id: "partial", at: 0, Pieces(Array(bytes[..<600]), size: 100))
                let error = await expectError(BlobStorageError.self, .incomplete, "600 of 1000 bytes") {
                    try await storage.completeUpload(id: "partial", sha256: BlobTestData.sha256(bytes))
                }
                #expect(error?.currentOffset == 600)
                #expect(try await storage.uploadState(id: "partial")?.offset == 600)
                await expectError(BlobStorageError.self, .uploadNotFound, "no such upload") {
                    try await storage.completeUpload(id: "none", sha256: BlobTestData.sha256(bytes))
                }
            },
            .init("completing again returns the same blob; another digest is refused and keeps the upload") {
                fixture in
                let storage = fixture.storage
                let bytes = BlobTestData.bytes(3000, seed: 7)
                let blob = try await BlobTestData.store(bytes, id: "twice", in: storage)
                #expect(try await storage.completeUpload(id: "twice", sha256: blob.sha256) == blob)
                await expectError(BlobStorageError.self, .digestMismatch, "another digest after completion") {
                    try await storage.completeUpload(id: "twice", sha256: BlobTestData.sha256([1, 2, 3]))
                }
                #expect(try await storage.uploadState(id: "twice")?.completedSHA256 == blob.sha256)
                #expect(try await storage.completeUpload(id: "twice", sha256: blob.sha256) == blob)
                #expect(try await storage.createUpload(id: "twice", length: 3000).completedSHA256 == blob.sha256)
            },
            .init("the same content uploaded twice is one blob, stored once") { fixture in
                let storage = fixture.storage
                let bytes = BlobTestData.bytes(fixture.chunkSize * 2 + 1, seed: 8)
                let first = try await BlobTestData.store(bytes, id: "copy-1", in: storage, pieceSize: 7000)
                let second = try await BlobTestData.store(bytes, id: "copy-2", in: storage, pieceSize: 3000)
                #expect(first == second, "the second keeps the first's blob (and its creation time)")
                let usage = try await storage.usage()
                #expect(usage.blobCount == 1 && usage.uploadCount == 2)
                #expect(usage.storedBytes == Int64(bytes.count), "the content is stored once")
                #expect(try await BlobTestData.readAll(storage, first.sha256).bytes == bytes)
            },
            .init("a SHA-256 must be 64 lowercase hex digits everywhere") { fixture in
                let storage = fixture.storage
                _ = try await storage.createUpload(id: "names", length: 0)
                let valid = BlobTestData.sha256([UInt8]())
                for bad in [
                    valid.uppercased(), String(valid.dropLast()), valid + "0", "../" + valid.dropFirst(3),
                    String(valid.dropLast()) + "g", "", "/" + valid.dropFirst(),
                ] {
                    await expectError(BlobStorageError.self, .invalidName, "blob '\(bad)'") {
                        try await storage.blob(sha256: bad)
                    }
                    await expectError(BlobStorageError.self, .invalidName, "read '\(bad)'") {
                        try await storage.read(sha256: bad, range: nil)
                    }
                    await expectError(BlobStorageError.self, .invalidName, "delete '\(bad)'") {
                        try await storage.deleteBlob(sha256: bad)
                    }
                    await expectError(BlobStorageError.self, .invalidName, "complete with '\(bad)'") {
                        try await storage.completeUpload(id: "names", sha256: bad)
                    }
                }
                #expect(try await storage.uploadState(id: "names")?.isCompleted == false)
            },
        ]
    }
}
