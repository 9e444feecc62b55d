import Crypto
public import Foundation
public import Logging
public import ServerStorageCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Blobs and uploads as files in a directory: one file per blob, named by its SHA-256.
///
/// ```swift
/// let blobs = try FileBlobStorage(directory: "/var/lib/ferry/blobs")
/// _ = try await blobs.createUpload(id: "u-1", length: 5)
/// let hello = AsyncStream<[UInt8]> { $0.yield(Array("hello".utf8)); $0.finish() }
/// _ = try await blobs.append(id: "u-1", at: 0, hello)
/// let blob = try await blobs.completeUpload(
///     id: "u-1", sha256: "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824")
/// ```
///
/// ## Layout
///
/// - `uploads/<id>.data`: the bytes of an upload, appended in place (`pwrite` at the offset).
/// - `uploads/<id>.state`: its length, offset, times and completion, as two checksummed slots
///   written in turn (`UploadRecord`), so a torn write leaves the previous state readable.
/// - `blobs/<first 2 hex digits>/<other 62>`: a blob's bytes, exactly; nothing else.
///
/// ## Durability
///
/// An appended chunk is written to the data file and synced (`fdatasync`) before the state's offset
/// moves past it (written and synced in turn): the offset never counts bytes that are not on disk.
/// After a crash the data file may hold bytes past the offset; the next append truncates them.
/// Completion hashes the data file, syncs it and renames it into `blobs/` (atomic: a blob file is
/// whole or absent), syncs both directories, then records the completion. A crash between the
/// rename and that record leaves an upload whose completion, called again, finds its blob.
///
/// ## Concurrency
///
/// Every operation on an upload holds an `flock` on its state file (exclusive for writes, shared
/// for reads), so several processes may share the directory on one machine (not over NFS). Blob
/// files are never written in place: readers holding one open keep reading it even if it is
/// deleted. Blocking calls run on a dispatch queue of their own, never on the cooperative pool.
public final class FileBlobStorage: BlobStorage {
    /// How the storage writes, tells time and logs.
    public struct Configuration: Sendable {
        /// The most bytes an append writes and syncs at once, and the most a read yields at once;
        /// kept within ``BlobStorageLimits/minimumChunkSize`` ... ``BlobStorageLimits/maximumChunkSize``.
        public var chunkSize: Int
        /// The clock upload times come from (tests inject their own).
        public var now: @Sendable () -> Date
        /// Where the storage logs (warnings about damaged or leftover files); `nil` for nowhere.
        public var logger: Logger?

        /// A configuration; see the properties.
        public init(
            chunkSize: Int = BlobStorageLimits.defaultChunkSize, now: @escaping @Sendable () -> Date = { Date() },
            logger: Logger? = nil
        ) {
            self.chunkSize = chunkSize
            self.now = now
            self.logger = logger
        }
    }

    /// `files:<directory>`.
    public let location: String
    /// The directory, as an absolute path.
    public let directory: String
    let uploads: String
    let blobs: String
    let chunkSize: Int
    let configuration: Configuration

    /// Opens the storage in `directory`, creating it (and `uploads/`, `blobs/`) when absent.
    ///
    /// - Throws: ``BlobStorageError`` (`io`) when the directory cannot be created.
    public init(directory: String, configuration: Configuration = Configuration()) throws {
        let absolute =
            directory.hasPrefix("/") ? directory : FileManager.default.currentDirectoryPath + "/" + directory
        self.directory = absolute
        location = "files:\(absolute)"
        uploads = absolute + "/uploads"
        blobs = absolute + "/blobs"
        chunkSize = BlobStorageLimits.clampedChunkSize(configuration.chunkSize)
        self.configuration = configuration
        try FileIO.makeDirectories(absolute)
        let createdUploads = try FileIO.makeDirectory(uploads)
        let createdBlobs = try FileIO.makeDirectory(blobs)
        if createdUploads || createdBlobs { try FileIO.syncDirectory(absolute) }
    }

