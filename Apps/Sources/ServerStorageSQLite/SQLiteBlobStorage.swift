public import Foundation
import GRDB
public import ServerStorageCore

/// Blobs and uploads in the records database of a ``SQLiteServerStorage``: chunk rows in the same
/// file (or memory), written through the same connection and write turn as the records.
///
/// ```swift
/// let storage = try SQLiteServerStorage(location: .file("ferry.sqlite"))
/// let blobs = SQLiteBlobStorage(storage: storage)
/// _ = try await blobs.createUpload(id: "u-1", length: 5)
/// let hello = AsyncStream<[UInt8]> { $0.yield(Array("hello".utf8)); $0.finish() }
/// _ = try await blobs.append(id: "u-1", at: 0, hello)
/// let blob = try await blobs.completeUpload(
///     id: "u-1", sha256: "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824")
/// ```
///
/// ## Layout
///
/// Three tables, created by the storage's migration `ferry-server-3-blobs`:
/// - `ferry_uploads (number, id, length, received, created_at, updated_at, sha256)`: one row per
///   upload; `number` (never reused) names its bytes until it completes, `received` is its offset,
///   `sha256` is set once it completed.
/// - `ferry_blobs (sha256, size, content, created_at)`: one row per blob; `content` is the number of
///   the upload whose bytes it took.
/// - `ferry_blob_chunks (content, start, bytes)`: the bytes, in chunks of at most
///   ``Configuration/chunkSize``, keyed by content number and offset.
///
/// Completing an upload moves no bytes: the blob row takes the upload's content number, in the
/// transaction that marks the upload completed (or, when the blob exists, deletes the upload's
/// chunks). Each appended chunk is inserted in the transaction that advances `received`, so the
/// offset and the bytes commit together, as durably as the records' writes.
///
/// The blob storage shares the records storage's lifetime: closing the ``SQLiteServerStorage``
/// closes it too.
public final class SQLiteBlobStorage: BlobStorage {
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

    /// The records storage's location (`sqlite:PATH` or `memory`).
    public var location: String { storage.location }
    let storage: SQLiteServerStorage
    let chunkSize: Int

    /// A blob storage in `storage`'s database.
    public init(storage: SQLiteServerStorage, configuration: Configuration = Configuration()) {
        self.storage = storage
        self.chunkSize = BlobStorageLimits.clampedChunkSize(configuration.chunkSize)
    }

    static let schema = """
        CREATE TABLE ferry_uploads (
            number INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            length INTEGER NOT NULL,
            received INTEGER NOT NULL,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            sha256 TEXT
        );
        CREATE INDEX ferry_uploads_updated ON ferry_uploads (updated_at);
        CREATE TABLE ferry_blobs (
            sha256 TEXT PRIMARY KEY NOT NULL,
            size INTEGER NOT NULL,
            content INTEGER NOT NULL UNIQUE,
            created_at INTEGER NOT NULL
        ) WITHOUT ROWID;
        CREATE TABLE ferry_blob_chunks (
            content INTEGER NOT NULL,
            start INTEGER NOT NULL,
            bytes BLOB NOT NULL,
            PRIMARY KEY (content, start)
        );
        """

    // MARK: - Uploads

    public func createUpload(id: String, length: Int64) async throws -> UploadState {
        try BlobNames.validateUploadID(id)
        guard length >= 0 else {
            throw BlobStorageError(.invalidLength, "the upload '\(id)' cannot have a negative length (\(length))")
        }
        let now = storage.configuration.now()
        return try await write("creating the upload '\(id)'") { db in
            if let existing = try Self.upload(db, id: id) {
                guard existing.state.length == length else {
                    throw BlobStorageError.conflict(id, length: length, existing: existing.state.length)
                }
                return existing.state
            }
            try db.execute(
                sql: """
                    INSERT INTO ferry_uploads (id, length, received, created_at, updated_at)
                    VALUES (?, ?, 0, ?, ?)
                    """, arguments: [id, length, now, now])
            return UploadState(
                id: id, length: length, offset: 0, createdAt: Self.date(now), updatedAt: Self.date(now))
        }
    }

