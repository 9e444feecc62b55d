import ServerStorageCore
import SyncCore

// How items and conflicts look in each protocol version: the item's fields plus its system properties, with
// `ETag` and `Last-Modified`.
extension TableService {
    /// An item as the protocol version shows it: its fields plus `id`, `updatedAt`, `version`,
    /// `deleted`, and in 2.0 `createdAt`.
    static func render(_ item: StoredItem, _ version: ProtocolVersion) -> JSONObject {
        var object = item.content
        object["id"] = .string(item.id)
        object["updatedAt"] = .string(item.updatedAt.iso8601)
        object["version"] = .string(item.versionTag)
        object["deleted"] = .bool(item.deleted)
        if version == .v2 { object["createdAt"] = .string(item.createdAt.iso8601) }
        return object
    }

    static func etag(_ item: StoredItem) -> String { "\"\(item.versionTag)\"" }

    func single(
        _ status: Int, _ item: StoredItem, _ context: RequestContext, extra: [(name: String, value: String)] = []
    )
        -> TableResponse
    {
        .json(
            status, .object(Self.render(item, context.version)),
            headers: [("ETag", Self.etag(item)), ("Last-Modified", HTTPDate.format(item.updatedAt))] + extra)
    }

    func conflict(_ status: Int, _ item: StoredItem, _ context: RequestContext, _ message: String) -> ProtocolError {
        var error = ProtocolError(status, status == 412 ? "preconditionFailed" : "conflict", message)
        error.item = Self.render(item, context.version)
        error.etag = Self.etag(item)
        error.lastModified = HTTPDate.format(item.updatedAt)
        return error
    }
}