    // MARK: - Paths

    func statePath(_ id: String) -> String { "\(uploads)/\(id).state" }
    func dataPath(_ id: String) -> String { "\(uploads)/\(id).data" }
    func blobDirectory(_ sha256: String) -> String { "\(blobs)/\(sha256.prefix(2))" }
    func blobPath(_ sha256: String) -> String { "\(blobs)/\(sha256.prefix(2))/\(sha256.dropFirst(2))" }

    var nowMilliseconds: Int64 { Int64((configuration.now().timeIntervalSince1970 * 1000).rounded(.down)) }

    // MARK: - Uploads

    public func createUpload(id: String, length: Int64) async throws -> UploadState {
        try BlobNames.validateUploadID(id)
        guard length >= 0 else {
            throw BlobStorageError(.invalidLength, "the upload '\(id)' cannot have a negative length (\(length))")
        }
        let now = nowMilliseconds
        return try await FileIO.run { [self] in
            let created = try withUpload(id, exclusive: true, create: true) { fd -> UploadState in
                if let record = try readRecord(fd, id) {
                    guard record.length == length else {
                        throw BlobStorageError.conflict(id, length: length, existing: record.length)
                    }
                    return state(id, record)
                }
                // The data file first: a state that exists always has its data file.
                let data = dataPath(id)
                guard let dataFD = try FileIO.open(data, O_RDWR | O_CREAT | O_TRUNC) else {
                    throw FileIO.failure("creating", data, ENOENT)
                }
                defer { FileIO.close(dataFD) }
                try FileIO.sync(dataFD, path: data)
                let record = UploadRecord(
                    sequence: 1, length: length, offset: 0, createdAt: now, updatedAt: now, completedSHA256: nil)
                try FileIO.write(fd, record.encoded(), at: record.slot, path: statePath(id))
                try FileIO.sync(fd, path: statePath(id))
                try FileIO.syncDirectory(uploads)
                return state(id, record)
            }
            guard let created else { throw BlobStorageError(.busy, "the upload '\(id)' kept being removed") }
            return created
        }
    }

