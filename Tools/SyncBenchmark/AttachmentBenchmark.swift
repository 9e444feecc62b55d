// The attachment benchmark (`SyncBenchmark --attachments`, Tools/README.md): uploads and downloads
// through `ferry serve --attachments` on loopback (SQLite file) by Transport's `HTTPRemote`, and the
// same bytes by curl on the same routes (`PUT` to create, `PATCH`es of 4 MiB, `GET`) against the
// same server in the same run, as the baseline; MB/s, ratios and peak RSS of server and clients.
import ArgumentParser
import Foundation
import Synchronization
import SyncCore
import Transport

struct AttachmentOptions: ParsableArguments {
    @Flag(name: .customLong("attachments"), help: "Attachments: HTTPRemote beside curl on the same routes.")
    var run = false
    @Option(name: .customLong("attachment-files"), help: "Small files of the attachment benchmark.")
    var files = 100
    @Option(name: .customLong("attachment-file-mib"), help: "MiB of each small file.")
    var fileMiB = 1
    @Option(name: .customLong("attachment-large-mib"), help: "MiB of the large file (0: none).")
    var largeMiB = 200
    @Option(name: .customLong("curl"), help: "The curl executable of the baseline.")
    var curl = "/usr/bin/curl"
}

enum AttachmentBenchmark {
    /// The bytes of one `PATCH`: `HTTPRemote`'s piece, which curl sends too.
    static let piece = 4 << 20

    /// One side's files: where they are, their size and SHA-256.
    struct File {
        var url: URL
        var size: Int
        var sha256: String
    }

    /// One measured transfer: seconds, bytes, and peak RSS of the server and the client.
    struct Figures {
        var seconds: Double
        var bytes: Int
        var serverPeak: Int
        var clientPeak: Int
        /// The server's RSS when the transfer started (its peak is no lower).
        var serverStart = 0
        /// The server's peak anonymous RSS (heap, stacks: without the pages of files it maps, such
        /// as SQLite's `mmap_size` of the database), sampled every 5 ms.
        var serverAnonymousPeak = 0
        var megabytesPerSecond: Double { Double(bytes) / 1_048_576 / seconds }
    }

