// The child process of the blob crash test (Tests/BlobStorageConformance/BlobCrashTest.swift).
//
//     BlobCrashWriter sqlite:/path/to/server.sqlite | files:/path/to/directory  LENGTH  CHUNK-SIZE
//
// Creates the upload "crash" of LENGTH bytes (or finds it), then appends to it from its stored
// offset, 64 KiB per append call in pieces of 4 KiB, with the blob storage committing chunks of
// CHUNK-SIZE. Byte p of the upload is `BlobCrashTest.byte(at: p)`. After each append it writes
// `offset <n>` to stdout with one write(2), so every offset the parent read was stored. At the
// end it writes `full` and waits. The parent kills it with SIGKILL at a random moment.
import BlobStorageFiles
import Foundation
import ServerStorageCore
import ServerStorageSQLite

/// Byte `position` of the crash upload: the same function as `BlobCrashTest.byte(at:)`.
func byte(at position: Int64) -> UInt8 {
    UInt8(truncatingIfNeeded: (UInt64(position) &* 0x9E37_79B1) >> 11)
}

/// The bytes `range` of the crash upload, in pieces of `pieceSize`, made on demand.
struct ContentPieces: AsyncSequence {
    let range: Range<Int64>
    let pieceSize: Int64

    struct AsyncIterator: AsyncIteratorProtocol {
        var position: Int64
        let end: Int64
        let pieceSize: Int64

        mutating func next() async -> [UInt8]? {
            guard position < end else { return nil }
            let stop = Swift.min(end, position + pieceSize)
            defer { position = stop }
            return (position..<stop).map(byte(at:))
        }
    }

    func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(position: range.lowerBound, end: range.upperBound, pieceSize: pieceSize)
    }
}

func say(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    _ = bytes.withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data((message + "\n").utf8))
    exit(1)
}

let arguments = CommandLine.arguments.dropFirst()
guard arguments.count == 3, let length = Int64(arguments[arguments.startIndex + 1]),
    let chunkSize = Int(arguments[arguments.startIndex + 2])
else { fail("usage: BlobCrashWriter sqlite:PATH|files:DIRECTORY LENGTH CHUNK-SIZE") }
let spec = arguments[arguments.startIndex]

do {
    let blobs: any BlobStorage
    if spec.hasPrefix("sqlite:") {
        let storage = try SQLiteServerStorage(location: .file(String(spec.dropFirst("sqlite:".count))))
        blobs = SQLiteBlobStorage(storage: storage, configuration: .init(chunkSize: chunkSize))
    } else if spec.hasPrefix("files:") {
        blobs = try FileBlobStorage(
            directory: String(spec.dropFirst("files:".count)), configuration: .init(chunkSize: chunkSize))
    } else {
        fail("BlobCrashWriter: unknown storage '\(spec)' (expected sqlite:PATH or files:DIRECTORY)")
    }
    _ = try await blobs.createUpload(id: "crash", length: length)
    while true {
        guard let state = try await blobs.uploadState(id: "crash") else { fail("BlobCrashWriter: the upload vanished") }
        if state.offset >= length {
            say("full")
            try await Task.sleep(for: .seconds(3600))
        }
        let end = min(length, state.offset + 64 * 1024)
        let offset = try await blobs.append(
            id: "crash", at: state.offset, ContentPieces(range: state.offset..<end, pieceSize: 4096))
        say("offset \(offset)")
    }
} catch {
    fail("BlobCrashWriter: \(error)")
}