    public func uploadState(id: String) async throws -> UploadState? {
        try BlobNames.validateUploadID(id)
        return try await FileIO.run { [self] in
            try withUpload(id, exclusive: false) { fd in try readRecord(fd, id).map { state(id, $0) } } ?? nil
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

    /// Writes `chunk` at `start`, syncs it, then moves the offset past it.
    private func commit(id: String, start: Int64, chunk: [UInt8]) async throws {
        let now = nowMilliseconds
        try await FileIO.run { [self] in
            let done: Void? = try withUpload(id, exclusive: true) { fd in
                guard var record = try readRecord(fd, id) else { throw BlobStorageError.uploadNotFound(id) }
                guard record.completedSHA256 == nil, record.offset == start else {
                    throw BlobStorageError.mismatch(id, expected: start, current: record.offset)
                }
                let end = start + Int64(chunk.count)
                guard end <= record.length else { throw BlobStorageError.exceedsLength(id, length: record.length) }
                let data = dataPath(id)
                guard let dataFD = try FileIO.open(data, O_RDWR) else {
                    throw BlobStorageError.corrupt("the bytes of the upload '\(id)' are missing (\(data))")
                }
                defer { FileIO.close(dataFD) }
                let size = try FileIO.size(dataFD, path: data)
                guard size >= start else {
                    throw BlobStorageError.corrupt(
                        "the upload '\(id)' holds \(size) bytes, fewer than its offset \(start)")
                }
                // Bytes past the offset were never counted (a crash before the state moved).
                if size > start { try FileIO.truncate(dataFD, to: start, path: data) }
                try FileIO.write(dataFD, chunk, at: start, path: data)
                try FileIO.syncData(dataFD, path: data)
                record.offset = end
                record.updatedAt = now
                try writeRecord(fd, &record, id)
            }
            if done == nil { throw BlobStorageError.uploadNotFound(id) }
        }
    }

    public func completeUpload(id: String, sha256: String) async throws -> BlobInfo {
        try BlobNames.validateUploadID(id)
        try BlobNames.validateSHA256(sha256)
        let now = nowMilliseconds
        return try await FileIO.run { [self] in
            // 1. Under the lock: the upload's state, and its data file opened for hashing.
            let first = try withUpload(id, exclusive: true) { fd -> Completion in
                guard var record = try readRecord(fd, id) else { throw BlobStorageError.uploadNotFound(id) }
                if let done = try completed(id, record, claimed: sha256) { return .done(done) }
                guard record.offset == record.length else {
                    throw BlobStorageError.incomplete(id, offset: record.offset, length: record.length)
                }
                guard let dataFD = try FileIO.open(dataPath(id), O_RDONLY) else {
                    // Moved into blobs/ by a completion that crashed before recording it.
                    if let blob = try blobInfo(sha256), blob.size == record.length {
                        record.completedSHA256 = sha256
                        record.updatedAt = now
                        try writeRecord(fd, &record, id)
                        return .done(blob)
                    }
                    try discard(id)
                    throw BlobStorageError.corrupt("the bytes of the upload '\(id)' were lost; it was discarded")
                }
                return .hash(dataFD, try FileIO.identity(dataFD, path: dataPath(id)), record.length)
            }
            guard let first else { throw BlobStorageError.uploadNotFound(id) }
            guard case .hash(let dataFD, let identity, let length) = first else {
                if case .done(let blob) = first { return blob }
                throw BlobStorageError.uploadNotFound(id)
            }
            // 2. Without the lock: the hash (the bytes of a full upload no longer change).
            let actual: String
            do {
                defer { FileIO.close(dataFD) }
                actual = try hash(dataFD, length: length, id: id)
            }
            // 3. Under the lock again: the same upload still, made the blob or discarded.
            let second = try withUpload(id, exclusive: true) { fd -> BlobInfo in
                guard var record = try readRecord(fd, id) else { throw BlobStorageError.uploadNotFound(id) }
                if let done = try completed(id, record, claimed: sha256) { return done }
                guard try FileIO.identity(path: dataPath(id)) == identity else {
                    throw BlobStorageError.uploadNotFound(id)
                }
                guard actual == sha256 else {
                    try discard(id)
                    throw BlobStorageError.digestMismatch(id, claimed: sha256, actual: actual, discarded: true)
                }
                try store(id, sha256: sha256, length: length)
                record.completedSHA256 = sha256
                record.updatedAt = now
                try writeRecord(fd, &record, id)
                guard let blob = try blobInfo(sha256) else { throw BlobStorageError.blobNotFound(sha256) }
                return blob
            }
            guard let second else { throw BlobStorageError.uploadNotFound(id) }
            return second
        }
    }

    enum Completion {
        case done(BlobInfo)
        case hash(Int32, [UInt64], Int64)
    }

    /// For an upload already completed: its blob when `claimed` names it, or the mismatch; `nil`
    /// for an upload not completed.
    private func completed(_ id: String, _ record: UploadRecord, claimed: String) throws -> BlobInfo? {
        guard let done = record.completedSHA256 else { return nil }
        guard done == claimed else {
            throw BlobStorageError.digestMismatch(id, claimed: claimed, actual: done, discarded: false)
        }
        guard let blob = try blobInfo(done) else { throw BlobStorageError.blobNotFound(done) }
        return blob
    }

    /// The SHA-256 of the first `length` bytes of `fd`, read a chunk at a time.
    private func hash(_ fd: Int32, length: Int64, id: String) throws -> String {
        var hasher = SHA256()
        var position: Int64 = 0
        while position < length {
            let count = Int(min(Int64(chunkSize), length - position))
            let chunk = try FileIO.read(fd, count: count, at: position, path: dataPath(id))
            guard chunk.count == count else {
                throw BlobStorageError.corrupt("the upload '\(id)' holds fewer bytes than its offset \(length)")
            }
            hasher.update(data: chunk)
            position += Int64(count)
        }
        return BlobNames.hex(hasher.finalize())
    }

    /// Moves the verified data file of `id` to the blob `sha256` (or drops it when the blob
    /// exists), durably.
    private func store(_ id: String, sha256: String, length: Int64) throws {
        let data = dataPath(id)
        let directory = blobDirectory(sha256)
        if try FileIO.makeDirectory(directory) { try FileIO.syncDirectory(blobs) }
        if try FileIO.identity(path: blobPath(sha256)) != nil {
            try FileIO.remove(data)
        } else {
            guard let fd = try FileIO.open(data, O_RDWR) else { throw BlobStorageError.uploadNotFound(id) }
            defer { FileIO.close(fd) }
            if try FileIO.size(fd, path: data) > length { try FileIO.truncate(fd, to: length, path: data) }
            try FileIO.touch(fd, path: data)
            try FileIO.sync(fd, path: data)
            // A link, not a rename: two uploads of the same content completing together (each
            // under its own lock) keep the first one's file, and its time, instead of the second
            // replacing it under the first one's answer.
            _ = try FileIO.linkUnlessExists(data, blobPath(sha256))
            try FileIO.syncDirectory(directory)
            try FileIO.remove(data)
        }
        try FileIO.syncDirectory(uploads)
    }

    /// Removes the files of `id`: the state first, so that the upload is gone at once.
    private func discard(_ id: String) throws {
        try FileIO.remove(statePath(id))
        try FileIO.remove(dataPath(id))
    }

    @discardableResult
    public func abortUpload(id: String) async throws -> Bool {
        try BlobNames.validateUploadID(id)
        return try await FileIO.run { [self] in
            try withUpload(id, exclusive: true) { fd in
                let existed = try readRecord(fd, id) != nil
                try discard(id)
                return existed
            } ?? false
        }
    }

    @discardableResult
    public func expireUploads(inactiveSince date: Date) async throws -> Int {
        let limit = Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
        return try await FileIO.run { [self] in
            var ids = Set<String>()
            for name in try FileIO.names(in: uploads) {
                for suffix in [".state", ".data"] where name.hasSuffix(suffix) {
                    let id = String(name.dropLast(suffix.count))
                    if (try? BlobNames.validateUploadID(id)) != nil { ids.insert(id) }
                }
            }
            var expired = 0
            for id in ids.sorted() {
                let removed = try withUpload(id, exclusive: true, create: true) { fd -> Bool in
                    let record = try readRecord(fd, id)
                    let stamp =
                        record?.updatedAt
                        ?? max(FileIO.modified(statePath(id)) ?? 0, FileIO.modified(dataPath(id)) ?? 0)
                    guard stamp < limit else { return false }
                    if record == nil {
                        configuration.logger?.warning(
                            "removing the leftover files of an upload never created",
                            metadata: ["ferry.upload": "\(id)"])
                    }
                    try discard(id)
                    return record != nil
                }
                if removed == true { expired += 1 }
            }
            return expired
        }
    }

    // MARK: - Blobs

    public func blob(sha256: String) async throws -> BlobInfo? {
        try BlobNames.validateSHA256(sha256)
        return try await FileIO.run { [self] in try blobInfo(sha256) }
    }

    func blobInfo(_ sha256: String) throws -> BlobInfo? {
        let path = blobPath(sha256)
        guard let size = FileIO.size(path) else { return nil }
        let modified = FileIO.modified(path) ?? 0
        return BlobInfo(sha256: sha256, size: size, createdAt: Date(timeIntervalSince1970: Double(modified) / 1000))
    }

    public func read(sha256: String, range: Range<Int64>?) async throws -> BlobBytes {
        try BlobNames.validateSHA256(sha256)
        let path = blobPath(sha256)
        let (file, size, modified) = try await FileIO.run { () throws -> (OpenFile, Int64, Int64) in
            guard let fd = try FileIO.open(path, O_RDONLY) else { throw BlobStorageError.blobNotFound(sha256) }
            let file = OpenFile(fd)
            return (file, try FileIO.size(fd, path: path), FileIO.modified(path) ?? 0)
        }
        let blob = BlobInfo(sha256: sha256, size: size, createdAt: Date(timeIntervalSince1970: Double(modified) / 1000))
        let range = try Self.checkedRange(range, size: size, sha256: sha256)
        return BlobBytes(blob: blob, range: range, source: FileChunks(file: file, path: path, chunkSize: chunkSize))
    }

    @discardableResult
    public func deleteBlob(sha256: String) async throws -> Bool {
        try BlobNames.validateSHA256(sha256)
        let path = blobPath(sha256)
        return try await FileIO.run { try FileIO.remove(path) }
    }

    public func blobs(after sha256: String?, limit: Int) async throws -> [BlobInfo] {
        if let sha256 { try BlobNames.validateSHA256(sha256) }
        let after = sha256 ?? ""
        return try await FileIO.run { [self] in
            // The directories in order, from the one `after` is in: a page reads at most the
            // directories its blobs are in (256 of them, each a 62nd of the names).
            var page: [BlobInfo] = []
            for prefix in try FileIO.names(in: blobs).sorted() where prefix >= String(after.prefix(2)) {
                guard page.count < limit else { break }
                let names = try FileIO.names(in: "\(blobs)/\(prefix)").map { prefix + $0 }.sorted()
                for name in names where name > after {
                    guard page.count < limit else { break }
                    guard (try? BlobNames.validateSHA256(name)) != nil, let info = try blobInfo(name) else { continue }
                    page.append(info)
                }
            }
            return page
        }
    }

    public func usage() async throws -> BlobUsage {
        try await FileIO.run { [self] in
            var usage = BlobUsage(blobCount: 0, blobBytes: 0, uploadCount: 0, uploadBytes: 0, storedBytes: 0)
            for prefix in try FileIO.names(in: blobs) {
                for name in try FileIO.names(in: "\(blobs)/\(prefix)") {
                    guard let size = FileIO.size("\(blobs)/\(prefix)/\(name)") else { continue }
                    usage.blobCount += 1
                    usage.blobBytes += size
                }
            }
            usage.storedBytes = usage.blobBytes
            for name in try FileIO.names(in: uploads) {
                if name.hasSuffix(".data") {
                    usage.storedBytes += FileIO.size("\(uploads)/\(name)") ?? 0
                } else if name.hasSuffix(".state") {
                    let id = String(name.dropLast(".state".count))
                    guard (try? BlobNames.validateUploadID(id)) != nil,
                        let record = try withUpload(id, exclusive: false, { fd in try readRecord(fd, id) }) ?? nil
                    else { continue }
                    usage.uploadCount += 1
                    if record.completedSHA256 == nil { usage.uploadBytes += record.offset }
                }
            }
            return usage
        }
    }

    public func unfinishedUploads(idPrefix: String) async throws -> UnfinishedUploads {
        try BlobNames.validateUploadID(idPrefix)
        return try await FileIO.run { [self] in
            var pending = UnfinishedUploads(count: 0, declaredBytes: 0)
            for name in try FileIO.names(in: uploads) where name.hasPrefix(idPrefix) && name.hasSuffix(".state") {
                let id = String(name.dropLast(".state".count))
                guard (try? BlobNames.validateUploadID(id)) != nil,
                    let record = try withUpload(id, exclusive: false, { fd in try readRecord(fd, id) }) ?? nil,
                    record.completedSHA256 == nil
                else { continue }
                pending.count += 1
                pending.declaredBytes += record.length
            }
            return pending
        }
    }
}
