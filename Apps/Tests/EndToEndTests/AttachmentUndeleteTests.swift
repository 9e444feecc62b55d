import FerryServer
import Foundation
import ServerTestSupport
import SyncCore
import Testing
import Transport

/// An item with a file, deleted on the server and brought back, through `ferry serve` over HTTP:
/// the server keeps a soft-deleted item's attachments, a device that pulled the delete freed its
/// copy of the file, and the undelete's pull brings the file back (eagerly, or on demand).
@Suite("Attachments of an undeleted item", .timeLimit(.minutes(3)))
struct AttachmentUndeleteTests {
    /// A device on a SQLite store with its own files directory.
    struct Device {
        let context: SyncContext
        let files: DiskAttachmentFiles

        init(_ name: String, _ scratch: Scratch, _ server: TestServer, downloads: AttachmentDownloads) async throws {
            let remote = TestServer.remote(server.url, .v3)
            context = SyncContext(store: try StoreKind.sqlite.open(scratch.url, name), remote: remote)
            files = try DiskAttachmentFiles(directory: scratch.url.appending(path: "\(name)-files"))
            await context.useAttachments(
                AttachmentConfiguration(files: files, remote: remote, defaultDownloads: downloads))
        }

        var notes: SyncTable { context.table("notes") }

        func pull() async throws { try await notes.pull(queryID: "all") }

        func state(of itemID: String) async throws -> AttachmentState? {
            try await notes.attachments(of: itemID).first { $0.name == "scan" }?.state
        }
    }

    /// The undelete by the protocol's own route: 2.0's `POST` of the item, 3.0's `PUT` with
    /// `deleted: false`.
    @Test(arguments: ProtocolVersion.both)
    func anUndeletedItemBringsItsFileBack(undeletingWith version: ProtocolVersion) async throws {
        let scratch = try await Scratch()
        defer { scratch.remove() }
        let server = try await TestServer.start(in: scratch, attachments: AttachmentLimits())
        let phone = try await Device("phone", scratch, server, downloads: .onDemand)
        let tablet = try await Device("tablet", scratch, server, downloads: .eager)

        let bytes = Data((0..<20_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })
        let source = scratch.url.appending(path: "scan.bin")
        try bytes.write(to: source)
        try await phone.notes.insert(["id": "a1", "text": "receipt"])
        let attached = try await phone.notes.attach(file: source, to: "a1", name: "scan")
        try await phone.context.push()

        try await tablet.pull()
        #expect(try await tablet.state(of: "a1") == .downloaded)
        #expect(await tablet.files.url(sha256: attached.sha256) != nil)

        // Deleted by the phone: the tablet's pull removes the item and frees the file.
        try await phone.notes.delete(id: "a1")
        try await phone.context.push()
        try await tablet.pull()
        #expect(try await tablet.notes.item(id: "a1") == nil)
        #expect(try await tablet.state(of: "a1") == .remote)
        #expect(await tablet.files.url(sha256: attached.sha256) == nil)

        // The server kept the item's attachment for this.
        let undeleted = try await TestServer.remote(server.url, version).onlineTable("notes").undelete(id: "a1")
        #expect(!undeleted.isDeleted)

        // The eager tablet downloads the file again with the item.
        try await tablet.pull()
        #expect(try await tablet.notes.item(id: "a1")?["text"] == "receipt")
        #expect(try await tablet.state(of: "a1") == .downloaded)
        let copy = try #require(await tablet.files.url(sha256: attached.sha256))
        #expect(try Data(contentsOf: copy) == bytes)

        // The phone, on demand: the item and its attachment come back, the file when opened.
        try await phone.pull()
        #expect(try await phone.notes.item(id: "a1")?["text"] == "receipt")
        #expect(try await phone.state(of: "a1") == .remote)
        let opened = try await phone.notes.openAttachment(of: "a1", name: "scan")
        #expect(try Data(contentsOf: opened) == bytes)
        #expect(try await phone.state(of: "a1") == .downloaded)

        // Nothing left to do on either device.
        #expect(try await phone.context.push().pushed == 0)
        #expect(try await tablet.context.push().pushed == 0)
        try await server.stop()
    }
}
