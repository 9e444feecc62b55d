// The attachment benchmark's baseline: curl on the same routes as HTTPRemote (`PUT` to create the
// upload, `PATCH`es of 4 MiB with `Upload-Offset`, `GET`), each phase one curl process reading a
// config file of all its requests (`--next`: one connection kept alive), so process starts do
// not weigh on the figures.
import Foundation

enum CurlTransfers {
    /// Creates the uploads (one curl), then sends their bytes (another curl), timed together.
    static func upload(
        _ files: [AttachmentBenchmark.File], server: ServerProcess, item: String, prefix: String,
        settings: AttachmentOptions, directory: URL
    ) async throws -> AttachmentBenchmark.Figures {
        let base = server.url.absoluteString
        // curl sends a file, not part of one: the pieces of files over 4 MiB, cut before the timing.
        var pieces: [[(url: URL, offset: Int)]] = []
        for (number, file) in files.enumerated() {
            guard file.size > AttachmentBenchmark.piece else {
                pieces.append([(file.url, 0)])
                continue
            }
            let handle = try FileHandle(forReadingFrom: file.url)
            defer { try? handle.close() }
            var list: [(URL, Int)] = []
            var offset = 0
            while offset < file.size {
                let url = directory.appendingPathComponent("piece-\(item)-\(prefix)\(number)-\(offset)")
                try handle.read(upToCount: AttachmentBenchmark.piece)?.write(to: url)
                list.append((url, offset))
                offset += AttachmentBenchmark.piece
            }
            pieces.append(list)
        }
        defer {
            for list in pieces where list.count > 1 {
                for piece in list { try? FileManager.default.removeItem(at: piece.url) }
            }
        }
        let creations = files.enumerated().map { number, file in
            """
            url = "\(base)/tables/files/\(item)/$attachments/\(prefix)\(number)"
            request = "PUT"
            header = "Upload-Length: \(file.size)"
            header = "Repr-Digest: sha-256=:\(base64(hex: file.sha256)):"
            header = "Upload-Complete: ?0"
            header = "Content-Type: application/octet-stream"
            header = "Content-Length: 0"
            output = "/dev/null"
            write-out = "%{http_code} %header{location}\\n"
            """
        }
        var peak = 0
        let pid = server.process.processIdentifier
        Memory.resetPeak(pid)
        let serverStart = Memory.peakBytes(pid)
        let anonymous = Memory.AnonymousSampler(pid)
        let seconds = try await Clock.measure {
            let (created, createPeak) = try run(settings.curl, creations, directory: directory)
            peak = max(peak, createPeak)
            var sends: [String] = []
            for (number, line) in created.split(separator: "\n").enumerated() {
                let fields = line.split(separator: " ")
                guard fields.count == 2, fields[0] == "201", number < files.count else {
                    throw BenchmarkError("curl PUT \(number): \(line)")
                }
                let location = String(fields[1])
                let upload = location.hasPrefix("http") ? location : base + location
                for (index, piece) in pieces[number].enumerated() {
                    sends.append(
                        """
                        url = "\(upload)"
                        request = "PATCH"
                        upload-file = "\(piece.url.path)"
                        header = "Content-Type: application/partial-upload"
                        header = "Upload-Offset: \(piece.offset)"
                        header = "Upload-Complete: \(index == pieces[number].count - 1 ? "?1" : "?0")"
                        header = "Expect:"
                        output = "/dev/null"
                        write-out = "%{http_code}\\n"
                        """)
                }
            }
            let (sent, sendPeak) = try run(settings.curl, sends, directory: directory)
            peak = max(peak, sendPeak)
            // 204 for each piece but the last of a file, 200 (stored) for the last.
            let expected = pieces.flatMap { list in list.indices.map { $0 == list.count - 1 ? "200" : "204" } }
            guard sent.split(separator: "\n").map(String.init) == expected else {
                throw BenchmarkError("curl PATCH answers: \(sent.prefix(300))")
            }
        }
        return AttachmentBenchmark.Figures(
            seconds: seconds, bytes: files.reduce(0) { $0 + $1.size }, serverPeak: Memory.peakBytes(pid),
            clientPeak: peak, serverStart: serverStart, serverAnonymousPeak: anonymous.stop())
    }

    /// Downloads every file into `folder` as `curl-N` (one curl).
    static func download(
        _ files: [AttachmentBenchmark.File], server: ServerProcess, item: String, prefix: String, into folder: URL,
        settings: AttachmentOptions
    ) async throws -> AttachmentBenchmark.Figures {
        let base = server.url.absoluteString
        let requests = files.indices.map { number in
            """
            url = "\(base)/tables/files/\(item)/$attachments/\(prefix)\(number)"
            output = "\(folder.appendingPathComponent("curl-\(number)").path)"
            write-out = "%{http_code}\\n"
            """
        }
        let pid = server.process.processIdentifier
        Memory.resetPeak(pid)
        let serverStart = Memory.peakBytes(pid)
        let anonymous = Memory.AnonymousSampler(pid)
        var peak = 0
        let seconds = try await Clock.measure {
            let (answers, curlPeak) = try run(settings.curl, requests, directory: folder)
            peak = curlPeak
            guard answers.split(separator: "\n").map(String.init) == Array(repeating: "200", count: files.count) else {
                throw BenchmarkError("curl GET answers: \(answers.prefix(300))")
            }
        }
        return AttachmentBenchmark.Figures(
            seconds: seconds, bytes: files.reduce(0) { $0 + $1.size }, serverPeak: Memory.peakBytes(pid),
            clientPeak: peak, serverStart: serverStart, serverAnonymousPeak: anonymous.stop())
    }

    /// Runs curl on a config file of `requests` (joined by `next`); answers what it wrote and its
    /// peak RSS (sampled from /proc until it exits).
    static func run(_ curl: String, _ requests: [String], directory: URL) throws -> (String, Int) {
        let config = directory.appendingPathComponent("curl-\(UUID().uuidString).conf")
        try (requests.joined(separator: "\nnext\n") + "\n").write(to: config, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: config) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: curl)
        process.arguments = ["--silent", "--show-error", "--config", config.path]
        let output = Pipe()
        process.standardOutput = output
        let collected = Collected()
        let reader = Thread {
            let data = output.fileHandleForReading.readDataToEndOfFile()
            collected.set(data)
        }
        try process.run()
        reader.start()
        var peak = 0
        while process.isRunning {
            peak = max(peak, Memory.peakBytes(process.processIdentifier))
            usleep(5_000)
        }
        process.waitUntilExit()
        let text = String(decoding: collected.wait(), as: UTF8.self)
        guard process.terminationStatus == 0 else {
            throw BenchmarkError("curl exited with \(process.terminationStatus): \(text.prefix(300))")
        }
        return (text, peak)
    }

    /// What the reader thread collected, handed over once it is done.
    final class Collected: @unchecked Sendable {
        private let done = DispatchSemaphore(value: 0)
        private var data = Data()
        func set(_ data: Data) {
            self.data = data
            done.signal()
        }
        func wait() -> Data {
            done.wait()
            return data
        }
    }

    /// The bytes of a hex SHA-256, in base64 (RFC 9530's `Repr-Digest`).
    static func base64(hex: String) -> String {
        var bytes: [UInt8] = []
        var index = hex.startIndex
        while let next = hex.index(index, offsetBy: 2, limitedBy: hex.endIndex), index < hex.endIndex {
            bytes.append(UInt8(hex[index..<next], radix: 16) ?? 0)
            index = next
        }
        return Data(bytes).base64EncodedString()
    }
}
