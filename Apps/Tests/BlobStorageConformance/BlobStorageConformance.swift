import Crypto
import Foundation
public import ServerStorageCore
public import StoreConformance
import Testing

/// A blob storage under test, fresh and empty for one check.
public struct BlobStorageFixture: ConformanceFixture {
    /// The storage the checks use.
    public var storage: any BlobStorage
    /// The chunk size the storage was configured with (the checks size their data by it).
    public var chunkSize: Int
    /// Opens a second storage on the same data while ``storage`` stays open (a second server
    /// instance or process); `nil` when no other can share it (a database in memory).
    public var openAnother: (@Sendable () async throws -> OpenedBlobStorage)?
    /// Closes what the fixture opened.
    public var onClose: @Sendable () async -> Void

    /// A fixture; see the properties.
    public init(
        storage: any BlobStorage, chunkSize: Int, openAnother: (@Sendable () async throws -> OpenedBlobStorage)? = nil,
        onClose: @escaping @Sendable () async -> Void = {}
    ) {
        self.storage = storage
        self.chunkSize = chunkSize
        self.openAnother = openAnother
        self.onClose = onClose
    }

    public func unmet(_ requirement: ConformanceRequirement) -> String? {
        switch requirement {
        case .sharedBlobs: openAnother == nil ? "the data is private to one storage (in memory)" : nil
        default: "the fixture does not know \(requirement)"
        }
    }

    public func close() async { await onClose() }
}

/// A second storage on a fixture's data, and how to close it.
public struct OpenedBlobStorage: Sendable {
    public var storage: any BlobStorage
    public var close: @Sendable () async -> Void

    public init(storage: any BlobStorage, close: @escaping @Sendable () async -> Void = {}) {
        self.storage = storage
        self.close = close
    }
}

extension ConformanceRequirement {
    /// The fixture can open a second blob storage on the same data (``BlobStorageFixture/openAnother``).
    public static let sharedBlobs = ConformanceRequirement("a second blob storage on the same data")
}

/// One check of the blob-storage suite.
///
/// ```swift
/// @Test(arguments: BlobStorageConformanceSuite.checks)
/// func files(_ check: BlobStorageCheck) async throws {
///     let directory = try TemporaryDirectory()
///     defer { directory.remove() }
///     try await check.run {
///         BlobStorageFixture(storage: try FileBlobStorage(directory: directory.path), chunkSize: 256 * 1024)
///     }
/// }
/// ```
public typealias BlobStorageCheck = ConformanceCheck<BlobStorageFixture>

/// The suite every ``BlobStorage`` backend must pass: uploads created, appended, resumed, cut,
/// raced, cancelled, completed (right and wrong digests, twice, the same content twice), aborted
/// and expired; blobs read whole and by ranges, streamed, deleted; names checked; a 64 MiB blob
/// through bounded chunks; and, with a second storage on the same data, both sides of an upload.
public enum BlobStorageConformanceSuite: Sendable {
    /// Every check.
    public static var checks: [BlobStorageCheck] { uploads + completion + reads + concurrency + lifecycle }
}

extension BlobStorageError: CodedError {}

/// Test data and helpers shared by the checks (and by the backends' own tests).
public enum BlobTestData: Sendable {
    /// `count` pseudo-random bytes from `seed` (SplitMix64), the same for the same arguments.
    public static func bytes(_ count: Int, seed: UInt64) -> [UInt8] {
        var random = SeededRandom(seed: seed &+ 0x9E37_79B9_7F4A_7C15)
        var result: [UInt8] = []
        result.reserveCapacity(count + 8)
        while result.count < count {
            withUnsafeBytes(of: random.next().littleEndian) { result.append(contentsOf: $0) }
        }
        result.removeLast(result.count - count)
        return result
    }

    /// The SHA-256 of `bytes` in lowercase hex.
    public static func sha256(_ bytes: some Sequence<UInt8>) -> String {
        BlobNames.hex(SHA256.hash(data: Array(bytes)))
    }

