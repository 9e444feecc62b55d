import Foundation
import SyncCore
import SyncTesting
import Testing
import Transport

@Suite("Attachments: conflicts and automatic sync")
struct AttachmentSyncTests {
    /// The item's insert fails with a conflict: its attachment is neither sent nor lost, and goes
    /// once the conflict is resolved and the item is on the server.
    @Test(arguments: StoreKind.allCases)
    func aConflictOnTheItemHoldsItsAttachmentBackWithoutLosingIt(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let remote = ModelAttachmentServer(items: server)
        server.seed("todo", [["id": "a", "title": "theirs"]])
        let phone = try await AttachmentDevice("phone", kind: kind, server: server, attachments: remote)
        try await phone.table().insert(["id": "a", "title": "mine"])
        let attached = try await phone.table().attach(file: try phone.file(pattern(4000)), to: "a", name: "p.png")
        let result = try await phone.context.push()
        #expect(result.failed.count == 1, "the insert conflicts (409)")
        #expect(remote.log.isEmpty, "nothing sent for an item whose insert did not go")
        #expect(try await phone.attachment("a", "p.png")?.state == .pendingUpload)
        #expect(await phone.files.url(sha256: attached.sha256) != nil)
        // Keep mine: the insert becomes an update of the server's item, then the upload follows.
        let error = try #require(try await phone.context.operationErrors().first)
        try await phone.context.resolveError(error.id, .useClient)
        try await phone.context.push()
        #expect(remote.log == ["upload todo/a/p.png"])
        #expect(remote.stored("todo", "a", "p.png")?.bytes == pattern(4000))
        #expect(try await phone.attachment("a", "p.png")?.state == .uploaded)
    }

    @Test func automaticSyncUploadsAndDownloadsByItself() async throws {
        let server = ModelServer()
        let remote = ModelAttachmentServer(items: server)
        let phone = try await AttachmentDevice("phone", kind: .sqliteFile, server: server, attachments: remote)
        let tablet = try await AttachmentDevice(
            "tablet", kind: .memory, server: server, attachments: remote, downloads: .eager)
        let subscription = SyncSubscription(table: "todo")
        await phone.context.startAutomaticSync([subscription], configuration: AutomaticSyncTests.fast)
        await tablet.context.startAutomaticSync([subscription], configuration: AutomaticSyncTests.fast)
        try await phone.table().insert(["id": "a"])
        try await eventually("the item reaches the server") { server.row("todo", id: "a") != nil }
        // An attachment of an item already on the server: no operation is queued, only the row.
        try await phone.table().attach(file: try phone.file(pattern(70_000, seed: 5)), to: "a", name: "v.mp4")
        try await eventually("the upload") { remote.stored("todo", "a", "v.mp4") != nil }
        try await eventually("the tablet downloads it") {
            try await tablet.attachment("a", "v.mp4")?.state == .downloaded
        }
        let url = try await tablet.table().openAttachment(of: "a", name: "v.mp4")
        #expect(try Data(contentsOf: url) == pattern(70_000, seed: 5))
        #expect(try await phone.attachment("a", "v.mp4")?.state == .uploaded)
        await phone.context.stopAutomaticSync()
        await tablet.context.stopAutomaticSync()
    }
}

