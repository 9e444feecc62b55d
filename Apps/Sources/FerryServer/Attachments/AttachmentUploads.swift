import Crypto
import Foundation
import NIOCore
import ServerStorageCore
import SyncCore

// The upload routes of docs/attachments.md: `PUT /tables/{table}/{id}/$attachments/{name}` creates
// (or finishes in one request) an upload, and `HEAD`, `PATCH`, `DELETE /tables/$uploads/{ticket}`
// inspect, continue and cancel it. Request bodies are streamed into the blob storage chunk by
// chunk, never collected: a cut connection keeps what arrived, and the next `HEAD` reports it.
extension TableService {
    /// Whether `request` is an upload whose body must be streamed rather than collected.
    func streamsBody(route: TableRoute, method: String) -> Bool {
        guard configuration.offersPushExtensions, configuration.attachments != nil else { return false }
        switch (route, method) {
        case (.attachment, "PUT"), (.upload, "PATCH"): return true
        default: return false
        }
    }

    /// Answers an upload request whose body is `body`, read as it arrives.
    func handleUpload<Body: AsyncSequence>(_ request: TableRequest, body: Body) async -> TableResponse
    where Body.Element == ByteBuffer {
        let body = ClientBody(base: body)
        return Self.finished(
            await answeringUpload {
                switch try await withStoredTableName(request.route) {
                case .attachment(let table, let id, let name):
                    return try await createUpload(request, table: table, id: id, name: name, body: body)
                case .upload(let token):
                    return try await continueUpload(request, token: token, body: body)
                default:
                    throw ProtocolError.notFound("no such resource")
                }
            })
    }

    /// `HEAD` and `DELETE` of an upload resource (no body).
    func uploadResource(_ request: TableRequest, token: String) async throws -> TableResponse {
        // A cancel needs only its uploader: the item may be gone since (deleted on another device),
        // and its unfinished upload held the user's quota until it expired.
        let (ticket, _, blobs) = try await resolvedTicket(request, token: token, needsItem: request.method != "DELETE")
        let id = ticket.uploadID(key: ticketKey)
        switch request.method {
        case "HEAD":
            guard let state = try await blobs.uploadState(id: id) else {
                throw ProtocolError.notFound("no such upload")
            }
            return TableResponse(
                status: 204,
                headers: [
                    ("Upload-Offset", String(state.offset)), ("Upload-Length", String(state.length)),
                    ("Upload-Complete", state.isCompleted ? "?1" : "?0"), ("Cache-Control", "no-store"),
                ])
        case "DELETE":
            guard try await blobs.abortUpload(id: id) else { throw ProtocolError.notFound("no such upload") }
            return TableResponse(status: 204)
        default:
            throw ProtocolError.methodNotAllowed(
                "\(request.method) is not allowed on an upload", allow: ["HEAD", "PATCH", "DELETE"])
        }
    }

    var ticketKey: SymmetricKey { UploadTicket.key(authSecret: configuration.authSecret) }

    /// The blob storage, or 501 when the server has none.
    func blobStorage() throws -> any BlobStorage {
        guard let blobs = configuration.blobStorage else {
            throw ProtocolError(501, "notImplemented", "this server stores no attachment content")
        }
        return blobs
    }

    // MARK: - Creation

