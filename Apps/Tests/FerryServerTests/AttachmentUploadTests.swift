import Crypto
import Foundation
import Logging
import ServerStorageCore
import ServerTestSupport
import SyncCore
import Synchronization
import Testing

@testable import FerryServer

/// The upload routes (issue 30): creation, continuation with `PATCH`, `HEAD` and `DELETE` of an
/// upload, digests, limits and the table's rules, over real HTTP.
@Suite("Attachment uploads", .timeLimit(.minutes(2)))
struct AttachmentUploadTests {
    static let notes = AttachmentRouteTests.notes

    /// A server with `notes` (per user) and alice's item `a1`, bob's `b1`.
    static func start(
        limits: AttachmentLimits = AttachmentLimits(), backend: ServerBackend = .sqlite, sharing: LiveServer? = nil,
        connections: ConnectionLimits = ConnectionLimits(), logger: Logger = .quietTest
    ) async throws -> LiveServer {
        let live = try await LiveServer.start(
            tables: [notes], backend: backend, sharing: sharing, logger: logger, attachments: limits,
            connections: connections)
        if sharing != nil { return live }
        try await insertNotes([("alice", "a1"), ("bob", "b1")], into: live)
        return live
    }

    /// Inserts a note of each id, as its user.
    static func insertNotes(_ notes: [(user: String, id: String)], into live: LiveServer) async throws {
        for (user, id) in notes {
            let reply = try await live.send(
                "POST", "/tables/notes", headers: auth(user), json: ["id": .string(id), "text": "x"])
            #expect(reply.status == 201, "\(reply.text)")
        }
    }

    /// The blob storage of the server's SQLite database.
    static func blobs(_ live: LiveServer) throws -> any BlobStorage {
        try #require(live.server.storage.blobStorage())
    }

    static func auth(_ user: String) -> [(String, String)] { AttachmentRouteTests.auth(user) }

