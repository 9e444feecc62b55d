import ServerStorageCore
import SyncCore

// Reading one item: what the request may see of it (owner scope and data view), 404 and 410, and `GET
// /tables/{name}/{id}` with its conditional headers.
extension TableService {
    /// The item `id` as the request may see it: within its owner scope and data view.
    func visibleItem(_ context: RequestContext, id: String) async throws -> StoredItem? {
        guard let scope = context.scope else { return nil }
        guard let item = try await storage.item(in: context.storageTable, id: id, owner: scope) else { return nil }
        if let view = context.view, !QueryEvaluator(schema: context.table.schema).matches(view, item.queryable) {
            return nil
        }
        return item
    }

    func validatedURLID(_ id: String) throws -> String {
        do {
            try ItemID.validate(id)
        } catch {
            throw ProtocolError.badRequest(error.description, code: "invalidId")
        }
        return id
    }

    func notFound(_ id: String, _ context: RequestContext) -> ProtocolError {
        .notFound("no item '\(id)' in '\(context.table.name)'")
    }

    /// 404 in 2.0 (the legacy servers filter deleted rows out), 410 Gone in 3.0.
    func gone(_ id: String, _ context: RequestContext) -> ProtocolError {
        context.version == .v2
            ? notFound(id, context)
            : ProtocolError(410, "gone", "the item '\(id)' of '\(context.table.name)' is deleted")
    }

    func read(_ context: RequestContext, id: String) async throws -> TableResponse {
        let id = try validatedURLID(id)
        guard let item = try await visibleItem(context, id: id) else { throw notFound(id, context) }
        if item.deleted && !context.includesDeleted { throw gone(id, context) }
        switch Preconditions(context.request.headers).evaluate(item, isRead: true) {
        case .proceed: return single(200, item, context)
        case .notModified:
            return TableResponse(
                status: 304, headers: [("ETag", Self.etag(item)), ("Last-Modified", HTTPDate.format(item.updatedAt))])
        case .failed(let reason): throw conflict(412, item, context, reason)
        }
    }

    func isVisible(_ item: StoredItem, _ context: RequestContext) -> Bool {
        switch context.scope {
        case nil: return false
        case .all?: break
        case .owner(let subject)?: if item.owner != subject { return false }
        }
        if let view = context.view { return QueryEvaluator(schema: context.table.schema).matches(view, item.queryable) }
        return true
    }

}
