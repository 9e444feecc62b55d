import Foundation
import SyncCore
import Transport

// Attachments pass through the switch too: offline, nothing leaves the device. A transfer the server
// refused because it does not offer attachments says so in Transport (`AttachmentsNotOffered`
// underneath), for every app, not only this one.
extension Connectivity: RemoteAttachments {
    func attachments() throws(RemoteError) -> any RemoteAttachments {
        guard let remote = try check() as? any RemoteAttachments else {
            throw RemoteError(.notFound, "this remote does not take attachments", underlying: Gate.noAttachments)
        }
        return remote
    }

    func uploadAttachment(
        table: String, itemID: String, name: String, file: URL, contentType: String?, sha256: String,
        progress: @escaping @Sendable (Int64, Int64) -> Void
    ) async throws {
        let remote = try attachments()
        try await remote.uploadAttachment(
            table: table, itemID: itemID, name: name, file: file, contentType: contentType, sha256: sha256,
            progress: progress)
    }

    func downloadAttachment(
        table: String, itemID: String, name: String, to file: URL,
        progress: @escaping @Sendable (Int64, Int64) -> Void
    ) async throws {
        let remote = try attachments()
        try await remote.downloadAttachment(table: table, itemID: itemID, name: name, to: file, progress: progress)
    }

    func deleteAttachment(table: String, itemID: String, name: String, sha256: String?) async throws {
        let remote = try attachments()
        try await remote.deleteAttachment(table: table, itemID: itemID, name: name, sha256: sha256)
    }

    func attachmentRows(table: String, query: TableQuery) async throws -> RemotePage {
        try await attachments().attachmentRows(table: table, query: query)
    }
}