    private func createUpload<Body: AsyncSequence>(
        _ request: TableRequest, table: String, id: String, name: String, body: Body
    ) async throws -> TableResponse where Body.Element == ByteBuffer {
        let blobs = try blobStorage()
        let limits = configuration.attachments ?? AttachmentLimits()
        let name = try Self.validatedAttachmentName(name)
        let (context, item) = try await attachedItem(request, table: table, id: id, operation: .update)
        guard let length = Self.structuredCount(request.headers["upload-length"]) else {
            throw ProtocolError.badRequest("Upload-Length must give the file's size in bytes", code: "invalidLength")
        }
        let sha256 = try Self.declaredSHA256(request.headers["repr-digest"])
        let contentType = request.headers["content-type"] ?? "application/octet-stream"
        guard contentType.utf8.count <= Self.maximumContentTypeLength else {
            throw ProtocolError.badRequest(
                "the Content-Type is \(contentType.utf8.count) bytes; an attachment's may have at most "
                    + "\(Self.maximumContentTypeLength)", code: "invalidContentType")
        }
        let complete = try Self.uploadComplete(request.headers["upload-complete"], default: true)
        guard length <= limits.maximumFileSize else {
            var error = Self.limitExceeded("maxFileSize", limits.maximumFileSize, "the file is \(length) bytes")
            // The draft's limits header, on the 413 as on the 201 (wave3-notes §3).
            error.headers = [("Upload-Limit", "max-size=\(limits.maximumFileSize)")]
            throw error
        }
        let index = attachmentIndex
        let attachment = StoredAttachment(
            table: table, item: item.id, name: name, sha256: sha256, size: length, contentType: contentType)
        let scope = Self.uploaderScope(context)
        let ticket = UploadTicket(
            owner: context.identity?.subject, table: table, item: item.id, name: name, sha256: sha256,
            length: length, contentType: contentType, shared: scope == .all)
        let uploadID = ticket.uploadID(key: ticketKey)
        // The limits, and the upload's creation, taking turns with other creations and completions
        // in this instance and in every other on the database: creations side by side each saw none
        // of the others reserved (20 at once put 7,780 bytes of unfinished uploads under a quota of
        // 1,000; through two instances, six at once put 3 files of 900 bytes under a quota of 2,000).
        try await contentGate.enter(within: nil) { CancellationError() }
        let creation: Creation
        do {
            defer { contentGate.leave() }
            creation = try await storage.exclusiveTransaction(.attachmentRoom) { [self] in
                let current = try await checkRoom(
                    for: attachment, scope: scope, limits: limits,
                    reserved: try await reservedByOtherUploads(blobs, scope: scope, except: uploadID))
                if let current, current.sha256 == sha256, current.contentType == contentType {
                    // Stored already within the caller's scope: no bytes need to come.
                    return .answered(.json(200, .object(Self.rendered(current, context.version))))
                } else if try await index.holds(sha256: sha256, table: table, owner: scope),
                    let blob = try await blobs.blob(sha256: sha256), blob.size == length
                {
                    let stored = try await index.put(attachment, owner: item.owner)
                    return .answered(.json(200, .object(Self.rendered(stored, context.version))))
                }
                return .created(try await blobs.createUpload(id: uploadID, length: length))
            }
        }
        var state: UploadState
        switch creation {
        case .answered(let answer): return answer
        case .created(let created): state = created
        }
        let location = "\(request.pathPrefix)/tables/\(Self.uploadsSegment)/\(ticket.token(key: ticketKey))"
        // A body comes with a length, or in chunks (whatever Upload-Complete says: a chunked body of
        // an upload left open was thrown away), or, for a PUT that completes, until the end.
        let declared = request.headers["content-length"].flatMap(Int64.init)
        let hasBody =
            declared.map { $0 > 0 } ?? (request.headers["transfer-encoding"] != nil || complete)
        if !state.isCompleted, hasBody {
            guard state.offset == 0 else {
                // The client sends the file from its start, but the server has a part already.
                return Self.offsetConflict(state.offset, location: location)
            }
            state.offset = try await appendMapping(blobs, id: uploadID, at: 0, body, location: location)
        }
        if state.isCompleted || state.offset == length {
            return try await finish(blobs, uploadID: uploadID, attachment: attachment, owner: item.owner, context)
        }
        // A body that ended whole yet short of the length it claimed to complete, as for a PATCH
        // (it was 201, as if the upload had been left open on purpose).
        if complete, hasBody { return Self.inconsistentLength(state.offset, of: length, location: location) }
        return TableResponse(
            status: 201,
            headers: [
                ("Location", location), ("Upload-Offset", String(state.offset)),
                ("Upload-Limit", "max-size=\(limits.maximumFileSize)"),
            ])
    }

    /// The longest `Content-Type` an attachment keeps (RFC 6838 gives a type and subtype 127
    /// characters each): one of 3 KB made a ticket the server then refused to read.
    static let maximumContentTypeLength = 255

    /// What the turn of an upload's creation came to: an answer already (the content is stored),
    /// or the upload.
    private enum Creation {
        case answered(TableResponse)
        case created(UploadState)
    }

    // MARK: - Continuation