    static func run(options: Options, directory: URL) async throws {
        let settings = options.attachmentBench
        guard FileManager.default.isExecutableFile(atPath: settings.curl) else {
            throw BenchmarkError("no curl at \(settings.curl) (the baseline): install it or pass --curl")
        }
        let database = directory.appendingPathComponent("attachments.sqlite").path
        let server = try ServerProcess.start(
            database: database, directory: directory, page: 100, extraArguments: ["--attachments"])
        defer { server.stop() }
        let remote = HTTPRemote(HTTPRemote.Configuration(serverURL: server.url, protocolVersion: .v3))
        for id in ["ferry", "curl"] {
            _ = try await remote.onlineTable("files").insert(["id": .string(id)])
        }
        let files = try DiskAttachmentFiles(directory: directory.appendingPathComponent("files"))
        print("\nattachments through ferry serve --attachments (SQLite file), one transfer at a time")
        print("  client: Transport's HTTPRemote (AsyncHTTPClient on Linux), from a DiskAttachmentFiles directory")
        print("  baseline: \(settings.curl), the same routes and 4 MiB PATCHes, one process per phase")

        var workloads: [(String, [Int])] = []
        if settings.files > 0 {
            workloads.append(
                (
                    "\(settings.files) × \(settings.fileMiB) MiB",
                    Array(repeating: settings.fileMiB << 20, count: settings.files)
                ))
        }
        if settings.largeMiB > 0 { workloads.append(("1 × \(settings.largeMiB) MiB", [settings.largeMiB << 20])) }
        var lines: [String] = []
        for (index, (label, sizes)) in workloads.enumerated() {
            // Different content of the same sizes for each side: the server stores content once per
            // scope, and would skip the second upload of the same bytes.
            let ferryFiles = try await make(sizes, tag: "ferry-\(index)", files: files, directory: directory)
            let curlFiles = try await make(sizes, tag: "curl-\(index)", files: files, directory: directory)
            let total = sizes.reduce(0, +)

            let ferryUp = try await measure(server: server, bytes: total) {
                for (number, file) in ferryFiles.enumerated() {
                    try await remote.uploadAttachment(
                        table: "files", itemID: "ferry", name: "w\(index)-\(number)", file: file.url, contentType: nil,
                        sha256: file.sha256, progress: { _, _ in })
                }
            }
            let curlUp = try await CurlTransfers.upload(
                curlFiles, server: server, item: "curl", prefix: "w\(index)-", settings: settings,
                directory: directory)

            let downloads = directory.appendingPathComponent("downloads-\(index)")
            try FileManager.default.createDirectory(at: downloads, withIntermediateDirectories: true)
            let ferryDown = try await measure(server: server, bytes: total) {
                for number in ferryFiles.indices {
                    try await remote.downloadAttachment(
                        table: "files", itemID: "ferry", name: "w\(index)-\(number)",
                        to: downloads.appendingPathComponent("ferry-\(number)"), progress: { _, _ in })
                }
            }
            let curlDown = try await CurlTransfers.download(
                curlFiles, server: server, item: "curl", prefix: "w\(index)-", into: downloads, settings: settings)
            // Every byte came back, on both sides (checked outside the timing).
            for (side, originals) in [("ferry", ferryFiles), ("curl", curlFiles)] {
                for (number, original) in originals.enumerated() {
                    let copy = downloads.appendingPathComponent("\(side)-\(number)")
                    let imported = try await files.importFile(at: copy, moving: true)
                    guard imported.sha256 == original.sha256 else {
                        throw BenchmarkError("\(side) download \(number) of \(label) differs from what was uploaded")
                    }
                }
            }
            try? FileManager.default.removeItem(at: downloads)
            for file in ferryFiles + curlFiles { try await files.remove(sha256: file.sha256) }

            print("\n\(label) (\(format(Double(total) / 1_048_576)) MiB each way)")
            for (direction, ferry, curl) in [("upload", ferryUp, curlUp), ("download", ferryDown, curlDown)] {
                print(
                    "  \(direction.padding(toLength: 9, withPad: " ", startingAt: 0))"
                        + "HTTPRemote \(rate(ferry)) MB/s   curl \(rate(curl)) MB/s   "
                        + "HTTPRemote/curl \(format(ferry.megabytesPerSecond / curl.megabytesPerSecond))x")
                print(
                    "           server peak RSS \(mb(ferry.serverPeak)) MB (from \(mb(ferry.serverStart)), "
                        + "anonymous \(mb(ferry.serverAnonymousPeak))) with HTTPRemote, \(mb(curl.serverPeak)) MB (from "
                        + "\(mb(curl.serverStart)), anonymous \(mb(curl.serverAnonymousPeak))) with curl")
                print(
                    "           client peak RSS \(mb(ferry.clientPeak)) MB (HTTPRemote, this process), "
                        + "\(mb(curl.clientPeak)) MB (curl)")
                lines.append(
                    "  \(label) \(direction): HTTPRemote \(format(ferry.megabytesPerSecond)) MB/s, curl "
                        + "\(format(curl.megabytesPerSecond)) MB/s, \(format(ferry.megabytesPerSecond / curl.megabytesPerSecond))x"
                )
            }
        }
        print("\nsummary (HTTPRemote vs curl)\n" + lines.joined(separator: "\n"))
    }

