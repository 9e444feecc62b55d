public import Foundation
import NIOCore
import PostgresNIO
public import ServerStorageCore

/// Blobs and uploads in the database of a ``PostgreSQLServerStorage``: `bytea` chunk rows beside
/// the records, through the same pool, so every server instance on the database sees every blob
/// and can resume any upload.
///
/// ```swift
/// let storage = try await PostgreSQLServerStorage.open(url)
/// let blobs = PostgreSQLBlobStorage(storage: storage)
/// _ = try await blobs.createUpload(id: "u-1", length: 5)
/// let hello = AsyncStream<[UInt8]> { $0.yield(Array("hello".utf8)); $0.finish() }
/// _ = try await blobs.append(id: "u-1", at: 0, hello)
/// let blob = try await blobs.completeUpload(
///     id: "u-1", sha256: "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824")
/// ```
///
/// ## Layout
///
/// The same tables as `SQLiteBlobStorage`'s, created by migration 3 (`blobs`): `ferry_uploads`
/// (`number` an identity, never reused; `received` the offset; `sha256` once completed),
/// `ferry_blobs` (`content` the number of the upload whose bytes it took) and `ferry_blob_chunks`
/// (`content`, `start`, `bytes bytea` stored out of line and uncompressed). Each appended chunk is
/// one transaction with the conditional update of `received`; completion moves no bytes.
///
/// Each chunk read is one short statement on a pooled connection, so a slow download holds no
/// connection between chunks. The blob storage shares the records storage's lifetime: closing the
/// ``PostgreSQLServerStorage`` closes it too.
public final class PostgreSQLBlobStorage: BlobStorage {
    /// How the blob storage writes.
    public struct Configuration: Sendable {
        /// The most bytes an append commits at once (one chunk row), and the most a read yields at
        /// once; kept within `BlobStorageLimits.minimumChunkSize` ... `BlobStorageLimits.maximumChunkSize`.
        public var chunkSize: Int

        /// A configuration; see the properties.
        public init(chunkSize: Int = BlobStorageLimits.defaultChunkSize) {
            self.chunkSize = chunkSize
        }
    }

    /// The records storage's location (its URL without the password).
    public var location: String { storage.location }
    let storage: PostgreSQLServerStorage
    let chunkSize: Int

    /// A blob storage in `storage`'s database (and schema).
    public init(storage: PostgreSQLServerStorage, configuration: Configuration = Configuration()) {
        self.storage = storage
        self.chunkSize = BlobStorageLimits.clampedChunkSize(configuration.chunkSize)
    }

    private static let uploadColumns = "number, length, received, created_at, updated_at, sha256"

    // MARK: - Uploads

    public func createUpload(id: String, length: Int64) async throws -> UploadState {
        try BlobNames.validateUploadID(id)
        guard length >= 0 else {
            throw BlobStorageError(.invalidLength, "the upload '\(id)' cannot have a negative length (\(length))")
        }
        let now = storage.configuration.now()
        return try await transaction("creating the upload '\(id)'") { session in
            let insert: PostgresQuery = """
                INSERT INTO ferry_uploads (id, length, received, created_at, updated_at)
                VALUES (\(id), \(length), 0, \(now), \(now)) ON CONFLICT (id) DO NOTHING
                """
            _ = try await session.rows(insert)
            guard let existing = try await Self.upload(session, id: id) else {
                throw BlobStorageError.uploadNotFound(id)
            }
            guard existing.state.length == length else {
                throw BlobStorageError.conflict(id, length: length, existing: existing.state.length)
            }
            return existing.state
        }
    }

    public func uploadState(id: String) async throws -> UploadState? {
        try BlobNames.validateUploadID(id)
        return try await connection("reading the upload '\(id)'") { session in
            try await Self.upload(session, id: id)?.state
        }
    }

    public func append<Bytes: AsyncSequence>(id: String, at offset: Int64, _ bytes: Bytes) async throws -> Int64
    where Bytes.Element: Collection<UInt8> {
        try await BlobAppending.append(
            id: id, at: offset, state: try await uploadState(id: id), chunkSize: chunkSize, bytes: bytes
        ) { start, chunk in
            try await commit(id: id, start: start, chunk: chunk)
        }
    }