    public func uploadState(id: String) async throws -> UploadState? {
        try BlobNames.validateUploadID(id)
        return try await read("reading the upload '\(id)'") { db in try Self.upload(db, id: id)?.state }
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
        try await write("appending to the upload '\(id)'") { db in
            // The conditional update first: it takes the write lock before anything is read.
            try db.execute(
                sql: """
                    UPDATE ferry_uploads SET received = ?, updated_at = ?
                    WHERE id = ? AND received = ? AND sha256 IS NULL AND ? <= length
                    """, arguments: [end, now, id, start, end])
            guard db.changesCount == 1, let upload = try Self.upload(db, id: id) else {
                guard let upload = try Self.upload(db, id: id) else { throw BlobStorageError.uploadNotFound(id) }
                if upload.state.offset != start || upload.state.isCompleted {
                    throw BlobStorageError.mismatch(id, expected: start, current: upload.state.offset)
                }
                throw BlobStorageError.exceedsLength(id, length: upload.state.length)
            }
            try db.execute(
                sql: "INSERT INTO ferry_blob_chunks (content, start, bytes) VALUES (?, ?, ?)",
                arguments: [upload.number, start, Data(chunk)])
        }
    }

    public func completeUpload(id: String, sha256: String) async throws -> BlobInfo {
        try BlobNames.validateUploadID(id)
        try BlobNames.validateSHA256(sha256)
        guard let upload = try await read("reading the upload '\(id)'", { db in try Self.upload(db, id: id) }) else {
            throw BlobStorageError.uploadNotFound(id)
        }
        if let done = try await completed(upload.state, claimed: sha256) { return done }
        guard upload.state.offset == upload.state.length else {
            throw BlobStorageError.incomplete(id, offset: upload.state.offset, length: upload.state.length)
        }
        let actual = try await BlobDigest.sha256(
            of: ChunkSource(blobs: self, content: upload.number, missing: .uploadNotFound(id)),
            length: upload.state.length, missing: .uploadNotFound(id))
        let number = upload.number
        guard actual == sha256 else {
            try await write("discarding the upload '\(id)'") { db in
                try db.execute(
                    sql: "DELETE FROM ferry_uploads WHERE number = ? AND sha256 IS NULL", arguments: [number])
                if db.changesCount > 0 {
                    try db.execute(sql: "DELETE FROM ferry_blob_chunks WHERE content = ?", arguments: [number])
                }
            }
            throw BlobStorageError.digestMismatch(id, claimed: sha256, actual: actual, discarded: true)
        }
        let now = storage.configuration.now()
        let outcome = try await write("completing the upload '\(id)'") { db -> (BlobInfo?, UploadState?) in
            guard let current = try Self.upload(db, id: id), current.number == number else {
                throw BlobStorageError.uploadNotFound(id)
            }
            // Completed meanwhile by another call: answered below, as a repeated call.
            if current.state.isCompleted { return (nil, current.state) }
            if let existing = try Self.blob(db, sha256: sha256) {
                try db.execute(sql: "DELETE FROM ferry_blob_chunks WHERE content = ?", arguments: [number])
                try Self.markCompleted(db, number: number, sha256: sha256, now: now)
                return (existing.info, nil)
            }
            try db.execute(
                sql: "INSERT INTO ferry_blobs (sha256, size, content, created_at) VALUES (?, ?, ?, ?)",
                arguments: [sha256, upload.state.length, number, now])
            try Self.markCompleted(db, number: number, sha256: sha256, now: now)
            return (BlobInfo(sha256: sha256, size: upload.state.length, createdAt: Self.date(now)), nil)
        }
        if let blob = outcome.0 { return blob }
        if let state = outcome.1, let done = try await completed(state, claimed: sha256) { return done }
        throw BlobStorageError.uploadNotFound(id)
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

    private static func markCompleted(_ db: Database, number: Int64, sha256: String, now: Int64) throws {
        try db.execute(
            sql: "UPDATE ferry_uploads SET sha256 = ?, updated_at = ? WHERE number = ?",
            arguments: [sha256, now, number])
    }

    @discardableResult
    public func abortUpload(id: String) async throws -> Bool {
        try BlobNames.validateUploadID(id)
        return try await write("aborting the upload '\(id)'") { db in
            guard let upload = try Self.upload(db, id: id) else { return false }
            if !upload.state.isCompleted {
                try db.execute(sql: "DELETE FROM ferry_blob_chunks WHERE content = ?", arguments: [upload.number])
            }
            try db.execute(sql: "DELETE FROM ferry_uploads WHERE number = ?", arguments: [upload.number])
            return true
        }
    }

    @discardableResult
    public func expireUploads(inactiveSince date: Date) async throws -> Int {
        let limit = Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
        return try await write("expiring uploads") { db in
            try db.execute(
                sql: """
                    DELETE FROM ferry_blob_chunks WHERE content IN
                        (SELECT number FROM ferry_uploads WHERE updated_at < ? AND sha256 IS NULL)
                    """, arguments: [limit])
            try db.execute(sql: "DELETE FROM ferry_uploads WHERE updated_at < ?", arguments: [limit])
            return db.changesCount
        }
    }

    // MARK: - Blobs

    public func blob(sha256: String) async throws -> BlobInfo? {
        try BlobNames.validateSHA256(sha256)
        return try await read("reading the blob \(sha256)") { db in try Self.blob(db, sha256: sha256)?.info }
    }

    public func read(sha256: String, range: Range<Int64>?) async throws -> BlobBytes {
        try BlobNames.validateSHA256(sha256)
        guard let found = try await read("reading the blob \(sha256)", { db in try Self.blob(db, sha256: sha256) })
        else { throw BlobStorageError.blobNotFound(sha256) }
        let range = try Self.checkedRange(range, size: found.info.size, sha256: sha256)
        let missing = BlobStorageError(.blobNotFound, "the blob \(sha256) was deleted while it was being read")
        return BlobBytes(
            blob: found.info, range: range, source: ChunkSource(blobs: self, content: found.content, missing: missing))
    }

    public func blobs(after sha256: String?, limit: Int) async throws -> [BlobInfo] {
        if let sha256 { try BlobNames.validateSHA256(sha256) }
        return try await read("listing the blobs") { db in
            try Row.fetchAll(
                db.cachedStatement(
                    sql: "SELECT sha256, size, created_at FROM ferry_blobs WHERE sha256 > ? ORDER BY sha256 LIMIT ?"),
                arguments: [sha256 ?? "", max(0, limit)]
            ).map { row in BlobInfo(sha256: row["sha256"], size: row["size"], createdAt: Self.date(row["created_at"])) }
        }
    }

    @discardableResult
    public func deleteBlob(sha256: String) async throws -> Bool {
        try BlobNames.validateSHA256(sha256)
        return try await write("deleting the blob \(sha256)") { db in
            guard let found = try Self.blob(db, sha256: sha256) else { return false }
            try db.execute(sql: "DELETE FROM ferry_blob_chunks WHERE content = ?", arguments: [found.content])
            try db.execute(sql: "DELETE FROM ferry_blobs WHERE sha256 = ?", arguments: [sha256])
            return true
        }
    }

    public func usage() async throws -> BlobUsage {
        try await read("measuring the blobs") { db in
            let blobs = try Row.fetchOne(db, sql: "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM ferry_blobs")
            let uploads = try Row.fetchOne(
                db,
                sql: """
                    SELECT COUNT(*), COALESCE(SUM(CASE WHEN sha256 IS NULL THEN received ELSE 0 END), 0)
                    FROM ferry_uploads
                    """)
            let stored = try Int64.fetchOne(db, sql: "SELECT COALESCE(SUM(LENGTH(bytes)), 0) FROM ferry_blob_chunks")
            return BlobUsage(
                blobCount: blobs?[0] ?? 0, blobBytes: blobs?[1] ?? 0, uploadCount: uploads?[0] ?? 0,
                uploadBytes: uploads?[1] ?? 0, storedBytes: stored ?? 0)
        }
    }

    public func unfinishedUploads(idPrefix: String) async throws -> UnfinishedUploads {
        try BlobNames.validateUploadID(idPrefix)
        return try await read("counting unfinished uploads") { db in
            // A range on the unique index of `id` (ids are ASCII, compared byte by byte).
            let row = try Row.fetchOne(
                db,
                sql: """
                    SELECT COUNT(*), COALESCE(SUM(length), 0) FROM ferry_uploads
                    WHERE id >= ? AND id < ? AND sha256 IS NULL
                    """, arguments: [idPrefix, idPrefix + "\u{7F}"])
            return UnfinishedUploads(count: row?[0] ?? 0, declaredBytes: row?[1] ?? 0)
        }
    }

    // MARK: - Rows

    struct UploadRow {
        var number: Int64
        var state: UploadState
    }

    static func upload(_ db: Database, id: String) throws -> UploadRow? {
        guard
            let row = try Row.fetchOne(
                db.cachedStatement(
                    sql: """
                        SELECT number, length, received, created_at, updated_at, sha256
                        FROM ferry_uploads WHERE id = ?
                        """),
                arguments: [id])
        else { return nil }
        return UploadRow(
            number: row["number"],
            state: UploadState(
                id: id, length: row["length"], offset: row["received"], createdAt: date(row["created_at"]),
                updatedAt: date(row["updated_at"]), completedSHA256: row["sha256"]))
    }

    static func blob(_ db: Database, sha256: String) throws -> (info: BlobInfo, content: Int64)? {
        guard
            let row = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT size, content, created_at FROM ferry_blobs WHERE sha256 = ?"),
                arguments: [sha256])
        else { return nil }
        return (BlobInfo(sha256: sha256, size: row["size"], createdAt: date(row["created_at"])), row["content"])
    }

