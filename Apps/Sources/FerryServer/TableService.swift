import Foundation
import Logging
import ServerStorage
import SyncCore

/// The table protocol, versions 2.0.0 and 3.0.0, over a ``ServerStorage``: routing, version
/// negotiation, authentication, OData queries and paging, conditional requests, conflicts and the
/// response shapes of each version. The HTTP framework only moves bytes in and out of it.
final class TableService: Sendable {
    let configuration: ServerConfiguration
    let storage: any ServerStorage
    let verifier: TokenVerifier?
    let declared: [String: TableSettings]
    let logger: Logger

    /// The value of `x-zumo-server-version`.
    static let serverVersion = "ferry-\(ReferenceServer.version)"
    /// How often a compare-and-set write is retried when another writer got there first.
    static let maximumAttempts = 8

    init(configuration: ServerConfiguration, storage: any ServerStorage) {
        self.configuration = configuration
        self.storage = storage
        verifier = configuration.authSecret.map {
            TokenVerifier(
                secret: $0, issuer: configuration.authIssuer, audience: configuration.authAudience,
                requiresExpiry: !configuration.allowsTokensWithoutExpiry)
        }
        declared = Dictionary(uniqueKeysWithValues: configuration.tables.map { ($0.name, $0) })
        logger = configuration.logger
    }

    // MARK: - Entry point

    func handle(_ request: TableRequest) async -> TableResponse {
        var response: TableResponse
        do {
            response = try await route(request)
        } catch let error as ProtocolError {
            response = Self.errorResponse(error)
        } catch let error as StorageError {
            response = Self.errorResponse(storageFailure(error))
        } catch {
            logger.error("request failed", metadata: ["ferry.error": "\(error)"])
            response = Self.errorResponse(ProtocolError(500, "internal", "the server failed to answer this request"))
        }
        response.headers.append(("x-zumo-server-version", Self.serverVersion))
        response.headers.append(("Cache-Control", "no-cache"))
        return response
    }

    static func errorResponse(_ error: ProtocolError) -> TableResponse {
        if let item = error.item {
            var headers: [(name: String, value: String)] = []
            if let etag = error.etag { headers.append(("ETag", etag)) }
            if let lastModified = error.lastModified { headers.append(("Last-Modified", lastModified)) }
            return .json(error.status, .object(item), headers: headers)
        }
        if error.code == "unsupportedVersion" {
            // As the Azure v5 server does: an RFC 9457 problem, which also carries "error" and "code".
            var response = TableResponse.json(
                error.status,
                [
                    "type": "about:blank", "title": "Bad Request", "status": .int(Int64(error.status)),
                    "detail": .string(error.message), "error": .string(error.message), "code": .string(error.code),
                ])
            response.headers[0] = ("Content-Type", "application/problem+json; charset=utf-8")
            return response
        }
        return .json(error.status, ["error": .string(error.message), "code": .string(error.code)])
    }

    func storageFailure(_ error: StorageError) -> ProtocolError {
        switch error.code {
        case .invalidQuery: return .badRequest(error.message, code: "invalidQuery")
        case .fieldKind: return .badRequest(error.message, code: "invalidItem")
        case .invalidName: return .badRequest(error.message, code: "invalidItem")
        case .notFound, .noSuchTable: return .notFound(error.message)
        case .busy: return ProtocolError(503, "busy", "the database is busy; retry later")
        default:
            logger.error("storage failure", metadata: ["ferry.error": "\(error)"])
            return ProtocolError(500, "storage", "the server's storage failed")
        }
    }