    /// Creates, fills (in pieces of `pieceSize`) and completes an upload of `bytes`.
    @discardableResult
    public static func store(
        _ bytes: [UInt8], id: String, in storage: any BlobStorage, pieceSize: Int = 10_000
    ) async throws -> BlobInfo {
        _ = try await storage.createUpload(id: id, length: Int64(bytes.count))
        let offset = try await storage.append(id: id, at: 0, Pieces(bytes, size: pieceSize))
        #expect(offset == Int64(bytes.count))
        return try await storage.completeUpload(id: id, sha256: sha256(bytes))
    }

    /// Every chunk of a read, and the bytes they make.
    public static func readAll(_ storage: any BlobStorage, _ sha256: String, range: Range<Int64>? = nil)
        async throws -> (bytes: [UInt8], chunks: [Int])
    {
        var bytes: [UInt8] = []
        var chunks: [Int] = []
        for try await chunk in try await storage.read(sha256: sha256, range: range) {
            bytes += chunk
            chunks.append(chunk.count)
        }
        return (bytes, chunks)
    }
}

/// The error a ``Pieces`` sequence throws after its bytes when told to (a sender that went away).
public struct SenderCut: Error, Equatable, Sendable {
    public init() {}
}

/// `bytes` as an async sequence of slices of `size` bytes, yielding to other tasks between pieces;
/// it can end by throwing ``SenderCut`` (a cut connection) or by waiting until its task is
/// cancelled (a stalled sender), after telling ``stalled``.
public struct Pieces: AsyncSequence, Sendable {
    public typealias Element = ArraySlice<UInt8>

    /// How the sequence ends after its bytes.
    public enum Ending: Sendable {
        case finish
        case fail
        case stall(AsyncStream<Void>.Continuation)
    }

    let bytes: [UInt8]
    let size: Int
    let ending: Ending

    public init(_ bytes: [UInt8], size: Int, ending: Ending = .finish) {
        self.bytes = bytes
        self.size = Swift.max(1, size)
        self.ending = ending
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(bytes: bytes, size: size, ending: ending)
    }

    public struct AsyncIterator: AsyncIteratorProtocol, Sendable {
        let bytes: [UInt8]
        let size: Int
        let ending: Ending
        var index = 0

        public mutating func next() async throws -> ArraySlice<UInt8>? {
            await Task.yield()
            if index < bytes.count {
                let end = Swift.min(bytes.count, index + size)
                defer { index = end }
                return bytes[index..<end]
            }
            switch ending {
            case .finish: return nil
            case .fail: throw SenderCut()
            case .stall(let stalled):
                stalled.yield()
                try await Task.sleep(for: .seconds(3600))
                return nil
            }
        }
    }
}

/// `count` pieces of `pieceSize` bytes made on demand (a base block with the piece's number in its
/// first 8 bytes), so a test can send and check a large upload without holding it.
public struct GeneratedPieces: AsyncSequence, Sendable {
    public typealias Element = [UInt8]
    let base: [UInt8]
    let count: Int

    public init(count: Int, pieceSize: Int, seed: UInt64) {
        base = BlobTestData.bytes(pieceSize, seed: seed)
        self.count = count
    }

    /// The piece `index`.
    public func piece(_ index: Int) -> [UInt8] {
        var piece = base
        withUnsafeBytes(of: UInt64(index).littleEndian) { raw in
            for (offset, byte) in raw.enumerated() where offset < piece.count { piece[offset] = byte }
        }
        return piece
    }

    /// The total size.
    public var size: Int64 { Int64(base.count) * Int64(count) }

    /// The SHA-256 of every piece in order, computed piece by piece.
    public var sha256: String {
        var hasher = SHA256()
        for index in 0..<count { hasher.update(data: piece(index)) }
        return BlobNames.hex(hasher.finalize())
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(pieces: self) }

    public struct AsyncIterator: AsyncIteratorProtocol, Sendable {
        let pieces: GeneratedPieces
        var index = 0

        public mutating func next() async -> [UInt8]? {
            guard index < pieces.count else { return nil }
            defer { index += 1 }
            return pieces.piece(index)
        }
    }
}
