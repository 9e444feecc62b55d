import Foundation
import SyncCore
import Transport

// Attachments pass through the switch too: offline, nothing leaves the device, and a transfer the
// server refused because it does not offer attachments says so (RemoteError with
// `Gate.noAttachments` underneath), not the route's 404.
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
        try await diagnosed(remote) {
            try await remote.uploadAttachment(
                table: table, itemID: itemID, name: name, file: file, contentType: contentType, sha256: sha256,
                progress: progress)
        }
    }

    func downloadAttachment(
        table: String, itemID: String, name: String, to file: URL,
        progress: @escaping @Sendable (Int64, Int64) -> Void
    ) async throws {
        let remote = try attachments()
        try await diagnosed(remote) {
            try await remote.downloadAttachment(table: table, itemID: itemID, name: name, to: file, progress: progress)
        }
    }

    func deleteAttachment(table: String, itemID: String, name: String, sha256: String?) async throws {
        let remote = try attachments()
        try await diagnosed(remote) {
            try await remote.deleteAttachment(table: table, itemID: itemID, name: name, sha256: sha256)
        }
    }

    func attachmentRows(table: String, query: TableQuery) async throws -> RemotePage {
        try await attachments().attachmentRows(table: table, query: query)
    }

    /// Runs a transfer; when the server refused it (not a network failure) and does not list
    /// attachments among its capabilities, the failure says that instead.
    private func diagnosed(_ remote: any RemoteAttachments, _ transfer: () async throws -> Void) async throws {
        do {
            try await transfer()
        } catch let error as RemoteError where error.code != .network && error.code != .unauthorized {
            if let http = remote as? HTTPRemote, await !http.offersAttachments() {
                throw RemoteError(
                    .notFound, "the server does not offer attachments", underlying: Gate.noAttachments,
                    wasNotSent: true)
            }
            throw error
        }
    }
}
