import Foundation
import StoreConformance
import StoreMemory
import SyncCore
import SyncTesting
import Testing
import Transport

/// The examples of the attachment API's doc comments (`SyncTable`'s attachment extension,
/// `SyncContext.importAttachment(from:)`) and of docs/attachments.md, "The Swift API", run against the
/// model server and its attachment routes.
@Suite("Attachments: the documented examples")
struct AttachmentExampleTests {
    @Test func theSwiftAPIExampleRuns() async throws {
        let server = ModelServer()
        let remote = ModelAttachmentServer(items: server)
        let temporary = try TemporaryDirectory()
        defer { temporary.remove() }
        let directory = URL(fileURLWithPath: temporary.path)
        let pictureURL = directory.appending(path: "harbour.jpg")
        let scanURL = directory.appending(path: "receipt.pdf")
        try Data(repeating: 0xFF, count: 50_000).write(to: pictureURL)
        try Data("%PDF-1.7".utf8).write(to: scanURL)
        let context = SyncContext(store: MemoryStore(), remote: server.remote())
        await context.useAttachments(
            AttachmentConfiguration(
                files: try DiskAttachmentFiles(directory: directory.appending(path: "attachments")), remote: remote,
                downloads: ["photo": .eager]))

        // As documented.
        let photos = context.table("photo")
        let item = try await photos.insert(["caption": "Harbour"])
        try await photos.attach(file: pictureURL, to: item.id!, name: "full.jpg", contentType: "image/jpeg")
        try await context.push()  // the insert, then the upload
        let url = try await photos.openAttachment(of: item.id!, name: "full.jpg")  // downloads on demand
        try await photos.pin(of: item.id!, name: "full.jpg")  // never evicted
        let all = try await photos.attachments(of: item.id!)  // [ItemAttachment], by name

        let scan = try await context.importAttachment(from: scanURL)
        try await context.write { writes in
            let note = try writes.insert(["title": "Receipt"], into: "notes")
            try writes.attach(scan, to: note["id"]!.stringValue!, in: "notes", name: "scan.pdf")
        }

        #expect(try Data(contentsOf: url) == Data(repeating: 0xFF, count: 50_000))
        #expect(all.map(\.name) == ["full.jpg"] && all.first?.pinned == true && all.first?.state == .uploaded)
        try await context.push()
        let noteID = try #require(server.rows("notes").first?.id)
        #expect(remote.stored("notes", noteID, "scan.pdf")?.bytes == Data("%PDF-1.7".utf8))

        try await photos.removeAttachment(of: item.id!, name: "full.jpg")  // deleted at the next push
        try await context.push()
        #expect(remote.stored("photo", item.id!, "full.jpg")?.deleted == true)
    }
}
