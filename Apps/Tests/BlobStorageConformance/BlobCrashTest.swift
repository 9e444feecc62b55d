import Foundation
import ServerStorageCore
import StoreConformance
public import Testing

/// The SIGKILL test of a persistent blob storage: a child process (`BlobCrashWriter`, in
/// Tests/BlobCrashWriter) appends to the upload "crash" and is killed at a random moment, often in
/// the middle of a chunk; after each kill the storage is reopened here and must show an offset
/// - at least the last one the child announced (announced means stored),
/// - never smaller than after the previous kill, never past the length,
/// - whose bytes, read from the storage's own files or rows, are exactly the upload's;
///
/// and at the end the upload resumes from its offset to a blob with the right SHA-256.
///
/// ```swift
/// try await BlobCrashTest.expectResumableAfterKills(spec: "files:\(directory)", seed: 3) {
///     OpenedBlobStorage(storage: try FileBlobStorage(directory: directory))
/// } storedPrefix: { count in try readDataFile(count) }
/// ```
public enum BlobCrashTest: Sendable {
    /// The upload the writer fills.
    public static let uploadID = "crash"

    /// Byte `position` of the upload (the same function as the writer's).
    public static func byte(at position: Int64) -> UInt8 {
        UInt8(truncatingIfNeeded: (UInt64(position) &* 0x9E37_79B1) >> 11)
    }

    /// The bytes `range` of the upload.
    public static func content(_ range: Range<Int64>) -> [UInt8] { range.map(byte(at:)) }

    /// What the rounds saw.
    public struct Report: Sendable, CustomStringConvertible {
        public var rounds = 0
        /// The offsets found after each kill.
        public var offsets: [Int64] = []
        /// Rounds where the storage held more than the child announced (killed mid-append).
        public var killedMidAppend = 0
        public var failures: [String] = []

        public var description: String {
            "\(rounds) rounds, offsets \(offsets), \(killedMidAppend) killed between a commit and its announcement, "
                + "\(failures.count) failures"
        }
    }

    /// Kills the writer `rounds` times on the storage `spec` (`sqlite:PATH` or `files:DIRECTORY`),
    /// checking after each kill, then completes the upload here and reads it back.
    ///
    /// - Parameters:
    ///   - open: Opens the storage in this process.
    ///   - storedPrefix: The first `count` bytes of the upload as the storage keeps them (its rows
    ///     or its data file), read around the blob-storage API.
    public static func expectResumableAfterKills(
        spec: String, length: Int64 = 8 * 1024 * 1024, chunkSize: Int = 16 * 1024, rounds: Int = 12, seed: UInt64,
        sourceLocation: SourceLocation = #_sourceLocation,
        open: @escaping @Sendable () async throws -> OpenedBlobStorage,
        storedPrefix: @escaping @Sendable (_ count: Int64) async throws -> [UInt8]
    ) async throws {
        let writer = try #require(
            CrashAtomicity.writerURL(named: "BlobCrashWriter"), "BlobCrashWriter was not built beside the tests",
            sourceLocation: sourceLocation)
        var random = SeededRandom(seed: seed)
        var report = Report()
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent(
            "ferry-blob-crash-" + UUID().uuidString)
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        var previous: Int64 = 0
        for round in 1...rounds {
            let output = scratch.appendingPathComponent("round-\(round).out")
            _ = FileManager.default.createFile(atPath: output.path, contents: nil)
            // Some rounds are killed at a random instant (maybe before the upload exists), the
            // others after a random number of announced appends, plus a random delay.
            let appends = round % 4 == 1 ? 0 : Int.random(in: 1...6, using: &random)
            let delay = UInt32.random(in: 0...3_000, using: &random)
            let early = UInt32.random(in: 0...30_000, using: &random)
            let arguments = [spec, "\(length)", "\(chunkSize)"]
            let exit = try await offThePool {
                try killRound(
                    writer: writer, arguments: arguments, output: output, appends: appends, initialSleep: early,
                    extraMicroseconds: delay)
            }
            if let exit {
                report.failures.append("round \(round): the writer exited by itself: \(exit)")
                break
            }
            let announced = announcedOffset(in: output)
            let opened = try await open()
            let state: UploadState?
            do {
                state = try await opened.storage.uploadState(id: uploadID)
            } catch {
                await opened.close()
                throw error
            }
            await opened.close()
            report.rounds += 1
            let offset = state?.offset ?? 0
            report.offsets.append(offset)
            if state == nil && (announced > 0 || previous > 0) {
                report.failures.append("round \(round): the upload is gone (announced \(announced))")
            }
            if offset < announced {
                report.failures.append("round \(round): offset \(offset) < announced \(announced)")
            }
            if offset < previous { report.failures.append("round \(round): offset \(offset) < previous \(previous)") }
            if offset > length { report.failures.append("round \(round): offset \(offset) > length \(length)") }
            if offset > announced { report.killedMidAppend += 1 }
            if state != nil {
                let stored = try await storedPrefix(offset)
                if stored != content(0..<offset) {
                    let first = zip(stored, content(0..<offset)).enumerated().first { $0.element.0 != $0.element.1 }
                    report.failures.append(
                        "round \(round): the \(stored.count) stored bytes differ from the upload's "
                            + "(first difference at \(first?.offset ?? min(stored.count, Int(offset))))")
                }
            }
            previous = offset
            if !report.failures.isEmpty { break }
        }
        print("blob crash test (\(spec.prefix(while: { $0 != ":" }))): \(report)")
        #expect(report.failures.isEmpty, "\(report.failures)", sourceLocation: sourceLocation)
        #expect(report.rounds == rounds, sourceLocation: sourceLocation)
        #expect(previous > 0, "the writer must append between kills", sourceLocation: sourceLocation)
        guard report.failures.isEmpty else { return }

