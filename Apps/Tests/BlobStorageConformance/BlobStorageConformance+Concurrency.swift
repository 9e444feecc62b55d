import Crypto
import Foundation
import ServerStorageCore
import StoreConformance
import Testing

extension BlobStorageConformanceSuite {
    static var concurrency: [BlobStorageCheck] {
        [
            .init("two appends racing from one offset: one wins whole, the other fails, nothing interleaves") {
                fixture in
                let storage = fixture.storage
                let size = fixture.chunkSize * 4
                for round in 0..<3 {
                    let id = "race-\(round)"
                    let contents = [
                        BlobTestData.bytes(size, seed: 40 + UInt64(round)),
                        BlobTestData.bytes(size, seed: 80 + UInt64(round)),
                    ]
                    _ = try await storage.createUpload(id: id, length: Int64(size))
                    let results = await withTaskGroup(of: (Int, Result<Int64, any Error>).self) { group in
                        for (index, bytes) in contents.enumerated() {
                            group.addTask {
                                let result = await outcome {
                                    try await storage.append(id: id, at: 0, Pieces(bytes, size: 8192))
                                }
                                return (index, result)
                            }
                        }
                        return await group.reduce(into: [(Int, Result<Int64, any Error>)]()) { $0.append($1) }
                    }
                    let winners = results.compactMap { index, result in
                        (try? result.get()) == Int64(size) ? index : nil
                    }
                    #expect(winners.count == 1, "round \(round): \(results)")
                    for (_, result) in results {
                        guard case .failure(let error) = result else { continue }
                        #expect((error as? BlobStorageError)?.code == .offsetMismatch, "round \(round): \(error)")
                    }
                    let winner = try #require(winners.first)
                    let blob = try await storage.completeUpload(id: id, sha256: BlobTestData.sha256(contents[winner]))
                    #expect(try await BlobTestData.readAll(storage, blob.sha256).bytes == contents[winner])
                }
            },
            .init("cancelling an append leaves an offset whose bytes are all stored, and it resumes") { fixture in
                let storage = fixture.storage
                let bytes = BlobTestData.bytes(fixture.chunkSize * 3, seed: 41)
                let sent = fixture.chunkSize * 3 / 2
                _ = try await storage.createUpload(id: "cancel", length: Int64(bytes.count))
                let (stalled, stall) = AsyncStream<Void>.makeStream()
                let append = Task {
                    try await storage.append(
                        id: "cancel", at: 0, Pieces(Array(bytes[..<sent]), size: 3000, ending: .stall(stall)))
                }
                for await _ in stalled { break }
                append.cancel()
                let result = await append.result
                #expect(throws: (any Error).self, "a cancelled append reports it") { try result.get() }
                let offset = try #require(try await storage.uploadState(id: "cancel")?.offset)
                #expect(
                    offset == Int64(fixture.chunkSize) || offset == Int64(sent),
                    "the whole first chunk, and the rest or none of it: \(offset)")
                let resumed = try await storage.append(
                    id: "cancel", at: offset, Pieces(Array(bytes[Int(offset)...]), size: 5000))
                #expect(resumed == Int64(bytes.count))
                let blob = try await storage.completeUpload(id: "cancel", sha256: BlobTestData.sha256(bytes))
                #expect(try await BlobTestData.readAll(storage, blob.sha256).bytes == bytes)
            },
            .init("uploads of the same content completing together make one blob") { fixture in
                let storage = fixture.storage
                let bytes = BlobTestData.bytes(fixture.chunkSize + 5, seed: 42)
                for index in 0..<4 {
                    _ = try await storage.createUpload(id: "same-\(index)", length: Int64(bytes.count))
                    _ = try await storage.append(id: "same-\(index)", at: 0, Pieces(bytes, size: 50_000))
                }
                let sha = BlobTestData.sha256(bytes)
                let blobs = try await withThrowingTaskGroup(of: BlobInfo.self) { group in
                    for index in 0..<4 {
                        group.addTask { try await storage.completeUpload(id: "same-\(index)", sha256: sha) }
                    }
                    return try await group.reduce(into: [BlobInfo]()) { $0.append($1) }
                }
                #expect(Set(blobs).count == 1)
                let usage = try await storage.usage()
                #expect(usage.blobCount == 1 && usage.storedBytes == Int64(bytes.count))
            },
            .init("a 64 MiB blob written in pieces reads back, streamed, with the same SHA-256") { fixture in
                let storage = fixture.storage
                let pieces = GeneratedPieces(count: 64, pieceSize: 1024 * 1024, seed: 43)
                let sha = pieces.sha256
                _ = try await storage.createUpload(id: "large", length: pieces.size)
                #expect(try await storage.append(id: "large", at: 0, pieces) == pieces.size)
                let blob = try await storage.completeUpload(id: "large", sha256: sha)
                #expect(blob.size == pieces.size)
                var hasher = SHA256()
                var read: Int64 = 0
                var largest = 0
                for try await chunk in try await storage.read(sha256: sha, range: nil) {
                    hasher.update(data: chunk)
                    read += Int64(chunk.count)
                    largest = max(largest, chunk.count)
                }
                #expect(read == pieces.size)
                #expect(BlobNames.hex(hasher.finalize()) == sha)
                #expect(largest <= fixture.chunkSize, "never more than a chunk at once")
                let tail = try await BlobTestData.readAll(storage, sha, range: (pieces.size - 10)..<pieces.size)
                #expect(tail.bytes == Array(pieces.piece(63).suffix(10)))
                #expect(try await storage.deleteBlob(sha256: sha))
                #expect(try await storage.usage().storedBytes == 0)
            },
        ]
    }
}

/// What `body` returned or threw.
func outcome<T>(_ body: () async throws -> T) async -> Result<T, any Error> {
    do {
        return .success(try await body())
    } catch {
        return .failure(error)
    }
}