    private func continueUpload<Body: AsyncSequence>(_ request: TableRequest, token: String, body: Body)
        async throws -> TableResponse where Body.Element == ByteBuffer
    {
        let (ticket, context, blobs) = try await resolvedTicket(request, token: token)
        let contentType = request.headers["content-type"]?.split(separator: ";").first
            .map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        guard contentType == "application/partial-upload" else {
            throw ProtocolError(415, "unsupportedMediaType", "a PATCH of an upload is application/partial-upload")
        }
        guard let offset = Self.structuredCount(request.headers["upload-offset"]) else {
            throw ProtocolError.badRequest("Upload-Offset must give where the bytes begin", code: "invalidOffset")
        }
        let claimsComplete = try Self.uploadComplete(request.headers["upload-complete"], default: false)
        let id = ticket.uploadID(key: ticketKey)
        let location = "\(request.pathPrefix)/tables/\(Self.uploadsSegment)/\(token)"
        guard let state = try await blobs.uploadState(id: id) else { throw ProtocolError.notFound("no such upload") }
        var reached = state.offset
        if !state.isCompleted {
            guard offset == state.offset else { return Self.offsetConflict(state.offset, location: location) }
            reached = try await appendMapping(blobs, id: id, at: offset, body, location: location)
        }
        guard state.isCompleted || reached == ticket.length else {
            // A body that ended whole yet short of the length it claimed to complete: the bytes
            // are kept, and the client learns where to continue.
            if claimsComplete { return Self.inconsistentLength(reached, of: ticket.length, location: location) }
            return TableResponse(status: 204, headers: [("Upload-Offset", String(reached))])
        }
        let (_, item) = try await attachedItem(request, table: ticket.table, id: ticket.item, operation: .update)
        if state.isCompleted, let answer = try await replayed(ticket, state, context) {
            return answer
        }
        let attachment = StoredAttachment(
            table: ticket.table, item: ticket.item, name: ticket.name, sha256: ticket.sha256, size: ticket.length,
            contentType: ticket.contentType)
        return try await finish(blobs, uploadID: id, attachment: attachment, owner: item.owner, context)
    }

    /// A completed upload sent again (a client that lost the answer sends `Upload-Complete: ?1`
    /// again): its attachment as recorded, unchanged, when it is still this upload's; 409
    /// `uploadSuperseded` when the attachment was replaced or deleted since, with nothing changed
    /// (such a replay brought deleted or replaced content back, for as long as the upload was
    /// kept); `nil` when the upload was never recorded (the server stopped between completing and
    /// recording it), which records it now. A row changed at or after the upload's last append was
    /// changed after it completed.
    private func replayed(_ ticket: UploadTicket, _ state: UploadState, _ context: RequestContext)
        async throws -> TableResponse?
    {
        // The caller may update the item (its ticket was resolved so): the item's row, whoever owns it.
        guard
            let row = try await attachmentIndex.row(
                table: ticket.table, item: ticket.item, name: ticket.name, owner: .all),
            row.updatedAt >= Timestamp(state.updatedAt)
        else { return nil }
        if !row.deleted, let current = StoredAttachment(row), current.sha256 == ticket.sha256 {
            return .json(200, .object(Self.rendered(current, context.version)))
        }
        throw ProtocolError(
            409, "uploadSuperseded",
            "this upload completed already, and the attachment was \(row.deleted ? "deleted" : "replaced") since; nothing was changed"
        )
    }

    /// The ticket a token stands for, when the caller is its user and may still update its item
    /// (404 otherwise: another user learns nothing of the upload); with `needsItem` false, when the
    /// caller is its user and may update the table, whether the item is still there or not.
    private func resolvedTicket(_ request: TableRequest, token: String, needsItem: Bool = true) async throws
        -> (UploadTicket, RequestContext, any BlobStorage)
    {
        let blobs = try blobStorage()
        guard let ticket = UploadTicket(token: token, key: ticketKey) else {
            throw ProtocolError.notFound("no such upload")
        }
        let context =
            needsItem
            ? try await attachedItem(request, table: ticket.table, id: ticket.item, operation: .update).0
            : try await appTableContext(request, table: ticket.table, operation: .update)
        guard ticket.owner == context.identity?.subject else { throw ProtocolError.notFound("no such upload") }
        return (ticket, context, blobs)
    }

    /// Appends, turning the storage's refusals into the protocol's answers.
    private func appendMapping<Body: AsyncSequence>(
        _ blobs: any BlobStorage, id: String, at offset: Int64, _ body: Body, location: String
    ) async throws -> Int64 where Body.Element == ByteBuffer {
        do {
            return try await blobs.append(id: id, at: offset, body.map { $0.readableBytesView })
        } catch let error as BlobStorageError where error.code == .offsetMismatch {
            throw UploadAnswer(response: Self.offsetConflict(error.currentOffset ?? 0, location: location))
        } catch let error as BlobStorageError where error.code == .exceedsLength {
            throw ProtocolError.badRequest("the body holds more bytes than Upload-Length", code: "exceedsLength")
        } catch let error as BlobStorageError where error.code == .uploadNotFound {
            throw ProtocolError.notFound("no such upload")
        }
    }