    func route(_ request: TableRequest) async throws -> TableResponse {
        guard request.rawQuery.utf8.count <= configuration.limits.maximumQueryLength else {
            throw ProtocolError(
                414, "queryTooLong",
                "the query string is \(request.rawQuery.utf8.count) bytes; the limit is \(configuration.limits.maximumQueryLength)"
            )
        }
        guard let segments = request.segments else { throw ProtocolError.badRequest("the path is not valid UTF-8") }
        if segments == ["health"], request.method == "GET" {
            return try await health()
        }
        if segments == ["tables"], request.method == "GET" {
            return try await tableList(request)
        }
        guard segments.count == 2 || segments.count == 3, segments[0] == "tables" else {
            throw ProtocolError.notFound("no such resource; tables are at /tables/{name}")
        }
        let version = try Self.protocolVersion(request)
        let id = segments.count == 3 ? segments[2] : nil
        let name = segments[1]
        let operation: TableOperation
        switch (request.method, id) {
        case ("GET", nil): operation = .query
        case ("GET", _?): operation = .read
        case ("POST", nil): operation = .insert
        case ("POST", _?): operation = .undelete
        case ("PATCH", _), ("PUT", _?): operation = .update
        case ("DELETE", _?): operation = .delete
        default:
            throw ProtocolError(405, "methodNotAllowed", "\(request.method) is not allowed on \(request.path)")
        }
        // A query of a dynamic table nobody has written yet is an empty table, not a 404: clients
        // tell "no rows yet" from "not a table endpoint" by that.
        let table = try await resolve(name, creating: operation == .insert || operation == .query)
        let identity = try authenticate(request, table: table)
        if table.requiresAuth && identity == nil {
            throw ProtocolError(table.unauthorizedStatus, "unauthorized", "table '\(name)' requires a valid token")
        }
        if table.disabledOperations.contains(operation) {
            throw ProtocolError(405, "methodNotAllowed", "the \(operation.rawValue) operation is disabled on '\(name)'")
        }
        var context = RequestContext(
            request: request, version: version, table: table, identity: identity,
            storageTable: StorageTable(
                name: table.name, schema: table.schema))
        context.view = table.dataViewFilter
        switch operation {
        case .query: return try await query(context)
        case .read: return try await read(context, id: id!)
        case .insert: return try await insert(context)
        case .update: return try await update(context, urlID: id)
        case .delete: return try await delete(context, id: id!)
        case .undelete: return try await undelete(context, id: id!)
        }
    }

    func health() async throws -> TableResponse {
        let tables = try await storage.tableNames()
        return .json(
            200,
            [
                "status": "ok", "server": .string(Self.serverVersion), "storage": .string(storage.location),
                "tables": .int(Int64(tables.count)),
            ])
    }

    /// `GET /tables`, an extension of Ferry's server (the protocol has no such listing; legacy
    /// clients never ask): the names of the declared tables and the dynamic tables written so far.
    /// With an auth secret configured it needs a valid token, like any table that requires one.
    func tableList(_ request: TableRequest) async throws -> TableResponse {
        let identity = try authenticate(request, table: configuration.dynamicTableDefaults)
        if verifier != nil && identity == nil {
            throw ProtocolError(401, "unauthorized", "listing the tables requires a valid token")
        }
        let names = Set(try await storage.tableNames()).union(declared.keys).sorted()
        return .json(200, ["tables": .array(names.map { .string($0) })])
    }

    /// What one request works with.
    struct RequestContext {
        var request: TableRequest
        var version: ProtocolVersion
        var table: TableSettings
        var identity: TokenVerifier.Identity?
        var storageTable: StorageTable
        var view: QueryExpression?

        /// Whose rows the request sees: `nil` means nobody's (an anonymous request to a per-user table).
        var scope: OwnerScope? {
            guard table.perUser else { return .all }
            return identity.map { .owner($0.subject) }
        }

        /// `__includedeleted=true` (any case) or `X-ZUMO-Options: include:deleted`.
        var includesDeleted: Bool {
            if let value = ODataParameters(parsing: request.rawQuery).value(for: "__includedeleted"),
                value.lowercased() == "true"
            {
                return true
            }
            return TableService.zumoOptions(request).contains("include:deleted")
        }
    }

    // MARK: - Negotiation, tables, identity

