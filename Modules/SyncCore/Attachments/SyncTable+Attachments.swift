public import Foundation

/// Attachments: files that belong to this table's items, queued for upload in the same transaction
/// as the row that records them, downloaded eagerly or on demand (``AttachmentConfiguration``).
///
/// ```swift
/// let photos = context.table("photo")
/// let item = try await photos.insert(["caption": "Harbour"])
/// try await photos.attach(file: pictureURL, to: item.id!, name: "full.jpg", contentType: "image/jpeg")
/// try await context.push()  // the insert, then the upload
/// let url = try await photos.openAttachment(of: item.id!, name: "full.jpg")
/// ```
extension SyncTable {
    /// Attaches a file to a stored item under `name` (replacing an attachment of that name) and queues
    /// its upload; the next push uploads it after the item's insert. The file is copied into the
    /// attachments directory (hashed as it streams), so the app may delete its own copy.
    ///
    /// Throws ``SyncError/Code/itemNotFound`` when the item is not stored locally,
    /// ``SyncError/Code/invalidAttachmentName``, ``SyncError/Code/attachmentFile`` when the file
    /// cannot be read or stored, ``SyncError/Code/attachmentsNotConfigured``.
    @discardableResult
    public func attach(file: URL, to itemID: String, name: String, contentType: String? = nil)
        async throws(SyncError) -> ItemAttachment
    {
        try StoreValidation.validateTableName(name: self.name)
        let name = AttachmentName.normalized(name)
        try AttachmentName.validate(name)
        let table = self.name
        let context = context
        return try await engine("attach '\(name)' to '\(table)/\(itemID)'") {
            let files = try await context.requireAttachments().files
            return try await context.holding([SyncContext.filesGate]) {
                let imported = try await context.importAttachment(from: file)
                do {
                    let (attachment, released) = try await context.write("attach '\(name)'") { tx in
                        guard try tx.item(table, id: itemID) != nil else {
                            throw SyncError(.itemNotFound, "no item '\(itemID)' in '\(table)' to attach '\(name)' to")
                        }
                        return try AttachmentEdits.attach(
                            imported, to: itemID, in: table, name: name,
                            contentType: contentType, in: tx)
                    }
                    if let released { try await files.remove(sha256: released) }
                    return attachment
                } catch {
                    let unused = try? await context.read("attach") {
                        try !AttachmentQueue.contentInUse(imported.sha256, except: nil, in: $0)
                    }
                    if unused == true { try? await files.remove(sha256: imported.sha256) }
                    throw error
                }
            }
        }
    }

    /// The item's attachments, by name (those being removed included, as ``AttachmentState/pendingDelete``).
    public func attachments(of itemID: String) async throws(SyncError) -> [ItemAttachment] {
        try StoreValidation.validateTableName(name: name)
        let table = name
        return try await context.read("list attachments of '\(table)/\(itemID)'") {
            try AttachmentQueue.attachments(of: itemID, table: table, in: $0)
        }
    }

    /// The local file of an attachment, downloaded first when it is not on the device. The URL is in
    /// the attachments directory: read it, do not move or change it; ``pin(_:of:name:)`` keeps the
    /// cache from evicting it.
    ///
    /// Throws ``SyncError/Code/attachmentNotFound`` when the item has no such attachment, and the
    /// download's errors (``SyncError/Code/network`` …) when it must download.
    public func openAttachment(of itemID: String, name: String) async throws(SyncError) -> URL {
        try StoreValidation.validateTableName(name: self.name)
        let name = AttachmentName.normalized(name)
        let table = self.name
        let context = context
        return try await engine("open attachment '\(name)' of '\(table)/\(itemID)'") {
            let configuration = try await context.requireAttachments()
            for _ in 0..<2 {
                let found = try await context.write("open attachment") { tx -> ItemAttachment? in
                    guard
                        var row = try AttachmentQueue.find(table: table, itemID: itemID, name: name, in: tx)?
                            .attachment,
                        row.state != .pendingDelete
                    else { return nil }
                    row.lastUsed = ItemFields.now()
                    try AttachmentQueue.save(row, in: tx)
                    return row
                }
                guard let found else {
                    throw SyncError(.attachmentNotFound, "'\(table)/\(itemID)' has no attachment '\(name)'")
                }
                if found.isLocal, let url = await configuration.files.url(sha256: found.sha256) { return url }
                try await context.download(found, configuration)
            }
            throw SyncError(.attachmentFile, "the file of attachment '\(name)' was evicted as soon as it arrived")
        }
    }

    /// Removes an attachment and queues its delete on the server (an attachment of an item the server
    /// never saw goes at once). Throws ``SyncError/Code/attachmentNotFound`` when there is none.
    public func removeAttachment(of itemID: String, name: String) async throws(SyncError) {
        try StoreValidation.validateTableName(name: self.name)
        let name = AttachmentName.normalized(name)
        let table = self.name
        let context = context
        try await engine("remove attachment '\(name)' of '\(table)/\(itemID)'") {
            let configuration = try await context.requireAttachments()
            try await context.holding([SyncContext.filesGate]) {
                let released = try await context.write("remove attachment") { tx in
                    try AttachmentEdits.remove(itemID: itemID, in: table, name: name, in: tx)
                }
                if let released { try await configuration.files.remove(sha256: released) }
            }
        }
    }

