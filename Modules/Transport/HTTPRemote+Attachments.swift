public import Foundation
public import SyncCore

/// The client half of Ferry's attachment routes (docs/attachments.md): resumable uploads on the IETF
/// draft's semantics, downloads that resume with `Range`, deletes, and the table's attachment rows.
///
/// An upload is created with `PUT` (the same attachment, content and user give the same upload, so
/// a process that lost its URL asks again), then sent from the file in `PATCH`es of
/// ``uploadChunkSize`` bytes: a cut one asks `HEAD` where the server is and goes on from there, never
/// resending what it holds. A download streams to the file and, when cut, asks for the rest with
/// `Range` and `If-Range`. Memory holds one piece of a file at a time, whatever its size.
///
/// ```swift
/// try await remote.uploadAttachment(
///     table: "notes", itemID: "a1", name: "scan.pdf", file: scan, contentType: "application/pdf",
///     sha256: digest, progress: { sent, total in print(sent, total) })
/// ```
extension HTTPRemote: RemoteAttachments {
    /// The bytes one `PATCH` carries: the most of a file in memory at once.
    static let uploadChunkSize = 4 << 20

    /// `<server>/tables/{table}/{id}/$attachments/{name}`.
    func attachmentURL(table: String, itemID: String, name: String) throws(RemoteError) -> URL {
        let base = try client.url(table: table, id: itemID)
        guard let url = URL(string: base.absoluteString + "/$attachments/" + PercentEncoding.pathSegment(name)) else {
            throw RemoteError(.badRequest, "cannot form the URL of attachment '\(name)' of '\(table)/\(itemID)'")
        }
        return url
    }

    /// Whether the server offers attachments (`attachments` in its `$capabilities`), asked once and
    /// remembered. `false` as well when the question could not be asked (a network failure, not
    /// remembered): ask it after a transfer failed, to tell "no attachments here" from other refusals.
    ///
    /// ```swift
    /// if await remote.offersAttachments() == false { print("start the server with --attachments") }
    /// ```
    public func offersAttachments() async -> Bool { await extensions().attachments }

    /// The failure of a transfer the server refused: a server that answered `$capabilities` without
    /// attachments says so (its route answers 404, "no such resource", which read as if the item
    /// were missing), with ``AttachmentsNotOffered`` underneath for code to test. When the question
    /// gets no answer, the refusal is left as it came.
    func refusal(_ answer: HTTPResponse, _ doing: String) async -> RemoteError {
        let failure = answer.failure(doing)
        guard (400..<500).contains(answer.status), ![401, 403, 408, 429].contains(answer.status),
            await knownExtensions()?.attachments == false
        else { return failure }
        return RemoteError(
            .notFound, status: answer.status,
            "\(doing): the server does not offer attachments (no 'attachments' in its $capabilities)",
            underlying: AttachmentsNotOffered(), wasNotSent: true)
    }

    /// `scheme://host:port` of `url`, lowercased, with the scheme's default port spelled out.
    static func origin(_ url: URL) -> String {
        let scheme = url.scheme?.lowercased() ?? ""
        let port = url.port ?? (scheme == "https" ? 443 : scheme == "http" ? 80 : 0)
        return "\(scheme)://\(url.host?.lowercased() ?? ""):\(port)"
    }

    /// Whether two URLs share scheme, host and port (RFC 6454's origin).
    static func sameOrigin(_ one: URL, _ other: URL) -> Bool { origin(one) == origin(other) }