    /// `ZUMO-API-VERSION` from the query (any case; it wins) or the header: 2.0.x is 2.0.0, 3.0.x or
    /// absent is 3.0.0, anything else is a 400.
    static func protocolVersion(_ request: TableRequest) throws -> ProtocolVersion {
        let fromQuery = ODataParameters(parsing: request.rawQuery).value(for: "zumo-api-version")
        guard let value = fromQuery ?? request.headers["zumo-api-version"] else { return .v3 }
        let parts = value.split(separator: ".", omittingEmptySubsequences: false)
        if parts.count == 2 || parts.count == 3, parts.allSatisfy({ !$0.isEmpty && $0.allSatisfy(\.isASCIIDigit) }) {
            if parts[0] == "2" && parts[1] == "0" { return .v2 }
            if parts[0] == "3" && parts[1] == "0" { return .v3 }
        }
        throw ProtocolError.badRequest(
            "unsupported ZUMO-API-VERSION '\(value.prefix(40))': this server speaks 2.0.0 and 3.0.0",
            code: "unsupportedVersion")
    }

    static func zumoOptions(_ request: TableRequest) -> [String] {
        request.headers.values("x-zumo-options").flatMap { $0.split(separator: ",") }
            .map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
    }

    func resolve(_ name: String, creating: Bool) async throws -> TableSettings {
        if let table = declared[name] { return table }
        guard configuration.allowsDynamicTables, (try? StoreValidation.validateTableName(name)) != nil else {
            throw ProtocolError.notFound("no table '\(name.prefix(128))'")
        }
        var table = configuration.dynamicTableDefaults
        table.name = name
        if !creating {
            guard try await storage.tableExists(name) else { throw ProtocolError.notFound("no table '\(name)'") }
        }
        return table
    }

    /// The token's identity; an invalid token answers the table's unauthorized status (401 unless
    /// configured otherwise), whether or not the table requires one.
    func authenticate(_ request: TableRequest, table: TableSettings) throws -> TokenVerifier.Identity? {
        var token = request.headers["x-zumo-auth"]
        if token == nil, let authorization = request.headers["authorization"] {
            let parts = authorization.split(separator: " ", maxSplits: 1)
            if parts.count == 2, parts[0].lowercased() == "bearer" { token = String(parts[1]) }
        }
        guard let token = token?.trimmingCharacters(in: .whitespaces), !token.isEmpty, let verifier else { return nil }
        do {
            return try verifier.verify(token)
        } catch {
            throw ProtocolError(table.unauthorizedStatus, "unauthorized", error.description)
        }
    }

    // MARK: - Rendering

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

    // MARK: - Query

