import Crypto
import FerryClient
import Foundation
import ServerTestSupport
import SyncCore
import Testing

/// `ferry push` killed with SIGKILL in the middle of a 40 MB upload, then run again: the upload
/// resumes from what the server holds (issue 30). The device reaches the server through a relay
/// that slows the upload (so the kill lands mid-file) and counts the bytes the server received.
@Suite("ferry push killed mid-upload", .timeLimit(.minutes(10)))
struct KilledUploadTests {
    static let size = 40 << 20

    /// The upload's offset on the server (`HEAD`), or `nil` before it exists.
    static func offset(_ upload: String) async throws -> Int64? {
        let answer = try await AttachmentCommandTests.request("HEAD", upload)
        return answer.status == 204 ? answer.headers["upload-offset"].flatMap { Int64($0) } : nil
    }

    @Test func theSecondPushSendsOnlyWhatTheServerLacks() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let ferry = try #require(FerryBinaryTests.ferryURL(), "the ferry executable was not built beside the tests")
        let (server, url, port) = try await AttachmentCommandTests.serve(directory)
        defer { server.terminate() }
        let relay = try ThrottlingProxy(target: port, bytesPerSecond: 6 << 20)
        defer { relay.stop() }
        let through = "http://127.0.0.1:\(relay.port)"
        let phone = "sqlite:\(directory)/phone.ferry"
        let file = "\(directory)/big.bin"
        let digest = try AttachmentCommandTests.randomFile(file, size: Self.size)
        #expect(
            try await AttachmentCommandTests.ferry(["insert", "notes", #"{"id":"k1"}"#, "--store", phone]).status == 0)
        let added = try await AttachmentCommandTests.ferry([
            "attachments", "add", "notes", "k1", file, "--store", phone,
        ])
        #expect(added.status == 0, "\(added.errors)")

        let push = Process()
        push.executableURL = ferry
        push.arguments = ["push", "--store", phone, "--server", through]
        push.standardOutput = FileHandle.nullDevice
        push.standardError = FileHandle.nullDevice
        try push.run()
        // The upload's resource: creation is idempotent (the same attachment, content and user give
        // the same upload), so asking for it tells where the push's upload stands, once the item
        // is on the server.
        let digestField =
            "sha-256=:\(Data(stride(from: 0, to: digest.count, by: 2).map { UInt8(digest.dropFirst($0).prefix(2), radix: 16)! }).base64EncodedString()):"
        var upload: String?
        while upload == nil, push.isRunning {
            let created = try await AttachmentCommandTests.request(
                "PUT", "\(url)/tables/notes/k1/$attachments/big.bin",
                headers: [
                    "Upload-Length": String(Self.size), "Repr-Digest": digestField, "Upload-Complete": "?0",
                    "Content-Type": "application/octet-stream",
                ])
            if created.status == 201, let location = created.headers["location"] {
                upload = URL(string: location, relativeTo: URL(string: url))?.absoluteString
            } else {
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        let resource = try #require(upload, "the push ended before its upload began")
        // Killed once the server holds more than 2 MiB: a push that sent from zero again would then
        // send more than the rest of the file.
        var killed = false
        while push.isRunning {
            if let offset = try await Self.offset(resource), offset > 2 << 20 {
                kill(push.processIdentifier, SIGKILL)
                killed = true
                break
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        try await offThePool { push.waitUntilExit() }
        try #require(killed && push.terminationReason == .uncaughtSignal, "the push ended before the kill")
        // What the server kept, once it stopped growing: what the killed process had already written
        // to its socket still arrives (on loopback, the whole 4 MiB piece in flight, as measured).
        var kept = try await Self.offset(resource) ?? 0
        while true {
            try await Task.sleep(for: .milliseconds(300))
            let now = try await Self.offset(resource) ?? 0
            if now == kept { break }
            kept = now
        }
        #expect(kept > 2 << 20 && kept < Int64(Self.size), "the server holds \(kept) bytes after the kill")
        let receivedBefore = relay.sent

        relay.setRate(16 << 20)
        var resumed = try await AttachmentCommandTests.ferry([
            "push", "--store", phone, "--server", through, "--progress",
        ])
        for _ in 0..<20 where resumed.errors.contains("another process is pushing") {
            try await Task.sleep(for: .milliseconds(500))
            resumed = try await AttachmentCommandTests.ferry([
                "push", "--store", phone, "--server", through, "--progress",
            ])
        }
        #expect(resumed.status == 0, "\(resumed.errors)")
        // --progress without a terminal: lines on stderr.
        #expect(resumed.errors.contains("uploading 'big.bin': "), "\(resumed.errors)")
        let receivedAfter = relay.sent - receivedBefore
        #expect(
            receivedAfter < Int64(Self.size) - kept + (512 << 10),
            "the second push sent \(receivedAfter) bytes; the server lacked \(Int64(Self.size) - kept)")
        #expect(
            relay.sent < 2 * Int64(Self.size), "the server received \(relay.sent) bytes for a \(Self.size)-byte file")

        let stored = try await AttachmentCommandTests.request("GET", "\(url)/tables/notes/k1/$attachments/big.bin")
        #expect(stored.status == 200)
        #expect(stored.body.count == Self.size)
        #expect(AttachmentCommandTests.hex(SHA256.hash(data: stored.body)) == digest)
        #expect(try await AttachmentCommandTests.list(phone, item: "k1")["big.bin"]?["state"] == .string("uploaded"))
    }
}