        // The upload resumes from where the kills left it, to the right blob.
        let opened = try await open()
        do {
            let blobs = opened.storage
            _ = try await blobs.createUpload(id: uploadID, length: length)
            let offset = try #require(try await blobs.uploadState(id: uploadID)?.offset)
            let rest = content(offset..<length)
            #expect(try await blobs.append(id: uploadID, at: offset, Pieces(rest, size: 64 * 1024)) == length)
            let whole = content(0..<length)
            let blob = try await blobs.completeUpload(id: uploadID, sha256: BlobTestData.sha256(whole))
            #expect(blob.size == length, sourceLocation: sourceLocation)
            let read = try await BlobTestData.readAll(blobs, blob.sha256)
            #expect(read.bytes == whole, sourceLocation: sourceLocation)
        } catch {
            await opened.close()
            throw error
        }
        await opened.close()
    }

    /// Starts the writer, waits until it announced `appends` appends (or `initialSleep` µs when
    /// `appends` is 0), then `extraMicroseconds` more, and kills it. Returns what it said on
    /// standard error when it exited by itself, `nil` when the kill ended it.
    static func killRound(
        writer: URL, arguments: [String], output: URL, appends: Int, initialSleep: UInt32, extraMicroseconds: UInt32
    ) throws -> String? {
        let handle = try FileHandle(forWritingTo: output)
        let errors = Pipe()
        let child = Process()
        child.executableURL = writer
        child.arguments = arguments
        child.standardOutput = handle
        child.standardError = errors
        try child.run()
        let deadline = Date().addingTimeInterval(60)
        if appends == 0 {
            usleep(initialSleep)
        } else {
            while child.isRunning, announcements(in: output) < appends, !isFull(output), Date() < deadline {
                usleep(500)
            }
        }
        usleep(extraMicroseconds)
        let exitedByItself = !child.isRunning
        kill(child.processIdentifier, SIGKILL)
        child.waitUntilExit()
        try handle.close()
        guard exitedByItself else { return nil }
        return String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    }

    /// The complete `offset N` lines the child wrote.
    static func lines(in output: URL) -> [Substring] {
        guard let data = try? Data(contentsOf: output) else { return [] }
        let text = String(decoding: data, as: UTF8.self)
        guard let end = text.lastIndex(of: "\n") else { return [] }
        return text[..<end].split(separator: "\n").filter { $0.hasPrefix("offset ") }
    }

    static func announcements(in output: URL) -> Int { lines(in: output).count }

    /// Whether the child filled the upload.
    static func isFull(_ output: URL) -> Bool {
        (try? String(contentsOf: output, encoding: .utf8))?.contains("full\n") ?? false
    }

    static func announcedOffset(in output: URL) -> Int64 {
        lines(in: output).last.flatMap { Int64($0.dropFirst("offset ".count)) } ?? 0
    }

    /// Runs blocking work on a thread of its own, without holding a thread of the cooperative pool.
    static func offThePool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
        }
    }
}
