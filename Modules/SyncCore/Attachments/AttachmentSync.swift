public import Foundation
import Logging

/// The attachment work of the engine: uploads and deletes after a push's operations, the rows and
/// eager downloads after a pull, on-demand downloads, and the cache's eviction.
extension SyncContext {
    /// Turns attachments on: files go to `configuration.files`, and pushes and pulls (manual and
    /// automatic) move them through `configuration.remote`.
    ///
    /// ```swift
    /// await context.useAttachments(AttachmentConfiguration(
    ///     files: try DiskAttachmentFiles(directory: directory), remote: remote, downloads: ["photo": .eager]))
    /// ```
    public func useAttachments(_ configuration: AttachmentConfiguration) {
        attachmentConfiguration = configuration
    }

    /// The gate that keeps the files directory and the rows that point at it in step (an import and
    /// its row, an eviction and its rows).
    static let filesGate = "attachment-files"

    func requireAttachments() throws(SyncError) -> AttachmentConfiguration {
        guard let attachmentConfiguration else {
            throw SyncError(
                .attachmentsNotConfigured, "attachments are not configured: call SyncContext.useAttachments(_:) first")
        }
        return attachmentConfiguration
    }

    /// Copies a file into the attachments directory (hashing it as it streams), for
    /// ``LocalWrites/attach(_:to:in:name:contentType:)``.
    ///
    /// ```swift
    /// let scan = try await context.importAttachment(from: scanURL)
    /// try await context.write { writes in
    ///     let note = try writes.insert(["title": "Receipt"], into: "notes")
    ///     try writes.attach(scan, to: note["id"]!.stringValue!, in: "notes", name: "scan.pdf")
    /// }
    /// ```
    public func importAttachment(from file: URL) async throws(SyncError) -> ImportedFile {
        let files = try requireAttachments().files
        do {
            return try await files.importFile(at: file, moving: false)
        } catch {
            throw SyncError(
                .attachmentFile, "cannot import '\(file.lastPathComponent)': \(FileProblem.reason(error))",
                underlying: error)
        }
    }

    /// Removes the files no attachment refers to: content imported for a write that then failed or
    /// never ran (the app was killed between ``importAttachment(from:)`` and its write). Files written
    /// less than `olderThan` ago are kept, so that an import whose write is still to come is safe; run
    /// it now and then (at launch, say). Returns how many files it removed.
    ///
    /// ```swift
    /// let removed = try await context.sweepAttachmentFiles()
    /// ```
    @discardableResult
    public func sweepAttachmentFiles(olderThan grace: Duration = .seconds(3600)) async throws(SyncError) -> Int {
        let files = try requireAttachments().files
        do {
            return try await holding([Self.filesGate]) {
                let contents = try await files.storedContents()
                let referenced = try await read("sweep attachment files") { reader in
                    Set(try AttachmentQueue.rows(reader, nil).map(\.attachment).filter(\.isLocal).map(\.sha256))
                }
                let (seconds, attoseconds) = grace.components
                let limit =
                    ItemFields.now().millisecondsSince1970 - seconds * 1000 - attoseconds / 1_000_000_000_000_000
                var removed = 0
                for content in contents
                where !referenced.contains(content.sha256) && content.modifiedAt.millisecondsSince1970 < limit {
                    try await files.remove(sha256: content.sha256)
                    removed += 1
                }
                return removed
            }
        } catch {
            throw SyncError(.attachmentFile, "sweeping the attachment files failed: \(error)", underlying: error)
        }
    }

    /// The attachment uploads and deletes waiting for a push, in queue order (every table's).
    ///
    /// ```swift
    /// let waiting = try await context.queuedAttachments().count  // "3 files waiting to be sent"
    /// ```
    public func queuedAttachments() async throws(SyncError) -> [ItemAttachment] {
        try await read("queued attachments") { try AttachmentQueue.queued(in: $0) }
    }

    // MARK: - Push