    public func uploadAttachment(
        table: String, itemID: String, name: String, file: URL, contentType: String?, sha256: String,
        progress: @escaping @Sendable (Int64, Int64) -> Void
    ) async throws {
        let handle = try FileHandle(forReadingFrom: file)
        defer { try? handle.close() }
        let size = Int64(try handle.seekToEnd())
        let target = try attachmentURL(table: table, itemID: itemID, name: name)
        var headers = [
            "Upload-Length": String(size), "Repr-Digest": ItemAttachment.reprDigest(sha256: sha256),
            "Upload-Complete": "?0", "Content-Type": contentType ?? "application/octet-stream",
        ]
        // Creation is idempotent: the same attachment, content and user give the same upload and
        // the server's offset, so a process that lost the upload's URL just asks again.
        var created = try await client.send("PUT", target, data: Data(), headers: headers, retries: true)
        if created.status == 200 {
            progress(size, size)
            return
        }
        guard created.status == 201,
            let location = created.headers.first(where: { $0.key.lowercased() == "location" })?.value,
            // Relative to the request's URL (RFC 9110 §10.2.2); Ferry's server names a path.
            let upload = URL(string: location, relativeTo: target)?.absoluteURL
        else { throw await refusal(created, "uploading attachment '\(name)' of '\(table)/\(itemID)'") }
        // The upload's requests carry the token: they go to the server's origin only. Ferry's
        // server names a path; a location elsewhere (a hostile or misconfigured server) is refused
        // before anything, the token included, is sent there.
        guard Self.sameOrigin(upload, client.configuration.serverURL) else {
            throw RemoteError(
                .invalidResponse,
                "uploading attachment '\(name)' of '\(table)/\(itemID)': the server named an upload location on "
                    + "another origin (\(HTTPResponse.displayLine(location) ?? "?")); "
                    + "Ferry sends the upload and its credentials only to \(Self.origin(client.configuration.serverURL))"
            )
        }
        var offset = Self.offset(created) ?? 0
        headers = ["Content-Type": "application/partial-upload"]
        var attempts = 0
        // Answers in a row that did not move the offset on (409 naming the offset sent).
        var stalls = 0
        // The network error of the last cut, until `HEAD` has told where the server is.
        var cut: RemoteError?
        while true {
            if let error = cut {
                // Cut: ask the server where it is, and go on from there (never resend what it has).
                // The question may be cut too: it counts as one more attempt.
                guard attempts < client.configuration.retry.maximumAttempts else { throw error }
                attempts += 1
                do {
                    created = try await client.send("HEAD", upload, retries: true)
                } catch {
                    guard error.code == .network else { throw error }
                    cut = error
                    continue
                }
                guard let known = Self.offset(created) else {
                    throw created.status >= 400
                        ? created.failure("resuming attachment '\(name)' of '\(table)/\(itemID)'") : error
                }
                offset = known
                cut = nil
            }
            try handle.seek(toOffset: UInt64(offset))
            let chunk = try handle.read(upToCount: Self.uploadChunkSize) ?? Data()
            let last = offset + Int64(chunk.count) >= size
            headers["Upload-Offset"] = String(offset)
            headers["Upload-Complete"] = last ? "?1" : "?0"
            let answer: HTTPResponse
            do {
                answer = try await client.send("PATCH", upload, data: chunk, headers: headers, retries: false)
            } catch {
                guard error.code == .network else { throw error }
                cut = error
                continue
            }
            switch answer.status {
            case 200:
                progress(size, size)
                return
            case 204 where !last:
                offset += Int64(chunk.count)
                stalls = 0
                progress(offset, size)
            case 204:
                // The last piece must be answered 200 (the upload complete); taken as progress,
                // an empty piece went again and again, for ever.
                throw RemoteError(
                    .invalidResponse,
                    "uploading attachment '\(name)' of '\(table)/\(itemID)': the server took the last piece "
                        + "(Upload-Complete: ?1) without completing the upload (HTTP 204, not 200)")
            case 409 where answer.errorBodyCode == "uploadSuperseded":
                // This upload completed (its answer was lost) and another has replaced or removed
                // the attachment since: it is done, and the later change stands. Failing it queued
                // the upload again, and the retry recorded this older content over the newer.
                progress(size, size)
                return
            case 409:
                guard let known = Self.offset(answer) else {
                    throw answer.failure("uploading attachment '\(name)' of '\(table)/\(itemID)'")
                }
                // A server that names the offset just sent, again and again, is not moving on.
                stalls = known == offset ? stalls + 1 : 0
                guard stalls < 3 else {
                    throw RemoteError(
                        .invalidResponse,
                        "uploading attachment '\(name)' of '\(table)/\(itemID)': the server answered 409 at "
                            + "offset \(known) three times in a row without taking the piece")
                }
                offset = known
            case 413 where answer.errorBodyCode == nil:
                // Not Ferry's limits (they answer with a code, on creation): a proxy's body limit.
                throw RemoteError(
                    status: 413,
                    "uploading attachment '\(name)' of '\(table)/\(itemID)': a proxy in front of the server "
                        + "refused a request of \(chunk.count) bytes; it must accept bodies of "
                        + "\(Self.uploadChunkSize >> 20) MiB (nginx: client_max_body_size 16m, as docs/deploy.md sets it for batches too)"
                )
            case 410:
                // The item was deleted meanwhile (on another device): cancel the upload, whose
                // unfinished bytes would hold the user's quota until they expire (a day by default).
                _ = try? await client.send("DELETE", upload, retries: false)
                throw answer.failure("uploading attachment '\(name)' of '\(table)/\(itemID)'")
            default:
                throw answer.failure("uploading attachment '\(name)' of '\(table)/\(itemID)'")
            }
        }
    }