@Suite("Attachments: failures and deleted items")
struct AttachmentFailureTests {
    /// A file the server refuses does not hold the others back; it stays queued.
    @Test(arguments: StoreKind.allCases)
    func oneRefusedUploadLetsTheOthersGo(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let remote = ModelAttachmentServer(items: server)
        let phone = try await AttachmentDevice("phone", kind: kind, server: server, attachments: remote)
        for id in ["a", "b"] {
            try await phone.table().insert(["id": .string(id)])
            try await phone.table().attach(
                file: try phone.file(pattern(100, seed: id == "a" ? 1 : 2)), to: id, name: "f")
        }
        remote.failNext(.upload)  // a's
        let error = await expectSyncError(.remote) { try await phone.context.push() }
        // The inserts went through before the uploads: the error says so.
        #expect(
            error?.message
                == "2 operations pushed; then upload of attachment 'f' of 'todo/a': connection reset after 100 bytes",
            "\(error?.message ?? "")")
        #expect(error?.operationsPushed == 2)
        #expect(try await phone.table().queuedOperationCount() == 0)
        #expect(try await phone.attachment("a", "f")?.state == .pendingUpload)
        #expect(try await phone.attachment("b", "f")?.state == .uploaded)
        try await phone.context.push()
        #expect(try await phone.attachment("a", "f")?.state == .uploaded)
        #expect(remote.log == ["upload todo/a/f", "upload todo/b/f", "upload todo/a/f"])
    }

    /// A copy damaged on the device is reported and stays queued, without a byte sent (it was
    /// uploaded in full on every push for the server to refuse); attached again, it goes.
    @Test(arguments: StoreKind.allCases)
    func aDamagedLocalCopyIsReportedNotUploaded(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let remote = ModelAttachmentServer(items: server)
        let phone = try await AttachmentDevice("phone", kind: kind, server: server, attachments: remote)
        let original = pattern(5_000, seed: 3)
        for id in ["a", "b"] {
            try await phone.table().insert(["id": .string(id)])
            try await phone.table().attach(
                file: try phone.file(pattern(100, seed: id == "a" ? 3 : 4)), to: id, name: "f")
        }
        try await phone.table().attach(file: try phone.file(original), to: "a", name: "f")
        let queued = try #require(try await phone.attachment("a", "f"))
        let stored = try #require(await phone.files.url(sha256: queued.sha256))
        var damaged = original
        damaged[2_500] ^= 0x01
        try damaged.write(to: stored)
        for _ in 0..<2 {
            let error = await expectSyncError(.attachmentFile) { try await phone.context.push() }
            #expect(
                error?.message.hasSuffix(
                    "the file of attachment 'f' of 'todo/a' is damaged: its bytes no longer have the SHA-256 they had "
                        + "when it was attached; attach the file again, or remove the attachment"
                ) == true, "\(error?.message ?? "")")
        }
        #expect(remote.log == ["upload todo/b/f"], "only the intact file was sent")
        #expect(try await phone.attachment("a", "f")?.state == .pendingUpload)
        try await phone.table().attach(file: try phone.file(original), to: "a", name: "f")
        try await phone.context.push()
        #expect(try await phone.attachment("a", "f")?.state == .uploaded)
        #expect(remote.stored("todo", "a", "f")?.bytes == original)
    }

    /// A file imported for a write that never came is swept once it is old enough; attached ones stay.
    @Test func theSweepRemovesOnlyFilesNoAttachmentRefersTo() async throws {
        let server = ModelServer()
        let remote = ModelAttachmentServer(items: server)
        let phone = try await AttachmentDevice("phone", kind: .sqliteFile, server: server, attachments: remote)
        try await phone.table().insert(["id": "a"])
        let kept = try await phone.table().attach(file: try phone.file(pattern(100, seed: 1)), to: "a", name: "f")
        let orphan = try await phone.context.importAttachment(from: try phone.file(pattern(100, seed: 2)))
        #expect(try await phone.context.sweepAttachmentFiles() == 0, "within the hour: an import may await its write")
        try await Task.sleep(for: .milliseconds(5))
        #expect(try await phone.context.sweepAttachmentFiles(olderThan: .zero) == 1)
        #expect(await phone.files.url(sha256: orphan.sha256) == nil)
        #expect(await phone.files.url(sha256: kept.sha256) != nil)
    }

    /// An item deleted before its attachment went: the upload is dropped, and the file with it.
    @Test(arguments: StoreKind.allCases)
    func theUploadOfADeletedItemIsDropped(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let remote = ModelAttachmentServer(items: server)
        let phone = try await AttachmentDevice("phone", kind: kind, server: server, attachments: remote)
        try await phone.table().insert(["id": "a"])
        try await phone.context.push()
        let attached = try await phone.table().attach(file: try phone.file(pattern(100)), to: "a", name: "f")
        try await phone.table().delete(id: "a")
        try await phone.context.push()
        #expect(remote.log.isEmpty)
        #expect(try await phone.table().attachments(of: "a").isEmpty)
        #expect(await phone.files.url(sha256: attached.sha256) == nil)
    }

    /// An item another device deleted on the server while this one's upload waited: the server
    /// answers 410, and the upload is dropped with its file, and said so (it failed every push
    /// until a pull brought the delete, and the push that dropped it then said "sent").
    @Test(arguments: StoreKind.allCases)
    func theUploadOfAnItemDeletedOnTheServerIsDropped(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let remote = ModelAttachmentServer(items: server)
        let phone = try await AttachmentDevice("phone", kind: kind, server: server, attachments: remote)
        try await phone.table().insert(["id": "a"])
        try await phone.table().insert(["id": "b"])
        try await phone.context.push()
        let doomed = try await phone.table().attach(file: try phone.file(pattern(100)), to: "a", name: "f")
        try await phone.table().attach(file: try phone.file(pattern(200)), to: "b", name: "g")
        server.softDelete("todo", ids: ["a"], by: "tablet")
        let result = try await phone.context.push()
        #expect(result.attachmentsTransferred == 1 && result.attachmentsDropped.map(\.itemID) == ["a"], "\(result)")
        #expect(remote.stored("todo", "b", "g")?.bytes == pattern(200))
        #expect(try await phone.attachment("a", "f") == nil)
        #expect(await phone.files.url(sha256: doomed.sha256) == nil)
        #expect(try await phone.context.queuedAttachments().isEmpty)
        // Nothing left to fail the next push.
        let next = try await phone.context.push()
        #expect(next.attachmentsDropped.isEmpty && next.attachmentsTransferred == 0)

        // A file's delete queued for an item deleted on the server meanwhile has nothing left to do.
        try await phone.table().removeAttachment(of: "b", name: "g")
        server.softDelete("todo", ids: ["b"], by: "tablet")
        let settled = try await phone.context.push()
        #expect(settled.attachmentsTransferred == 0 && settled.attachmentsDropped.isEmpty)
        #expect(try await phone.context.queuedAttachments().isEmpty)
    }

    /// An item another device deleted on the server, with its attachments: a device that pulls
    /// the delete frees their files and keeps their rows (the server keeps them for an undelete),
    /// and an eager device downloads no file of an item it does not hold (a deleted item's file
    /// answered 410, and every pull failed on it).
    @Test(arguments: StoreKind.allCases)
    func theFilesOfAnItemDeletedOnTheServerAreFreed(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let remote = ModelAttachmentServer(items: server)
        let phone = try await AttachmentDevice("phone", kind: kind, server: server, attachments: remote)
        let tablet = try await AttachmentDevice(
            "tablet", kind: kind, server: server, attachments: remote, downloads: .eager)
        for id in ["a", "b"] { try await phone.table().insert(["id": .string(id)]) }
        let first = try await phone.table().attach(file: try phone.file(pattern(100, seed: 1)), to: "a", name: "f")
        let second = try await phone.table().attach(file: try phone.file(pattern(100, seed: 2)), to: "b", name: "g")
        try await phone.context.push()
        try await tablet.table().pull()
        #expect(try await tablet.attachment("a", "f")?.state == .downloaded)
        #expect(await tablet.files.url(sha256: first.sha256) != nil)

        server.softDelete("todo", ids: ["a", "b"], by: "laptop")
        try await tablet.table().pull()
        #expect(try await tablet.attachment("a", "f")?.state == .remote)
        #expect(await tablet.files.url(sha256: first.sha256) == nil)
        try await phone.table().pull()
        #expect(try await phone.attachment("b", "g")?.state == .remote)
        #expect(await phone.files.url(sha256: second.sha256) == nil)

        // A device that never had the items pulls their deletes, and asks for no file.
        let late = try await AttachmentDevice(
            "late", kind: kind, server: server, attachments: remote, downloads: .eager)
        try await late.table().pull()
        // Only the tablet's two downloads, before the delete.
        #expect(remote.log.filter { $0.hasPrefix("download") }.count == 2, "\(remote.log)")
        try await late.table().pull()
    }

    /// The device that deletes an item frees the files of its attachments once the server applied
    /// the delete (they stayed until the cache evicted them); a delete the server refuses keeps them.
    @Test(arguments: StoreKind.allCases)
    func theFilesOfAnItemDeletedHereAreFreedByThePush(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let remote = ModelAttachmentServer(items: server)
        let phone = try await AttachmentDevice("phone", kind: kind, server: server, attachments: remote)
        for id in ["a", "b", "c"] { try await phone.table().insert(["id": .string(id)]) }
        let first = try await phone.table().attach(file: try phone.file(pattern(100, seed: 1)), to: "a", name: "f")
        let kept = try await phone.table().attach(file: try phone.file(pattern(100, seed: 2)), to: "b", name: "g")
        try await phone.context.push()
        #expect(try await phone.attachment("a", "f")?.state == .uploaded)

        try await phone.table().delete(id: "a")
        #expect(await phone.files.url(sha256: first.sha256) != nil, "freed when the server has the delete")
        // The item c's file, attached and deleted before any push, goes with its upload.
        let dropped = try await phone.table().attach(file: try phone.file(pattern(100, seed: 3)), to: "c", name: "h")
        try await phone.table().delete(id: "c")
        let result = try await phone.context.push()
        #expect(result.pushed == 2 && result.attachmentsDropped.count == 1, "\(result)")
        #expect(try await phone.attachment("a", "f")?.state == .remote)
        #expect(await phone.files.url(sha256: first.sha256) == nil)
        #expect(await phone.files.url(sha256: dropped.sha256) == nil)
        #expect(try await phone.attachment("b", "g")?.state == .uploaded)
        #expect(await phone.files.url(sha256: kept.sha256) != nil)

        // A change of an item another device deleted, given up to the server's deletion: the item
        // leaves the device, and its file with it.
        let server2 = ModelServer()
        let yielding = try await AttachmentDevice(
            "yielding", kind: kind, server: server2, attachments: ModelAttachmentServer(items: server2),
            handler: ServerWinsConflictHandler())
        try await yielding.table().insert(["id": "x"])
        let lost = try await yielding.table().attach(file: try yielding.file(pattern(50, seed: 6)), to: "x", name: "f")
        try await yielding.context.push()
        server2.softDelete("todo", ids: ["x"], by: "laptop")
        try await yielding.table().update(["id": "x", "text": "edited"])
        let yielded = try await yielding.context.push()
        #expect(yielded.resolvedConflicts.map(\.resolution) == [.useServer], "\(yielded)")
        #expect(try await yielding.table().item(id: "x") == nil)
        #expect(await yielding.files.url(sha256: lost.sha256) == nil)

        // A delete the server refuses (another device changed the item) frees nothing.
        server.touch("todo", ids: ["b"], set: ["text": "changed"], by: "laptop")
        try await phone.table().delete(id: "b")
        let refused = try await phone.context.push()
        #expect(refused.failed.count == 1)
        #expect(await phone.files.url(sha256: kept.sha256) != nil)
    }

    /// A kept conflict resolved later for the server's deletion takes the item off the device, and
    /// the files of its synced attachments with it.
    @Test(arguments: StoreKind.allCases)
    func aResolutionThatTakesAnItemOffTheDeviceFreesItsFiles(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let phone = try await AttachmentDevice(
            "phone", kind: kind, server: server, attachments: ModelAttachmentServer(items: server))
        try await phone.table().insert(["id": "y"])
        let attached = try await phone.table().attach(file: try phone.file(pattern(40, seed: 8)), to: "y", name: "f")
        try await phone.context.push()
        server.softDelete("todo", ids: ["y"], by: "laptop")
        try await phone.table().update(["id": "y", "text": "edited"])
        let kept = try await phone.context.push()
        let error = try #require(kept.failed.first)
        #expect(await phone.files.url(sha256: attached.sha256) != nil, "kept with the conflict")
        #expect(try await phone.context.resolveError(error.id, .useClient) == .useServer)
        #expect(try await phone.table().item(id: "y") == nil)
        #expect(try await phone.attachment("y", "f")?.state == .remote)
        #expect(await phone.files.url(sha256: attached.sha256) == nil)
    }

    /// A purge frees the files of the purged items' synced attachments (they stayed until the cache
    /// evicted them); their rows stay `remote`, and the file comes back when the item does.
    @Test(arguments: StoreKind.allCases)
    func aPurgeFreesTheFilesOfThePurgedItems(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let remote = ModelAttachmentServer(items: server)
        let phone = try await AttachmentDevice("phone", kind: kind, server: server, attachments: remote)
        for id in ["a", "b", "c", "d"] { try await phone.table().insert(["id": .string(id)]) }
        let purged = try await phone.table().attach(file: try phone.file(pattern(100, seed: 4)), to: "a", name: "f")
        let kept = try await phone.table().attach(file: try phone.file(pattern(100, seed: 5)), to: "b", name: "g")
        // The same content as b's, attached to an item purged with a: b's file stays.
        try await phone.table().attach(file: try phone.file(pattern(100, seed: 5)), to: "c", name: "g")
        try await phone.context.push()

        let purge = TableQuery().filter(.isIn(.field("id"), [.literal(.string("a")), .literal(.string("c"))]))
        #expect(try await phone.table().purge(purge) == 2)
        #expect(try await phone.attachment("a", "f")?.state == .remote)
        #expect(try await phone.attachment("c", "g")?.state == .remote)
        #expect(await phone.files.url(sha256: purged.sha256) == nil)
        #expect(try await phone.attachment("b", "g")?.state == .uploaded)
        #expect(await phone.files.url(sha256: kept.sha256) != nil)

        try await phone.table().pull()
        let opened = try await phone.table().openAttachment(of: "a", name: "f")
        #expect(try Data(contentsOf: opened) == pattern(100, seed: 4))
    }

    /// A pull whose items all came and whose attachment rows failed (or were cancelled: `auto off`
    /// in the REPL) throws, but its table is not "stopped before its end": every item is here. One
    /// cut in its pages still is.
    @Test(arguments: StoreKind.allCases)
    func aPullWhoseItemsAllCameIsFinishedWhateverBecameOfItsAttachmentRows(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let remote = ModelAttachmentServer(items: server)
        server.seed("todo", (1...5).map { ["id": .string("i\($0)")] })
        let phone = try await AttachmentDevice("phone", kind: kind, server: server, attachments: remote)
        let options = PullOptions(pageSize: 2, pushesFirst: false)
        // An earlier pull cut after its first page.
        server.dropQueries(after: 1)
        await expectSyncError(.network) { try await phone.table().pull(queryID: "all", options: options) }
        #expect(try await phone.context.unfinishedPulls() == ["todo"])
        server.setFaultPolicy(nil)

        remote.failNext(.rows)
        await #expect(throws: SyncError.self) { try await phone.table().pull(queryID: "all", options: options) }
        #expect(try await phone.table().query().items.count == 5)
        #expect(try await phone.context.unfinishedPulls() == [])
        // The rows come with the next pull.
        try await phone.table().pull(queryID: "all", options: options)
        #expect(try await phone.context.unfinishedPulls() == [])
    }

    /// A file an eager device cannot have (the server holds other content than its row says) is
    /// reported and left `remote`: the pull succeeds and the table's other files come (it failed
    /// every pull of the table).
    @Test(arguments: StoreKind.allCases)
    func aFileThatCannotBeHadDoesNotFailThePull(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let remote = ModelAttachmentServer(items: server)
        server.seed("todo", [["id": "a"]])
        remote.seed("todo", "a", "bad", bytes: pattern(50), sha256: String(repeating: "0", count: 64))
        let phone = try await AttachmentDevice("phone", kind: kind, server: server, attachments: remote)
        try await phone.table().insert(["id": "b"])
        try await phone.table().attach(file: try phone.file(pattern(60, seed: 9)), to: "b", name: "good")
        try await phone.context.push()
        let laptop = try await AttachmentDevice(
            "laptop", kind: kind, server: server, attachments: remote, downloads: .eager)
        let failures = laptop.context.events(bufferingNewest: 50)
        try await laptop.table().pull()
        #expect(try await laptop.attachment("a", "bad")?.state == .remote)
        #expect(try await laptop.attachment("b", "good")?.state == .downloaded)
        var failed: [String] = []
        for await event in failures {
            if case .attachmentFailed(let transfer, _) = event { failed.append(transfer.name) }
            if case .pullFinished = event { break }
        }
        #expect(failed == ["bad"])
        try await laptop.table().pull()
    }

    /// A push that sends only files is a sync: the store's last sync time moves.
    @Test func aPushOfFilesOnlyRecordsASync() async throws {
        let server = ModelServer()
        let remote = ModelAttachmentServer(items: server)
        let phone = try await AttachmentDevice("phone", kind: .memory, server: server, attachments: remote)
        try await phone.table().insert(["id": "a"])
        try await phone.context.push()
        let first = try #require(try await phone.context.lastSyncedAt())
        try await Task.sleep(for: .milliseconds(20))
        try await phone.table().attach(file: try phone.file(pattern(10)), to: "a", name: "f")
        let result = try await phone.context.push()
        #expect(result.pushed == 0 && result.attachmentsTransferred == 1)
        let second = try #require(try await phone.context.lastSyncedAt())
        #expect(second > first)
    }
}