    /// Writes files of `sizes` with content of their own, into the files directory.
    static func make(_ sizes: [Int], tag: String, files: DiskAttachmentFiles, directory: URL) async throws -> [File] {
        var made: [File] = []
        for (number, size) in sizes.enumerated() {
            let url = directory.appendingPathComponent("source-\(tag)-\(number)")
            _ = FileManager.default.createFile(atPath: url.path, contents: nil)
            let handle = try FileHandle(forWritingTo: url)
            // FNV-1a of the tag and number: the same content in every run.
            var state = (tag + "-\(number)").utf8.reduce(UInt64(0xcbf2_9ce4_8422_2325)) {
                ($0 ^ UInt64($1)) &* 0x100_0000_01b3
            }
            var written = 0
            while written < size {
                let count = min(1 << 20, size - written)
                var bytes = [UInt8](repeating: 0, count: count)
                for index in stride(from: 0, to: count, by: 8) {
                    state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                    withUnsafeBytes(of: state) { word in
                        for offset in 0..<min(8, count - index) { bytes[index + offset] = word[offset] }
                    }
                }
                try handle.write(contentsOf: bytes)
                written += count
            }
            try handle.close()
            let imported = try await files.importFile(at: url, moving: true)
            guard let stored = await files.url(sha256: imported.sha256) else {
                throw BenchmarkError("the files directory lost \(url.lastPathComponent)")
            }
            made.append(File(url: stored, size: size, sha256: imported.sha256))
        }
        return made
    }

    /// Times `body`, with the server's and this process's peak RSS during it.
    static func measure(server: ServerProcess, bytes: Int, _ body: () async throws -> Void)
        async throws -> Figures
    {
        let pid = server.process.processIdentifier
        Memory.resetPeak(pid)
        Memory.resetPeak(nil)
        let start = Memory.peakBytes(pid)
        let anonymous = Memory.AnonymousSampler(pid)
        let seconds = try await Clock.measure(body)
        return Figures(
            seconds: seconds, bytes: bytes, serverPeak: Memory.peakBytes(pid), clientPeak: Memory.peakBytes(nil),
            serverStart: start, serverAnonymousPeak: anonymous.stop())
    }

    static func rate(_ figures: Figures) -> String { String(format: "%7.1f", figures.megabytesPerSecond) }
    static func format(_ value: Double) -> String { String(format: "%.2f", value) }
    static func mb(_ bytes: Int) -> String { String(format: "%.1f", Double(bytes) / 1_048_576) }
}

extension Memory {
    /// Samples `RssAnon` of process `pid` every 5 ms on a thread until stopped; answers the peak.
    final class AnonymousSampler: Sendable {
        private let peak = Mutex(0)
        private let running = Mutex(true)

        init(_ pid: Int32) {
            Thread.detachNewThread { [self] in
                while running.withLock({ $0 }) {
                    let value = Memory.statusField("RssAnon", of: pid)
                    peak.withLock { $0 = max($0, value) }
                    usleep(5_000)
                }
            }
        }

        func stop() -> Int {
            running.withLock { $0 = false }
            return peak.withLock { $0 }
        }
    }

    /// A field of /proc/PID/status in bytes (0 where there is none).
    static func statusField(_ name: String, of pid: Int32?) -> Int {
        let path = "/proc/\(pid.map(String.init) ?? "self")/status"
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return 0 }
        for line in text.split(separator: "\n") where line.hasPrefix(name + ":") {
            return (Int(line.filter(\.isNumber)) ?? 0) * 1024
        }
        return 0
    }

    /// Resets the peak RSS (`VmHWM`) of process `pid` (this one when `nil`): Linux's `clear_refs` 5.
    static func resetPeak(_ pid: Int32?) {
        let path = "/proc/\(pid.map(String.init) ?? "self")/clear_refs"
        try? "5".write(toFile: path, atomically: false, encoding: .utf8)
    }

    /// The peak RSS (`VmHWM`) of process `pid` (this one when `nil`) since it started or since
    /// ``resetPeak(_:)``; 0 where /proc has none.
    static func peakBytes(_ pid: Int32?) -> Int { statusField("VmHWM", of: pid) }
}
