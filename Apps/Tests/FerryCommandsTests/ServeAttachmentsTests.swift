import Crypto
import FerryServer
import Foundation
import ServerTestSupport
import Testing

@testable import FerryCommands

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// `ferry serve --attachments-directory`: attachment content as files (issue 30).
@Suite("ferry serve: attachments as files", .timeLimit(.minutes(5)))
struct ServeAttachmentsTests {
    @Test func contentIsAFileNamedByItsHashInTheDirectory() async throws {
        let executable = try #require(ServeCommandTests.executable, "the ferry executable is not built")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-blobs-\(UUID())").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = [
            "serve", "--port", "0", "--db", "memory", "--log-level", "warning", "--attachments-directory", directory,
        ]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer {
            if process.isRunning { process.terminate() }
        }
        let line = try await ServeCommandTests.firstLine(of: output.fileHandleForReading, from: process)
        let base = try #require(
            line.split(separator: " ").first { $0.hasPrefix("http://") }.map(String.init), "\(line)")
        #expect(
            line.contains("attachments in files:\(directory),"), "the start-up line says where content goes: \(line)")

        func send(_ method: String, _ path: String, headers: [String: String] = [:], body: Data? = nil) async throws
            -> (Int, Data)
        {
            var request = URLRequest(url: URL(string: base + path)!)
            request.httpMethod = method
            for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
            request.httpBody = body
            let (data, response) = try await URLSession.shared.data(for: request)
            return ((response as? HTTPURLResponse)?.statusCode ?? 0, data)
        }
        let capabilities = try await send("GET", "/tables/$capabilities")
        #expect(String(decoding: capabilities.1, as: UTF8.self).contains("\"attachments\""), "implied by the directory")
        let created = try await send(
            "POST", "/tables/todo", headers: ["Content-Type": "application/json"], body: Data(#"{"id":"a"}"#.utf8))
        #expect(created.0 == 201)
        let bytes = Data((0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        let digest = SHA256.hash(data: bytes)
        let hex = digest.map { String(format: "%02x", $0) }.joined()
        let stored = try await send(
            "PUT", "/tables/todo/a/$attachments/data.bin",
            headers: [
                "Upload-Length": String(bytes.count), "Upload-Complete": "?1",
                "Content-Type": "application/octet-stream",
                "Repr-Digest": "sha-256=:\(Data(digest).base64EncodedString()):",
            ], body: bytes)
        #expect(stored.0 == 200, "\(String(decoding: stored.1, as: UTF8.self))")
        let file = "\(directory)/blobs/\(hex.prefix(2))/\(hex.dropFirst(2))"
        #expect(FileManager.default.contents(atPath: file) == bytes, "the content is the file \(file)")
        let downloaded = try await send("GET", "/tables/todo/a/$attachments/data.bin")
        #expect(downloaded.0 == 200 && downloaded.1 == bytes)
        kill(process.processIdentifier, SIGTERM)
        try await offThePool { process.waitUntilExit() }
        #expect(process.terminationStatus == 0)
    }

    /// A directory that cannot be made (here: under a file) is one line with the system's reason,
    /// exit status 1 like a database that cannot be opened (Foundation's "error 512" before).
    @Test func aDirectoryItCannotMakeIsOneLineWithTheReasonAndExitStatus1() async throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-not-a-directory-\(UUID())").path
        try Data("x".utf8).write(to: URL(fileURLWithPath: file))
        defer { try? FileManager.default.removeItem(atPath: file) }
        let (status, text) = try await ServeCommandTests.serveUntilExit([
            "--port", "0", "--db", "memory", "--attachments-directory", file + "/blobs/more",
        ])
        #expect(status == 1, "\(text)")
        #expect(
            text == "error: --attachments-directory: creating the directory \(file)/blobs failed: Not a directory\n",
            "\(text)")
    }

    @Test func aDirectoryWithAttachmentsOffIsOneLineNamingBoth() async throws {
        let error = await #expect(throws: ConfigurationError.self) {
            try await ServeSettingsTests.configuration(["--attachments-directory", "/tmp/x", "--no-attachments"])
        }
        #expect(error?.message == "--attachments-directory is set but --attachments is off", "\(error?.message ?? "")")
    }
}