    /// Runs the queued uploads and deletes in queue order, each after its item's insert was pushed
    /// (an attachment of an item whose insert is still queued waits for a later push). The upload of
    /// an item deleted meanwhile is dropped (the server deletes an item's attachments with it).
    ///
    /// A failure leaves its attachment queued. One the whole push shares (offline, unauthorized,
    /// cancelled) stops at once; another (the server refused one file) lets the rest run, and the
    /// first such failure is thrown at the end, so one file never holds the others back.
    func pushAttachments(into result: inout PushResult) async throws {
        guard let configuration = attachmentConfiguration else { return }
        let queued = try await read("push attachments") { try AttachmentQueue.queued(in: $0) }
        var firstFailure: SyncError?
        for attachment in queued {
            try checkCancellation("push of attachments")
            let (waits, gone) = try await read("push attachments") { reader in
                (
                    try AttachmentQueue.insertQueued(table: attachment.table, itemID: attachment.itemID, in: reader),
                    try reader.item(attachment.table, id: attachment.itemID) == nil
                )
            }
            if waits { continue }
            let direction: AttachmentTransfer.Direction = attachment.state == .pendingUpload ? .upload : .delete
            let transfer = AttachmentTransfer(
                direction, table: attachment.table, itemID: attachment.itemID, name: attachment.name)
            if gone && attachment.state == .pendingUpload {
                if try await removeRow(attachment, in: .pendingUpload, onlyWithoutItem: true, configuration) {
                    result.attachmentsDropped.append(transfer)
                }
                continue
            }
            do {
                if attachment.state == .pendingUpload {
                    try await upload(attachment, transfer, configuration)
                } else {
                    try await configuration.remote.deleteAttachment(
                        table: attachment.table, itemID: attachment.itemID, name: attachment.name,
                        sha256: attachment.sha256)
                    try await removeRow(attachment, in: .pendingDelete, onlyWithoutItem: false, configuration)
                }
            } catch let error as RemoteError where error.status == 410 {
                // The item was deleted on the server (another device), and its attachments with
                // it: an upload has nothing to belong to and is dropped, as a local delete drops
                // it; a delete has nothing left to do. Either failed every push until a pull
                // brought the item's delete.
                if direction == .upload {
                    try await removeRow(attachment, in: .pendingUpload, onlyWithoutItem: false, configuration)
                    result.attachmentsDropped.append(transfer)
                } else {
                    try await removeRow(attachment, in: .pendingDelete, onlyWithoutItem: false, configuration)
                }
                hub.logger.info(
                    "\(transfer) settled: the item was deleted on the server", metadata: ["ferry.status": "410"])
                continue
            } catch let error as RemoteError where error.status == 412 && direction == .delete {
                // Another device replaced the file since this one removed it: the newer file is not
                // this device's to delete, and stays; the next pull brings it back. It counted as
                // sent, and the file came back with nothing said.
                try await removeRow(attachment, in: .pendingDelete, onlyWithoutItem: false, configuration)
                result.attachmentsSuperseded.append(transfer)
                hub.logger.info(
                    "\(transfer) settled: another device replaced the file since; it stays",
                    metadata: ["ferry.status": "412"])
                continue
            } catch {
                let error = Self.transferError(error, transfer)
                hub.emit(.attachmentFailed(transfer, message: error.message))
                if [.network, .unauthorized, .cancelled, .store].contains(error.code) { throw error }
                firstFailure = firstFailure ?? error
                continue
            }
            hub.emit(.attachmentTransferred(transfer))
            result.attachmentsTransferred += 1
        }
        if let firstFailure { throw firstFailure }
    }