    public func downloadAttachment(
        table: String, itemID: String, name: String, to file: URL,
        progress: @escaping @Sendable (Int64, Int64) -> Void
    ) async throws {
        let source = try attachmentURL(table: table, itemID: itemID, name: name)
        _ = FileManager.default.createFile(atPath: file.path, contents: nil)
        let handle = try FileHandle(forWritingTo: file)
        defer { try? handle.close() }
        var written: Int64 = 0
        var etag: String?
        var attempts = 0
        while true {
            var headers: [String: String] = [:]
            if written > 0, let etag {
                headers["Range"] = "bytes=\(written)-"
                headers["If-Range"] = etag
            }
            do {
                let opened = try await client.openStream(
                    source, headers: headers, timeout: client.configuration.timeout.seconds)
                let fields = Dictionary(opened.headers.map { ($0.key.lowercased(), $0.value) }) { $1 }
                switch opened.status {
                case 200:
                    // The whole file (first try, or the content changed since the last one).
                    try handle.truncate(atOffset: 0)
                    written = 0
                case 206:
                    break
                default:
                    var text: [UInt8] = []
                    for try await piece in opened.body {
                        text += piece
                        if text.count > 64 * 1024 { break }
                    }
                    let response = HTTPResponse(status: opened.status, headers: opened.headers, body: Data(text))
                    throw await refusal(response, "downloading attachment '\(name)' of '\(table)/\(itemID)'")
                }
                etag = fields["etag"]
                let total =
                    fields["content-range"].flatMap { $0.split(separator: "/").last.flatMap { Int64($0) } }
                    ?? fields["content-length"].flatMap { Int64($0) } ?? -1
                for try await piece in opened.body {
                    try handle.write(contentsOf: piece)
                    written += Int64(piece.count)
                    progress(written, total)
                }
                return
            } catch {
                // A cut: ask again for the rest (If-Range: the whole file if it changed meanwhile).
                let isCut = (error as? RemoteError)?.code == .network || error is URLError
                guard isCut, attempts < client.configuration.retry.maximumAttempts else { throw error }
                attempts += 1
            }
        }
    }

    public func deleteAttachment(table: String, itemID: String, name: String, sha256: String?) async throws {
        let target = try attachmentURL(table: table, itemID: itemID, name: name)
        let headers = sha256.map { ["If-Match": "\"\($0)\""] } ?? [:]
        let answer = try await client.send("DELETE", target, headers: headers, retries: true)
        // Gone already: done. Replaced by other content since is 412, thrown: not this client's to
        // delete, and the engine tells the user so (it reported the delete as sent).
        guard [200, 204, 404].contains(answer.status) else {
            throw answer.failure("deleting attachment '\(name)' of '\(table)/\(itemID)'")
        }
    }

    public func attachmentRows(table: String, query: TableQuery) async throws -> RemotePage {
        // A server without the extension has no such endpoint: an empty page, not an error.
        guard await extensions().attachments else { return RemotePage(items: []) }
        let text = query.odataQueryString(protocolVersion: client.configuration.protocolVersion)
        guard
            let url = URL(
                string: try client.tablesURL().absoluteString + "/$attachments/" + PercentEncoding.pathSegment(table)
                    + (text.isEmpty ? "" : "?" + text))
        else { throw RemoteError(.invalidTableName, "cannot form the URL of the attachments of '\(table)'") }
        let response = try await client.send("GET", url)
        // A table nobody has written yet has no attachments (Ferry's servers before 2026-11-28
        // answered 404 where its items' query answers an empty page); a wrong URL stays an error.
        if response.status == 404 && !OnlineTable.isNoEndpoint(response) { return RemotePage(items: []) }
        guard response.status == 200 else { throw response.failure("reading the attachments of '\(table)'") }
        return try PageDecoding.decode(
            response, protocolVersion: client.configuration.protocolVersion, table: table, endpoint: url.path)
    }

    /// `Upload-Offset` of an answer.
    static func offset(_ response: HTTPResponse) -> Int64? {
        response.headers.first { $0.key.lowercased() == "upload-offset" }.flatMap { Int64($0.value) }
    }
}

/// What a transfer's `RemoteError` holds as its `underlying` error when the server refused it
/// because it does not offer attachments (no `attachments` in its `$capabilities`): Ferry's server
/// started without them, or another server of the protocol.
///
/// ```swift
/// if error.underlying is AttachmentsNotOffered { print("start the server with --attachments") }
/// ```
public struct AttachmentsNotOffered: Error, Sendable, CustomStringConvertible {
    public init() {}
    public var description: String { "the server does not offer attachments" }
}
