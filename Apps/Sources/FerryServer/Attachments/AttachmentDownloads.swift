import Foundation
import ServerStorageCore
import SyncCore

// The download route of docs/attachments.md: `GET /tables/{table}/{id}/$attachments/{name}`, its
// bytes streamed from the blob storage (one chunk in memory at a time), with ranges for resuming.
extension TableService {
    /// Whether `request` is a download, answered with a streamed body.
    func streamsDownload(route: TableRoute, method: String) -> Bool {
        guard configuration.offersPushExtensions, configuration.attachments != nil else { return false }
        if case .attachment = route, method == "GET" || method == "HEAD" { return true }
        return false
    }

    /// The head of a download's answer, and the bytes of its body (`nil` for none: an error, a
    /// `HEAD`, a 416).
    func download(_ request: TableRequest) async -> (TableResponse, BlobBytes?) {
        var bytes: BlobBytes?
        let response = await answeringUpload {
            guard case .attachment(let table, let id, let name) = try await withStoredTableName(request.route) else {
                throw ProtocolError.notFound("no such resource")
            }
            let (head, body) = try await downloadAnswer(request, table: table, id: id, name: name)
            bytes = body
            return head
        }
        return (Self.finished(response), bytes)
    }

    private func downloadAnswer(_ request: TableRequest, table: String, id: String, name: String) async throws
        -> (TableResponse, BlobBytes?)
    {
        let blobs = try blobStorage()
        let name = try Self.validatedAttachmentName(name)
        let (_, item) = try await attachedItem(request, table: table, id: id, operation: .read)
        guard
            let attachment = try await attachmentIndex.attachment(table: table, item: item.id, name: name, owner: .all),
            let blob = try await blobs.blob(sha256: attachment.sha256)
        else { throw ProtocolError.notFound("item '\(item.id)' of '\(table)' has no attachment '\(name)'") }
        let etag = "\"\(attachment.sha256)\""
        if let tags = request.headers.list("if-none-match"), Self.anyMatches(tags, etag: etag) {
            // The client holds this content already (RFC 9110 §13.1.2): 304, no body.
            return (TableResponse(status: 304, headers: [("ETag", etag)]), nil)
        }
        var headers: [(name: String, value: String)] = [
            ("ETag", etag), ("Accept-Ranges", "bytes"), ("Content-Type", attachment.contentType),
            ("Repr-Digest", ItemAttachment.reprDigest(sha256: attachment.sha256)),
            // The type is the uploader's word: a browser that opens the file from this origin must
            // neither guess another type nor run it (an HTML upload would be a stored script).
            ("X-Content-Type-Options", "nosniff"), ("Content-Security-Policy", "sandbox"),
        ]
        var status = 200
        var range: Range<Int64> = 0..<blob.size
        if let header = request.headers["range"], request.headers["if-range"].map({ $0 == etag }) ?? true {
            switch Self.byteRange(header, size: blob.size) {
            case .whole: break
            case .unsatisfiable:
                return (
                    TableResponse(
                        status: 416, headers: [("Content-Range", "bytes */\(blob.size)"), ("ETag", etag)], body: nil),
                    nil
                )
            case .part(let part):
                status = 206
                range = part
                headers.append(("Content-Range", "bytes \(part.lowerBound)-\(part.upperBound - 1)/\(blob.size)"))
            }
        }
        headers.append(("Content-Length", String(range.count)))
        guard request.method == "GET" else { return (TableResponse(status: status, headers: headers), nil) }
        let bytes = try await blobs.read(sha256: attachment.sha256, range: range)
        return (TableResponse(status: status, headers: headers), bytes)
    }

    /// A position of a byte range: digits only (RFC 9110 §14.1.1; `Int64("+5")` took a sign), and
    /// past `Int64.max` as `Int64.max`, beyond any content (such a first byte was read as no range
    /// at all, 200, where it is unsatisfiable, 416).
    static func position(_ text: String) -> Int64? {
        guard !text.isEmpty, text.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) else {
            return nil
        }
        return Int64(text) ?? .max
    }

    /// Whether an `If-None-Match` list names `etag`, by the weak comparison the RFC asks for
    /// (`W/"…"` matches `"…"`), or is `*`.
    static func anyMatches(_ tags: String, etag: String) -> Bool {
        Preconditions.entityTags(tags).contains { tag in
            tag == "*" || (tag.hasPrefix("W/") ? tag.dropFirst(2) == etag : tag == etag)
        }
    }

    enum ByteRange: Equatable {
        /// No usable range (absent, malformed, or several): the whole content.
        case whole
        case part(Range<Int64>)
        case unsatisfiable
    }

    /// One range of `Range: bytes=K-`, `bytes=K-L` or `bytes=-N` (RFC 9110 §14); anything else
    /// (other units, several ranges, malformed) is ignored, as the RFC allows.
    static func byteRange(_ header: String, size: Int64) -> ByteRange {
        let text = header.trimmingCharacters(in: .whitespaces)
        guard text.lowercased().hasPrefix("bytes="), !text.contains(",") else { return .whole }
        let spec = text.dropFirst("bytes=".count).trimmingCharacters(in: .whitespaces)
        let parts = spec.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { return .whole }
        let first = parts[0].trimmingCharacters(in: .whitespaces)
        let last = parts[1].trimmingCharacters(in: .whitespaces)
        guard first.allSatisfy(\.isASCII), last.allSatisfy(\.isASCII) else { return .whole }
        if first.isEmpty {
            guard let suffix = position(last) else { return .whole }
            guard suffix > 0, size > 0 else { return .unsatisfiable }
            return .part(max(0, size - suffix)..<size)
        }
        guard let start = position(first) else { return .whole }
        let end: Int64
        if last.isEmpty {
            end = size - 1
        } else {
            guard let value = position(last), value >= start else { return .whole }
            end = min(value, size - 1)
        }
        guard start < size else { return .unsatisfiable }
        return .part(start..<(end + 1))
    }
}