    /// Removes the queue row of `attachment` while it is still in `state` (and, with
    /// `onlyWithoutItem`, while its item no longer exists locally), and its file when no other row
    /// uses the content: a pending upload of a deleted item is forgotten, a delete the server took
    /// is settled.
    @discardableResult
    private func removeRow(
        _ attachment: ItemAttachment, in state: AttachmentState, onlyWithoutItem: Bool,
        _ configuration: AttachmentConfiguration
    ) async throws -> Bool {
        try await holding([Self.filesGate]) {
            let (removed, unused) = try await write("remove the queue row of an attachment") { tx -> (Bool, Bool) in
                guard
                    let row = try AttachmentQueue.find(
                        table: attachment.table, itemID: attachment.itemID, name: attachment.name, in: tx),
                    row.attachment.state == state, row.attachment.sha256 == attachment.sha256,
                    try !onlyWithoutItem || tx.item(attachment.table, id: attachment.itemID) == nil
                else { return (false, false) }
                try tx.delete(AttachmentQueue.table, ids: [row.id])
                return (true, try !AttachmentQueue.contentInUse(attachment.sha256, except: nil, in: tx))
            }
            if unused { try await configuration.files.remove(sha256: attachment.sha256) }
            return removed
        }
    }

    /// A transfer's failure as a ``SyncError``: the engine's and the remote's own errors as they map,
    /// anything else the remote threw as ``SyncError/Code/remote``. The message names the transfer
    /// once: a remote's message that names the attachment already (Transport's do: "uploading
    /// attachment 'scan.pdf' of 'notes/a1': …") is kept as it is, others get the transfer in front.
    static func transferError(_ error: any Error, _ transfer: AttachmentTransfer) -> SyncError {
        if error is SyncError || error is RemoteError || error is CancellationError || error is StoreError {
            var wrapped = SyncError.wrapping(error, "\(transfer)")
            if let remote = error as? RemoteError, remote.code != .cancelled,
                remote.message.contains(transfer.subject)
            {
                wrapped.message = "\(remote)"
            }
            return wrapped
        }
        return SyncError(.remote, "\(transfer): \(error)", underlying: error)
    }

    private func upload(
        _ attachment: ItemAttachment, _ transfer: AttachmentTransfer, _ configuration: AttachmentConfiguration
    ) async throws {
        guard let file = await configuration.files.url(sha256: attachment.sha256) else {
            throw SyncError(
                .attachmentFile,
                "the file of attachment '\(attachment.name)' of '\(attachment.table)/\(attachment.itemID)' is missing "
                    + "from the attachments directory")
        }
        // A copy damaged on the device (a flipped byte) was sent in full on every push, for the
        // server to refuse it each time: it is reported instead, and stays queued.
        guard try await configuration.files.holdsIntact(sha256: attachment.sha256) else {
            throw SyncError(
                .attachmentFile,
                "the file of attachment '\(attachment.name)' of '\(attachment.table)/\(attachment.itemID)' is damaged: "
                    + "its bytes no longer have the SHA-256 they had when it was attached; attach the file again, or "
                    + "remove the attachment"
            )
        }
        let hub = hub
        try await configuration.remote.uploadAttachment(
            table: attachment.table, itemID: attachment.itemID, name: attachment.name, file: file,
            contentType: attachment.contentType, sha256: attachment.sha256,
            progress: { hub.emit(.attachmentProgress(transfer, bytes: $0, total: $1)) })
        try await write("record an upload") { tx in
            // Only if nothing changed it meanwhile (attached again, removed).
            guard
                var row = try AttachmentQueue.find(
                    table: attachment.table, itemID: attachment.itemID, name: attachment.name, in: tx)?.attachment,
                row.state == .pendingUpload, row.sha256 == attachment.sha256
            else { return }
            row.state = .uploaded
            try AttachmentQueue.save(row, in: tx)
        }
        try await trimAttachmentCache()
    }

    // MARK: - Pull

    /// The query id under which a table's attachment rows keep their delta token (beside the
    /// tokens of the table's own queries, in ``StoreReader/deltaTokens(table:)``).
    public static let attachmentRowsQueryID = "$attachments"
    /// Attachment rows per request.
    static let attachmentPageSize = 100

