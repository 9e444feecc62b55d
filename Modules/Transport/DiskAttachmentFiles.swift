public import Foundation
public import SyncCore
import Synchronization

#if canImport(CryptoKit)
    import CryptoKit
#else
    import Crypto
#endif

/// SyncCore's `AttachmentFiles` on the file system: a directory the app chooses (inside an App
/// Group container to share it with extensions), each content stored once under its SHA-256.
///
/// ```
/// <directory>/ab/cdef…   a content: exactly its bytes, named by its SHA-256 (2 + 62 hex digits)
/// <directory>/tmp/…      imports and downloads in progress (removed when they end; one left by a
///                        killed process is removed when the directory is next opened, once it
///                        has not changed for `staleTemporaryAge`)
/// ```
///
/// Imports stream: the file is read and hashed `chunkSize` bytes at a time while the copy is
/// written, then renamed into place (atomic: a reader sees a whole file or none), so memory stays
/// bounded whatever the size. Blocking file calls run on a dispatch queue, not on Swift's
/// cooperative pool.
///
/// ```swift
/// let files = try DiskAttachmentFiles(directory: URL.applicationSupportDirectory.appending(path: "attachments"))
/// await context.useAttachments(AttachmentConfiguration(files: files, remote: remote))
/// ```
public final class DiskAttachmentFiles: AttachmentFiles {
    /// The directory.
    public let directory: URL
    /// The bytes read at a time when importing (256 KiB by default, at least 4 KiB).
    public let chunkSize: Int
    private let queue = DispatchQueue(label: "ferry.attachment-files", attributes: .concurrent)
    /// The largest single read an import made (for the tests of bounded memory).
    let largestRead = Mutex(0)

    /// How long a scratch file in `tmp/` may go unchanged before it is taken for one a killed
    /// process left (a download or an import writes its file as it goes).
    public static let staleTemporaryAge: TimeInterval = 3_600

    /// Opens (creating it when absent) the directory, and removes the scratch files killed
    /// processes left in it (a download cut by SIGKILL left 65 MB there for good).
    public init(directory: URL, chunkSize: Int = 256 << 10) throws {
        self.directory = directory
        self.chunkSize = max(chunkSize, 4096)
        let scratch = directory.appending(path: "tmp")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        Self.removeStale(in: scratch, olderThan: Date(timeIntervalSinceNow: -Self.staleTemporaryAge))
    }

    /// Removes the files of `scratch` last changed before `limit`; one that cannot be read or
    /// removed stays (another process may be ending with it).
    static func removeStale(in scratch: URL, olderThan limit: Date) {
        let manager = FileManager.default
        guard let names = try? manager.contentsOfDirectory(atPath: scratch.path) else { return }
        for name in names {
            let file = scratch.appending(path: name)
            guard let changed = (try? manager.attributesOfItem(atPath: file.path))?[.modificationDate] as? Date,
                changed < limit
            else { continue }
            try? manager.removeItem(at: file)
        }
    }

    public func importFile(at source: URL, moving: Bool) async throws -> ImportedFile {
        try await run { try self.importNow(source, moving: moving) }
    }

    public func url(sha256: String) async -> URL? {
        guard let file = path(sha256) else { return nil }
        return FileManager.default.fileExists(atPath: file.path) ? file : nil
    }

    public func remove(sha256: String) async throws {
        guard let file = path(sha256) else { return }
        try await run {
            // An absent file is not an error (a racing remove may take it between the two calls).
            guard FileManager.default.fileExists(atPath: file.path) else { return }
            do {
                try FileManager.default.removeItem(at: file)
            } catch  where !FileManager.default.fileExists(atPath: file.path) {
                // Removed meanwhile.
            }
        }
    }

    public func size(sha256: String) async throws -> Int64? {
        guard let file = path(sha256), FileManager.default.fileExists(atPath: file.path) else { return nil }
        let attributes = try FileManager.default.attributesOfItem(atPath: file.path)
        return (attributes[.size] as? NSNumber)?.int64Value
    }

    public func temporaryURL() async throws -> URL {
        directory.appending(path: "tmp").appending(path: UUID().uuidString)
    }

    public func discardTemporary(_ url: URL) async {
        // Only scratch files of this directory.
        func trimmed(_ url: URL) -> Substring {
            let path = url.standardizedFileURL.path
            return path.hasSuffix("/") ? path.dropLast() : Substring(path)
        }
        guard trimmed(url.deletingLastPathComponent()) == trimmed(directory.appending(path: "tmp")) else { return }
        _ = try? await run { try FileManager.default.removeItem(at: url) }
    }

