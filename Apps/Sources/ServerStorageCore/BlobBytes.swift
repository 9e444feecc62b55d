import Crypto
import Foundation

/// The bytes of a blob in a range, as chunks read on demand (``BlobStorage/read(sha256:range:)``).
///
/// Each chunk is read from the storage when the iterator asks for it, so a slow consumer (a
/// download to a slow client) holds one chunk in memory, never the blob. The sequence can be
/// iterated more than once; each iteration reads again from the start of ``range``.
///
/// ```swift
/// let bytes = try await blobs.read(sha256: hash, range: 100..<200)
/// print(bytes.blob.size, bytes.range)          // answer 206 with Content-Range from these
/// for try await chunk in bytes { send(chunk) }  // 100 bytes, in one or more chunks
/// ```
public struct BlobBytes: AsyncSequence, Sendable {
    public typealias Element = [UInt8]

    /// The blob being read.
    public let blob: BlobInfo
    /// The bytes the sequence yields: the range asked for, or the whole blob.
    public let range: Range<Int64>
    private let source: any BlobChunkSource

    /// A sequence yielding `range` of `blob` from `source`.
    package init(blob: BlobInfo, range: Range<Int64>, source: any BlobChunkSource) {
        self.blob = blob
        self.range = range
        self.source = source
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(position: range.lowerBound, end: range.upperBound, source: source, sha256: blob.sha256)
    }

    /// Reads the chunks one by one.
    public struct AsyncIterator: AsyncIteratorProtocol, Sendable {
        var position: Int64
        let end: Int64
        let source: any BlobChunkSource
        let sha256: String

        /// The next chunk, or `nil` after the end of the range.
        ///
        /// - Throws: ``BlobStorageError`` when the blob disappeared or a chunk is missing.
        public mutating func next() async throws -> [UInt8]? {
            guard position < end else { return nil }
            let chunk = try await source.chunk(from: position, before: end)
            guard !chunk.isEmpty, chunk.count <= end - position else {
                position = end
                throw BlobStorageError.corrupt("the blob \(sha256) has no bytes stored at offset \(position)")
            }
            position += Int64(chunk.count)
            return chunk
        }
    }
}

/// Where a backend's ``BlobBytes`` come from.
package protocol BlobChunkSource: Sendable {
    /// The bytes stored from `position` on, at least one and none at or after `end` (as much as is
    /// convenient: one stored chunk, or one read of the backend's chunk size).
    func chunk(from position: Int64, before end: Int64) async throws -> [UInt8]
}

extension BlobStorage {
    /// `range` checked against a blob of `size` bytes (`nil`: the whole blob).
    package static func checkedRange(_ range: Range<Int64>?, size: Int64, sha256: String) throws -> Range<Int64> {
        guard let range else { return 0..<size }
        guard range.lowerBound >= 0, range.upperBound <= size else {
            throw BlobStorageError(
                .rangeNotSatisfiable,
                "the range \(range.lowerBound)..<\(range.upperBound) is not within the \(size) bytes of the blob \(sha256)"
            )
        }
        return range
    }
}

/// The common part of every backend's append: reads the byte sequence, groups it into chunks and
/// hands each chunk to the backend's commit, which stores it together with the new offset.
package enum BlobAppending {
    /// Appends `bytes` to the upload `id` from `offset` (the upload's offset, just checked), never
    /// past `length`, committing chunks of `chunkSize`; returns the new offset.
    ///
    /// `commit(start, chunk)` must store `chunk` at `start` and move the offset from `start` to
    /// `start + chunk.count` in one durable step, or throw (``BlobStorageError/Code/offsetMismatch``
    /// when the offset is no longer `start`). When `bytes` throws, the bytes received before are
    /// committed if that still works (unless the task is cancelled), and the sequence's error is
    /// thrown.
    /// A backend's whole `append`: the upload must exist (`state`, as the backend read it) and stand
    /// at `offset`, else ``BlobStorageError/Code/uploadNotFound`` or
    /// ``BlobStorageError/Code/offsetMismatch``; then ``run(id:from:length:chunkSize:bytes:commit:)``.
    package static func append<Bytes: AsyncSequence>(
        id: String, at offset: Int64, state: UploadState?, chunkSize: Int, bytes: Bytes,
        commit: (_ start: Int64, _ chunk: [UInt8]) async throws -> Void
    ) async throws -> Int64 where Bytes.Element: Collection<UInt8> {
        guard let state else { throw BlobStorageError.uploadNotFound(id) }
        guard state.offset == offset else {
            throw BlobStorageError.mismatch(id, expected: offset, current: state.offset)
        }
        return try await run(
            id: id, from: offset, length: state.length, chunkSize: chunkSize, bytes: bytes, commit: commit)
    }

    package static func run<Bytes: AsyncSequence>(
        id: String, from offset: Int64, length: Int64, chunkSize: Int, bytes: Bytes,
        commit: (_ start: Int64, _ chunk: [UInt8]) async throws -> Void
    ) async throws -> Int64 where Bytes.Element: Collection<UInt8> {
        var committed = offset
        var pending: [UInt8] = []
        pending.reserveCapacity(min(chunkSize, Int(clamping: max(0, length - offset))))
        var iterator = bytes.makeAsyncIterator()
        var overflow = false
        reading: while true {
            let next: Bytes.Element?
            do {
                next = try await iterator.next(isolation: #isolation)
            } catch {
                // A sender that went away: keep what it sent. A cancelled task drops the chunk in
                // progress (a commit started now could land after this returns).
                if !pending.isEmpty, !Task.isCancelled, (try? await commit(committed, pending)) != nil {
                    committed += Int64(pending.count)
                }
                throw error
            }
            guard let piece = next else { break }
            var index = piece.startIndex
            while index != piece.endIndex {
                let left = length - committed - Int64(pending.count)
                guard left > 0 else {
                    overflow = true
                    break reading
                }
                let room = min(chunkSize - pending.count, Int(clamping: left))
                let end = piece.index(index, offsetBy: room, limitedBy: piece.endIndex) ?? piece.endIndex
                pending.append(contentsOf: piece[index..<end])
                index = end
                if pending.count == chunkSize {
                    try await commit(committed, pending)
                    committed += Int64(pending.count)
                    pending.removeAll(keepingCapacity: true)
                }
            }
        }
        if !pending.isEmpty {
            try await commit(committed, pending)
            committed += Int64(pending.count)
        }
        if overflow { throw BlobStorageError.exceedsLength(id, length: length) }
        return committed
    }
}

/// The SHA-256 of stored bytes, computed chunk by chunk.
package enum BlobDigest {
    /// Hashes the `length` bytes `source` holds from offset 0, one chunk at a time; throws `missing`
    /// when a chunk is not there (the bytes were removed meanwhile, or are damaged).
    package static func sha256(
        of source: any BlobChunkSource, length: Int64, missing: @autoclosure () -> BlobStorageError
    ) async throws -> String {
        var hasher = SHA256()
        var position: Int64 = 0
        while position < length {
            let chunk = try await source.chunk(from: position, before: length)
            guard !chunk.isEmpty, chunk.count <= length - position else { throw missing() }
            hasher.update(data: chunk)
            position += Int64(chunk.count)
        }
        return BlobNames.hex(hasher.finalize())
    }
}