    func query(_ context: RequestContext) async throws -> TableResponse {
        let table = context.table
        let parsed: TableQuery
        do {
            parsed = try TableQuery(
                odata: context.request.rawQuery, dialect: context.version,
                limits: QueryLimits(
                    maximumLength: configuration.limits.maximumQueryLength,
                    maximumDepth: configuration.limits.maximumFilterDepth))
            try QueryEvaluator(schema: table.schema).validate(parsed)
        } catch {
            throw ProtocolError.badRequest(error.description, code: "invalidQuery")
        }
        if let top = parsed.top, table.maxTop > 0, top > table.maxTop {
            throw ProtocolError.badRequest(
                "You cannot request more than \(table.maxTop) records ($top=\(top))", code: "invalidQuery")
        }
        let skip = parsed.skip ?? 0
        let take = min(parsed.top ?? table.pageSize, table.pageSize)
        var filter = parsed.filter
        if let view = context.view { filter = filter.map { .binary(.and, view, $0) } ?? view }
        var page = StoragePage(
            items: [], totalCount: parsed.includeTotalCount ? 0 : nil, hasMore: false, plan: .database)
        if let scope = context.scope, try await storage.tableExists(table.name) {
            page = try await storage.query(
                context.storageTable,
                StorageQuery(
                    filter: filter, orderBy: parsed.orderBy, skip: skip, limit: take,
                    includeDeleted: parsed.includeDeleted || context.includesDeleted,
                    includeTotalCount: parsed.includeTotalCount, owner: scope))
        }
        let evaluator = QueryEvaluator(schema: table.schema)
        let items = page.items.map {
            JSONValue.object(evaluator.project(Self.render($0, context.version), parsed.select))
        }
        let returned = page.items.count
        let remaining = parsed.top.map { $0 - returned }
        let hasNext = page.hasMore && (remaining ?? 1) > 0
        let next = ODataParameters(parsing: context.request.rawQuery).nextPageParameters(
            skip: skip + returned, top: remaining)

        switch context.version {
        case .v3:
            var body: JSONObject = ["items": .array(items)]
            if let total = page.totalCount { body["count"] = .int(Int64(total)) }
            if hasNext {
                let query = next.percentEncodedQueryString
                body["nextLink"] = .string(
                    Self.zumoOptions(context.request).contains("nextlink=path")
                        ? "\(context.request.path)?\(query)" : query)
            }
            return .json(200, .object(body))
        case .v2:
            var headers: [(name: String, value: String)] = []
            if hasNext {
                let link = "\(context.request.origin)\(context.request.path)?\(next.percentEncodedQueryString)"
                headers.append(("Link", "\(link); rel=next"))
            }
            if let total = page.totalCount {
                return .json(200, ["results": .array(items), "count": .int(Int64(total))], headers: headers)
            }
            return .json(200, .array(items), headers: headers)
        }
    }

    // MARK: - Single items

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