    /// Stores `chunk` at `start` and moves the offset past it, in one transaction.
    private func commit(id: String, start: Int64, chunk: [UInt8]) async throws {
        let now = storage.configuration.now()
        let end = start + Int64(chunk.count)
        try await transaction("appending to the upload '\(id)'") { session in
            // Two appends from one offset: the second waits for the first's row lock, then finds
            // another offset and changes nothing.
            let advance: PostgresQuery = """
                UPDATE ferry_uploads SET received = \(end), updated_at = \(now)
                WHERE id = \(id) AND received = \(start) AND sha256 IS NULL AND \(end) <= length
                RETURNING number
                """
            guard let row = try await session.rows(advance).first else {
                guard let upload = try await Self.upload(session, id: id) else {
                    throw BlobStorageError.uploadNotFound(id)
                }
                if upload.state.offset != start || upload.state.isCompleted {
                    throw BlobStorageError.mismatch(id, expected: start, current: upload.state.offset)
                }
                throw BlobStorageError.exceedsLength(id, length: upload.state.length)
            }
            let number = try row.decode(Int64.self)
            let insert: PostgresQuery = """
                INSERT INTO ferry_blob_chunks (content, start, bytes) VALUES (\(number), \(start), \(ByteBuffer(bytes: chunk)))
                """
            _ = try await session.rows(insert)
        }
    }

    public func completeUpload(id: String, sha256: String) async throws -> BlobInfo {
        try BlobNames.validateUploadID(id)
        try BlobNames.validateSHA256(sha256)
        guard let upload = try await connection("reading the upload '\(id)'", { try await Self.upload($0, id: id) })
        else { throw BlobStorageError.uploadNotFound(id) }
        if let done = try await completed(upload.state, claimed: sha256) { return done }
        guard upload.state.offset == upload.state.length else {
            throw BlobStorageError.incomplete(id, offset: upload.state.offset, length: upload.state.length)
        }
        let number = upload.number
        let length = upload.state.length
        let actual = try await BlobDigest.sha256(
            of: ChunkSource(blobs: self, content: number, missing: .uploadNotFound(id)), length: length,
            missing: .uploadNotFound(id))
        guard actual == sha256 else {
            try await transaction("discarding the upload '\(id)'") { session in
                let delete: PostgresQuery = """
                    DELETE FROM ferry_uploads WHERE number = \(number) AND sha256 IS NULL RETURNING 1
                    """
                if try await session.rows(delete).isEmpty == false {
                    let chunks: PostgresQuery = "DELETE FROM ferry_blob_chunks WHERE content = \(number)"
                    _ = try await session.rows(chunks)
                }
            }
            throw BlobStorageError.digestMismatch(id, claimed: sha256, actual: actual, discarded: true)
        }
        let now = storage.configuration.now()
        let outcome = try await transaction("completing the upload '\(id)'") { session -> (BlobInfo?, UploadState?) in
            let lock: PostgresQuery =
                "SELECT \(unescaped: Self.uploadColumns) FROM ferry_uploads WHERE id = \(id) FOR UPDATE"
            guard let row = try await session.rows(lock).first else { throw BlobStorageError.uploadNotFound(id) }
            let current = try Self.decodeUpload(row, id: id)
            guard current.number == number else { throw BlobStorageError.uploadNotFound(id) }
            if current.state.isCompleted { return (nil, current.state) }
            // A blob of the same content completed elsewhere meanwhile waits here for its commit.
            let insert: PostgresQuery = """
                INSERT INTO ferry_blobs (sha256, size, content, created_at) VALUES (\(sha256), \(length), \(number), \(now))
                ON CONFLICT (sha256) DO NOTHING RETURNING 1
                """
            let inserted = try await session.rows(insert).isEmpty == false
            if !inserted {
                let chunks: PostgresQuery = "DELETE FROM ferry_blob_chunks WHERE content = \(number)"
                _ = try await session.rows(chunks)
            }
            let mark: PostgresQuery = """
                UPDATE ferry_uploads SET sha256 = \(sha256), updated_at = \(now) WHERE number = \(number)
                """
            _ = try await session.rows(mark)
            if inserted { return (BlobInfo(sha256: sha256, size: length, createdAt: Self.date(now)), nil) }
            return (try await Self.blob(session, sha256: sha256)?.info, nil)
        }
        if let blob = outcome.0 { return blob }
        if let state = outcome.1, let done = try await completed(state, claimed: sha256) { return done }
        throw BlobStorageError.blobNotFound(sha256)
    }

    /// For an upload already completed: its blob when `claimed` names it (a repeated call), or the
    /// mismatch; `nil` for an upload not completed.
    private func completed(_ state: UploadState, claimed: String) async throws -> BlobInfo? {
        guard let done = state.completedSHA256 else { return nil }
        guard done == claimed else {
            throw BlobStorageError.digestMismatch(state.id, claimed: claimed, actual: done, discarded: false)
        }
        guard let blob = try await blob(sha256: done) else { throw BlobStorageError.blobNotFound(done) }
        return blob
    }

