public import Foundation

/// A typed table of models with `UUID` ids takes those ids as they are. An item stores a UUID as
/// the wire writes it, in lower case, so a lookup by `uuidString` (upper case) found nothing.
///
/// ```swift
/// let chore = try await chores.insert(Chore(title: "Bins"))
/// let again = try await chores.item(id: chore.id)
/// try await chores.attach(file: photoURL, to: chore.id, name: "photo.jpg")
/// ```
extension TypedSyncTable where Item: SyncModel, Item.ID == UUID {
    /// The local model with `id`, or `nil` (as the `String` overload).
    public func item(id: UUID) async throws(SyncError) -> Item? {
        try await item(id: id.wireText)
    }

    /// Deletes the model with `id` and queues a delete.
    public func delete(id: UUID) async throws(SyncError) {
        try await delete(id: id.wireText)
    }

    /// See ``SyncTable/attach(file:to:name:contentType:)``.
    @discardableResult
    public func attach(file: URL, to itemID: UUID, name: String, contentType: String? = nil)
        async throws(SyncError) -> ItemAttachment
    {
        try await attach(file: file, to: itemID.wireText, name: name, contentType: contentType)
    }

    /// See ``SyncTable/attachments(of:)``.
    public func attachments(of itemID: UUID) async throws(SyncError) -> [ItemAttachment] {
        try await attachments(of: itemID.wireText)
    }

    /// See ``SyncTable/openAttachment(of:name:)``.
    public func openAttachment(of itemID: UUID, name: String) async throws(SyncError) -> URL {
        try await openAttachment(of: itemID.wireText, name: name)
    }

    /// See ``SyncTable/removeAttachment(of:name:)``.
    public func removeAttachment(of itemID: UUID, name: String) async throws(SyncError) {
        try await removeAttachment(of: itemID.wireText, name: name)
    }
}