    func insert(_ context: RequestContext) async throws -> TableResponse {
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
        let stored: StoredItem
        do {
            stored = try await storage.insert(into: context.storageTable, id: id, content: content, owner: owner)
        } catch let error as StorageError where error.code == .conflict {
            if let current = error.current, isVisible(current, context) {
                throw conflict(409, current, context, "an item with id '\(id)' already exists")
            }
            // Do not reveal an item the caller cannot see.
            throw ProtocolError.badRequest("the id '\(id)' cannot be used", code: "idUnavailable")
        }
        var collection = Substring(context.request.path)
        while collection.hasSuffix("/") { collection = collection.dropLast() }
        let location = "\(context.request.origin)\(collection)/\(Self.percentEncodedSegment(id))"
        return single(201, stored, context, extra: [("Location", location)])
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
        for _ in 0..<Self.maximumAttempts {
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
                if context.version == .v3, case .bool(let flag)? = body["deleted"] { next.deleted = flag }
            case .jsonPatch:
                let patched: JSONValue
                do {
                    patched = try JSONPatch.apply(patch, to: .object(Self.render(current, context.version)))
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
            if case .failed(let reason) = Preconditions(request.headers).evaluate(current, isRead: false) {
                throw conflict(412, current, context, reason)
            }
            if request.headers["if-match"] == nil, context.version == .v2 || kind != .replace,
                case .string(let version)? = body["version"], version != current.versionTag
            {
                throw conflict(409, current, context, "the item '\(id)' has changed (version \(current.versionTag))")
            }
            if table.perUser { next.content[table.userIDField] = current.owner.map(JSONValue.string) ?? .null }
            try validateContent(next.content, table)
            do {
                let updated = try await storage.replace(
                    in: context.storageTable, id: id, expectedVersion: current.version, content: next.content,
                    deleted: next.deleted, owner: context.scope ?? .all)
                return single(200, updated, context)
            } catch let error as StorageError where error.code == .versionMismatch {
                continue  // another writer got there first: re-check against the new version
            }
        }
        throw ProtocolError(409, "contention", "the item '\(id)' is being changed by others; retry")
    }

    func delete(_ context: RequestContext, id: String) async throws -> TableResponse {
        let id = try validatedURLID(id)
        for _ in 0..<Self.maximumAttempts {
            guard let current = try await visibleItem(context, id: id) else { throw notFound(id, context) }
            if current.deleted { throw gone(id, context) }
            if case .failed(let reason) = Preconditions(context.request.headers).evaluate(current, isRead: false) {
                throw conflict(412, current, context, reason)
            }
            do {
                var last = current
                if context.table.softDelete {
                    last = try await storage.replace(
                        in: context.storageTable, id: id, expectedVersion: current.version, content: current.content,
                        deleted: true, owner: context.scope ?? .all)
                } else {
                    try await storage.delete(
                        from: context.storageTable, id: id, expectedVersion: current.version,
                        owner: context.scope ?? .all)
                }
                return context.version == .v2 ? single(200, last, context) : TableResponse(status: 204)
            } catch let error as StorageError where error.code == .versionMismatch {
                continue
            }
        }
        throw ProtocolError(409, "contention", "the item '\(id)' is being changed by others; retry")
    }

    func undelete(_ context: RequestContext, id: String) async throws -> TableResponse {
        let id = try validatedURLID(id)
        guard context.table.softDelete else {
            throw ProtocolError(405, "methodNotAllowed", "table '\(context.table.name)' does not soft-delete")
        }
        let status = context.version == .v2 ? 201 : 200
        for _ in 0..<Self.maximumAttempts {
            guard let current = try await visibleItem(context, id: id) else { throw notFound(id, context) }
            if case .failed(let reason) = Preconditions(context.request.headers).evaluate(current, isRead: false) {
                throw conflict(412, current, context, reason)
            }
            guard current.deleted else { return single(status, current, context) }
            do {
                let restored = try await storage.replace(
                    in: context.storageTable, id: id, expectedVersion: current.version, content: current.content,
                    deleted: false, owner: context.scope ?? .all)
                return single(status, restored, context)
            } catch let error as StorageError where error.code == .versionMismatch {
                continue
            }
        }
        throw ProtocolError(409, "contention", "the item '\(id)' is being changed by others; retry")
    }

    // MARK: - Bodies

    static func mediaType(_ request: TableRequest) -> String? {
        guard let header = request.headers["content-type"] else { return nil }
        let type = header.split(separator: ";", maxSplits: 1).first.map {
            $0.trimmingCharacters(in: .whitespaces).lowercased()
        }
        return type?.isEmpty == false ? type : nil
    }

    /// The `charset` parameter of `Content-Type`, lowercased and unquoted, when there is one.
    static func charset(_ request: TableRequest) -> String? {
        guard let header = request.headers["content-type"] else { return nil }
        for parameter in header.split(separator: ";").dropFirst() {
            let pair = parameter.split(separator: "=", maxSplits: 1)
            guard pair.count == 2, pair[0].trimmingCharacters(in: .whitespaces).lowercased() == "charset" else {
                continue
            }
            var value = pair[1].trimmingCharacters(in: .whitespaces)
            if value.count >= 2, value.hasPrefix("\""), value.hasSuffix("\"") {
                value = String(value.dropFirst().dropLast())
            }
            return value.lowercased()
        }
        return nil
    }

    /// Parses the body as JSON. A missing or empty `Content-Type` counts as JSON (as the Node server
    /// did); other types than JSON ones answer 415.
    func parseJSON(_ request: TableRequest, allowing types: Set<String> = []) throws -> JSONValue {
        if let type = Self.mediaType(request) {
            let accepted =
                type == "application/json" || type == "text/json" || type == "application/merge-patch+json"
                || types.contains(type)
            guard accepted else {
                throw ProtocolError(
                    415, "unsupportedMediaType", "the body must be JSON (Content-Type application/json), not \(type)")
            }
            if let charset = Self.charset(request), charset != "utf-8", charset != "utf8" {
                throw ProtocolError(
                    415, "unsupportedMediaType", "the body must be UTF-8 JSON, not charset '\(charset.prefix(40))'")
            }
        }
        guard let bytes = request.body, !bytes.isEmpty else {
            throw ProtocolError.badRequest("the request has no body", code: "invalidBody")
        }
        let value: JSONValue
        do {
            value = try JSONValue(parsingUTF8: bytes)
        } catch {
            throw ProtocolError.badRequest(error.description, code: "invalidJSON")
        }
        try rejectUnstorable(value)
        return value
    }

    func readObject(_ request: TableRequest) throws -> JSONObject {
        guard case .object(let object) = try parseJSON(request) else {
            throw ProtocolError.badRequest("the body must be a JSON object", code: "invalidBody")
        }
        return object
    }

    /// Refuses what the storage could not hold exactly, naming where it is: strings or member names
    /// holding U+0000 (SQLite's text functions and PostgreSQL's `jsonb` cannot hold them faithfully),
    /// and numbers no double can hold (`1e400`, a 400-digit integer), which JSON text would turn into
    /// `null`.
    func rejectUnstorable(_ value: JSONValue) throws {
        var stack: [(value: JSONValue, path: String)] = [(value, "")]
        while let (next, path) = stack.popLast() {
            switch next {
            case .string(let text) where text.utf8.contains(0):
                throw ProtocolError.badRequest(
                    "\(Self.describe(path)) holds the NUL character (\\u0000), which strings may not contain",
                    code: "invalidItem")
            case .double(let number) where !number.isFinite:
                throw ProtocolError.badRequest(
                    "\(Self.describe(path)) is a number too large for a double (at most about 1.8e308)",
                    code: "invalidItem")
            case .array(let elements):
                for (index, element) in elements.enumerated() { stack.append((element, "\(path)[\(index)]")) }
            case .object(let object):
                for (key, element) in object {
                    if key.utf8.contains(0) {
                        throw ProtocolError.badRequest("member names must not contain NUL", code: "invalidItem")
                    }
                    stack.append((element, path.isEmpty ? key : "\(path).\(key)"))
                }
            default: break
            }
        }
    }

    /// `field 'a.b[2]'`, or `the body` for the top level, with the name cut to a readable length.
    static func describe(_ path: String) -> String {
        if path.isEmpty { return "the body" }
        let shown = path.count > 80 ? path.prefix(80) + "…" : Substring(path)
        return "field '\(shown)'"
    }

    /// The body's `id`: a valid string (an integer is taken as its decimal text, as the Node server
    /// stored it); absent or `null` gives `nil`.
    func bodyID(_ body: JSONObject) throws -> String? {
        switch body["id"] {
        case nil, .null?: return nil
        case .string(let text)?: return try validatedURLID(text)
        case .int(let number)?: return String(number)
        default: throw ProtocolError.badRequest("'id' must be a string", code: "invalidId")
        }
    }

    /// 2.0 refuses `createdAt`, `updatedAt` and `deleted` in any letter case (as the Node server
    /// did); both versions refuse other spellings of system properties (`ID`, `UpdatedAt`).
    func checkReservedProperties(_ body: JSONObject, _ context: RequestContext) throws {
        for key in body.keys.sorted() where SystemProperty.isSystemProperty(key) {
            let exact = SystemProperty(rawValue: key) != nil
            if !exact || (context.version == .v2 && ["createdAt", "updatedAt", "deleted"].contains(key)) {
                throw ProtocolError.badRequest(
                    "'\(key)' is a system property; the server sets it", code: "reservedProperty")
            }
        }
    }

    /// A 3.0 patch may repeat `id`, `createdAt`, `updatedAt` and `version` but not change them.
    /// (In a merge patch, `version` is a concurrency token instead: a stale one is a 409.)
    func checkUnchangedSystemProperties(_ object: JSONObject, _ current: StoredItem, includingVersion: Bool) throws {
        let rendered = Self.render(current, .v2)
        for key in ["id", "createdAt", "updatedAt", "version"] where includingVersion || key != "version" {
            guard let value = object[key] else { continue }
            let same: Bool
            if key == "createdAt" || key == "updatedAt", case .string(let text) = value {
                same = Timestamp(iso8601: text) == (key == "createdAt" ? current.createdAt : current.updatedAt)
            } else {
                same = value == rendered[key]
            }
            guard same else {
                throw ProtocolError.badRequest(
                    "'\(key)' is a system property and cannot be changed", code: "reservedProperty")
            }
        }
    }

    /// The body without system properties.
    static func userFields(_ body: JSONObject) -> JSONObject {
        var content = body
        for property in SystemProperty.allCases { content[property.rawValue] = nil }
        return content
    }

    func validateContent(_ content: JSONObject, _ table: TableSettings) throws {
        for field in table.fields.keys.sorted() {
            if let violation = table.fields[field]!.violation(of: content[field], field: field) {
                throw ProtocolError.badRequest(violation, code: "invalidItem")
            }
        }
        if !table.additionalFields {
            for key in content.keys.sorted()
            where table.fields[key] == nil && !(table.perUser && key == table.userIDField) {
                throw ProtocolError.badRequest("table '\(table.name)' has no field '\(key)'", code: "invalidItem")
            }
        }
    }

    static func percentEncodedSegment(_ text: String) -> String {
        var result = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."),
                UInt8(ascii: "~"):
                result.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                result += "%" + String(byte, radix: 16, uppercase: true).leftPadded(2)
            }
        }
        return result
    }
}