    /// Pins an attachment (the cache never evicts its file) or unpins it.
    public func pin(_ pinned: Bool = true, of itemID: String, name: String) async throws(SyncError) {
        try StoreValidation.validateTableName(name: self.name)
        let name = AttachmentName.normalized(name)
        let table = self.name
        try await engine("pin attachment '\(name)' of '\(table)/\(itemID)'") {
            try await context.write("pin attachment") { tx in
                guard var row = try AttachmentQueue.find(table: table, itemID: itemID, name: name, in: tx)?.attachment
                else { throw SyncError(.attachmentNotFound, "'\(table)/\(itemID)' has no attachment '\(name)'") }
                row.pinned = pinned
                try AttachmentQueue.save(row, in: tx)
            }
            if !pinned { try await context.trimAttachmentCache() }
        }
    }

    private func engine<Result>(_ what: String, _ body: () async throws -> Result) async throws(SyncError) -> Result {
        do {
            return try await body()
        } catch {
            throw SyncError.wrapping(error, what)
        }
    }
}

extension LocalWrites {
    /// Attaches an imported file (``SyncContext/importAttachment(from:)``) to an item, in this write's
    /// transaction: an item inserted in the same write and its attachment commit together, and the
    /// upload follows the insert.
    ///
    /// Replacing an attachment leaves the previous content's file for the cache to reclaim.
    @discardableResult
    public func attach(
        _ file: ImportedFile, to itemID: String, in table: String, name: String, contentType: String? = nil
    )
        throws(SyncError) -> ItemAttachment
    {
        let name = AttachmentName.normalized(name)
        try AttachmentName.validate(name)
        let tx = transaction
        return try run(table) {
            guard try tx.item(table, id: itemID) != nil else {
                throw SyncError(.itemNotFound, "no item '\(itemID)' in '\(table)' to attach '\(name)' to")
            }
            return try AttachmentEdits.attach(file, to: itemID, in: table, name: name, contentType: contentType, in: tx)
                .0
        }
    }
}

/// The store side of the attachment API.
enum AttachmentEdits {
    /// Saves a pending upload; returns it and the previous content when no row keeps its file any more.
    static func attach(
        _ file: ImportedFile, to itemID: String, in table: String, name: String, contentType: String?,
        in tx: any StoreTransaction
    ) throws -> (ItemAttachment, String?) {
        let previous = try AttachmentQueue.find(table: table, itemID: itemID, name: name, in: tx)?.attachment
        let attachment = ItemAttachment(
            table: table, itemID: itemID, name: name, sha256: file.sha256, size: file.size, contentType: contentType,
            state: .pendingUpload, pinned: previous?.pinned ?? false, lastUsed: ItemFields.now(),
            sequence: try AttachmentQueue.nextSequence(in: tx))
        try AttachmentQueue.save(attachment, in: tx)
        var released: String?
        if let previous, previous.sha256 != file.sha256, previous.state.hasLocalFile,
            try !AttachmentQueue.contentInUse(previous.sha256, except: nil, in: tx)
        {
            released = previous.sha256
        }
        return (attachment, released)
    }

    /// Queues the delete (or drops the row of an item the server never saw); returns the content when
    /// no row keeps its file any more.
    static func remove(itemID: String, in table: String, name: String, in tx: any StoreTransaction) throws -> String? {
        guard let (id, row) = try AttachmentQueue.find(table: table, itemID: itemID, name: name, in: tx),
            row.state != .pendingDelete
        else { throw SyncError(.attachmentNotFound, "'\(table)/\(itemID)' has no attachment '\(name)'") }
        if try AttachmentQueue.insertQueued(table: table, itemID: itemID, in: tx) {
            try tx.delete(AttachmentQueue.table, ids: [id])
        } else {
            var deleting = row
            deleting.state = .pendingDelete
            deleting.sequence = try AttachmentQueue.nextSequence(in: tx)
            try AttachmentQueue.save(deleting, in: tx)
        }
        guard row.state.hasLocalFile, try !AttachmentQueue.contentInUse(row.sha256, except: nil, in: tx) else {
            return nil
        }
        return row.sha256
    }
}

extension StoreValidation {
    /// An app's table name, as a ``SyncError``.
    static func validateTableName(name: String) throws(SyncError) {
        do {
            try validateTableName(name)
        } catch {
            throw SyncError.invalidTableName(error)
        }
    }
}

/// The attachment API of ``SyncTable`` on a typed table, by item id.
///
/// ```swift
/// let notes = context.table("notes", of: Note.self)
/// try await notes.attach(file: scanURL, to: note.id!, name: "scan.pdf")
/// ```
extension TypedSyncTable {
    /// See ``SyncTable/attach(file:to:name:contentType:)``.
    @discardableResult
    public func attach(file: URL, to itemID: String, name: String, contentType: String? = nil)
        async throws(SyncError) -> ItemAttachment
    {
        try await table.attach(file: file, to: itemID, name: name, contentType: contentType)
    }

    /// See ``SyncTable/attachments(of:)``.
    public func attachments(of itemID: String) async throws(SyncError) -> [ItemAttachment] {
        try await table.attachments(of: itemID)
    }

    /// See ``SyncTable/openAttachment(of:name:)``.
    public func openAttachment(of itemID: String, name: String) async throws(SyncError) -> URL {
        try await table.openAttachment(of: itemID, name: name)
    }

    /// See ``SyncTable/removeAttachment(of:name:)``.
    public func removeAttachment(of itemID: String, name: String) async throws(SyncError) {
        try await table.removeAttachment(of: itemID, name: name)
    }

    /// See ``SyncTable/pin(_:of:name:)``.
    public func pin(_ pinned: Bool = true, of itemID: String, name: String) async throws(SyncError) {
        try await table.pin(pinned, of: itemID, name: name)
    }
}
