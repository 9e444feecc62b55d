import Foundation
import Synchronization
import SyncCore
import Testing

@testable import Transport

@Suite("DiskAttachmentFiles: content-addressed files, streamed")
struct DiskAttachmentFilesTests {
    let root: URL

    init() throws {
        root = FileManager.default.temporaryDirectory.appending(path: "ferry-files-" + UUID().uuidString)
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
    }

    func write(_ bytes: Data, _ name: String) throws -> URL {
        let url = root.appending(path: name)
        try bytes.write(to: url)
        return url
    }

    @Test func importHashesAndStoresEachContentOnce() async throws {
        defer { try? FileManager.default.removeItem(at: root) }
        let files = try DiskAttachmentFiles(directory: root.appending(path: "files"))
        let abc = try write(Data("abc".utf8), "abc.txt")
        let imported = try await files.importFile(at: abc, moving: false)
        // The SHA-256 of "abc" (FIPS 180-2's example).
        #expect(
            imported
                == ImportedFile(sha256: "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", size: 3))
        #expect(FileManager.default.fileExists(atPath: abc.path), "a copy leaves the source")
        let stored = try #require(await files.url(sha256: imported.sha256))
        #expect(try Data(contentsOf: stored) == Data("abc".utf8))
        #expect(stored.lastPathComponent == String(imported.sha256.dropFirst(2)))
        // The same content again, moved: one copy, the source gone.
        let again = try write(Data("abc".utf8), "again.txt")
        #expect(try await files.importFile(at: again, moving: true) == imported)
        #expect(!FileManager.default.fileExists(atPath: again.path))
        #expect(try await files.size(sha256: imported.sha256) == 3)
        try await files.remove(sha256: imported.sha256)
        try await files.remove(sha256: imported.sha256)  // absent: not an error
        #expect(await files.url(sha256: imported.sha256) == nil)
        // Text that is not a SHA-256 never reaches a path.
        #expect(await files.url(sha256: "../../etc/passwd") == nil)
        #expect(try await files.size(sha256: String(repeating: "A", count: 64)) == nil)
        let scratch = try FileManager.default.contentsOfDirectory(atPath: root.appending(path: "files/tmp").path)
        #expect(scratch.isEmpty, "no scratch file is left behind")
    }

    /// A copy damaged on the device is found by hashing it again, and importing the content again
    /// repairs it (the import kept the damaged copy, as the content was "already there").
    @Test func aDamagedCopyIsFoundAndAnImportRepairsIt() async throws {
        defer { try? FileManager.default.removeItem(at: root) }
        let files = try DiskAttachmentFiles(directory: root.appending(path: "files"), chunkSize: 4096)
        let bytes = Data((0..<50_000).map { UInt8(truncatingIfNeeded: $0 &* 13) })
        let imported = try await files.importFile(at: try write(bytes, "a.bin"), moving: false)
        #expect(try await files.holdsIntact(sha256: imported.sha256))
        let stored = try #require(await files.url(sha256: imported.sha256))
        var damaged = bytes
        damaged[40_000] ^= 0x80
        try damaged.write(to: stored)
        #expect(try await !files.holdsIntact(sha256: imported.sha256))
        #expect(try await !files.holdsIntact(sha256: String(repeating: "0", count: 64)), "absent")
        #expect(try await files.importFile(at: try write(bytes, "b.bin"), moving: true) == imported)
        #expect(try await files.holdsIntact(sha256: imported.sha256))
        #expect(try Data(contentsOf: stored) == bytes)
        let scratch = try FileManager.default.contentsOfDirectory(atPath: root.appending(path: "files/tmp").path)
        #expect(scratch.isEmpty, "no scratch file is left behind")
    }

    /// A scratch file a killed process left (a download cut by SIGKILL) is removed when the
    /// directory is next opened, once it went unchanged for an hour; a recent one may be another
    /// process's transfer in progress, and stays.
    @Test func scratchFilesKilledProcessesLeftAreRemovedOnOpening() throws {
        defer { try? FileManager.default.removeItem(at: root) }
        let directory = root.appending(path: "files")
        _ = try DiskAttachmentFiles(directory: directory)
        let scratch = directory.appending(path: "tmp")
        let (old, recent) = (scratch.appending(path: "old"), scratch.appending(path: "recent"))
        try Data(count: 1_000).write(to: old)
        try Data(count: 1_000).write(to: recent)
        try FileManager.default.setAttributes(
            [.modificationDate: Date(timeIntervalSinceNow: -DiskAttachmentFiles.staleTemporaryAge - 60)],
            ofItemAtPath: old.path)
        _ = try DiskAttachmentFiles(directory: directory)
        #expect(!FileManager.default.fileExists(atPath: old.path))
        #expect(FileManager.default.fileExists(atPath: recent.path))
    }

    /// Memory stays bounded: a 20 MB file is read and hashed a chunk at a time, never whole.
    @Test func aTwentyMegabyteFileIsHashedInChunks() async throws {
        defer { try? FileManager.default.removeItem(at: root) }
        let source = root.appending(path: "big.bin")
        #expect(FileManager.default.createFile(atPath: source.path, contents: nil))
        let handle = try FileHandle(forWritingTo: source)
        let block = Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        for index in 0..<20 {
            var piece = block
            piece[0] = UInt8(index)
            try handle.write(contentsOf: piece)
        }
        try handle.close()
        let files = try DiskAttachmentFiles(directory: root.appending(path: "files"), chunkSize: 64 << 10)
        let copied = try await files.importFile(at: source, moving: false)
        #expect(copied.size == 20 << 20)
        #expect(files.largestRead.withLock { $0 } == 64 << 10, "read 64 KiB at a time")
        // Hashing the stored copy (moved this time) gives the same content address.
        let stored = try #require(await files.url(sha256: copied.sha256))
        let other = try DiskAttachmentFiles(directory: root.appending(path: "other"), chunkSize: 1 << 20)
        let temporary = try await other.temporaryURL()
        try FileManager.default.copyItem(at: stored, to: temporary)
        #expect(try await other.importFile(at: temporary, moving: true) == copied)
        #expect(other.largestRead.withLock { $0 } == 1 << 20)
    }
}