    /// Completes the upload and records the attachment: 200 and the attachment.
    private func finish(
        _ blobs: any BlobStorage, uploadID: String, attachment: StoredAttachment, owner: String?,
        _ context: RequestContext
    ) async throws -> TableResponse {
        do {
            _ = try await blobs.completeUpload(id: uploadID, sha256: attachment.sha256)
        } catch let error as BlobStorageError where error.code == .digestMismatch {
            throw ProtocolError.badRequest(
                "the bytes do not hash to the declared Repr-Digest; the upload is discarded", code: "digestMismatch")
        } catch let error as BlobStorageError where error.code == .blobNotFound {
            // Completed before, and its content collected since (a retention shorter than the
            // uploads' expiry): the client uploads it again.
            _ = try? await blobs.abortUpload(id: uploadID)
            throw Self.contentCollected
        }
        // Recorded under the content gate and the lock below, so that no sweeper, of this instance
        // or another, collects the content (an old blob nothing named, which this upload found
        // stored) meanwhile. The gate also keeps this instance's turns off the database's lock.
        try await contentGate.enter(within: nil) { CancellationError() }
        defer { contentGate.leave() }
        // The limits again, now that the file is whole, and with completions taking turns, in this
        // instance and across instances: uploads created side by side were each within them alone
        // (two devices adding a file to one item put 40 MB on an item of 30).
        let scope = Self.uploaderScope(context)
        let limits = configuration.attachments ?? AttachmentLimits()
        let index = attachmentIndex
        let recorded: Result<StoredAttachment, any Error> = try await storage.exclusiveTransaction(.attachmentRoom) {
            [self] in
            do {
                _ = try await checkRoom(for: attachment, scope: scope, limits: limits)
            } catch {
                return .failure(error)  // refused (or unchecked): nothing was written, and the upload goes
            }
            return .success(try await index.put(attachment, owner: owner))
        }
        let stored: StoredAttachment
        switch recorded {
        case .success(let put): stored = put
        case .failure(let error):
            _ = try? await blobs.abortUpload(id: uploadID)
            throw error
        }
        guard try await blobs.blob(sha256: attachment.sha256) != nil else {
            // A sweeper collected it after the upload completed and before this recorded it (a
            // sweeper checks and deletes in the lock taken above, never after): the client uploads
            // it again.
            _ = try? await attachmentIndex.remove(
                table: attachment.table, item: attachment.item, name: attachment.name, owner: .all)
            _ = try? await blobs.abortUpload(id: uploadID)
            throw Self.contentCollected
        }
        return .json(200, .object(Self.rendered(stored, context.version)))
    }

    /// The content of a completed upload was collected before its attachment was recorded: 503,
    /// and the next attempt uploads it again.
    static var contentCollected: ProtocolError {
        var error = ProtocolError(503, "contentCollected", "the content was removed as it was stored; upload it again")
        error.retryAfter = 1
        return error
    }

    // MARK: - Headers and answers

    /// Whose quota (`maxUserSize`) an upload counts against: the caller's subject on a per-user
    /// table, `.all` on a table without users (those tables share one quota, their attachments
    /// having no user), and the caller's subject where the table's scope is unknown (anonymous
    /// callers share the empty one).
    static func uploaderScope(_ context: RequestContext) -> OwnerScope {
        context.scope ?? .owner(context.identity?.subject ?? "")
    }

    /// The bytes the unfinished uploads of `scope` other than `uploadID` were created for: they count
    /// against `maxUserSize` when an upload is created, so that uploads left unfinished cannot hold
    /// more than the quota until they expire (a probe held 480 MB under a 50 MB quota that way).
    private func reservedByOtherUploads(_ blobs: any BlobStorage, scope: OwnerScope, except uploadID: String)
        async throws -> Int64
    {
        let pending = try await blobs.unfinishedUploads(idPrefix: UploadTicket.quotaPrefix(scope, key: ticketKey))
        guard let own = try await blobs.uploadState(id: uploadID), !own.isCompleted else {
            return pending.declaredBytes
        }
        return pending.declaredBytes - own.length
    }