    @discardableResult
    public func abortUpload(id: String) async throws -> Bool {
        try BlobNames.validateUploadID(id)
        return try await transaction("aborting the upload '\(id)'") { session in
            let delete: PostgresQuery = "DELETE FROM ferry_uploads WHERE id = \(id) RETURNING number, sha256"
            guard let row = try await session.rows(delete).first else { return false }
            let (number, sha256) = try row.decode((Int64, String?).self)
            if sha256 == nil {
                let chunks: PostgresQuery = "DELETE FROM ferry_blob_chunks WHERE content = \(number)"
                _ = try await session.rows(chunks)
            }
            return true
        }
    }

    @discardableResult
    public func expireUploads(inactiveSince date: Date) async throws -> Int {
        let limit = Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
        return try await transaction("expiring uploads") { session in
            let chunks: PostgresQuery = """
                DELETE FROM ferry_blob_chunks WHERE content IN
                    (SELECT number FROM ferry_uploads WHERE updated_at < \(limit) AND sha256 IS NULL)
                """
            _ = try await session.rows(chunks)
            let uploads: PostgresQuery = "DELETE FROM ferry_uploads WHERE updated_at < \(limit) RETURNING 1"
            return try await session.rows(uploads).count
        }
    }

    // MARK: - Blobs

    public func blob(sha256: String) async throws -> BlobInfo? {
        try BlobNames.validateSHA256(sha256)
        return try await connection("reading the blob \(sha256)") { session in
            try await Self.blob(session, sha256: sha256)?.info
        }
    }

    public func read(sha256: String, range: Range<Int64>?) async throws -> BlobBytes {
        try BlobNames.validateSHA256(sha256)
        guard
            let found = try await connection("reading the blob \(sha256)", { try await Self.blob($0, sha256: sha256) })
        else { throw BlobStorageError.blobNotFound(sha256) }
        let range = try Self.checkedRange(range, size: found.info.size, sha256: sha256)
        let missing = BlobStorageError(.blobNotFound, "the blob \(sha256) was deleted while it was being read")
        return BlobBytes(
            blob: found.info, range: range, source: ChunkSource(blobs: self, content: found.content, missing: missing))
    }

    public func blobs(after sha256: String?, limit: Int) async throws -> [BlobInfo] {
        if let sha256 { try BlobNames.validateSHA256(sha256) }
        let after = sha256 ?? ""
        let count = Int64(max(0, limit))
        return try await connection("listing the blobs") { session in
            let query: PostgresQuery = """
                SELECT sha256, size, created_at FROM ferry_blobs WHERE sha256 > \(after) ORDER BY sha256 LIMIT \(count)
                """
            return try await session.rows(query).map { row in
                let (name, size, created) = try row.decode((String, Int64, Int64).self)
                return BlobInfo(sha256: name, size: size, createdAt: Self.date(created))
            }
        }
    }

    @discardableResult
    public func deleteBlob(sha256: String) async throws -> Bool {
        try BlobNames.validateSHA256(sha256)
        return try await transaction("deleting the blob \(sha256)") { session in
            let delete: PostgresQuery = "DELETE FROM ferry_blobs WHERE sha256 = \(sha256) RETURNING content"
            guard let row = try await session.rows(delete).first else { return false }
            let content = try row.decode(Int64.self)
            let chunks: PostgresQuery = "DELETE FROM ferry_blob_chunks WHERE content = \(content)"
            _ = try await session.rows(chunks)
            return true
        }
    }

    public func usage() async throws -> BlobUsage {
        try await connection("measuring the blobs") { session in
            let query: PostgresQuery = """
                SELECT (SELECT COUNT(*) FROM ferry_blobs), (SELECT COALESCE(SUM(size), 0)::bigint FROM ferry_blobs),
                    (SELECT COUNT(*) FROM ferry_uploads),
                    (SELECT COALESCE(SUM(received) FILTER (WHERE sha256 IS NULL), 0)::bigint FROM ferry_uploads),
                    (SELECT COALESCE(SUM(octet_length(bytes)), 0)::bigint FROM ferry_blob_chunks)
                """
            guard let row = try await session.rows(query).first else {
                return BlobUsage(blobCount: 0, blobBytes: 0, uploadCount: 0, uploadBytes: 0, storedBytes: 0)
            }
            let (blobs, blobBytes, uploads, uploadBytes, stored) = try row.decode(
                (Int64, Int64, Int64, Int64, Int64).self)
            return BlobUsage(
                blobCount: Int(blobs), blobBytes: blobBytes, uploadCount: Int(uploads), uploadBytes: uploadBytes,
                storedBytes: stored)
        }
    }

