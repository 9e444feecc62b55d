import Crypto
import Foundation
import ServerTestSupport
import SyncCore
import Synchronization
import Testing
import Transport

@testable import FerryServer

/// `HTTPRemote`'s attachment client (Transport) against the real routes over loopback (issue 30).
@Suite("Attachment client over HTTP", .timeLimit(.minutes(3)))
struct AttachmentClientTests {
    static func remote(_ live: LiveServer, user: String) -> HTTPRemote {
        HTTPRemote(
            HTTPRemote.Configuration(
                serverURL: URL(string: "http://127.0.0.1:\(live.server.port)")!, protocolVersion: .v3),
            tokenProvider: { @Sendable _ in LiveServer.token(user) })
    }

    static func temporaryFile(_ bytes: [UInt8]) throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-attachment-\(UUID())")
        try Data(bytes).write(to: url)
        return url
    }

    static func hex(_ bytes: [UInt8]) -> String {
        SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
    }

    @Test(arguments: ServerBackend.allCases)
    func aFiveMegabyteFileGoesUpAndComesBackByteIdentical(_ backend: ServerBackend) async throws {
        let live = try await AttachmentUploadTests.start(backend: backend)
        let alice = Self.remote(live, user: "alice")
        let bytes = AttachmentUploadTests.file(5 << 20, seed: 3)
        let source = try Self.temporaryFile(bytes)
        let target = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-download-\(UUID())")
        defer {
            try? FileManager.default.removeItem(at: source)
            try? FileManager.default.removeItem(at: target)
        }
        let sent = Mutex<[Int64]>([])
        try await alice.uploadAttachment(
            table: "notes", itemID: "a1", name: "scan.pdf", file: source, contentType: "application/pdf",
            sha256: Self.hex(bytes), progress: { done, _ in sent.withLock { $0.append(done) } })
        #expect(await alice.offersAttachments())
        #expect(sent.withLock { $0.last } == Int64(bytes.count))
        #expect(sent.withLock { $0.count } >= 2, "a 5 MB file goes in more than one piece")

        try await alice.downloadAttachment(table: "notes", itemID: "a1", name: "scan.pdf", to: target) { _, _ in }
        #expect(try Data(contentsOf: target) == Data(bytes))

        let rows = try await alice.attachmentRows(table: "notes", query: TableQuery())
        #expect(rows.items.map { $0["name"] } == [.string("scan.pdf")])
        #expect(rows.items.first?["sha256"] == .string(Self.hex(bytes)))

        // Another user cannot read it; deleting twice is done twice.
        await #expect(throws: RemoteError.self) {
            try await Self.remote(live, user: "bob").downloadAttachment(
                table: "notes", itemID: "a1", name: "scan.pdf", to: target
            ) { _, _ in }
        }
        try await alice.deleteAttachment(table: "notes", itemID: "a1", name: "scan.pdf", sha256: Self.hex(bytes))
        try await alice.deleteAttachment(table: "notes", itemID: "a1", name: "scan.pdf", sha256: nil)
        let after = try await alice.attachmentRows(table: "notes", query: TableQuery())
        #expect(after.items.isEmpty)
        try await live.stop()
    }

    /// A server without attachments answers the rows with an empty page (every pull asks).
    @Test func aServerWithoutAttachmentsHasNoRows() async throws {
        let live = try await LiveServer.start(tables: [AttachmentUploadTests.notes])
        let remote = Self.remote(live, user: "alice")
        let rows = try await remote.attachmentRows(table: "notes", query: TableQuery())
        #expect(rows.items.isEmpty)
        #expect(await remote.offersAttachments() == false)
        try await live.stop()
    }
}