    /// Checks that `attachment` fits its item's and its user's limits (413 when not), counting the
    /// attachment of the same name it replaces out, and `reserved` bytes of unfinished uploads in;
    /// answers the attachment replaced.
    private func checkRoom(
        for attachment: StoredAttachment, scope: OwnerScope, limits: AttachmentLimits, reserved: Int64 = 0
    ) async throws -> StoredAttachment? {
        let index = attachmentIndex
        let current = try await index.attachment(
            table: attachment.table, item: attachment.item, name: attachment.name, owner: .all)
        let replaced = current?.size ?? 0
        let length = attachment.size
        if try await index.bytesUsed(table: attachment.table, item: attachment.item) - replaced + length
            > limits.maximumItemSize
        {
            throw Self.limitExceeded("maxItemSize", limits.maximumItemSize, "the item's attachments would pass it")
        }
        // Sending the content stored already under that name again reserves nothing.
        let reserved =
            current?.sha256 == attachment.sha256 && current?.contentType == attachment.contentType ? 0 : reserved
        if try await index.bytesUsed(by: scope) - replaced + length + reserved > limits.maximumUserSize {
            throw Self.limitExceeded(
                "maxUserSize", limits.maximumUserSize,
                // The tables without users share one quota (their attachments have no user).
                (scope == .all ? "the attachments of the tables without users" : "the user's attachments")
                    + (reserved > 0 ? " and \(reserved) bytes of unfinished uploads" : "") + " would pass it")
        }
        return current
    }

    static func limitExceeded(_ limit: String, _ value: Int64, _ reason: String) -> ProtocolError {
        ProtocolError(413, limit, "\(reason); \(limit) is \(value) bytes")
    }

    /// 409 with the server's offset.
    /// 400 `inconsistentLength` for `Upload-Complete: ?1` with a body that ended at `reached`, short
    /// of the upload's `length`: the bytes are kept, and the client learns where to continue.
    static func inconsistentLength(_ reached: Int64, of length: Int64, location: String) -> TableResponse {
        var response = Self.errorResponse(
            ProtocolError.badRequest(
                "Upload-Complete: ?1, but the upload holds \(reached) of its \(length) bytes",
                code: "inconsistentLength"))
        response.headers += [("Upload-Offset", String(reached)), ("Location", location)]
        return response
    }

    static func offsetConflict(_ offset: Int64, location: String) -> TableResponse {
        var response = errorResponse(
            ProtocolError(409, "offsetMismatch", "the upload is at offset \(offset); continue from there"))
        response.headers += [("Upload-Offset", String(offset)), ("Location", location)]
        return response
    }

    /// Like ``answering(_:)``, with the answers carried by ``UploadAnswer`` and blob-storage errors.
    func answeringUpload(_ body: () async throws -> TableResponse) async -> TableResponse {
        await answering {
            do {
                return try await body()
            } catch let answer as UploadAnswer {
                return answer.response
            } catch let cut as BodyCut {
                // The client's connection closed, or its bytes stopped, before the body's end: a
                // mobile network dropping, not the server failing (it was a 500 at error level).
                throw ProtocolError(
                    400, "bodyCut",
                    "the body stopped before its end (\(cut.reason)); the bytes that came are kept: continue from Upload-Offset"
                )
            } catch let error as BlobStorageError where error.code == .invalidName || error.code == .invalidLength {
                throw ProtocolError.badRequest(error.message, code: error.code.description)
            } catch let error as BlobStorageError where error.code == .uploadNotFound {
                throw ProtocolError.notFound("no such upload")
            } catch let error as BlobStorageError where error.code == .full {
                throw ProtocolError(507, "insufficientStorage", "the server has no room for the file")
            } catch let error as BlobStorageError where error.code == .busy || error.code == .unavailable {
                throw ProtocolError(503, "unavailable", "the attachment storage is busy; try again")
            }
        }
    }
}

/// A complete answer thrown from deep inside an upload (a 409 with headers).
struct UploadAnswer: Error {
    var response: TableResponse
}

/// A request body whose failures are told apart from the storage's: a body that stops before its
/// end (the connection closed, a proxy cut it) is the client's cut, ``BodyCut``.
struct ClientBody<Base: AsyncSequence>: AsyncSequence where Base.Element == ByteBuffer {
    typealias Element = ByteBuffer
    let base: Base

    struct AsyncIterator: AsyncIteratorProtocol {
        var base: Base.AsyncIterator

        mutating func next(isolation actor: isolated (any Actor)?) async throws -> ByteBuffer? {
            do {
                return try await base.next(isolation: actor)
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                throw BodyCut(reason: "\(error)")
            }
        }

        mutating func next() async throws -> ByteBuffer? { try await next(isolation: nil) }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(base: base.makeAsyncIterator()) }
}

/// The request body stopped before its end.
struct BodyCut: Error {
    var reason: String
}