    /// Brings the table's attachment rows since the last time (as `remote` rows), then downloads
    /// their files when the table downloads eagerly.
    func pullAttachments(_ table: String) async throws {
        guard let configuration = attachmentConfiguration else { return }
        let queryID = Self.attachmentRowsQueryID
        var token = try await read("pull attachments") { try $0.deltaToken(table: table, queryID: queryID) }
            .flatMap(DeltaToken.init(stored:))
        while true {
            try checkCancellation("pull of attachments of '\(table)'")
            let request = TableQuery(
                filter: PullPlan.filter(nil, after: token), orderBy: [.field("updatedAt"), .field("id")],
                top: Self.attachmentPageSize, includeDeleted: true)
            let page = try await configuration.remote.attachmentRows(table: table, query: request)
            if page.items.isEmpty { break }
            let next = try PullPlan.deltaToken(after: page.items, previous: token, filter: "", table: table)
            let stored = next.stored
            let items = page.items
            try await holding([Self.filesGate]) {
                let unused = try await write("pull attachments") { tx in
                    let unused = try AttachmentPull.apply(items, table: table, in: tx)
                    try tx.setDeltaToken(table: table, queryID: queryID, value: stored)
                    return unused
                }
                for sha256 in unused { try await configuration.files.remove(sha256: sha256) }
            }
            token = next
            if items.count < Self.attachmentPageSize && page.nextPage == nil { break }
        }
        guard configuration.downloads(for: table) == .eager else { return }
        // The files of the items this device holds: a row of an item it does not hold (deleted on
        // the server, whose rows stay there for an undelete; or not pulled here) downloads when
        // its item comes, or on demand. Before, a deleted item's file answered 410 and every pull
        // failed on it.
        let waiting = try await read("pull attachments") { reader in
            let rows = try AttachmentQueue.attachments(in: .remote, table: table, in: reader)
            let held = try reader.items(table, ids: Array(Set(rows.map(\.itemID))))
            return rows.filter { held[ItemID.Key($0.itemID)] != nil }
        }
        for attachment in waiting {
            try checkCancellation("download of attachments of '\(table)'")
            do {
                try await download(attachment, configuration)
            } catch let error as SyncError where ![.network, .unauthorized, .cancelled, .store].contains(error.code) {
                // A file that cannot be had now (its item deleted on the server since this pull's
                // items, no such file there, content that does not match its row) is reported
                // (`attachmentFailed`) and stays `remote`, for the next pull or an open: the
                // pull's items are in, and the table's other files come. Before, such a file
                // failed every pull of the table.
                continue
            }
        }
    }

    /// Frees the files of the attachments of items that left this device: removed by a pull
    /// because the server deleted them, deleted by a push, or purged. Their rows stay, `remote`, as
    /// the server keeps a soft-deleted item's attachments for an undelete (the item's return brings
    /// the files back, eagerly or on demand). Files still queued here are left to the push, which
    /// drops them on the server's 410 or with their deleted item. A failure is logged, not thrown:
    /// the pull's page, the push or the purge stands, and the files stay as they were.
    func freeAttachmentFiles(of itemIDs: [String], table: String) async {
        guard let configuration = attachmentConfiguration else { return }
        do {
            try await freeAttachmentFiles(of: itemIDs, table: table, configuration)
        } catch {
            hub.logger.warning(
                "the files of the attachments of removed items were not freed",
                metadata: ["ferry.table": "\(table)", "ferry.error": "\(error)"])
        }
    }

    /// ``freeAttachmentFiles(of:table:)`` of any number of items (those of a push's deletes, of a
    /// purge), in pieces of a pull's page at most: one query of the attachment rows each.
    func freeAttachmentFiles(ofMany itemIDs: [String], table: String) async {
        guard attachmentConfiguration != nil else { return }
        for start in stride(from: 0, to: itemIDs.count, by: 500) {
            await freeAttachmentFiles(of: Array(itemIDs[start..<min(start + 500, itemIDs.count)]), table: table)
        }
    }