    public func unfinishedUploads(idPrefix: String) async throws -> UnfinishedUploads {
        try BlobNames.validateUploadID(idPrefix)
        return try await connection("counting unfinished uploads") { session in
            // `left(…) =` rather than a range: text comparisons follow the database's collation.
            let query: PostgresQuery = """
                SELECT COUNT(*), COALESCE(SUM(length), 0)::bigint FROM ferry_uploads
                WHERE left(id, \(Int32(idPrefix.utf8.count))) = \(idPrefix) AND sha256 IS NULL
                """
            guard let row = try await session.rows(query).first else {
                return UnfinishedUploads(count: 0, declaredBytes: 0)
            }
            let (count, bytes) = try row.decode((Int64, Int64).self)
            return UnfinishedUploads(count: Int(count), declaredBytes: bytes)
        }
    }

    // MARK: - Rows

    struct UploadRow: Sendable {
        var number: Int64
        var state: UploadState
    }

    static func upload(_ session: PostgreSQLSession, id: String) async throws -> UploadRow? {
        let query: PostgresQuery = "SELECT \(unescaped: uploadColumns) FROM ferry_uploads WHERE id = \(id)"
        guard let row = try await session.rows(query).first else { return nil }
        return try decodeUpload(row, id: id)
    }

    static func decodeUpload(_ row: PostgresRow, id: String) throws -> UploadRow {
        let (number, length, received, created, updated, sha256) = try row.decode(
            (Int64, Int64, Int64, Int64, Int64, String?).self)
        return UploadRow(
            number: number,
            state: UploadState(
                id: id, length: length, offset: received, createdAt: date(created), updatedAt: date(updated),
                completedSHA256: sha256))
    }

    static func blob(_ session: PostgreSQLSession, sha256: String) async throws -> (info: BlobInfo, content: Int64)? {
        let query: PostgresQuery = "SELECT size, content, created_at FROM ferry_blobs WHERE sha256 = \(sha256)"
        guard let row = try await session.rows(query).first else { return nil }
        let (size, content, created) = try row.decode((Int64, Int64, Int64).self)
        return (BlobInfo(sha256: sha256, size: size, createdAt: date(created)), content)
    }

    static func date(_ milliseconds: Int64) -> Date {
        Date(timeIntervalSince1970: Double(milliseconds) / 1000)
    }

    /// The chunks of one content number, one statement each.
    struct ChunkSource: BlobChunkSource {
        let blobs: PostgreSQLBlobStorage
        let content: Int64
        let missing: BlobStorageError

        func chunk(from position: Int64, before end: Int64) async throws -> [UInt8] {
            let content = content
            let found = try await blobs.connection("reading a chunk") { session -> [UInt8] in
                let query: PostgresQuery = """
                    SELECT start, bytes FROM ferry_blob_chunks
                    WHERE content = \(content) AND start <= \(position) ORDER BY start DESC LIMIT 1
                    """
                guard let row = try await session.rows(query).first else { return [] }
                let (start, buffer) = try row.decode((Int64, ByteBuffer).self)
                let from = Int(position - start)
                let to = min(buffer.readableBytes, Int(clamping: end - start))
                guard from < to else { return [] }
                return buffer.getBytes(at: buffer.readerIndex + from, length: to - from) ?? []
            }
            guard !found.isEmpty else { throw missing }
            return found
        }
    }

    // MARK: - Statements

    /// Runs `body` on a pooled connection (or in the current records transaction).
    func connection<T: Sendable>(_ action: String, _ body: @escaping @Sendable (PostgreSQLSession) async throws -> T)
        async throws -> T
    {
        do {
            return try await storage.withConnection(action, body)
        } catch let error as StorageError {
            throw BlobStorageError(error)
        }
    }

    /// Runs `body` in one transaction (a savepoint of the current records transaction, if any); a
    /// `BlobStorageError` it throws rolls it back and is thrown as it is.
    func transaction<T: Sendable>(_ action: String, _ body: @escaping @Sendable (PostgreSQLSession) async throws -> T)
        async throws -> T
    {
        let storage = storage
        do {
            return try await storage.transaction {
                guard let session = storage.currentTransaction?.session else {
                    throw StorageError(.io, "\(action) failed: no transaction")
                }
                return try await body(session)
            }
        } catch let error as BlobStorageError {
            throw error
        } catch {
            throw BlobStorageError(storage.mapped(error, action))
        }
    }
}
