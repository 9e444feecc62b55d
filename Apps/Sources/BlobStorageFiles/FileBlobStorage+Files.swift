import Foundation
import Logging
import ServerStorageCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

extension FileBlobStorage {
    // MARK: - Upload files

    /// Opens and locks the state file of `id` and runs `body` on it; `nil` when there is no state
    /// file (or it was removed while this waited for the lock). With `create`, a missing state file
    /// is created (empty: no upload until a record is written in it).
    func withUpload<T>(_ id: String, exclusive: Bool, create: Bool = false, _ body: (Int32) throws -> T) throws -> T? {
        let path = statePath(id)
        for _ in 0..<16 {
            guard let fd = try FileIO.open(path, O_RDWR | (create ? O_CREAT : 0)) else { return nil }
            defer { FileIO.close(fd) }  // closing releases the lock
            try FileIO.lock(fd, exclusive: exclusive, path: path)
            if try FileIO.isLinked(fd, path: path) { return try body(fd) }
            if !create { return nil }
        }
        return nil
    }

    /// The newest valid record of a state file; `nil` for a file without one (created, never
    /// written).
    func readRecord(_ fd: Int32, _ id: String) throws -> UploadRecord? {
        let path = statePath(id)
        let first = try FileIO.read(fd, count: UploadRecord.slotSize, at: 0, path: path)
        let second = try FileIO.read(fd, count: UploadRecord.slotSize, at: UploadRecord.slotStride, path: path)
        let record = UploadRecord.newest(first, second)
        if record == nil, first.contains(where: { $0 != 0 }) || second.contains(where: { $0 != 0 }) {
            configuration.logger?.warning(
                "an upload's state file holds no valid record; it counts as absent",
                metadata: ["ferry.upload": "\(id)"])
        }
        return record
    }

    /// Writes `record` as the next record of the state file (the other slot), and syncs it.
    func writeRecord(_ fd: Int32, _ record: inout UploadRecord, _ id: String) throws {
        record.sequence += 1
        try FileIO.write(fd, record.encoded(), at: record.slot, path: statePath(id))
        try FileIO.syncData(fd, path: statePath(id))
    }

    func state(_ id: String, _ record: UploadRecord) -> UploadState {
        UploadState(
            id: id, length: record.length, offset: record.offset,
            createdAt: Date(timeIntervalSince1970: Double(record.createdAt) / 1000),
            updatedAt: Date(timeIntervalSince1970: Double(record.updatedAt) / 1000),
            completedSHA256: record.completedSHA256)
    }
}

/// A file descriptor closed when the last reader lets it go.
final class OpenFile: Sendable {
    let fd: Int32
    init(_ fd: Int32) { self.fd = fd }
    deinit { FileIO.close(fd) }
}

/// The chunks of one open blob file, read with `pread` (so several iterations can share it).
struct FileChunks: BlobChunkSource {
    let file: OpenFile
    let path: String
    let chunkSize: Int

    func chunk(from position: Int64, before end: Int64) async throws -> [UInt8] {
        let count = Int(min(Int64(chunkSize), end - position))
        let file = file
        let path = path
        return try await FileIO.run { try FileIO.read(file.fd, count: count, at: position, path: path) }
    }
}