    private func freeAttachmentFiles(
        of itemIDs: [String], table: String, _ configuration: AttachmentConfiguration
    ) async throws {
        try await holding([Self.filesGate]) {
            let unused = try await write("free the attachment files of deleted items") { tx -> Set<String> in
                let filter =
                    QueryExpression.field("table").eq(table)
                    && .isIn(.field("itemID"), itemIDs.map { .literal(.string($0)) })
                var released: Set<String> = []
                for (_, attachment) in try AttachmentQueue.rows(tx, filter)
                where attachment.state.hasLocalFile && !attachment.state.isQueued {
                    var row = attachment
                    row.state = .remote
                    try AttachmentQueue.save(row, in: tx)
                    released.insert(attachment.sha256)
                }
                return released.filter { (try? AttachmentQueue.contentInUse($0, except: nil, in: tx)) == false }
            }
            for sha256 in unused { try await configuration.files.remove(sha256: sha256) }
        }
    }

    // MARK: - Downloads and the cache

    /// Downloads an attachment's file and records it as downloaded. The file is hashed as it is
    /// imported; content that does not match the row's SHA-256 is refused.
    func download(_ attachment: ItemAttachment, _ configuration: AttachmentConfiguration) async throws {
        let transfer = AttachmentTransfer(
            .download, table: attachment.table, itemID: attachment.itemID, name: attachment.name)
        let hub = hub
        do {
            let temporary = try await configuration.files.temporaryURL()
            do {
                try await configuration.remote.downloadAttachment(
                    table: attachment.table, itemID: attachment.itemID, name: attachment.name, to: temporary,
                    progress: { hub.emit(.attachmentProgress(transfer, bytes: $0, total: $1)) })
            } catch {
                await configuration.files.discardTemporary(temporary)
                throw error
            }
            try await holding([Self.filesGate]) {
                let imported: ImportedFile
                do {
                    imported = try await configuration.files.importFile(at: temporary, moving: true)
                } catch {
                    await configuration.files.discardTemporary(temporary)
                    throw error
                }
                let kept = try await write("record a download") { tx -> Bool in
                    guard
                        var row = try AttachmentQueue.find(
                            table: attachment.table, itemID: attachment.itemID, name: attachment.name, in: tx
                        )?.attachment, row.sha256 == imported.sha256
                    else { return try AttachmentQueue.contentInUse(imported.sha256, except: nil, in: tx) }
                    if row.state == .remote { row.state = .downloaded }
                    row.lastUsed = ItemFields.now()
                    try AttachmentQueue.save(row, in: tx)
                    return true
                }
                if !kept { try await configuration.files.remove(sha256: imported.sha256) }
                guard imported.sha256 == attachment.sha256 else {
                    throw SyncError(
                        .invalidResponse,
                        "the server sent content with SHA-256 \(imported.sha256) for attachment '\(attachment.name)', "
                            + "which should be \(attachment.sha256)")
                }
            }
        } catch {
            let error = Self.transferError(error, transfer)
            hub.emit(.attachmentFailed(transfer, message: error.message))
            throw error
        }
        hub.emit(.attachmentTransferred(transfer))
        try await trimAttachmentCache()
    }

    /// Evicts synced, unpinned files, least recently used first, until they fit
    /// ``AttachmentConfiguration/cacheLimit``. Pending uploads and pinned files are never evicted
    /// and do not count. Returns how many contents it removed; an evicted attachment becomes
    /// ``AttachmentState/remote`` and downloads again when opened.
    ///
    /// Uploads, downloads and unpinning trim the cache by themselves; call it after lowering the
    /// limit, or when the system asks the app to free space.
    @discardableResult
    public func trimAttachmentCache() async throws(SyncError) -> Int {
        guard let configuration = attachmentConfiguration else { return 0 }
        do {
            return try await trimAttachmentCache(configuration)
        } catch {
            throw SyncError.wrapping(error, "trim the attachment cache")
        }
    }

    private func trimAttachmentCache(_ configuration: AttachmentConfiguration) async throws -> Int {
        return try await holding([Self.filesGate]) {
            let victims = try await write("evict attachment files") { tx in
                try AttachmentCache.evict(limit: configuration.cacheLimit, in: tx)
            }
            for sha256 in victims { try await configuration.files.remove(sha256: sha256) }
            return victims.count
        }
    }
}
