import Foundation
import Logging
import ServerStorageCore
import ServerTestSupport
import SyncCore
import Testing

@testable import FerryServer

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Downloads with ranges, and an upload cut mid-`PATCH` that resumes from the server's offset
/// (issue 30), over real HTTP.
@Suite("Attachment downloads and cut uploads", .timeLimit(.minutes(2)))
struct AttachmentDownloadTests {
    typealias Uploads = AttachmentUploadTests

    /// A server whose alice's `a1` has `photo.png` holding `bytes`.
    static func stored(
        _ bytes: [UInt8], connections: ConnectionLimits = ConnectionLimits(), logger: Logger = .quietTest
    ) async throws -> LiveServer {
        let live = try await Uploads.start(connections: connections, logger: logger)
        let reply = try await live.send(
            "PUT", Uploads.path, headers: Uploads.auth("alice") + Uploads.creation(bytes, complete: true), body: bytes)
        #expect(reply.status == 200, "\(reply.text)")
        return live
    }

    @Test func downloadsAreWholeOrRanges() async throws {
        let bytes = Uploads.file(700_000)
        let live = try await Self.stored(bytes)
        let alice = Uploads.auth("alice")
        let whole = try await live.send("GET", Uploads.path, headers: alice)
        #expect(whole.status == 200 && whole.body == bytes)
        let etag = "\"\(Uploads.hex(bytes))\""
        #expect(whole.header("ETag") == etag && whole.header("Accept-Ranges") == "bytes")
        #expect(whole.header("Repr-Digest") == Uploads.digest(bytes) && whole.header("Content-Type") == "image/png")
        // The uploader's type is served as is, but a browser may neither sniff another nor run it.
        #expect(whole.header("X-Content-Type-Options") == "nosniff")
        #expect(whole.header("Content-Security-Policy") == "sandbox")

        let tail = try await live.send("GET", Uploads.path, headers: alice + [("Range", "bytes=600000-")])
        #expect(tail.status == 206 && tail.body == Array(bytes[600_000...]))
        #expect(tail.header("Content-Range") == "bytes 600000-699999/700000")
        let middle = try await live.send(
            "GET", Uploads.path, headers: alice + [("Range", "bytes=10-19"), ("If-Range", etag)])
        #expect(middle.status == 206 && middle.body == Array(bytes[10..<20]))
        let suffix = try await live.send("GET", Uploads.path, headers: alice + [("Range", "bytes=-5")])
        #expect(suffix.status == 206 && suffix.body == Array(bytes[699_995...]))
        // Another content than the client's: the whole file, not a part of the wrong one.
        let stale = try await live.send(
            "GET", Uploads.path, headers: alice + [("Range", "bytes=10-19"), ("If-Range", "\"00\"")])
        #expect(stale.status == 200 && stale.body.count == bytes.count)
        let beyond = try await live.send("GET", Uploads.path, headers: alice + [("Range", "bytes=700000-")])
        #expect(beyond.status == 416 && beyond.header("Content-Range") == "bytes */700000")
        // Malformed ranges are no range (RFC 9110 §14.2 lets a server ignore them): the file.
        for hostile in ["bytes=5-2", "bytes=x-", "items=0-1", "bytes=0-1,4-5", "bytes=+5-", "bytes=-+5", "bytes=5-+9"] {
            let reply = try await live.send("GET", Uploads.path, headers: alice + [("Range", hostile)])
            #expect(reply.status == 200 && reply.body.count == bytes.count, "\(hostile): \(reply.status)")
        }
        // Positions past any 64-bit size: a first byte beyond the content is 416, a last byte or a
        // suffix beyond it is cut to the content.
        let far = "99999999999999999999"
        let farStart = try await live.send("GET", Uploads.path, headers: alice + [("Range", "bytes=\(far)-")])
        #expect(farStart.status == 416, "\(farStart.status)")
        let farEnd = try await live.send("GET", Uploads.path, headers: alice + [("Range", "bytes=699990-\(far)")])
        #expect(farEnd.status == 206 && farEnd.body == Array(bytes[699_990...]), "\(farEnd.status)")
        let farSuffix = try await live.send("GET", Uploads.path, headers: alice + [("Range", "bytes=-\(far)")])
        #expect(farSuffix.status == 206 && farSuffix.body == bytes, "\(farSuffix.status)")

        // A copy the client holds (RFC 9110 §13.1.2, weak comparison): 304 with the tag, no body;
        // another content's tag, the file.
        for held in [etag, "W/\(etag)", "\"00\", \(etag)", "*"] {
            for method in ["GET", "HEAD"] {
                let reply = try await live.send(method, Uploads.path, headers: alice + [("If-None-Match", held)])
                #expect(reply.status == 304 && reply.body.isEmpty, "\(method) \(held): \(reply.status)")
                #expect(reply.header("ETag") == etag)
            }
        }
        let changed = try await live.send("GET", Uploads.path, headers: alice + [("If-None-Match", "\"00\"")])
        #expect(changed.status == 200 && changed.body == bytes)

        // The item's rules: another user, an anonymous caller, a missing attachment.
        #expect(try await live.send("GET", Uploads.path, headers: Uploads.auth("bob")).status == 404)
        #expect(try await live.send("GET", Uploads.path).status == 401)
        let missing = try await live.send("GET", "/tables/notes/a1/$attachments/none.png", headers: alice)
        #expect(missing.status == 404)
        try await live.stop()
    }

