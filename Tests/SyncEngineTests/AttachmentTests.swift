import Foundation
import StoreConformance
import SyncCore
import SyncTesting
import Testing
import Transport

/// A device with attachments: its context uses a files directory of its own and the model's
/// attachment routes.
struct AttachmentDevice {
    let device: Device
    let files: DiskAttachmentFiles
    let directory: TemporaryDirectory

    init(
        _ name: String, kind: StoreKind, server: ModelServer, attachments: ModelAttachmentServer,
        cacheLimit: Int64 = 1 << 30, downloads: AttachmentDownloads = .onDemand,
        handler: some ConflictHandler = KeepingConflictHandler()
    ) async throws {
        device = try Device(name, kind: kind, server: server, handler: handler)
        directory = try TemporaryDirectory()
        files = try DiskAttachmentFiles(directory: URL(fileURLWithPath: directory.path).appending(path: "files"))
        await device.context.useAttachments(
            AttachmentConfiguration(
                files: files, remote: attachments, cacheLimit: cacheLimit, defaultDownloads: downloads))
    }

    var context: SyncContext { device.context }
    func table(_ name: String = "todo") -> SyncTable { device.table(name) }

    /// A file of `bytes` in the device's scratch directory.
    func file(_ bytes: Data, _ name: String = UUID().uuidString) throws -> URL {
        let url = URL(fileURLWithPath: directory.path).appending(path: name)
        try bytes.write(to: url)
        return url
    }

    func attachment(_ itemID: String, _ name: String) async throws -> ItemAttachment? {
        try await table().attachments(of: itemID).first { $0.name == name }
    }
}

/// `count` bytes of a repeating pattern that starts at `seed`.
func pattern(_ count: Int, seed: UInt8 = 0) -> Data {
    Data((0..<count).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ Int(seed)) })
}