    public func storedContents() async throws -> [StoredContent] {
        let directory = directory
        return try await run {
            let manager = FileManager.default
            var contents: [StoredContent] = []
            for prefix in try manager.contentsOfDirectory(atPath: directory.path) where prefix.utf8.count == 2 {
                let folder = directory.appending(path: prefix)
                for rest in try manager.contentsOfDirectory(atPath: folder.path) {
                    let sha256 = prefix + rest
                    guard self.path(sha256) != nil else { continue }
                    let attributes = try manager.attributesOfItem(atPath: folder.appending(path: rest).path)
                    let modified = (attributes[.modificationDate] as? Date) ?? .distantPast
                    contents.append(
                        StoredContent(
                            sha256: sha256,
                            modifiedAt: Timestamp(millisecondsSince1970: Int64(modified.timeIntervalSince1970 * 1000))))
                }
            }
            return contents
        }
    }

    public func holdsIntact(sha256: String) async throws -> Bool {
        guard let file = path(sha256), FileManager.default.fileExists(atPath: file.path) else { return false }
        return try await run {
            let input = try FileHandle(forReadingFrom: file)
            defer { try? input.close() }
            var hasher = SHA256()
            while let chunk = try input.read(upToCount: self.chunkSize), !chunk.isEmpty {
                self.largestRead.withLock { $0 = max($0, chunk.count) }
                hasher.update(data: chunk)
            }
            return Self.hex(hasher.finalize()) == sha256
        }
    }

    static func hex(_ digest: SHA256.Digest) -> String { digest.map { String(format: "%02x", $0) }.joined() }

    /// The path of a content, or `nil` for text that is not a SHA-256 (so nothing else reaches a path).
    func path(_ sha256: String) -> URL? {
        guard sha256.utf8.count == 64, sha256.utf8.allSatisfy({ (48...57).contains($0) || (97...102).contains($0) })
        else { return nil }
        return directory.appending(path: String(sha256.prefix(2))).appending(path: String(sha256.dropFirst(2)))
    }

    private func importNow(_ source: URL, moving: Bool) throws -> ImportedFile {
        let manager = FileManager.default
        let input = try FileHandle(forReadingFrom: source)
        defer { try? input.close() }
        // A copy goes to a scratch file first; a move hashes the file where it is, then renames it.
        var scratch: URL?
        var output: FileHandle?
        if !moving {
            let url = directory.appending(path: "tmp").appending(path: UUID().uuidString)
            guard manager.createFile(atPath: url.path, contents: nil) else {
                throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: url.path])
            }
            scratch = url
            output = try FileHandle(forWritingTo: url)
        }
        var hasher = SHA256()
        var size: Int64 = 0
        do {
            defer { try? output?.close() }
            while let chunk = try input.read(upToCount: chunkSize), !chunk.isEmpty {
                largestRead.withLock { $0 = max($0, chunk.count) }
                hasher.update(data: chunk)
                try output?.write(contentsOf: chunk)
                size += Int64(chunk.count)
            }
            try output?.synchronize()
        } catch {
            if let scratch { try? manager.removeItem(at: scratch) }
            throw error
        }
        let sha256 = Self.hex(hasher.finalize())
        guard let target = path(sha256) else { preconditionFailure("a SHA-256 in hex is a valid content name") }
        let placed = scratch ?? source
        try manager.createDirectory(at: target.deletingLastPathComponent(), withIntermediateDirectories: true)
        // Stored once: a content already here is replaced by the copy just hashed, in one rename
        // (a reader of the old file keeps reading it). Keeping the old one kept a copy damaged on
        // the device for good: attaching the file again did not repair it.
        if rename(placed.path, target.path) != 0 {
            let failure = errno
            guard failure == EXDEV, scratch == nil else {
                if scratch != nil { try? manager.removeItem(at: placed) }
                throw POSIXError(POSIXErrorCode(rawValue: failure) ?? .EIO)
            }
            // A file moved in from another volume: copied to the scratch area, then renamed.
            let copy = directory.appending(path: "tmp").appending(path: UUID().uuidString)
            do {
                try manager.copyItem(at: placed, to: copy)
                guard rename(copy.path, target.path) == 0 else {
                    throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
                }
            } catch {
                try? manager.removeItem(at: copy)
                throw error
            }
            try? manager.removeItem(at: placed)
        }
        return ImportedFile(sha256: sha256, size: size)
    }

    private func run<Value: Sendable>(_ body: @escaping @Sendable () throws -> Value) async throws -> Value {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Swift.Result { try body() }) }
        }
    }
}
