import Foundation
import Testing
import Transport

@testable import SyncCore

/// What a failed attachment transfer says, from the server's answer through Transport to the
/// engine's error: which file, once.
@Suite("Transport: attachment error messages")
struct AttachmentErrorMessageTests {
    static let transfer = AttachmentTransfer(.upload, table: "todo", itemID: "1", name: "x")

    @Test func aRefusedUploadNamesTheAttachmentOnce() async throws {
        let remote = stubbedRemote(
            "attachmentmessage.test", .v3,
            [StubAnswer(status: 400, body: #"{"error":"the name is not valid","code":"badRequest"}"#)])
        let file = FileManager.default.temporaryDirectory.appending(path: "ferry-\(UUID().uuidString)")
        try Data("x".utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let refused = await #expect(throws: RemoteError.self) {
            try await remote.uploadAttachment(
                table: "todo", itemID: "1", name: "x", file: file, contentType: nil,
                sha256: String(repeating: "0", count: 64), progress: { _, _ in })
        }
        let error = SyncContext.transferError(try #require(refused), Self.transfer)
        #expect(error.code == .remote)
        #expect(error.message == "uploading attachment 'x' of 'todo/1': the name is not valid (HTTP 400)")
    }

    /// A remote whose message does not name the file (a network failure names the request) gets
    /// the transfer in front, as does any other error.
    @Test func aMessageThatDoesNotNameTheAttachmentGetsItInFront() {
        let network = RemoteError(.network, "PUT /tables/todo/1 failed: could not connect to the server")
        let error = SyncContext.transferError(network, Self.transfer)
        #expect(error.code == .network)
        #expect(
            error.message
                == "upload of attachment 'x' of 'todo/1': PUT /tables/todo/1 failed: could not connect to the server")
        let cancelled = SyncContext.transferError(
            RemoteError(.cancelled, "uploading attachment 'x' of 'todo/1': cancelled"), Self.transfer)
        #expect(cancelled.message == "upload of attachment 'x' of 'todo/1': cancelled")
    }
}