    static func date(_ milliseconds: Int64) -> Date {
        Date(timeIntervalSince1970: Double(milliseconds) / 1000)
    }

    /// The chunks of one content number.
    struct ChunkSource: BlobChunkSource {
        let blobs: SQLiteBlobStorage
        let content: Int64
        let missing: BlobStorageError

        func chunk(from position: Int64, before end: Int64) async throws -> [UInt8] {
            let content = content
            let found = try await blobs.read("reading a chunk") { db -> (start: Int64, bytes: [UInt8])? in
                guard
                    let row = try Row.fetchOne(
                        db.cachedStatement(
                            sql: """
                                SELECT start, bytes FROM ferry_blob_chunks
                                WHERE content = ? AND start <= ? ORDER BY start DESC LIMIT 1
                                """),
                        arguments: [content, position])
                else { return nil }
                let start: Int64 = row["start"]
                let data: Data = row["bytes"]
                let from = Int(position - start)
                let to = min(data.count, Int(end - start))
                guard from < to else { return (start, []) }
                return (start, [UInt8](data[data.startIndex + from..<data.startIndex + to]))
            }
            guard let found, !found.bytes.isEmpty else { throw missing }
            return found.bytes
        }
    }

    // MARK: - Statements

    func read<T: Sendable>(_ action: String, _ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        do {
            return try await storage.read(action, body)
        } catch let error as StorageError {
            throw BlobStorageError(error)
        }
    }

    func write<T: Sendable>(_ action: String, _ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        do {
            return try await storage.write(action, body)
        } catch let error as StorageError {
            throw BlobStorageError(error)
        }
    }
}