    /// A name is one attachment whatever its Unicode form (NFC, as the SDK keeps it): uploaded as
    /// "café" from an HFS+ file name (`e` and a combining accent), it is found, listed and removed
    /// as "café" typed (one `é`). They named two attachments.
    @Test func aNameIsOneAttachmentWhateverItsUnicodeForm() async throws {
        let bytes = Uploads.file(1_000)
        let live = try await Uploads.start()
        let alice = Uploads.auth("alice")
        let decomposed = "/tables/notes/a1/$attachments/cafe%CC%81.bin"
        let composed = "/tables/notes/a1/$attachments/caf%C3%A9.bin"
        let stored = try await live.send(
            "PUT", decomposed, headers: alice + Uploads.creation(bytes, complete: true), body: bytes)
        #expect(stored.status == 200, "\(stored.text)")
        #expect(stored.json?["name"]?.stringValue.map { Array($0.utf8) } == Array("caf\u{E9}.bin".utf8))
        let download = try await live.send("GET", composed, headers: alice)
        #expect(download.status == 200 && download.body == bytes, "\(download.status)")
        #expect(try await live.send("DELETE", composed, headers: alice).status == 204)
        #expect(try await live.send("GET", decomposed, headers: alice).status == 404)
        try await live.stop()
    }

    /// A download whose reader stops taking bytes is closed after the write timeout, as a page's
    /// is: it held a connection (and its place among `maximumConnections`) for as long as the
    /// reader liked.
    @Test func aDownloadWhoseReaderStopsIsClosedAfterTheWriteTimeout() async throws {
        let log = CapturedLog()
        var logger = Logger(label: "test.server") { _ in CapturingLogHandler(captured: log) }
        logger.logLevel = .debug
        // More than loopback's socket buffers hold on both sides, so that the server's writes stop.
        let bytes = Uploads.file(24 << 20)
        let live = try await Self.stored(
            bytes, connections: ConnectionLimits(idleTimeout: .seconds(30), writeTimeout: .milliseconds(500)),
            logger: logger)
        let port = live.server.port
        let headers = Uploads.auth("alice")
        try await offThePool {
            let connection = try LoopbackHTTP.KeptAlive(port: port)
            try connection.send("GET", Uploads.path, headers: headers)
            try connection.expectClosedForReadingNothing(log: log)
        }
        try await live.stop()
    }

    @Test func twoServersOnOnePostgreSQLDatabaseShareUploads() async throws {
        let first = try await Uploads.start(backend: .postgreSQL)
        let second = try await Uploads.start(backend: .postgreSQL, sharing: first)
        let bytes = Uploads.file(400_000)
        let created = try await first.send(
            "PUT", Uploads.path, headers: Uploads.auth("alice") + Uploads.creation(bytes, complete: false))
        let location = try #require(created.header("Location"))
        let patch = [("Content-Type", "application/partial-upload"), ("Upload-Complete", "?0")]
        let half = try await first.send(
            "PATCH", location, headers: Uploads.auth("alice") + patch + [("Upload-Offset", "0")],
            body: Array(bytes[0..<200_000]))
        #expect(half.status == 204, "\(half.text)")
        // The other instance knows the ticket and the offset, and finishes the upload.
        let head = try await second.send("HEAD", location, headers: Uploads.auth("alice"))
        #expect(head.header("Upload-Offset") == "200000")
        let rest = try await second.send(
            "PATCH", location, headers: Uploads.auth("alice") + patch + [("Upload-Offset", "200000")],
            body: Array(bytes[200_000...]))
        #expect(rest.status == 200, "\(rest.text)")
        let download = try await first.send("GET", Uploads.path, headers: Uploads.auth("alice"))
        #expect(download.status == 200 && download.body == bytes)
        try await second.stop()
        try await first.stop()
    }

    @Test func aCutUploadResumesFromTheOffsetTheServerReports() async throws {
        let live = try await Uploads.start()
        let bytes = Uploads.file(600_000)
        let created = try await live.send(
            "PUT", Uploads.path, headers: Uploads.auth("alice") + Uploads.creation(bytes, complete: false))
        let location = try #require(created.header("Location"))
        // Half the body, then the connection is closed.
        let port = live.server.port
        let sent = 300_000
        try await offThePool {
            let fd = try LoopbackHTTP.connect(port: port)
            defer { close(fd) }
            var head = "PATCH \(location) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n"
            for (name, value) in Uploads.auth("alice") + [
                ("Content-Type", "application/partial-upload"), ("Upload-Offset", "0"), ("Upload-Complete", "?1"),
                ("Content-Length", String(bytes.count)),
            ] {
                head += "\(name): \(value)\r\n"
            }
            try LoopbackHTTP.writeAll(fd, Array((head + "\r\n").utf8) + Array(bytes[0..<sent]))
        }
        // The server notices the cut when it reads on; it keeps what arrived.
        var offset = -1
        for _ in 0..<200 {
            let head = try await live.send("HEAD", location, headers: Uploads.auth("alice"))
            offset = Int(head.header("Upload-Offset") ?? "") ?? -1
            if offset == sent { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(offset == sent, "the server kept \(offset) of the \(sent) bytes sent")
        let rest = try await live.send(
            "PATCH", location,
            headers: Uploads.auth("alice") + [
                ("Content-Type", "application/partial-upload"), ("Upload-Offset", String(offset)),
                ("Upload-Complete", "?1"),
            ], body: Array(bytes[offset...]))
        #expect(rest.status == 200, "\(rest.text)")
        let download = try await live.send("GET", Uploads.path, headers: Uploads.auth("alice"))
        #expect(download.body == bytes)
        try await live.stop()
    }
}
