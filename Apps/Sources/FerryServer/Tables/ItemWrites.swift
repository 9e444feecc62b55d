import Foundation
import ServerStorageCore
import SyncCore

// Writing one item: insert, replace and the two kinds of patch, delete and undelete, each a compare-and-set
// against the version the request's preconditions were checked on.
extension TableService {
    func insert(_ context: RequestContext) async throws -> TableResponse {
        let insert = try prepareInsert(context)
        let stored: Result<StoredItem, StorageError>
        do {
            stored = .success(
                try await storage.insert(
                    into: context.storageTable, id: insert.id, content: insert.content, owner: insert.owner))
        } catch let error as StorageError where error.code == .conflict {
            stored = .failure(error)
        }
        return try insertAnswer(insert, stored)
    }

    /// An insert checked and ready for the storage.
    struct PreparedInsert: Sendable {
        var context: RequestContext
        var id: String
        var content: JSONObject
        var owner: String?
    }

    /// The checks of an insert before the storage, which it does not read: the body, the id (made
    /// when absent), the owner of a per-user table, the table's field rules.
    func prepareInsert(_ context: RequestContext) throws -> PreparedInsert {
        let body = try readObject(context.request)
        try checkReservedProperties(body, context)
        let id = try bodyID(body) ?? ItemID.generate()
        var content = Self.userFields(body)
        var owner: String?
        if context.table.perUser {
            guard let subject = context.identity?.subject else {
                throw ProtocolError(
                    context.table.unauthorizedStatus, "unauthorized",
                    "writing to '\(context.table.name)' requires a token")
            }
            owner = subject
            content[context.table.userIDField] = .string(subject)
        }
        try validateContent(content, context.table)
        return PreparedInsert(context: context, id: id, content: content, owner: owner)
    }

    /// The answer to an insert: 201 with the item, or for a conflict 409 with the item (400 when
    /// the caller cannot see it); other storage errors are thrown.
    func insertAnswer(_ insert: PreparedInsert, _ stored: Result<StoredItem, StorageError>) throws -> TableResponse {
        let context = insert.context
        let id = insert.id
        switch stored {
        case .success(let stored):
            var collection = Substring(context.request.path)
            while collection.hasSuffix("/") { collection = collection.dropLast() }
            let location = "\(context.request.origin)\(collection)/\(PercentEncoding.pathSegment(id))"
            return single(201, stored, context, extra: [("Location", location)])
        case .failure(let error) where error.code == .conflict:
            if let current = error.current, isVisible(current, context) {
                throw conflict(409, current, context, "an item with id '\(id)' already exists")
            }
            // Do not reveal an item the caller cannot see.
            throw ProtocolError.badRequest("the id '\(id)' cannot be used", code: "idUnavailable")
        case .failure(let error):
            throw error
        }
    }

    enum UpdateKind { case replace, mergePatch, jsonPatch }

    func update(_ context: RequestContext, urlID: String?) async throws -> TableResponse {
        let request = context.request
        let kind: UpdateKind
        if request.method == "PUT" {
            kind = .replace
        } else {
            kind = Self.mediaType(request) == "application/json-patch+json" ? .jsonPatch : .mergePatch
        }
        var patch: [JSONValue] = []
        var body: JSONObject = [:]
        if kind == .jsonPatch {
            guard case .array(let operations) = try parseJSON(request, allowing: ["application/json-patch+json"]) else {
                throw ProtocolError.badRequest("a JSON Patch body must be an array of operations", code: "invalidBody")
            }
            if let violation = JSONPatch.systemPropertyViolation(operations) {
                throw ProtocolError.badRequest(violation, code: "reservedProperty")
            }
            patch = operations
        } else {
            body = try readObject(request)
            try checkReservedProperties(body, context)
        }
        let id: String
        switch (urlID, try bodyID(body)) {
        case (let url?, let fromBody?):
            guard url == fromBody else {
                throw ProtocolError.badRequest("the id in the body ('\(fromBody)') differs from the URL's ('\(url)')")
            }
            id = try validatedURLID(url)
        case (let url?, nil): id = try validatedURLID(url)
        case (nil, let fromBody?): id = fromBody
        case (nil, nil): throw ProtocolError.badRequest("the item to update has no id", code: "invalidId")
        }
        let table = context.table
        return try await compareAndSet(id) {
            guard let current = try await visibleItem(context, id: id) else { throw notFound(id, context) }
            var next = (content: current.content, deleted: current.deleted)
            switch kind {
            case .replace:
                next.content = Self.userFields(body)
                if let deleted = body["deleted"], context.version == .v3 {
                    guard case .bool(let flag) = deleted else {
                        throw ProtocolError.badRequest("'deleted' must be true or false", code: "invalidItem")
                    }
                    next.deleted = flag
                }
            case .mergePatch:
                if context.version == .v3 { try checkUnchangedSystemProperties(body, current, includingVersion: false) }
                for (key, value) in Self.userFields(body) { next.content[key] = value }
                if context.version == .v3, let deleted = body["deleted"] {
                    // As a PUT reads it: a flag of another type is refused, not ignored.
                    guard case .bool(let flag) = deleted else {
                        throw ProtocolError.badRequest("'deleted' must be true or false", code: "invalidItem")
                    }
                    next.deleted = flag
                }
            case .jsonPatch:
                let patched: JSONValue
                do {
                    patched = try JSONPatch.apply(
                        patch, to: .object(Self.render(current, context.version)),
                        maximumCopiedBytes: configuration.limits.maximumBodySize)
                } catch {
                    throw ProtocolError.badRequest("the JSON Patch cannot be applied: \(error)", code: "invalidPatch")
                }
                guard case .object(let object) = patched else {
                    throw ProtocolError.badRequest("the JSON Patch must leave an object", code: "invalidPatch")
                }
                try checkUnchangedSystemProperties(object, current, includingVersion: true)
                try rejectUnstorable(.object(object))
                guard case .bool(let flag)? = object["deleted"] else {
                    throw ProtocolError.badRequest("'deleted' must remain true or false", code: "invalidPatch")
                }
                next.content = Self.userFields(object)
                next.deleted = flag
            }
            if next.deleted && !table.softDelete {
                throw ProtocolError.badRequest("table '\(table.name)' does not soft-delete; 'deleted' must be false")
            }
            if current.deleted {
                let undeletes = current.deleted && !next.deleted && kind != .replace
                guard context.includesDeleted || undeletes else { throw gone(id, context) }
            }
            try checkWritePreconditions(current, context)
            if request.headers["if-match"] == nil, context.version == .v2 || kind != .replace,
                case .string(let version)? = body["version"], version != current.versionTag
            {
                throw conflict(409, current, context, "the item '\(id)' has changed (version \(current.versionTag))")
            }
            if table.perUser { next.content[table.userIDField] = current.owner.map(JSONValue.string) ?? .null }
            try validateContent(next.content, table)
            if kind != .replace { try checkPatchedSize(next.content) }
            let updated = try await storage.replace(
                in: context.storageTable, id: id, expectedVersion: current.version, content: next.content,
                deleted: next.deleted, owner: context.scope ?? .all)
            return single(200, updated, context)
        }
    }

