public import Foundation

/// The directory where an app keeps attachment files, named by their SHA-256 (one copy per
/// content, however many items carry it). SyncCore does no I/O: Transport's `DiskAttachmentFiles`
/// is the implementation on the file system (inside an App Group container where the app wants).
///
/// Every method streams: no file is ever read or written whole in memory.
public protocol AttachmentFiles: Sendable {
    /// Copies (or, with `moving`, moves) the file at `source` into the directory, hashing it as it
    /// streams, and returns its SHA-256 and size. Importing content that is already there keeps the
    /// one copy.
    func importFile(at source: URL, moving: Bool) async throws -> ImportedFile

    /// The file of the content with `sha256`, or `nil` when the directory does not hold it.
    func url(sha256: String) async -> URL?

    /// Removes the content's file; an absent file is not an error.
    func remove(sha256: String) async throws

    /// The content's size in bytes, or `nil` when absent.
    func size(sha256: String) async throws -> Int64?

    /// A fresh path in the directory's scratch area for a download in progress (on the same volume,
    /// so that importing it with `moving` is a rename).
    func temporaryURL() async throws -> URL

    /// Removes what is left at a ``temporaryURL()`` (a download that failed); nothing there is not an
    /// error.
    func discardTemporary(_ url: URL) async

    /// Every content in the directory, with when its file was last written (for
    /// ``SyncContext/sweepAttachmentFiles(olderThan:)``).
    func storedContents() async throws -> [StoredContent]

    /// Whether the content's file is there and its bytes still hash to `sha256` (read whole,
    /// streaming). The engine asks before it uploads a file, so that a copy damaged on the device
    /// is reported rather than sent in full on every push for the server to refuse.
    ///
    /// The default implementation checks only that the file is there.
    func holdsIntact(sha256: String) async throws -> Bool
}

extension AttachmentFiles {
    /// Checks only that the file is there (see ``AttachmentFiles/holdsIntact(sha256:)``).
    public func holdsIntact(sha256: String) async throws -> Bool { await url(sha256: sha256) != nil }
}

/// A content in an ``AttachmentFiles`` directory.
public struct StoredContent: Sendable, Hashable {
    /// Its SHA-256.
    public var sha256: String
    /// When its file was last written.
    public var modifiedAt: Timestamp

    public init(sha256: String, modifiedAt: Timestamp) {
        self.sha256 = sha256
        self.modifiedAt = modifiedAt
    }
}

/// A file that ``AttachmentFiles/importFile(at:moving:)`` stored.
public struct ImportedFile: Sendable, Hashable {
    /// The SHA-256 of its bytes (64 lowercase hex digits).
    public var sha256: String
    /// Its size in bytes.
    public var size: Int64

    public init(sha256: String, size: Int64) {
        self.sha256 = sha256
        self.size = size
    }
}

/// The server's side of attachments, which the engine calls during push and pull. Transport's
/// `HTTPRemote` conforms to it over the `$attachments` routes (docs/attachments.md); tests use an
/// in-memory model (SyncTesting's `ModelAttachmentServer`).
public protocol RemoteAttachments: Sendable {
    /// Uploads `file` as the attachment `name` of an item (resuming an upload the server already
    /// holds part of); `progress` gets (bytes sent, total).
    func uploadAttachment(
        table: String, itemID: String, name: String, file: URL, contentType: String?, sha256: String,
        progress: @escaping @Sendable (Int64, Int64) -> Void
    ) async throws

    /// Downloads the attachment into `file` (which it creates or replaces); `progress` gets
    /// (bytes received, total).
    func downloadAttachment(
        table: String, itemID: String, name: String, to file: URL,
        progress: @escaping @Sendable (Int64, Int64) -> Void
    ) async throws

    /// Deletes the attachment; when `sha256` is given, only if it still has that content, and else
    /// throws a ``RemoteError`` with status 412 (another device replaced the file since: not this
    /// device's to delete). An attachment that is already gone is not an error.
    func deleteAttachment(table: String, itemID: String, name: String, sha256: String?) async throws

    /// One page of the table's attachment rows (`GET /tables/$attachments/{table}` as a table
    /// query): objects with `id`, `item`, `name`, `sha256`, `size`, `contentType`, `updatedAt` and
    /// `deleted` (tombstones when `includeDeleted`). The engine pages by `(updatedAt, id)`, as for items.
    ///
    /// A server that does not offer attachments (no `attachments` in `$capabilities`) must answer an
    /// empty page here, not an error: every pull of a context with attachments asks.
    func attachmentRows(table: String, query: TableQuery) async throws -> RemotePage
}

/// When the files of a table's attachments come to the device.
public enum AttachmentDownloads: Sendable, Hashable {
    /// Every pull downloads the files of the rows it brought.
    case eager
    /// A file downloads when the app opens it (``SyncTable/openAttachment(of:name:)``).
    case onDemand
}

/// What a ``SyncContext`` needs for attachments: the files directory, the server's side, the
/// cache's bound and when to download.
///
/// ```swift
/// try await context.useAttachments(AttachmentConfiguration(
///     files: try DiskAttachmentFiles(directory: groupContainer.appending(path: "attachments")),
///     remote: httpRemote, cacheLimit: 200 << 20, downloads: ["photo": .eager]))
/// ```
public struct AttachmentConfiguration: Sendable {
    /// Where the files live.
    public var files: any AttachmentFiles
    /// The server's side.
    public var remote: any RemoteAttachments
    /// The most bytes the synced, unpinned files may take before the least recently used are
    /// evicted (pending uploads and pinned files never are, and do not count against it).
    public var cacheLimit: Int64
    /// Per table: when files download. Tables not listed use ``defaultDownloads``.
    public var downloads: [String: AttachmentDownloads]
    /// For tables not in ``downloads``: on demand by default.
    public var defaultDownloads: AttachmentDownloads

    public init(
        files: any AttachmentFiles, remote: any RemoteAttachments, cacheLimit: Int64 = 256 << 20,
        downloads: [String: AttachmentDownloads] = [:], defaultDownloads: AttachmentDownloads = .onDemand
    ) {
        self.files = files
        self.remote = remote
        self.cacheLimit = cacheLimit
        self.downloads = downloads
        self.defaultDownloads = defaultDownloads
    }

    func downloads(for table: String) -> AttachmentDownloads { downloads[table] ?? defaultDownloads }
}
