import Foundation
import Testing
import Transport

@testable import SyncCore

/// What a failed attachment transfer says, from the server's answer through Transport to the
/// engine's error: which file, once.
@Suite("Transport: attachment error messages")
struct AttachmentErrorMessageTests {
    static let transfer = AttachmentTransfer(.upload, table: "todo", itemID: "1", name: "x")

    /// Uploads a file of one byte as attachment `x` of `todo/1`.
    static func uploadOneByte(_ remote: HTTPRemote) async throws {
        let file = FileManager.default.temporaryDirectory.appending(path: "ferry-\(UUID().uuidString)")
        try Data("x".utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        try await remote.uploadAttachment(
            table: "todo", itemID: "1", name: "x", file: file, contentType: nil,
            sha256: String(repeating: "0", count: 64), progress: { _, _ in })
    }

    @Test func aRefusedUploadNamesTheAttachmentOnce() async throws {
        let remote = stubbedRemote(
            "attachmentmessage.test", .v3,
            [StubAnswer(status: 400, body: #"{"error":"the name is not valid","code":"badRequest"}"#)])
        let refused = await #expect(throws: RemoteError.self) { try await Self.uploadOneByte(remote) }
        let error = SyncContext.transferError(try #require(refused), Self.transfer)
        #expect(error.code == .remote)
        #expect(error.message == "uploading attachment 'x' of 'todo/1': the name is not valid (HTTP 400)")
    }

    /// Answers that would keep an upload going for ever: the last piece taken with 204 (the client
    /// sent an empty piece again and again) and a 409 naming the offset just sent, over and over.
    @Test(arguments: [
        ([StubAnswer(status: 204)], "without completing the upload (HTTP 204, not 200)", 2),
        (
            Array(repeating: StubAnswer(status: 409, headers: ["Upload-Offset": "0"]), count: 3),
            "answered 409 at offset 0 three times in a row", 4
        ),
    ])
    func anUploadThatTheServerDoesNotMoveOnIsRefused(answers: [StubAnswer], says: String, requests: Int)
        async throws
    {
        let host = "stalledupload\(requests).test"
        let created = StubAnswer(
            status: 201, headers: ["Location": "/tables/$uploads/t1", "Upload-Offset": "0"])
        // What a server would go on answering; never reached.
        let more = Array(repeating: StubAnswer(status: 204), count: 4) + [StubAnswer(status: 200)]
        let remote = stubbedRemote(host, .v3, [created] + answers + more)
        let refused = await #expect(throws: RemoteError.self) { try await Self.uploadOneByte(remote) }
        #expect(refused?.code == .invalidResponse, "\(String(describing: refused))")
        #expect(refused?.message.contains(says) == true, "\(String(describing: refused?.message))")
        #expect(StubProtocol.seen(host: host).count == requests)
    }

    /// A completed upload whose answer was lost, sent again after another device replaced the
    /// attachment: Ferry's server answers 409 `uploadSuperseded` (no `Upload-Offset`), and the
    /// upload is done, not failed. Failed, it stayed queued, and the next push uploaded this older
    /// content over the newer.
    @Test func anUploadSupersededByALaterOneIsDone() async throws {
        let host = "supersededupload.test"
        let superseded = #"{"error":"the attachment was replaced since","code":"uploadSuperseded"}"#
        let remote = stubbedRemote(
            host, .v3,
            [
                StubAnswer(status: 201, headers: ["Location": "/tables/$uploads/t1", "Upload-Offset": "0"]),
                StubAnswer(status: 409, body: superseded),
            ])
        try await Self.uploadOneByte(remote)
        #expect(StubProtocol.seen(host: host).map(\.method) == ["PUT", "PATCH"])
    }

    /// An upload whose item was deleted meanwhile (410 on a `PATCH`) is cancelled before the
    /// failure is told: its unfinished bytes held the user's quota until they expired.
    @Test func anUploadWhoseItemIsGoneIsCancelled() async throws {
        let host = "goneupload.test"
        let gone = #"{"error":"the item '1' of 'todo' was deleted","code":"gone"}"#
        let remote = stubbedRemote(
            host, .v3,
            [
                StubAnswer(status: 201, headers: ["Location": "/tables/$uploads/t1", "Upload-Offset": "0"]),
                StubAnswer(status: 410, body: gone), StubAnswer(status: 204),
            ])
        let refused = await #expect(throws: RemoteError.self) { try await Self.uploadOneByte(remote) }
        #expect(refused?.status == 410, "\(String(describing: refused))")
        let seen = StubProtocol.seen(host: host)
        #expect(seen.map(\.method) == ["PUT", "PATCH", "DELETE"])
        #expect(seen.last?.path == "/tables/$uploads/t1")
    }

    /// An upload's `Location` is resolved against the creation's URL (RFC 9110), not the
    /// server's: a relative one (`../../../$uploads/t1` from `/tables/todo/1/$attachments/x`)
    /// names `/tables/$uploads/t1`.
    @Test func aRelativeUploadLocationIsResolvedAgainstTheRequest() async throws {
        let host = "relativeupload.test"
        let remote = stubbedRemote(
            host, .v3,
            [
                StubAnswer(status: 201, headers: ["Location": "../../../$uploads/t1", "Upload-Offset": "0"]),
                StubAnswer(status: 200, body: #"{"name":"x"}"#),
            ])
        try await Self.uploadOneByte(remote)
        let seen = StubProtocol.seen(host: host)
        #expect(seen.map(\.method) == ["PUT", "PATCH"])
        #expect(seen.last?.path == "/tables/$uploads/t1", "\(seen.map(\.url))")
    }

    /// A server whose `$capabilities` list no attachments answers a transfer with its route's 404:
    /// the failure says the server does not offer attachments, not "no such resource" (which read
    /// as if the item were missing), with `AttachmentsNotOffered` underneath. A server that offers
    /// them keeps its own answer.
    @Test func aServerWithoutAttachmentsIsSaidSo() async throws {
        let notFound = StubAnswer(status: 404, body: #"{"error":"no such resource"}"#)
        let withoutAttachments = StubAnswer(
            status: 200, body: #"{"batch":{"url":"$batch","format":"odata-json-batch","maxRequests":100}}"#)
        let file = FileManager.default.temporaryDirectory.appending(path: "ferry-\(UUID().uuidString)")
        try Data("x".utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let digest = String(repeating: "0", count: 64)

        let plain = stubbedRemote("noattachments.test", .v3, [notFound, withoutAttachments, notFound])
        let upload = await #expect(throws: RemoteError.self) {
            try await plain.uploadAttachment(
                table: "todo", itemID: "1", name: "x", file: file, contentType: nil, sha256: digest,
                progress: { _, _ in })
        }
        #expect(
            upload?.message
                == "uploading attachment 'x' of 'todo/1': the server does not offer attachments (no 'attachments' in its $capabilities)"
        )
        #expect(upload?.underlying is AttachmentsNotOffered)
        #expect(upload?.status == 404)
        // The answer is remembered: a download asks no more.
        let download = await #expect(throws: RemoteError.self) {
            try await plain.downloadAttachment(table: "todo", itemID: "1", name: "x", to: file, progress: { _, _ in })
        }
        #expect(download?.underlying is AttachmentsNotOffered)
        #expect(
            download?.message.hasPrefix("downloading attachment 'x' of 'todo/1': the server does not offer") == true)
        #expect(
            StubProtocol.seen(host: "noattachments.test").map(\.path).filter { $0.hasSuffix("$capabilities") }.count
                == 1)

        let offering = stubbedRemote(
            "offersattachments.test", .v3,
            [notFound, StubAnswer(status: 200, body: #"{"attachments":{"maxBytes":1000}}"#)])
        let missing = await #expect(throws: RemoteError.self) {
            try await offering.downloadAttachment(
                table: "todo", itemID: "1", name: "x", to: file, progress: { _, _ in })
        }
        #expect(missing?.message == "downloading attachment 'x' of 'todo/1': no such resource")
        #expect(missing?.underlying == nil)
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