@Suite("Attachments: queue, push, pull, cache")
struct AttachmentTests {
    @Test func theReprDigestIsTheBase64OfTheHashsBytes() {
        // RFC 9530's form; the SHA-256 of "hello" and of nothing.
        #expect(
            ItemAttachment.reprDigest(sha256: "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824")
                == "sha-256=:LPJNul+wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ=:")
        #expect(
            ItemAttachment.reprDigest(sha256: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
                == "sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:")
    }

    @Test(arguments: StoreKind.allCases)
    func anAttachmentOfAnItemCreatedOfflineUploadsAfterTheInsert(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let remote = ModelAttachmentServer(items: server)
        let phone = try await AttachmentDevice("phone", kind: kind, server: server, attachments: remote)
        let bytes = pattern(200_000)
        let item = try await phone.table().insert(["title": "receipt"])
        let id = try #require(item.id)
        let attached = try await phone.table().attach(
            file: try phone.file(bytes), to: id, name: "scan.pdf", contentType: "application/pdf")
        #expect(attached.state == .pendingUpload && attached.size == 200_000)
        #expect(try await phone.context.queuedOperations().map(\.kind) == [.insert])
        #expect(remote.log.isEmpty, "offline: nothing sent")

        let events = phone.context.events()
        try await phone.context.push()
        // The model refuses an upload for an item it does not hold: the upload followed the insert.
        #expect(server.row("todo", id: id) != nil)
        #expect(remote.log == ["upload todo/\(id)/scan.pdf"])
        #expect(remote.stored("todo", id, "scan.pdf")?.bytes == bytes)
        #expect(remote.stored("todo", id, "scan.pdf")?.sha256 == attached.sha256)
        #expect(try await phone.attachment(id, "scan.pdf")?.state == .uploaded)
        let seen = await collect(events) { if case .attachmentTransferred = $0 { true } else { false } }
        #expect(
            seen.contains {
                if case .attachmentProgress(_, let bytes, 200_000) = $0 { bytes == 200_000 } else { false }
            })
    }

    @Test(arguments: StoreKind.allCases)
    func aFailedUploadStaysQueuedAndTheNextPushResumesIt(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let remote = ModelAttachmentServer(items: server, chunkSize: 1000)
        let phone = try await AttachmentDevice("phone", kind: kind, server: server, attachments: remote)
        try await phone.table().insert(["id": "a"])
        try await phone.table().attach(file: try phone.file(pattern(10_000)), to: "a", name: "voice.m4a")
        remote.failNext(.upload)
        await expectSyncError(.remote) { try await phone.context.push() }
        #expect(server.row("todo", id: "a") != nil, "the insert went")
        #expect(try await phone.context.queuedOperationCount() == 0)
        #expect(remote.stored("todo", "a", "voice.m4a") == nil, "a cut upload stores nothing")
        #expect(try await phone.attachment("a", "voice.m4a")?.state == .pendingUpload)
        try await phone.context.push()
        #expect(remote.stored("todo", "a", "voice.m4a")?.bytes == pattern(10_000))
        #expect(try await phone.attachment("a", "voice.m4a")?.state == .uploaded)
        #expect(remote.log == ["upload todo/a/voice.m4a", "upload todo/a/voice.m4a"])
    }

    @Test(arguments: StoreKind.allCases)
    func removingQueuesADeleteUnlessTheServerNeverSawTheItem(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let remote = ModelAttachmentServer(items: server)
        let phone = try await AttachmentDevice("phone", kind: kind, server: server, attachments: remote)
        try await phone.table().insert(["id": "a"])
        let attached = try await phone.table().attach(file: try phone.file(pattern(5000)), to: "a", name: "x.bin")
        try await phone.context.push()
        try await phone.table().removeAttachment(of: "a", name: "x.bin")
        #expect(try await phone.attachment("a", "x.bin")?.state == .pendingDelete)
        await expectSyncError(.attachmentNotFound) {
            _ = try await phone.table().openAttachment(of: "a", name: "x.bin")
        }
        try await phone.context.push()
        #expect(remote.stored("todo", "a", "x.bin")?.deleted == true)
        #expect(try await phone.table().attachments(of: "a").isEmpty)
        #expect(await phone.files.url(sha256: attached.sha256) == nil, "the file went with the last row")

        // An item still to be inserted: its attachment goes at once, with nothing sent.
        try await phone.table().insert(["id": "b"])
        try await phone.table().attach(file: try phone.file(pattern(10)), to: "b", name: "y.bin")
        try await phone.table().removeAttachment(of: "b", name: "y.bin")
        #expect(try await phone.table().attachments(of: "b").isEmpty)
        try await phone.context.push()
        #expect(remote.log == ["upload todo/a/x.bin", "delete todo/a/x.bin"])
    }

    /// A device removes a file offline while another replaces it: the delete is not this device's
    /// to make (the server answers 412), and the push says so in ``PushResult/attachmentsSuperseded``
    /// instead of counting it as sent; the newer file stays, and a pull brings it back. It was
    /// counted as sent, and the file came back with nothing said.
    @Test func aDeleteOfAFileAnotherDeviceReplacedIsToldNotSent() async throws {
        let server = ModelServer()
        let remote = ModelAttachmentServer(items: server)
        let phone = try await AttachmentDevice("phone", kind: .sqliteFile, server: server, attachments: remote)
        let tablet = try await AttachmentDevice("tablet", kind: .memory, server: server, attachments: remote)
        try await phone.table().insert(["id": "a"])
        try await phone.table().attach(file: try phone.file(pattern(100)), to: "a", name: "f.bin")
        try await phone.context.push()
        try await tablet.table().pull()
        try await phone.table().removeAttachment(of: "a", name: "f.bin")
        try await tablet.table().attach(file: try tablet.file(pattern(200, seed: 3)), to: "a", name: "f.bin")
        try await tablet.context.push()

        let result = try await phone.context.push()
        #expect(result.attachmentsSuperseded.map(\.name) == ["f.bin"])
        #expect(result.attachmentsTransferred == 0)
        #expect(remote.stored("todo", "a", "f.bin")?.deleted == false)
        #expect(try await phone.attachment("a", "f.bin") == nil, "the delete is settled, not queued again")
        try await phone.table().pull()
        #expect(try await phone.attachment("a", "f.bin")?.size == 200)
    }

    @Test(arguments: StoreKind.allCases)
    func aPullBringsRowsAndDownloadsOnDemandOrEagerly(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let remote = ModelAttachmentServer(items: server)
        let phone = try await AttachmentDevice("phone", kind: kind, server: server, attachments: remote)
        let bytes = pattern(300_000, seed: 3)
        try await phone.table().insert(["id": "a"])
        let sent = try await phone.table().attach(file: try phone.file(bytes), to: "a", name: "photo.jpg")
        try await phone.context.push()

        let tablet = try await AttachmentDevice("tablet", kind: kind, server: server, attachments: remote)
        try await tablet.table().pull()
        let known = try #require(try await tablet.attachment("a", "photo.jpg"))
        #expect(known.state == .remote && known.sha256 == sent.sha256 && known.size == 300_000)
        #expect(await tablet.files.url(sha256: sent.sha256) == nil, "on demand: nothing downloaded yet")
        let url = try await tablet.table().openAttachment(of: "a", name: "photo.jpg")
        #expect(try Data(contentsOf: url) == bytes)
        #expect(try await tablet.attachment("a", "photo.jpg")?.state == .downloaded)

        let laptop = try await AttachmentDevice(
            "laptop", kind: kind, server: server, attachments: remote, downloads: .eager)
        try await laptop.table().pull()
        #expect(try await laptop.attachment("a", "photo.jpg")?.state == .downloaded)
        let local = try #require(await laptop.files.url(sha256: sent.sha256))
        #expect(try Data(contentsOf: local) == bytes)

        // A delete on the server reaches the others with the next pull, which frees the file.
        try await phone.table().removeAttachment(of: "a", name: "photo.jpg")
        try await phone.context.push()
        try await laptop.table().pull()
        #expect(try await laptop.table().attachments(of: "a").isEmpty)
        #expect(await laptop.files.url(sha256: sent.sha256) == nil)
        // A failed download leaves the row remote for the next try.
        try await phone.table().attach(file: try phone.file(pattern(10)), to: "a", name: "n.txt")
        try await phone.context.push()
        try await tablet.table().pull()
        remote.failNext(.download)
        await expectSyncError(.remote) { _ = try await tablet.table().openAttachment(of: "a", name: "n.txt") }
        #expect(try await tablet.attachment("a", "n.txt")?.state == .remote)
        let scratch = URL(fileURLWithPath: tablet.directory.path).appending(path: "files/tmp")
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch.path).isEmpty, "the cut download is gone")
        #expect(try Data(contentsOf: try await tablet.table().openAttachment(of: "a", name: "n.txt")) == pattern(10))
    }

    @Test(arguments: StoreKind.allCases)
    func theCacheEvictsTheLeastRecentlyUsedSyncedFilesAndKeepsPendingAndPinnedOnes(_ kind: StoreKind)
        async throws
    {
        let server = ModelServer()
        let remote = ModelAttachmentServer(items: server)
        let phone = try await AttachmentDevice(
            "phone", kind: kind, server: server, attachments: remote, cacheLimit: 2_500)
        var sha: [String: String] = [:]
        for (index, id) in ["a", "b", "c", "d"].enumerated() {
            try await Task.sleep(for: .milliseconds(3))  // distinct last-use times: a, then b, c, d
            try await phone.table().insert(["id": .string(id)])
            sha[id] =
                try await phone.table().attach(
                    file: try phone.file(pattern(1000, seed: UInt8(index))), to: id, name: "f"
                ).sha256
        }
        try await phone.table().pin(of: "d", name: "f")
        try await phone.context.push()  // a, b, c and d uploaded: 3 000 unpinned bytes > 2 500
        #expect(try await phone.attachment("a", "f")?.state == .remote, "the oldest went")
        #expect(await phone.files.url(sha256: sha["a"]!) == nil)
        // A pending upload (its item's insert waits for a push) is never evicted, nor counted.
        try await phone.table().insert(["id": "e"])
        let pending = try await phone.table().attach(file: try phone.file(pattern(5000, seed: 9)), to: "e", name: "f")
        // Using a file makes it the most recent: opening a brings it back and b is evicted.
        try await Task.sleep(for: .milliseconds(5))
        _ = try await phone.table().openAttachment(of: "a", name: "f")
        #expect(try await phone.context.trimAttachmentCache() == 0, "a's download already trimmed the cache")
        #expect(try await phone.attachment("b", "f")?.state == .remote)
        #expect(await phone.files.url(sha256: sha["b"]!) == nil)
        for id in ["a", "c"] { #expect(await phone.files.url(sha256: sha[id]!) != nil, "\(id) is kept") }
        #expect(try await phone.attachment("d", "f")?.pinned == true)
        #expect(await phone.files.url(sha256: sha["d"]!) != nil, "pinned")
        #expect(try await phone.attachment("e", "f")?.state == AttachmentState.pendingUpload)
        #expect(await phone.files.url(sha256: pending.sha256) != nil, "pending")
        // Unpinning makes d evictable, and once c is used, d is the least recently used.
        try await Task.sleep(for: .milliseconds(5))
        _ = try await phone.table().openAttachment(of: "c", name: "f")
        try await phone.table().pin(false, of: "d", name: "f")
        #expect(try await phone.attachment("d", "f")?.state == .remote)
        #expect(await phone.files.url(sha256: sha["d"]!) == nil)
        #expect(try await phone.attachment("c", "f")?.state == .uploaded)
    }

    @Test func attachingNeedsTheItemAValidNameAndAConfiguration() async throws {
        let server = ModelServer()
        let remote = ModelAttachmentServer(items: server)
        let phone = try await AttachmentDevice("phone", kind: .memory, server: server, attachments: remote)
        let file = try phone.file(pattern(10))
        await expectSyncError(.itemNotFound) { try await phone.table().attach(file: file, to: "nobody", name: "a") }
        try await phone.table().insert(["id": "a"])
        await expectSyncError(.invalidAttachmentName) {
            try await phone.table().attach(file: file, to: "a", name: "../x")
        }
        let missing = await expectSyncError(.attachmentFile) {
            try await phone.table().attach(
                file: file.deletingLastPathComponent().appending(path: "missing"), to: "a", name: "x")
        }
        #expect(missing?.message == "cannot import 'missing': no such file or directory", "\(missing?.message ?? "-")")
        let bare = try Device("bare", kind: .memory, server: server)
        await expectSyncError(.attachmentsNotConfigured) {
            try await bare.table().attach(file: file, to: "a", name: "x")
        }
    }

    /// A name is one attachment whatever its Unicode form: "café" from an HFS+ file name (`e` and
    /// a combining accent) and "café" typed (one `é`) are equal to Swift, and were two attachments
    /// to the store (which compares bytes) and to the server.
    @Test(arguments: StoreKind.allCases)
    func aNameIsOneAttachmentWhateverItsUnicodeForm(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let remote = ModelAttachmentServer(items: server)
        let phone = try await AttachmentDevice("phone", kind: kind, server: server, attachments: remote)
        let decomposed = "cafe\u{301}.txt"
        let composed = "caf\u{E9}.txt"
        #expect(Array(decomposed.utf8) != Array(composed.utf8))
        try await phone.table().insert(["id": "a"])
        try await phone.table().attach(file: try phone.file(pattern(10)), to: "a", name: decomposed)
        try await phone.table().attach(file: try phone.file(pattern(20)), to: "a", name: composed)
        let listed = try await phone.table().attachments(of: "a")
        #expect(listed.map { Array($0.name.utf8) } == [Array(composed.utf8)], "\(listed.map(\.name))")
        #expect(listed.first?.size == 20)
        let opened = try await phone.table().openAttachment(of: "a", name: decomposed)
        #expect(try Data(contentsOf: opened) == pattern(20))
        try await phone.table().pin(of: "a", name: decomposed)
        try await phone.table().removeAttachment(of: "a", name: decomposed)
        #expect(try await phone.table().attachments(of: "a").isEmpty)
    }
}
