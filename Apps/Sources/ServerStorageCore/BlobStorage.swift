public import Foundation

/// Where the server keeps the bytes of attachments: content-addressed blobs, and the resumable
/// uploads they come from.
///
/// A blob is named by the SHA-256 of its bytes (64 lowercase hex digits) and stored once, however
/// many uploads bring the same content. Bytes reach a blob through an upload: created with the
/// total length it will have, filled by appends at the offset the storage reports (an append cut
/// at any byte resumes from the offset ``uploadState(id:)`` reports afterwards), then completed
/// with the SHA-256 the client claims, which the storage checks against the bytes it holds before
/// the upload becomes a blob. A partial or corrupt file is never stored as a blob.
///
/// ```swift
/// let blobs: any BlobStorage = SQLiteBlobStorage(storage: storage)   // or another backend
/// _ = try await blobs.createUpload(id: "u-7f3a", length: Int64(photo.count))
/// let offset = try await blobs.append(id: "u-7f3a", at: 0, chunks)    // an AsyncSequence of bytes
/// if offset == Int64(photo.count) {
///     let blob = try await blobs.completeUpload(id: "u-7f3a", sha256: claimedHex)
///     for try await chunk in try await blobs.read(sha256: blob.sha256, range: 0..<1024) {
///         send(chunk)
///     }
/// }
/// ```
///
/// ## The contract (checked by the shared suite in `Tests/BlobStorageConformance`)
///
/// - **The offset never claims bytes that are not stored.** An append commits the bytes it
///   receives in chunks (``BlobStorageLimits/defaultChunkSize`` by default), each chunk durably and
///   together with the new offset. Whatever stops an append (the sender's stream failing, the
///   task's cancellation, the process being killed), the offset afterwards counts exactly the bytes
///   stored before it; the next append resumes there.
/// - **One writer at an offset.** An append starts only at the upload's current offset, and each
///   chunk commits only if the offset is still the one it follows: of two appends racing from one
///   offset, one fails with ``BlobStorageError/Code/offsetMismatch`` at its first chunk, so their
///   bytes never interleave.
/// - **Verified, then atomic.** Completion reads the stored bytes back (streaming), checks their
///   SHA-256 against the claimed one and only then makes them the blob, in one step: a reader sees
///   the whole blob or none. A mismatch discards the upload.
/// - **Bounded memory.** No operation holds a whole blob or upload in memory: appends, hashing and
///   reads go chunk by chunk.
/// - **Names are checked.** Upload ids are 1 to 128 characters of `A-Z a-z 0-9 _ -`
///   (``BlobNames/validateUploadID(_:)``), hashes 64 characters of `0-9 a-f`
///   (``BlobNames/validateSHA256(_:)``); anything else fails with
///   ``BlobStorageError/Code/invalidName`` before touching the storage.
/// - Errors are ``BlobStorageError``s, except the errors of the byte sequence an append reads,
///   which are thrown as they are (after the bytes received before them are stored).
///
/// A backend that shares a records database (SQLite, PostgreSQL) joins the caller's current
/// records transaction when there is one; blob operations are meant to run outside transactions.
public protocol BlobStorage: Sendable {
    /// A one-line description for logs, such as `sqlite:/var/ferry.sqlite` or `files:/var/ferry/blobs`.
    var location: String { get }

    /// Creates an upload of `length` bytes, or returns the upload `id` if it exists with the same
    /// length (creating is idempotent, so a client may retry it).
    ///
    /// - Throws: ``BlobStorageError/Code/uploadConflict`` when `id` exists with another length,
    ///   ``BlobStorageError/Code/invalidName`` for an id outside the safe alphabet,
    ///   ``BlobStorageError/Code/invalidLength`` for a negative length.
    func createUpload(id: String, length: Int64) async throws -> UploadState

    /// The upload `id` as stored now, completed or not; `nil` when there is none (never created,
    /// aborted, expired or discarded after a digest mismatch).
    func uploadState(id: String) async throws -> UploadState?

