/// A blob-storage failure: a code that is the same for every backend and one line for people.
///
/// ```swift
/// do {
///     _ = try await blobs.append(id: id, at: 0, body)
/// } catch let error as BlobStorageError where error.code == .offsetMismatch {
///     print("resume at", error.currentOffset ?? 0)   // the upload's offset now
/// }
/// ```
public struct BlobStorageError: Error, Sendable, CustomStringConvertible {
    /// A classification that stays the same across backends.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }

        /// There is no upload with that id (never created, aborted, expired or discarded).
        public static let uploadNotFound = Code("uploadNotFound")
        /// There is no blob with that SHA-256.
        public static let blobNotFound = Code("blobNotFound")
        /// An upload with that id exists with another length.
        public static let uploadConflict = Code("uploadConflict")
        /// An append did not begin at the upload's offset (``BlobStorageError/currentOffset`` says
        /// where it is), or another append moved the offset meanwhile.
        public static let offsetMismatch = Code("offsetMismatch")
        /// An append brought more bytes than the upload's length (those up to the length are kept).
        public static let exceedsLength = Code("exceedsLength")
        /// Completion was asked before the offset reached the length.
        public static let incomplete = Code("incomplete")
        /// The stored bytes do not hash to the claimed SHA-256.
        public static let digestMismatch = Code("digestMismatch")
        /// A read range that does not lie within the blob.
        public static let rangeNotSatisfiable = Code("rangeNotSatisfiable")
        /// An upload id or a SHA-256 the storage does not accept (``BlobNames``).
        public static let invalidName = Code("invalidName")
        /// A negative upload length, or one past the backend's limit.
        public static let invalidLength = Code("invalidLength")
        /// The storage was closed.
        public static let closed = Code("closed")
        /// The database stayed busy (locked, no free connection, a statement timed out); retry later.
        public static let busy = Code("busy")
        /// The database cannot be reached now; retry later.
        public static let unavailable = Code("unavailable")
        /// The disk or the database's size limit is full; retry once room is made.
        public static let full = Code("full")
        /// Stored data is damaged (a missing chunk, an unreadable upload record).
        public static let corrupt = Code("corrupt")
        /// Another input or output failure.
        public static let io = Code("io")

        public var description: String { name }
    }

    /// What kind of failure this is.
    public var code: Code
    /// One line: what failed, with the upload id or blob hash involved.
    public var message: String
    /// For ``Code/offsetMismatch`` (and ``Code/incomplete``): the upload's offset now.
    public var currentOffset: Int64?
    /// The backend's native error, when there is one.
    public var underlying: (any Error & Sendable)?

    /// An error; see the properties.
    public init(_ code: Code, _ message: String, currentOffset: Int64? = nil, underlying: (any Error & Sendable)? = nil)
    {
        self.code = code
        self.message = message
        self.currentOffset = currentOffset
        self.underlying = underlying
    }

    /// A records-storage failure (from the database a blob storage shares) as a blob-storage one,
    /// with the same code where there is one.
    public init(_ error: StorageError) {
        let code: Code =
            switch error.code {
            case .closed: .closed
            case .busy: .busy
            case .unavailable: .unavailable
            case .full: .full
            case .corrupt: .corrupt
            default: .io
            }
        self.init(code, error.message, underlying: error)
    }

    public var description: String { "\(code): \(message)" }
}

extension BlobStorageError {
    /// The upload `id` is not there.
    package static func uploadNotFound(_ id: String) -> BlobStorageError {
        BlobStorageError(.uploadNotFound, "there is no upload '\(id)'")
    }

    /// The blob `sha256` is not there.
    package static func blobNotFound(_ sha256: String) -> BlobStorageError {
        BlobStorageError(.blobNotFound, "there is no blob \(sha256)")
    }

    /// The upload `id` is at `current`, not `expected`.
    package static func mismatch(_ id: String, expected: Int64, current: Int64) -> BlobStorageError {
        BlobStorageError(
            .offsetMismatch, "the upload '\(id)' is at offset \(current), not \(expected)", currentOffset: current)
    }

    /// The upload `id` exists with another length.
    package static func conflict(_ id: String, length: Int64, existing: Int64) -> BlobStorageError {
        BlobStorageError(
            .uploadConflict, "the upload '\(id)' exists with a length of \(existing) bytes, not \(length)")
    }

    /// Completion of `id` before its offset reached its length.
    package static func incomplete(_ id: String, offset: Int64, length: Int64) -> BlobStorageError {
        BlobStorageError(
            .incomplete, "the upload '\(id)' holds \(offset) of its \(length) bytes: it cannot be completed yet",
            currentOffset: offset)
    }

    /// The bytes of `id` hash to `actual`, not `claimed`.
    package static func digestMismatch(_ id: String, claimed: String, actual: String, discarded: Bool)
        -> BlobStorageError
    {
        BlobStorageError(
            .digestMismatch,
            "the upload '\(id)' has SHA-256 \(actual), not the claimed \(claimed)"
                + (discarded ? "; the upload was discarded" : ""))
    }

    /// An append of `id` went past `length`.
    package static func exceedsLength(_ id: String, length: Int64) -> BlobStorageError {
        BlobStorageError(
            .exceedsLength, "the bytes sent for the upload '\(id)' go past its length of \(length) bytes",
            currentOffset: length)
    }

    /// Data of `what` is missing or damaged.
    package static func corrupt(_ what: String) -> BlobStorageError {
        BlobStorageError(.corrupt, what)
    }
}

/// The names a blob storage accepts: upload ids and SHA-256 hashes. Every backend checks them
/// before any work, so neither can reach a file path or a statement unchecked.
///
/// ```swift
/// try BlobNames.validateUploadID("u-7f3a9c")         // fine
/// try BlobNames.validateSHA256(String(repeating: "ab", count: 32))
/// try BlobNames.validateUploadID("../etc/passwd")    // throws BlobStorageError.Code.invalidName
/// ```
public enum BlobNames: Sendable {
    /// The longest upload id.
    public static let maximumUploadIDLength = 128

    /// Checks an upload id: 1 to 128 characters of `A-Z a-z 0-9 _ -`.
    public static func validateUploadID(_ id: String) throws {
        let valid =
            (1...maximumUploadIDLength).contains(id.utf8.count)
            && id.utf8.allSatisfy { byte in
                (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
                    || byte == 0x5F || byte == 0x2D
            }
        guard valid else {
            throw BlobStorageError(
                .invalidName,
                "the upload id '\(id.prefix(140))' is not 1 to \(maximumUploadIDLength) characters of A-Z a-z 0-9 _ -")
        }
    }

    /// Checks a SHA-256 name: 64 characters of `0-9 a-f` (lowercase hex).
    public static func validateSHA256(_ sha256: String) throws {
        guard isSHA256(sha256) else {
            throw BlobStorageError(
                .invalidName, "'\(sha256.prefix(80))' is not a SHA-256 in 64 lowercase hex digits")
        }
    }

    /// Whether `text` is 64 characters of `0-9 a-f`.
    public static func isSHA256(_ text: String) -> Bool {
        text.utf8.count == 64 && text.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }

    /// Lowercase hex of `bytes` (a digest as a blob name).
    public static func hex(_ bytes: some Sequence<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}
