import ServerStorageCore
import SyncCore

// The attachment routes answered with JSON (docs/attachments.md): an item's list, the removal of
// one attachment, and a table's attachment rows for incremental sync. Every one applies the
// table's rules as a read of the item does: requiresAuth, the owner scope of per-user tables, the
// data view, and a deleted item's attachments are gone with it.
extension TableService {
    /// `$attachments`, the segment of attachment routes.
    static let attachmentsSegment = "$attachments"
    /// `$uploads`, the segment of upload resources.
    static let uploadsSegment = "$uploads"

    /// The longest attachment name, in UTF-8 bytes.
    static let maximumAttachmentNameLength = 255

    var attachmentIndex: AttachmentIndex { AttachmentIndex(storage: storage) }

    /// `route` with its table as the server names it (``tableName(_:)``): an item's attachments
    /// are one list whatever the case a client spells its table with.
    func withStoredTableName(_ route: TableRoute) async throws -> TableRoute {
        switch route {
        case .attachments(let table, let id): .attachments(try await tableName(table), id: id)
        case .attachment(let table, let id, let name): .attachment(try await tableName(table), id: id, name: name)
        case .attachmentRows(let table): .attachmentRows(try await tableName(table))
        default: route
        }
    }

    func attachmentRoute(_ request: TableRequest) async throws -> TableResponse {
        switch (try await withStoredTableName(request.route), request.method) {
        case (.attachments(let table, let id), "GET"):
            let (context, item) = try await attachedItem(request, table: table, id: id)
            let list = try await attachmentIndex.attachments(table: table, item: item.id, owner: .all)
            return .json(200, .array(list.map { .object(Self.rendered($0, context.version)) }))
        case (.attachment(let table, let id, let name), "DELETE"):
            let name = try Self.validatedAttachmentName(name)
            let (_, item) = try await attachedItem(request, table: table, id: id, operation: .update)
            if let expected = request.headers.list("if-match") {
                let current = try await attachmentIndex.attachment(table: table, item: item.id, name: name, owner: .all)
                guard let current,
                    Preconditions.entityTags(expected).contains(where: { $0 == "*" || $0 == "\"\(current.sha256)\"" })
                else {
                    throw ProtocolError(412, "preconditionFailed", "attachment '\(name)' is not the one If-Match names")
                }
            }
            guard try await attachmentIndex.remove(table: table, item: item.id, name: name, owner: .all) else {
                throw ProtocolError.notFound("item '\(item.id)' of '\(table)' has no attachment '\(name)'")
            }
            return TableResponse(status: 204)
        case (.attachmentRows(let table), "GET"):
            return try await attachmentRows(request, table: table)
        case (.upload(let token), "HEAD"), (.upload(let token), "DELETE"):
            return try await uploadResource(request, token: token)
        case (.attachment, let method) where !["GET", "HEAD", "PUT"].contains(method):
            throw ProtocolError.methodNotAllowed(
                "\(request.method) is not allowed on \(request.path)", allow: ["GET", "HEAD", "PUT", "DELETE"])
        case (.attachments, _), (.attachmentRows, _):
            throw ProtocolError.methodNotAllowed("\(request.method) is not allowed on \(request.path)", allow: ["GET"])
        case (.upload, _):
            throw ProtocolError.methodNotAllowed(
                "\(request.method) is not allowed on \(request.path)", allow: ["HEAD", "PATCH", "DELETE"])
        default:
            throw ProtocolError(
                501, "notImplemented", "downloading attachments is not offered by this server yet")
        }
    }

    /// The request's context on the app table and the item it addresses, when the caller may
    /// `operation` it (read for lists and downloads, update for changes): 404 for an item the
    /// caller cannot see, 404 (2.0) or 410 (3.0) for a deleted one.
    func attachedItem(
        _ request: TableRequest, table name: String, id: String, operation: TableOperation = .read
    ) async throws -> (RequestContext, StoredItem) {
        let context = try await appTableContext(request, table: name, operation: operation)
        let id = try validatedURLID(id)
        guard let item = try await visibleItem(context, id: id) else { throw notFound(id, context) }
        if item.deleted { throw gone(id, context) }
        return (context, item)
    }

    /// The context of a request on an existing app table, after authentication and its rules.
    func appTableContext(_ request: TableRequest, table name: String, operation: TableOperation) async throws
        -> RequestContext
    {
        let version = try Self.protocolVersion(request)
        // A query finds a table nobody has written yet empty, as a query of its items does.
        let table = try await resolve(name, creating: operation == .query)
        let identity = try authenticate(request, table: table)
        if table.requiresAuth && identity == nil {
            throw ProtocolError(table.unauthorizedStatus, "unauthorized", "table '\(name)' requires a valid token")
        }
        if table.disabledOperations.contains(operation) {
            // The attachment routes' reads need the table's read, their changes its update.
            let allow = ["GET", "HEAD", "PUT", "DELETE"].filter {
                !table.disabledOperations.contains($0 == "GET" || $0 == "HEAD" ? .read : .update)
            }
            throw ProtocolError.methodNotAllowed(
                "the \(operation.rawValue) operation is disabled on '\(name)'", allow: allow)
        }
        var context = RequestContext(
            request: request, version: version, table: table, identity: identity,
            storageTable: StorageTable(name: table.name, schema: table.schema))
        context.view = table.dataViewFilter
        return context
    }

    /// `GET /tables/$attachments/{table}`: the table's attachment rows as a table query (paging,
    /// `$filter`, deleted rows and delta tokens as for items), in the caller's owner scope.
    ///
    /// A table's data view is not applied to its attachment rows: they name items and files, not
    /// the items' fields.
    func attachmentRows(_ request: TableRequest, table name: String) async throws -> TableResponse {
        var context = try await appTableContext(request, table: name, operation: .query)
        context.table.name = AttachmentIndex.table.name
        context.table.fields = [:]
        context.table.additionalFields = true
        context.table.dataView = nil
        context.storageTable = AttachmentIndex.table
        context.view = AttachmentIndex.equal(["table": name])
        return try await query(context)
    }

    /// A name is 1–255 bytes of UTF-8 without `/`, `\`, control characters, and not `.` or `..`.
    static func validatedAttachmentName(_ name: String) throws -> String {
        // One attachment whatever the Unicode form of its name (NFC, as the SDK keeps it): "café"
        // typed and "café" from an HFS+ file name named two.
        let name = AttachmentName.normalized(name)
        guard !name.isEmpty, name.utf8.count <= maximumAttachmentNameLength, name != ".", name != "..",
            !name.unicodeScalars.contains(where: {
                $0 == "/" || $0 == "\\" || $0.properties.generalCategory == .control
            })
        else {
            throw ProtocolError.badRequest(
                "invalid attachment name '\(name.prefix(40))': 1 to 255 bytes, without '/', '\\' or control characters",
                code: "invalidName")
        }
        return name
    }

    /// An attachment as the routes show it.
    static func rendered(_ attachment: StoredAttachment, _ version: ProtocolVersion) -> JSONObject {
        [
            "item": .string(attachment.item), "name": .string(attachment.name), "size": .int(attachment.size),
            "sha256": .string(attachment.sha256), "contentType": .string(attachment.contentType),
            "updatedAt": .string(attachment.updatedAt.iso8601), "version": .string(String(attachment.version)),
        ]
    }
}