    /// Appends `bytes` to the upload `id`, beginning exactly at `offset`, and returns the new offset.
    ///
    /// The bytes are committed in chunks as they arrive; each commit is durable before it counts in
    /// the offset. When `bytes` ends, what remains is committed and the new offset returned. When
    /// `bytes` throws, what was received before is committed (best effort) and its error is thrown
    /// as it is; when the task is cancelled, the chunk in progress is dropped (and a commit already
    /// in flight may still land just after this returns). Either way ``uploadState(id:)`` then tells
    /// where to resume.
    ///
    /// ```swift
    /// // Hummingbird: request.body is an AsyncSequence of ByteBuffer.
    /// let offset = try await blobs.append(id: id, at: claimedOffset, request.body.map(\.readableBytesView))
    /// ```
    ///
    /// - Throws: ``BlobStorageError/Code/offsetMismatch`` (with ``BlobStorageError/currentOffset``)
    ///   when `offset` is not the upload's offset, before reading any byte, or later when another
    ///   append moved it; ``BlobStorageError/Code/exceedsLength`` when `bytes` holds more than the
    ///   upload's length: the bytes up to the length are stored, the rest is refused;
    ///   ``BlobStorageError/Code/uploadNotFound`` when there is no such upload (or it disappears).
    func append<Bytes: AsyncSequence>(id: String, at offset: Int64, _ bytes: Bytes) async throws -> Int64
    where Bytes.Element: Collection<UInt8>

    /// Turns the full upload `id` into the blob named by `sha256` (64 lowercase hex digits) and
    /// returns the blob.
    ///
    /// The stored bytes are hashed (streaming) and compared with `sha256`. When they match, the
    /// upload becomes the blob in one atomic step, or, when the blob exists already, the upload's
    /// bytes are dropped (content is stored once). The upload then stays, completed, until it is
    /// aborted or expires, so calling this again returns the same blob.
    ///
    /// - Throws: ``BlobStorageError/Code/incomplete`` when the offset has not reached the length;
    ///   ``BlobStorageError/Code/digestMismatch`` when the bytes hash to another value: the upload
    ///   is discarded (unless it was already completed as another blob, when it stays);
    ///   ``BlobStorageError/Code/uploadNotFound``.
    func completeUpload(id: String, sha256: String) async throws -> BlobInfo

    /// Removes the upload `id` and its bytes (a completed upload's blob stays); returns whether
    /// there was one.
    @discardableResult
    func abortUpload(id: String) async throws -> Bool

    /// The blob named by `sha256`, or `nil` when there is none.
    func blob(sha256: String) async throws -> BlobInfo?

    /// The bytes of the blob `sha256` in `range` (the whole blob for `nil`), as a sequence of
    /// chunks read on demand: one chunk in memory at a time, none read before it is asked for.
    ///
    /// The blob and the range are checked before this returns, so a caller can answer 404 or 416
    /// before it starts a body. A blob deleted while it is being read may end the sequence with
    /// ``BlobStorageError/Code/blobNotFound`` (the file-system backend finishes the read).
    ///
    /// - Throws: ``BlobStorageError/Code/blobNotFound``;
    ///   ``BlobStorageError/Code/rangeNotSatisfiable`` for a range that does not lie within
    ///   `0...size` (an empty range at the end, such as `size..<size`, is allowed and reads nothing).
    func read(sha256: String, range: Range<Int64>?) async throws -> BlobBytes

    /// Up to `limit` blobs in the order of their names, those after `sha256` (all for `nil`): the
    /// pages of a walk over every blob (the server's collection of content no attachment names).
    ///
    /// ```swift
    /// var after: String?
    /// while case let page = try await blobs.blobs(after: after, limit: 500), !page.isEmpty {
    ///     for blob in page { inspect(blob) }
    ///     after = page.last?.sha256
    /// }
    /// ```
    ///
    /// - Throws: ``BlobStorageError/Code/invalidName`` for an `after` that is not a SHA-256.
    func blobs(after sha256: String?, limit: Int) async throws -> [BlobInfo]

    /// Deletes the blob `sha256`; returns whether there was one. Uploads completed as that blob stay
    /// completed, but completing them again fails with ``BlobStorageError/Code/blobNotFound``.
    @discardableResult
    func deleteBlob(sha256: String) async throws -> Bool

    /// Removes the uploads, completed or not, untouched since `date` (created or last appended to
    /// before it), with their bytes; returns how many. Run it periodically to reclaim abandoned
    /// uploads; an append racing with it fails with ``BlobStorageError/Code/uploadNotFound``.
    @discardableResult
    func expireUploads(inactiveSince date: Date) async throws -> Int

    /// What the storage holds now: blobs, uploads and the bytes they take. Reads every blob and
    /// upload entry (a table scan or a directory walk): for monitoring, not for every request.
    func usage() async throws -> BlobUsage