@Suite("Attachments: the sync status")
struct AttachmentStatusTests {
    @Test func queuedFilesKeepTheStatusFromSayingEverythingIsSynced() async throws {
        var snapshot = SyncStatus.Snapshot()
        snapshot.isCaughtUp = true
        snapshot.pendingAttachments = 2
        #expect(snapshot.summary == "2 files waiting to be sent")

        let server = ModelServer()
        let remote = ModelAttachmentServer(items: server)
        let phone = try await AttachmentDevice("phone", kind: .memory, server: server, attachments: remote)
        try await phone.table().insert(["id": "a"])
        remote.failNext(.upload, count: 1_000)  // the server refuses the file, again and again
        await phone.context.startAutomaticSync(
            [SyncSubscription(table: "todo")], configuration: AutomaticSyncTests.fast)
        try await phone.table().attach(file: try phone.file(pattern(10)), to: "a", name: "f")
        try await eventually("the item is pushed and the upload tried") { remote.log.count >= 2 }
        try await eventually("the status counts the queued file") {
            let status = phone.context.status.snapshot
            return status.pendingAttachments == 1 && status.pendingOperations == 0 && !status.isCaughtUp
        }
        await phone.context.stopAutomaticSync()
    }

    /// `queuedAttachments()`: the uploads and deletes a push would run, without automatic sync.
    @Test func theQueuedFilesAreListedInQueueOrder() async throws {
        let server = ModelServer()
        let remote = ModelAttachmentServer(items: server)
        let phone = try await AttachmentDevice("phone", kind: .memory, server: server, attachments: remote)
        #expect(try await phone.context.queuedAttachments().isEmpty)
        try await phone.table().insert(["id": "a"])
        try await phone.table().attach(file: try phone.file(pattern(10)), to: "a", name: "f")
        try await phone.table().attach(file: try phone.file(pattern(20)), to: "a", name: "g")
        #expect(try await phone.context.queuedAttachments().map(\.name) == ["f", "g"])
        try await phone.context.push()
        #expect(try await phone.context.queuedAttachments().isEmpty)
        try await phone.table().removeAttachment(of: "a", name: "f")
        #expect(try await phone.context.queuedAttachments().map { "\($0.name) \($0.state)" } == ["f pendingDelete"])
    }
}