extension Character {
    var isASCIIDigit: Bool { isASCII && isNumber }
}

extension String {
    func leftPadded(_ width: Int) -> String { String(repeating: "0", count: max(0, width - count)) + self }
}

/// RFC 9110 conditional requests against an item: `If-Match`, `If-None-Match`,
/// `If-Modified-Since` and `If-Unmodified-Since`, in the order the RFC evaluates them.
struct Preconditions {
    let headers: RequestHeaders

    init(_ headers: RequestHeaders) { self.headers = headers }

    enum Outcome: Equatable {
        case proceed
        /// A read of an unchanged item: 304.
        case notModified
        /// 412, with the reason.
        case failed(String)
    }

    /// A strong comparison: `*` matches any item, weak tags never match; quotes are optional (the
    /// Node server accepted a bare version).
    static func matches(_ header: String, _ item: StoredItem) -> Bool {
        for raw in header.split(separator: ",") {
            let tag = raw.trimmingCharacters(in: .whitespaces)
            if tag == "*" { return true }
            if tag.hasPrefix("W/") { continue }
            var bare = Substring(tag)
            if bare.count >= 2, bare.hasPrefix("\""), bare.hasSuffix("\"") { bare = bare.dropFirst().dropLast() }
            if bare == item.versionTag { return true }
        }
        return false
    }

    func evaluate(_ item: StoredItem, isRead: Bool) -> Outcome {
        let modifiedSeconds = Self.seconds(item.updatedAt)
        if let ifMatch = headers["if-match"] {
            if !Self.matches(ifMatch, item) { return .failed("If-Match does not match the item's version") }
        } else if let header = headers["if-unmodified-since"], let date = HTTPDate.parse(header), modifiedSeconds > date
        {
            return .failed("the item was modified after If-Unmodified-Since")
        }
        if let ifNoneMatch = headers["if-none-match"] {
            if Self.matches(ifNoneMatch, item) {
                return isRead ? .notModified : .failed("If-None-Match matches the item's version")
            }
        } else if let header = headers["if-modified-since"], let date = HTTPDate.parse(header), modifiedSeconds <= date
        {
            return isRead ? .notModified : .failed("the item was not modified since If-Modified-Since")
        }
        return .proceed
    }

    static func seconds(_ timestamp: Timestamp) -> Int64 {
        let milliseconds = timestamp.millisecondsSince1970
        return milliseconds >= 0 ? milliseconds / 1000 : (milliseconds - 999) / 1000
    }
}