    /// The uploads not completed whose id begins with `idPrefix`: how many, and the sum of the
    /// lengths they were created with (what they will hold once whole, not what they hold now).
    /// A server that names uploads by their uploader (a prefix per user) bounds with it what one
    /// user's unfinished uploads may reserve.
    ///
    /// ```swift
    /// let pending = try await blobs.unfinishedUploads(idPrefix: "u3f9c2a7d41e0b6c8-")
    /// if pending.declaredBytes + length > quota { refuse() }
    /// ```
    ///
    /// - Throws: ``BlobStorageError/Code/invalidName`` for a prefix outside the upload ids'
    ///   alphabet (or longer than an id).
    func unfinishedUploads(idPrefix: String) async throws -> UnfinishedUploads
}

/// An upload as the storage holds it.
public struct UploadState: Sendable, Hashable {
    /// The upload's id.
    public var id: String
    /// The total number of bytes the upload will have.
    public var length: Int64
    /// How many bytes are stored, from the start: where the next append begins.
    public var offset: Int64
    /// When the upload was created.
    public var createdAt: Date
    /// When the upload was created or last appended to (what ``BlobStorage/expireUploads(inactiveSince:)``
    /// compares).
    public var updatedAt: Date
    /// The SHA-256 of the blob the upload became, once ``BlobStorage/completeUpload(id:sha256:)``
    /// succeeded; `nil` before.
    public var completedSHA256: String?

    /// Whether the upload became a blob.
    public var isCompleted: Bool { completedSHA256 != nil }

    /// An upload state; see the properties.
    public init(
        id: String, length: Int64, offset: Int64, createdAt: Date, updatedAt: Date, completedSHA256: String? = nil
    ) {
        self.id = id
        self.length = length
        self.offset = offset
        self.createdAt = createdAt
        self.updatedAt = updatedAt
        self.completedSHA256 = completedSHA256
    }
}

/// A stored blob.
public struct BlobInfo: Sendable, Hashable {
    /// The SHA-256 of the bytes, 64 lowercase hex digits: the blob's name.
    public var sha256: String
    /// The number of bytes.
    public var size: Int64
    /// When the blob was first stored (a second upload of the same content keeps it).
    public var createdAt: Date

    /// A blob description; see the properties.
    public init(sha256: String, size: Int64, createdAt: Date) {
        self.sha256 = sha256
        self.size = size
        self.createdAt = createdAt
    }
}

/// What a blob storage holds (``BlobStorage/usage()``).
public struct BlobUsage: Sendable, Hashable {
    /// The number of blobs.
    public var blobCount: Int
    /// The sum of the blobs' sizes.
    public var blobBytes: Int64
    /// The number of uploads, completed or not.
    public var uploadCount: Int
    /// The sum of the offsets of the uploads not completed (the bytes they hold).
    public var uploadBytes: Int64
    /// The bytes the storage actually keeps for blobs and uploads (chunk rows or files), measured
    /// rather than summed from sizes: `blobBytes + uploadBytes` unless something leaked.
    public var storedBytes: Int64

    /// A usage report; see the properties.
    public init(blobCount: Int, blobBytes: Int64, uploadCount: Int, uploadBytes: Int64, storedBytes: Int64) {
        self.blobCount = blobCount
        self.blobBytes = blobBytes
        self.uploadCount = uploadCount
        self.uploadBytes = uploadBytes
        self.storedBytes = storedBytes
    }
}

/// The uploads not completed under one id prefix (``BlobStorage/unfinishedUploads(idPrefix:)``).
public struct UnfinishedUploads: Sendable, Hashable {
    /// How many there are.
    public var count: Int
    /// The sum of the lengths they were created with.
    public var declaredBytes: Int64

    /// A count and a sum; see the properties.
    public init(count: Int, declaredBytes: Int64) {
        self.count = count
        self.declaredBytes = declaredBytes
    }
}

/// Sizes shared by the blob-storage backends.
public enum BlobStorageLimits: Sendable {
    /// The default size of a committed chunk, and of the chunks a read yields: 256 KiB.
    public static let defaultChunkSize = 256 * 1024
    /// The smallest chunk size a backend accepts (smaller values are raised to it): 1 KiB.
    public static let minimumChunkSize = 1024
    /// The largest chunk size a backend accepts (larger values are lowered to it): 16 MiB.
    public static let maximumChunkSize = 16 * 1024 * 1024

    /// `size` within ``minimumChunkSize`` ... ``maximumChunkSize``.
    public static func clampedChunkSize(_ size: Int) -> Int {
        min(max(size, minimumChunkSize), maximumChunkSize)
    }
}