    /// A patch may not grow an item past the body size limit, one request at a time or at once: an
    /// item is never larger than a request could carry whole (a `PUT` of it must stay possible).
    private func checkPatchedSize(_ content: JSONObject) throws {
        let limit = configuration.limits.maximumBodySize
        let size = JSONValue.object(content).serializedUTF8().count
        guard size <= limit else {
            throw ProtocolError(
                413, "itemTooLarge", "the item would be \(size) bytes after this patch; the limit is \(limit)")
        }
    }

    func delete(_ context: RequestContext, id: String) async throws -> TableResponse {
        let id = try validatedURLID(id)
        return try await compareAndSet(id) {
            guard let current = try await visibleItem(context, id: id) else { throw notFound(id, context) }
            if current.deleted { throw gone(id, context) }
            try checkWritePreconditions(current, context)
            var last = current
            if context.table.softDelete {
                last = try await storage.replace(
                    in: context.storageTable, id: id, expectedVersion: current.version, content: current.content,
                    deleted: true, owner: context.scope ?? .all)
            } else {
                try await storage.delete(
                    from: context.storageTable, id: id, expectedVersion: current.version, owner: context.scope ?? .all)
                // An item deleted for good takes its attachments with it (a soft-deleted one keeps
                // them, for an undelete).
                if configuration.attachments != nil {
                    try await attachmentIndex.purge(table: context.table.name, item: id)
                }
            }
            return context.version == .v2 ? single(200, last, context) : TableResponse(status: 204)
        }
    }

    func undelete(_ context: RequestContext, id: String) async throws -> TableResponse {
        let id = try validatedURLID(id)
        guard context.table.softDelete else {
            var error = ProtocolError(405, "methodNotAllowed", "table '\(context.table.name)' does not soft-delete")
            error.headers = [
                ("Allow", TableService.allowedMethods(of: context.table, onItem: true, version: context.version))
            ]
            throw error
        }
        let status = context.version == .v2 ? 201 : 200
        return try await compareAndSet(id) {
            guard let current = try await visibleItem(context, id: id) else { throw notFound(id, context) }
            try checkWritePreconditions(current, context)
            guard current.deleted else { return single(status, current, context) }
            let restored = try await storage.replace(
                in: context.storageTable, id: id, expectedVersion: current.version, content: current.content,
                deleted: false, owner: context.scope ?? .all)
            return single(status, restored, context)
        }
    }

    /// Runs `write` (which reads the item, checks it and writes it at the version it read) until it
    /// lands: when another writer got there first (a version mismatch), it reads the new version and
    /// checks again, up to ``maximumAttempts`` times, then answers 409.
    func compareAndSet(_ id: String, _ write: () async throws -> TableResponse) async throws -> TableResponse {
        for _ in 0..<Self.maximumAttempts {
            do {
                return try await write()
            } catch let error as StorageError where error.code == .versionMismatch {
                continue
            }
        }
        throw ProtocolError(409, "contention", "the item '\(id)' is being changed by others; retry")
    }

    /// 412 when the request's conditional headers refuse a write to `current`.
    func checkWritePreconditions(_ current: StoredItem, _ context: RequestContext) throws {
        if case .failed(let reason) = Preconditions(context.request.headers).evaluate(current, isRead: false) {
            throw conflict(412, current, context, reason)
        }
    }
}