    static func file(_ count: Int, seed: UInt8 = 7) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed)) }
    }

    static func digest(_ bytes: [UInt8]) -> String {
        "sha-256=:" + Data(SHA256.hash(data: bytes)).base64EncodedString() + ":"
    }

    static func hex(_ bytes: [UInt8]) -> String {
        SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
    }

    static func creation(_ bytes: [UInt8], complete: Bool, digest: String? = nil) -> [(String, String)] {
        [
            ("Upload-Length", String(bytes.count)), ("Repr-Digest", digest ?? Self.digest(bytes)),
            ("Content-Type", "image/png"), ("Upload-Complete", complete ? "?1" : "?0"),
        ]
    }

    static let path = "/tables/notes/a1/$attachments/photo.png"

    @Test(arguments: ServerBackend.allCases)
    func oneRequestStoresTheFile(_ backend: ServerBackend) async throws {
        let live = try await Self.start(backend: backend)
        let bytes = Self.file(100_000)
        let reply = try await live.send(
            "PUT", Self.path, headers: Self.auth("alice") + Self.creation(bytes, complete: true), body: bytes)
        #expect(reply.status == 200, "\(reply.text)")
        #expect(reply.json?["sha256"]?.stringValue == Self.hex(bytes) && reply.json?["size"] == 100_000)
        let list = try await live.send("GET", "/tables/notes/a1/$attachments", headers: Self.auth("alice"))
        #expect(AttachmentRouteTests.names(list) == ["photo.png"])
        let blobs = try Self.blobs(live)
        #expect(try await blobs.blob(sha256: Self.hex(bytes))?.size == 100_000)

        // The same content again within alice's scope: no bytes need to come.
        let again = try await live.send(
            "PUT", "/tables/notes/a1/$attachments/copy.png",
            headers: Self.auth("alice") + Self.creation(bytes, complete: false))
        #expect(again.status == 200, "\(again.text)")
        // Bob may not skip the upload of content only alice holds.
        let bob = try await live.send(
            "PUT", "/tables/notes/b1/$attachments/photo.png",
            headers: Self.auth("bob") + Self.creation(bytes, complete: false))
        #expect(bob.status == 201, "\(bob.text)")
        try await live.stop()
    }

    @Test(arguments: ServerBackend.allCases)
    func patchesContinueFromTheServersOffset(_ backend: ServerBackend) async throws {
        let live = try await Self.start(backend: backend)
        let bytes = Self.file(300_000)
        let created = try await live.send(
            "PUT", Self.path, headers: Self.auth("alice") + Self.creation(bytes, complete: false))
        #expect(created.status == 201, "\(created.text)")
        #expect(created.header("Upload-Offset") == "0")
        #expect(created.header("Upload-Limit") == "max-size=\(AttachmentLimits().maximumFileSize)")
        let location = try #require(created.header("Location"))
        #expect(location.hasPrefix("/tables/$uploads/"))

        func patch(_ range: Range<Int>, offset: Int? = nil, user: String = "alice") async throws -> LiveServer.Reply {
            try await live.send(
                "PATCH", location,
                headers: Self.auth(user) + [
                    ("Content-Type", "application/partial-upload"),
                    ("Upload-Offset", String(offset ?? range.lowerBound)),
                    ("Upload-Complete", range.upperBound == bytes.count ? "?1" : "?0"),
                ], body: Array(bytes[range]))
        }
        let first = try await patch(0..<100_000)
        #expect(first.status == 204 && first.header("Upload-Offset") == "100000", "\(first.text)")
        let head = try await live.send("HEAD", location, headers: Self.auth("alice"))
        #expect(head.status == 204 && head.header("Upload-Offset") == "100000")
        #expect(head.header("Upload-Length") == "300000" && head.header("Upload-Complete") == "?0")
        // One Cache-Control, the upload's own (the general no-cache came too).
        #expect(head.header("Cache-Control") == "no-store", "\(head.headers)")

        // A wrong offset is refused with the server's.
        let wrong = try await patch(50_000..<150_000)
        #expect(wrong.status == 409 && wrong.header("Upload-Offset") == "100000", "\(wrong.text)")
        // Another user learns nothing of the upload.
        #expect(try await patch(100_000..<150_000, user: "bob").status == 404)
        #expect(try await live.send("HEAD", location, headers: Self.auth("bob")).status == 404)
        #expect(try await live.send("DELETE", location, headers: Self.auth("bob")).status == 404)
        #expect(try await live.send("HEAD", location).status == 401)

        // The client lost the Location: the same PUT gives it back with the offset.
        let lost = try await live.send(
            "PUT", Self.path, headers: Self.auth("alice") + Self.creation(bytes, complete: false))
        #expect(lost.status == 201 && lost.header("Upload-Offset") == "100000" && lost.header("Location") == location)

        let last = try await patch(100_000..<300_000)
        #expect(last.status == 200, "\(last.text)")
        #expect(last.json?["sha256"]?.stringValue == Self.hex(bytes))
        try await live.stop()
    }

    /// A completed upload sent again (what a client that lost the answer does) gets the attachment
    /// as recorded, unchanged; once the attachment was replaced or deleted, a replay is 409 and
    /// changes nothing. It recorded the old content again: a deleted file came back.
    @Test(arguments: ServerBackend.allCases)
    func aCompletedUploadSentAgainChangesNothing(_ backend: ServerBackend) async throws {
        let live = try await Self.start(backend: backend)
        let first = Self.file(2_000, seed: 1)
        let created = try await live.send(
            "PUT", Self.path, headers: Self.auth("alice") + Self.creation(first, complete: false))
        let location = try #require(created.header("Location"), "\(created.text)")
        func replay(offset: Int, body: [UInt8] = []) async throws -> LiveServer.Reply {
            try await live.send(
                "PATCH", location,
                headers: Self.auth("alice") + [
                    ("Content-Type", "application/partial-upload"), ("Upload-Offset", String(offset)),
                    ("Upload-Complete", "?1"),
                ], body: body)
        }
        let done = try await replay(offset: 0, body: first)
        #expect(done.status == 200, "\(done.text)")
        let again = try await replay(offset: first.count)
        #expect(again.status == 200, "\(again.text)")
        #expect(again.json?["sha256"]?.stringValue == Self.hex(first))
        #expect(again.json?["version"] == done.json?["version"], "the replay changed nothing")

        // Replaced by other content: the replay does not bring the first back.
        let second = Self.file(1_000, seed: 2)
        let replaced = try await live.send(
            "PUT", Self.path, headers: Self.auth("alice") + Self.creation(second, complete: true), body: second)
        #expect(replaced.status == 200, "\(replaced.text)")
        for offset in [0, first.count, 999] {
            let stale = try await replay(offset: offset, body: Array("junk".utf8))
            #expect(stale.status == 409, "\(stale.text)")
            #expect(stale.json?["code"] == "uploadSuperseded", "\(stale.text)")
        }
        let current = try await live.send("GET", Self.path, headers: Self.auth("alice"))
        #expect(current.body == second)

        // Deleted: it stays deleted.
        #expect(try await live.send("DELETE", Self.path, headers: Self.auth("alice")).status == 204)
        let afterDelete = try await replay(offset: first.count)
        #expect(afterDelete.status == 409 && afterDelete.text.contains("deleted"), "\(afterDelete.text)")
        #expect(try await live.send("GET", Self.path, headers: Self.auth("alice")).status == 404)
        try await live.stop()
    }

    @Test func capabilitiesListAttachmentsWhenOffered() async throws {
        let live = try await Self.start(
            limits: AttachmentLimits(maximumFileSize: 1_000, maximumItemSize: 1_500, maximumUserSize: 2_000))
        let reply = try await live.send("GET", "/tables/$capabilities")
        let attachments = reply.json?["attachments"]?.objectValue
        #expect(attachments?["maxFileSize"] == 1_000 && attachments?["maxItemSize"] == 1_500)
        #expect(attachments?["maxUserSize"] == 2_000)
        try await live.stop()
        let plain = try await LiveServer.start(tables: [Self.notes])
        let without = try await plain.send("GET", "/tables/$capabilities")
        #expect(without.status == 200 && without.json?["attachments"] == nil && without.json?["batch"] != nil)
        try await plain.stop()
    }

    @Test func theSweeperRemovesExpiredUploads() async throws {
        let live = try await Self.start()
        let bytes = Self.file(1_000)
        let created = try await live.send(
            "PUT", Self.path, headers: Self.auth("alice") + Self.creation(bytes, complete: false))
        let location = try #require(created.header("Location"))
        let sweeper = AttachmentSweeper(blobs: try Self.blobs(live), limits: AttachmentLimits(), logger: .quietTest)
        await sweeper.sweep()
        #expect(try await live.send("HEAD", location, headers: Self.auth("alice")).status == 204)
        await sweeper.sweep(now: Date().addingTimeInterval(25 * 3600))
        #expect(try await live.send("HEAD", location, headers: Self.auth("alice")).status == 404)
        try await live.stop()
    }

    /// A `PATCH` or `PUT` whose body ends whole yet short of the length it claims to complete is a
    /// 400 that keeps the bytes and says where to continue; `HEAD` of a download tells the size, no body.
    @Test func aShortCompletionIs400AndTheBytesStay() async throws {
        let live = try await Self.start()
        let bytes = Self.file(50_000)
        let created = try await live.send(
            "PUT", Self.path, headers: Self.auth("alice") + Self.creation(bytes, complete: false))
        let location = try #require(created.header("Location"))
        func patch(_ range: Range<Int>, complete: Bool) async throws -> LiveServer.Reply {
            try await live.send(
                "PATCH", location,
                headers: Self.auth("alice") + [
                    ("Content-Type", "application/partial-upload"), ("Upload-Offset", String(range.lowerBound)),
                    ("Upload-Complete", complete ? "?1" : "?0"),
                ], body: Array(bytes[range]))
        }
        let short = try await patch(0..<20_000, complete: true)
        #expect(short.status == 400 && short.json?["code"] == "inconsistentLength", "\(short.text)")
        #expect(short.header("Upload-Offset") == "20000" && short.header("Location") == location)
        let rest = try await patch(20_000..<50_000, complete: true)
        #expect(rest.status == 200, "\(rest.text)")
        let head = try await live.send("HEAD", Self.path, headers: Self.auth("alice"))
        #expect(head.status == 200 && head.body.isEmpty, "\(head.text)")
        #expect(head.header("Content-Length") == "50000")
        let download = try await live.send("GET", Self.path, headers: Self.auth("alice"))
        #expect(Array(download.body) == bytes)

        // So is a PUT that claims to complete with a body short of its length (it was 201).
        let other = Self.file(30_000, seed: 9)
        let shortPut = try await live.send(
            "PUT", "/tables/notes/a1/$attachments/other.bin",
            headers: Self.auth("alice") + Self.creation(other, complete: true), body: Array(other[..<10_000]))
        #expect(shortPut.status == 400 && shortPut.json?["code"] == "inconsistentLength", "\(shortPut.text)")
        let otherLocation = try #require(shortPut.header("Location"), "\(shortPut.headers)")
        #expect(shortPut.header("Upload-Offset") == "10000")
        let otherRest = try await live.send(
            "PATCH", otherLocation,
            headers: Self.auth("alice") + [
                ("Content-Type", "application/partial-upload"), ("Upload-Offset", "10000"), ("Upload-Complete", "?1"),
            ], body: Array(other[10_000...]))
        #expect(otherRest.status == 200, "\(otherRest.text)")
        try await live.stop()
    }

    /// Content no attachment names is deleted once the last one naming it was removed longer ago
    /// than the retention; attached content stays, and the same file can be attached again after.
    @Test(arguments: ServerBackend.allCases)
    func contentNothingNamesIsCollectedAfterTheRetention(_ backend: ServerBackend) async throws {
        let live = try await Self.start(backend: backend)
        let removed = Self.file(3_000, seed: 1)
        let kept = Self.file(2_000, seed: 2)
        let keptPath = "/tables/notes/a1/$attachments/kept.png"
        for (path, bytes) in [(Self.path, removed), (keptPath, kept)] {
            let reply = try await live.send(
                "PUT", path, headers: Self.auth("alice") + Self.creation(bytes, complete: true), body: bytes)
            #expect(reply.status == 200, "\(reply.text)")
        }
        #expect(try await live.send("DELETE", Self.path, headers: Self.auth("alice")).status == 204)
        let blobs = try Self.blobs(live)
        let sweeper = AttachmentSweeper(
            blobs: blobs, limits: AttachmentLimits(), logger: .quietTest,
            index: AttachmentIndex(storage: live.server.storage))
        await sweeper.sweep()
        #expect(try await blobs.blob(sha256: Self.hex(removed)) != nil, "removed a moment ago: kept for the retention")
        await sweeper.sweep(now: Date().addingTimeInterval(8 * 24 * 3600))
        #expect(try await blobs.blob(sha256: Self.hex(removed)) == nil, "removed longer ago than the retention")
        #expect(try await blobs.blob(sha256: Self.hex(kept)) != nil, "still attached")
        let again = try await live.send(
            "PUT", Self.path, headers: Self.auth("alice") + Self.creation(removed, complete: true), body: removed)
        #expect(again.status == 200, "\(again.text)")
        let download = try await live.send("GET", Self.path, headers: Self.auth("alice"))
        #expect(download.status == 200 && Array(download.body) == removed)
        try await live.stop()
    }

    /// The sweep checks and deletes content in the lock that the completions of every instance
    /// take to record an attachment: an attachment recorded to name the content while the sweep
    /// waited is seen, and the content stays (before, a sweep that had read "nothing names it"
    /// deleted content that a completion in another instance had just recorded).
    @Test(arguments: ServerBackend.allCases)
    func theSweepWaitsForAnAttachmentBeingRecorded(_ backend: ServerBackend) async throws {
        let live = try await Self.start(backend: backend)
        let bytes = Self.file(3_000, seed: 4)
        let stored = try await live.send(
            "PUT", Self.path, headers: Self.auth("alice") + Self.creation(bytes, complete: true), body: bytes)
        #expect(stored.status == 200, "\(stored.text)")
        #expect(try await live.send("DELETE", Self.path, headers: Self.auth("alice")).status == 204)
        let storage = live.server.storage
        let index = AttachmentIndex(storage: storage)
        let (held, holding) = AsyncStream.makeStream(of: Void.self)
        // A completion recording an attachment that names the content, in the lock, taking its time.
        let completion = Task {
            try await storage.exclusiveTransaction(.attachmentRoom) {
                _ = try await index.put(
                    StoredAttachment(
                        table: "notes", item: "a1", name: "again.png", sha256: Self.hex(bytes), size: 3_000,
                        contentType: "image/png"),
                    owner: "alice")
                holding.yield()
                try await Task.sleep(for: .milliseconds(300))
            }
        }
        for await _ in held { break }
        let sweeper = AttachmentSweeper(
            blobs: try Self.blobs(live), limits: AttachmentLimits(), logger: .quietTest, index: index)
        await sweeper.sweep(now: Date().addingTimeInterval(8 * 24 * 3600))
        try await completion.value
        #expect(try await Self.blobs(live).blob(sha256: Self.hex(bytes)) != nil, "named again: kept")
        let download = try await live.send(
            "GET", "/tables/notes/a1/$attachments/again.png", headers: Self.auth("alice"))
        #expect(download.status == 200 && Array(download.body) == bytes, "\(download.status)")
        try await live.stop()
    }

    @Test func aWrongDigestNeverBecomesAnAttachment() async throws {
        let live = try await Self.start()
        let bytes = Self.file(5_000)
        let other = Self.digest(Self.file(5_000, seed: 9))
        let reply = try await live.send(
            "PUT", Self.path, headers: Self.auth("alice") + Self.creation(bytes, complete: true, digest: other),
            body: bytes)
        #expect(reply.status == 400 && reply.json?["code"] == "digestMismatch", "\(reply.text)")
        let list = try await live.send("GET", "/tables/notes/a1/$attachments", headers: Self.auth("alice"))
        #expect(AttachmentRouteTests.names(list).isEmpty)
        #expect(try await Self.blobs(live).blob(sha256: Self.hex(bytes)) == nil)
        try await live.stop()
    }

    @Test func uploadsCancelAndFollowTheItemsRules() async throws {
        let live = try await Self.start()
        let bytes = Self.file(1_000)
        let headers = Self.creation(bytes, complete: false)
        #expect(try await live.send("PUT", Self.path, headers: headers).status == 401)
        #expect(try await live.send("PUT", Self.path, headers: Self.auth("bob") + headers).status == 404)
        let missing = "/tables/notes/zz/$attachments/photo.png"
        #expect(try await live.send("PUT", missing, headers: Self.auth("alice") + headers).status == 404)
        let created = try await live.send("PUT", Self.path, headers: Self.auth("alice") + headers)
        let location = try #require(created.header("Location"))
        #expect(try await live.send("DELETE", location, headers: Self.auth("alice")).status == 204)
        #expect(try await live.send("HEAD", location, headers: Self.auth("alice")).status == 404)
        // An upload whose item is deleted meanwhile (on another device) can still be cancelled by
        // its user, and only by its user: it was 410, and held the user's quota until it expired.
        let orphan = try #require(
            try await live.send("PUT", Self.path, headers: Self.auth("alice") + headers).header("Location"))
        #expect(try await Self.blobs(live).unfinishedUploads(idPrefix: "u").count == 1)
        // A soft-deleted item takes no uploads.
        _ = try await live.send("DELETE", "/tables/notes/a1", headers: Self.auth("alice"))
        let deleted = try await live.send("PUT", Self.path, headers: Self.auth("alice") + headers)
        #expect(deleted.status == 404 || deleted.status == 410, "\(deleted.status)")
        #expect(try await live.send("DELETE", orphan, headers: Self.auth("bob")).status == 404)
        #expect(try await live.send("DELETE", orphan).status == 401)
        let cancelled = try await live.send("DELETE", orphan, headers: Self.auth("alice"))
        #expect(cancelled.status == 204, "\(cancelled.status) \(cancelled.text)")
        #expect(try await Self.blobs(live).unfinishedUploads(idPrefix: "u").count == 0)
        try await live.stop()
    }

    /// A PATCH whose client goes away mid-body (a mobile network dropping) is the client's doing:
    /// a 400 `bodyCut` at info, not a 500 at error level, and the bytes that came are kept.
    @Test func aBodyCutByTheClientIsNotAServerError() async throws {
        let captured = CapturedLog()
        var logger = Logger(label: "test.server") { _ in CapturingLogHandler(captured: captured) }
        logger.logLevel = .info
        let live = try await LiveServer.start(tables: [Self.notes], logger: logger, attachments: AttachmentLimits())
        let item = try await live.send("POST", "/tables/notes", headers: Self.auth("alice"), json: ["id": "a1"])
        #expect(item.status == 201)
        let bytes = Self.file(200_000)
        let created = try await live.send(
            "PUT", Self.path, headers: Self.auth("alice") + Self.creation(bytes, complete: false))
        let location = try #require(created.header("Location"))
        let head =
            "PATCH \(location) HTTP/1.1\r\nHost: a\r\n"
            + Self.auth("alice").map { "\($0.0): \($0.1)\r\n" }.joined()
            + "Content-Type: application/partial-upload\r\nUpload-Offset: 0\r\nUpload-Complete: ?1\r\n"
            + "Content-Length: \(bytes.count)\r\n\r\n"
        try await offThePool {
            let fd = try LoopbackHTTP.connect(port: live.server.port)
            try LoopbackHTTP.writeAll(fd, Array(head.utf8) + Array(bytes[..<100_000]))
            Thread.sleep(forTimeInterval: 0.3)
            close(fd)
        }
        try await eventually("the cut request is answered and logged") {
            captured.entries.withLock { $0 }.contains { $0.message.hasPrefix("PATCH /tables/$uploads/") }
        }
        let lines = captured.entries.withLock { $0 }.filter { $0.message.hasPrefix("PATCH /tables/$uploads/") }
        #expect(lines.allSatisfy { $0.level < .warning }, "\(lines.map { "\($0.level) \($0.message)" })")
        #expect(lines.first?.message.contains(" 400") == true, "\(lines.map(\.message))")
        #expect(!captured.entries.withLock { $0 }.contains { $0.level >= .error }, "nothing at error level")
        let state = try await live.send("HEAD", location, headers: Self.auth("alice"))
        #expect(Int(state.header("Upload-Offset") ?? "") ?? 0 > 0, "\(state.headers)")
        try await live.stop()
    }

    /// A table is named whatever its case: the attachments of an item are one list, however a
    /// client spells the table.
    @Test func attachmentsAreOneListWhateverTheCaseOfTheTable() async throws {
        let live = try await Self.start()
        let bytes = Self.file(1_000)
        let stored = try await live.send(
            "PUT", "/tables/NOTES/a1/$attachments/photo.png",
            headers: Self.auth("alice") + Self.creation(bytes, complete: true), body: bytes)
        #expect(stored.status == 200, "\(stored.text)")
        let list = try await live.send("GET", "/tables/notes/a1/$attachments", headers: Self.auth("alice"))
        #expect(AttachmentRouteTests.names(list) == ["photo.png"])
        let download = try await live.send(
            "GET", "/tables/Notes/a1/$attachments/photo.png", headers: Self.auth("alice"))
        #expect(download.status == 200 && download.body == bytes)
        try await live.stop()
    }

    /// A 3 KB `Content-Type` made a ticket the server then refused to read: its upload answered 404
    /// to `HEAD`, `PATCH` and `DELETE`, and its length held the user's quota for a day. A type of
    /// more than 255 bytes is refused now, and the longest ticket the server writes (255 bytes of
    /// type, a 255-byte name of letters JSON escapes) is read back. A chunked body of an upload
    /// left open (`Upload-Complete: ?0`) was thrown away.
    @Test func everyUploadTheServerCreatesCanBeContinued() async throws {
        let live = try await Self.start()
        let bytes = Self.file(5_000)
        let long = Self.creation(bytes, complete: false).filter { $0.0 != "Content-Type" }
        let refused = try await live.send(
            "PUT", Self.path,
            headers: Self.auth("alice") + long + [
                ("Content-Type", "text/plain; p=" + String(repeating: "x", count: 300))
            ])
        #expect(refused.status == 400 && refused.json?["code"] == "invalidContentType", "\(refused.text)")
        let type = "text/plain; p=" + String(repeating: "x", count: 241)
        let name = String(repeating: "é", count: 127)
        let encoded = try #require(name.addingPercentEncoding(withAllowedCharacters: .alphanumerics))
        let created = try await live.send(
            "PUT", "/tables/notes/a1/$attachments/\(encoded)",
            headers: Self.auth("alice") + long + [("Content-Type", type)])
        #expect(created.status == 201, "\(created.text)")
        let location = try #require(created.header("Location"))
        #expect(try await live.send("HEAD", location, headers: Self.auth("alice")).status == 204)
        #expect(try await live.send("DELETE", location, headers: Self.auth("alice")).status == 204)

        // Chunked, left open: the bytes are kept.
        var request =
            "PUT /tables/notes/a1/$attachments/chunked.bin HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            + "Transfer-Encoding: chunked\r\n"
        for (field, value) in Self.auth("alice") + Self.creation(bytes, complete: false) {
            request += "\(field): \(value)\r\n"
        }
        let chunk = Array(bytes[0..<3_000])
        var raw = Array((request + "\r\n" + String(chunk.count, radix: 16) + "\r\n").utf8) + chunk
        raw += Array("\r\n0\r\n\r\n".utf8)
        let sent = raw
        let answer = try await offThePool {
            let fd = try LoopbackHTTP.connect(port: live.server.port)
            defer { close(fd) }
            try LoopbackHTTP.writeAll(fd, sent)
            return String(decoding: LoopbackHTTP.readUntilClosed(fd, seconds: 30).bytes, as: UTF8.self)
        }
        #expect(answer.hasPrefix("HTTP/1.1 201"), "\(answer)")
        #expect(answer.lowercased().contains("upload-offset: 3000\r\n"), "\(answer)")
        try await live.stop()
    }

    @Test func hostileHeadersAreClientErrors() async throws {
        let live = try await Self.start()
        let bytes = Self.file(10)
        let good = Self.creation(bytes, complete: false)
        let cases: [[(String, String)]] = [
            [("Upload-Length", "-1"), ("Repr-Digest", Self.digest(bytes))],
            [("Upload-Length", "99999999999999999999999"), ("Repr-Digest", Self.digest(bytes))],
            [("Upload-Length", "abc"), ("Repr-Digest", Self.digest(bytes))],
            // No structured integer (RFC 8941): a sign, 16 digits.
            [("Upload-Length", "+10"), ("Repr-Digest", Self.digest(bytes))],
            [("Upload-Length", "0000000000000010"), ("Repr-Digest", Self.digest(bytes))],
            [("Upload-Length", "10")],
            [("Upload-Length", "10"), ("Repr-Digest", "sha-256=:AAAA:")],
            [("Upload-Length", "10"), ("Repr-Digest", "md5=:AAAA:")],
            good.filter { $0.0 != "Upload-Complete" } + [("Upload-Complete", "yes")],
        ]
        for headers in cases {
            let reply = try await live.send("PUT", Self.path, headers: Self.auth("alice") + headers)
            #expect((400..<500).contains(reply.status), "\(headers): \(reply.status) \(reply.text)")
        }
        for name in ["..", "a%2Fb", "%00x", String(repeating: "n", count: 300)] {
            let reply = try await live.send(
                "PUT", "/tables/notes/a1/$attachments/\(name)", headers: Self.auth("alice") + good)
            #expect((400..<500).contains(reply.status), "\(name): \(reply.status)")
        }
        let created = try await live.send("PUT", Self.path, headers: Self.auth("alice") + good)
        let location = try #require(created.header("Location"))
        for offset in ["-5", "x", "99999999999999999999", "+0", " 0 0"] {
            let reply = try await live.send(
                "PATCH", location,
                headers: Self.auth("alice") + [
                    ("Content-Type", "application/partial-upload"), ("Upload-Offset", offset),
                ],
                body: bytes)
            #expect((400..<500).contains(reply.status), "\(offset): \(reply.status)")
        }
        // Bytes past the declared length are refused; a forged ticket is 404.
        let over = try await live.send(
            "PATCH", location,
            headers: Self.auth("alice") + [("Content-Type", "application/partial-upload"), ("Upload-Offset", "0")],
            body: Self.file(20))
        #expect((400..<500).contains(over.status), "\(over.status)")
        for forged in ["x", "x.y", String(location.dropLast(2)) + "AA"] {
            let path = forged.hasPrefix("/") ? forged : "/tables/$uploads/" + forged
            #expect(try await live.send("HEAD", path, headers: Self.auth("alice")).status == 404)
        }
        try await live.stop()
    }
}
