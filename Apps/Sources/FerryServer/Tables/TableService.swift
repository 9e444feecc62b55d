import Foundation
import Logging
import ServerStorageCore
import SyncCore

/// The table protocol, versions 2.0.0 and 3.0.0, over a ``ServerStorage``: routing, version
/// negotiation, authentication, OData queries and paging, conditional requests, conflicts and the
/// response shapes of each version. The HTTP framework only moves bytes in and out of it.
final class TableService: Sendable {
    let configuration: ServerConfiguration
    let storage: any ServerStorage
    let verifier: TokenVerifier?
    let declared: [String: TableSettings]
    /// The declared tables by their names in lower case (``resolve(_:creating:)``).
    let declaredIgnoringCase: [String: TableSettings]
    let logger: Logger
    let ledger: IdempotencyLedger
    /// The change feeds open (``openChangeFeed(_:)``).
    let feeds: FeedRegistry
    /// The server's metrics; `nil` when they are off.
    let metrics: ServerMetrics?
    /// The one subscription to the storage's changes that every open feed shares.
    let feedHub: FeedHub
    /// Held while an upload's attachment is recorded and while the sweeper checks and deletes
    /// content (``AttachmentSweeper``): content is never collected under an attachment being recorded.
    let contentGate = TurnGate()
    /// The tables inserts have created, within ``RequestLimits/maximumDynamicTables``.
    let dynamicTables: DynamicTables
    /// The bytes of request bodies handled at once (``RequestLimits/maximumBodyBytesAtOnce``).
    let bodyBytes: ByteBudget

    /// The value of `x-zumo-server-version`.
    static let serverVersion = "ferry-\(ReferenceServer.version)"
    /// How often a compare-and-set write is retried when another writer got there first.
    static let maximumAttempts = 8

    init(configuration: ServerConfiguration, storage: any ServerStorage, metrics: ServerMetrics? = nil) {
        // Every storage call a span, when tracing.
        var storage = storage
        if let tracer = configuration.tracer { storage = TracedServerStorage(storage, tracer: tracer) }
        self.configuration = configuration
        self.storage = storage
        self.metrics = metrics
        feeds = FeedRegistry(open: metrics?.feeds)
        verifier = configuration.authSecret.map {
            TokenVerifier(
                secret: $0, issuer: configuration.authIssuer, audience: configuration.authAudience,
                requiresExpiry: !configuration.allowsTokensWithoutExpiry)
        }
        declared = Dictionary(uniqueKeysWithValues: configuration.tables.map { ($0.name, $0) })
        declaredIgnoringCase = Dictionary(
            configuration.tables.map { ($0.name.lowercased(), $0) }, uniquingKeysWith: { first, _ in first })
        bodyBytes = ByteBudget(capacity: configuration.limits.maximumBodyBytesAtOnce)
        dynamicTables = DynamicTables(
            declared: configuration.tables.map(\.name), limit: configuration.limits.maximumDynamicTables)
        logger = configuration.logger
        feedHub = FeedHub(storage: storage, heartbeat: configuration.limits.changeFeedHeartbeat)
        ledger = IdempotencyLedger(
            storage: storage, retention: configuration.limits.idempotencyRetention, logger: configuration.logger,
            replays: metrics?.replays)
    }

    // MARK: - Entry point

    func handle(_ request: TableRequest) async -> TableResponse {
        Self.finished(await answering { try await route(request) })
    }

    /// The response `body` gives, or the error response for what it throws.
    func answering(_ body: () async throws -> TableResponse) async -> TableResponse {
        do {
            return try await body()
        } catch let error as ProtocolError {
            return Self.errorResponse(error)
        } catch let error as StorageError {
            return Self.errorResponse(storageFailure(error))
        } catch is CancellationError {
            // The server stopped before the request finished (its grace period ended): not a fault
            // of the server's, and most often never sent, as the connection closes with it. It was
            // logged `500 … CancellationError()`.
            var failure = ProtocolError(503, "unavailable", "the server is stopping; retry later")
            failure.retryAfter = 2
            failure.logDetail = "cancelled before it finished, as the server stopped"
            return Self.errorResponse(failure)
        } catch {
            var failure = ProtocolError(500, "internal", "the server failed to answer this request")
            failure.logDetail = "\(error)"
            return Self.errorResponse(failure)
        }
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
        var response = TableResponse.json(
            error.status, ["error": .string(error.message), "code": .string(error.code)])
        if let seconds = error.retryAfter { response.headers.append(("Retry-After", "\(seconds)")) }
        response.headers += error.headers
        response.logDetail = error.logDetail
        return response
    }

    func storageFailure(_ error: StorageError) -> ProtocolError {
        let failure = protocolFailure(error)
        if failure.status >= 500 { metrics?.storageFailed(error.code) }
        return failure
    }

    /// The answer to a storage failure: 4xx for what the request asked wrongly, 5xx for the
    /// storage's own failures (busy, unreachable, closed, full, …). The storage's own words go in
    /// the request's one log line (`logDetail`), which carries its request id: a line of their own
    /// here had none, and made two lines of one error.
    private func protocolFailure(_ error: StorageError) -> ProtocolError {
        switch error.code {
        case .invalidQuery: return .badRequest(error.message, code: "invalidQuery")
        case .fieldKind: return .badRequest(error.message, code: "invalidItem")
        case .invalidName: return .badRequest(error.message, code: "invalidItem")
        case .invalidTableName: return ProtocolError(404, "invalidTableName", error.message)
        case .notFound, .noSuchTable: return .notFound(error.message)
        case .busy:
            var failure = ProtocolError(503, "busy", "the database is busy; retry later")
            failure.retryAfter = 1
            failure.logDetail = error.message
            return failure
        case .unavailable:
            var failure = ProtocolError(503, "unavailable", "the database cannot be reached; retry later")
            failure.retryAfter = 2
            failure.logDetail = error.message
            return failure
        case .closed:
            // The server is stopping (or its storage was closed under it): not ready, not broken.
            var failure = ProtocolError(503, "unavailable", "the server is stopping; retry later")
            failure.retryAfter = 2
            return failure
        case .full:
            var failure = ProtocolError(
                507, "storageFull", "the server's storage is full; nothing was written; retry later")
            failure.retryAfter = 30
            failure.logDetail = error.message
            return failure
        default:
            var failure = ProtocolError(500, "storage", "the server's storage failed")
            failure.logDetail = "\(error)"
            return failure
        }
    }

    func route(_ request: TableRequest) async throws -> TableResponse {
        switch try await routeWrite(request) {
        case .answered(let response):
            return response
        case .write(let operation, var context, let id):
            guard let key = request.headers[IdempotencyLedger.header] else {
                return try await write(operation, context, id: id)
            }
            // The body is parsed once, for the key's fingerprint and for the write.
            if context.request.parsedBody == nil, let body = request.body, !body.isEmpty {
                context.request.parsedBody = try? JSONValue(parsingUTF8: body)
            }
            // After authentication and the table's rules: a replay never bypasses them.
            return try await ledger.answer(
                key: key, scope: context.identity?.subject ?? "", request: context.request,
                table: context.storageTable.name
            ) { [self, context] in
                await answering { try await write(operation, context, id: id) }
            }
        }
    }

    /// The message of a 404 for a path that addresses nothing. A path with `tables` further in
    /// (`/sync/tables/todo`) most often came through a proxy that serves the server under a path and
    /// passed that path on: it says so.
    static func noSuchResource(_ segments: [String]?) -> String {
        let message = "no such resource; tables are at /tables/{name}"
        guard let segments, let at = segments.firstIndex(of: "tables"), at > 0 else { return message }
        let prefix = "/" + segments[..<at].joined(separator: "/")
        return message
            + " (a proxy that serves this server under '\(LogText.escaped(String(prefix.prefix(100))))' must take it off: "
            + "nginx's proxy_pass with a trailing /, see docs/deploy.md)"
    }

    /// Where a request stands once it is routed, negotiated and authenticated.
    enum Routed {
        /// Answered without a write (a read, a query, the capabilities, …).
        case answered(TableResponse)
        /// A write to make: idempotency keys apply (``IdempotencyLedger``) when the server offers
        /// them and the request sends one.
        case write(TableOperation, RequestContext, id: String?)
    }

    /// Everything before a write: the route, the protocol version, the table, the caller, the
    /// table's rules. Reads and everything but table writes are answered here. A table write
    /// (`POST` to a table, an insert) reads nothing from the storage before it is answered
    /// `.write`.
    func routeWrite(_ request: TableRequest) async throws -> Routed {
        if let refusal = request.refusal { throw refusal }
        guard request.rawQuery.utf8.count <= configuration.limits.maximumQueryLength else {
            throw ProtocolError(
                414, "queryTooLong",
                "the query string is \(request.rawQuery.utf8.count) bytes; the limit is \(configuration.limits.maximumQueryLength)"
            )
        }
        // As the path is: `$filter=title eq '%FF'` matched a stored U+FFFD.
        guard TableRequest.decodesAsUTF8(request.rawQuery) else {
            throw ProtocolError.badRequest(
                "the query string is not valid UTF-8 once percent-decoded", code: "invalidQuery")
        }
        let name: String
        let id: String?
        switch request.route {
        case .invalidPath: throw ProtocolError.badRequest("the path is not valid UTF-8")
        // Health checks of load balancers often use HEAD: the status alone answers them.
        case .health where request.method == "GET" || request.method == "HEAD": return .answered(try await health())
        case .liveness where request.method == "GET" || request.method == "HEAD":
            return .answered(.json(200, ["status": "ok", "server": .string(Self.serverVersion)]))
        case .tableList where request.method == "GET": return .answered(try await tableList(request))
        case .health, .liveness:
            throw ProtocolError.methodNotAllowed(
                "\(request.method) is not allowed on \(request.path); use GET", allow: ["GET", "HEAD"])
        case .tableList:
            throw ProtocolError.methodNotAllowed(
                "\(request.method) is not allowed on \(request.path); use GET", allow: ["GET"])
        case .batch, .capabilities, .changes:
            guard configuration.offersPushExtensions else {
                throw ProtocolError.notFound("no such resource; tables are at /tables/{name}")
            }
            switch request.route {
            case .batch: return .answered(try await batch(request))
            case .capabilities:
                guard request.method == "GET" else {
                    throw ProtocolError.methodNotAllowed("the capabilities are read with GET", allow: ["GET"])
                }
                return .answered(capabilities())
            default:
                throw ProtocolError.methodNotAllowed("the change feed is read with GET", allow: ["GET"])
            }
        case .attachments, .attachment, .attachmentRows, .upload:
            guard configuration.offersPushExtensions, configuration.attachments != nil else {
                throw ProtocolError.notFound("no such resource; tables are at /tables/{name}")
            }
            return .answered(try await attachmentRoute(request))
        case .table(let table):
            (name, id) = (table, nil)
        case .item(let table, let item):
            (name, id) = (table, item)
        case .metrics, .unknown:
            // A code of its own: a client tells a wrong URL from a missing table or item by it.
            throw ProtocolError(404, "noSuchResource", Self.noSuchResource(request.segments))
        }
        if request.method == "OPTIONS" {
            // Exempt from the version check (table-protocol.md §1.3): it says what the URL serves.
            let table = try await resolve(name, creating: true)
            let version = (try? Self.protocolVersion(request)) ?? .v3
            return .answered(
                TableResponse(
                    status: 204,
                    headers: [("Allow", Self.allowedMethods(of: table, onItem: id != nil, version: version))]))
        }
        let version = try Self.protocolVersion(request)
        let operation: TableOperation
        switch (request.method, id) {
        // HEAD is GET without the body (RFC 9110 §9.3.2: every general-purpose server serves it),
        // with the headers (ETag, Content-Length, Link) a GET would send.
        case ("GET", nil), ("HEAD", nil): operation = .query
        case ("GET", _?), ("HEAD", _?): operation = .read
        case ("POST", nil): operation = .insert
        // 2.0's undelete. 3.0 has no POST on an item (it undeletes with a PUT): answering it
        // as an undelete gave a 200 that changed nothing (table-protocol.md §1.1).
        case ("POST", _?) where version == .v2: operation = .undelete
        case ("PATCH", _), ("PUT", _?): operation = .update
        case ("DELETE", _?): operation = .delete
        default:
            // With the table's rules when it is one (its disabled operations are not allowed).
            let table = try? await resolve(name, creating: true)
            throw Self.methodNotAllowed(request, table: table, onItem: id != nil, version: version)
        }
        // A query of a dynamic table nobody has written yet is an empty table, not a 404: clients
        // tell "no rows yet" from "not a table endpoint" by that.
        var table = try await resolve(name, creating: operation == .insert || operation == .query)
        let identity = try authenticate(request, table: table)
        if table.requiresAuth && identity == nil {
            throw ProtocolError(table.unauthorizedStatus, "unauthorized", "table '\(name)' requires a valid token")
        }
        if table.disabledOperations.contains(operation) {
            var error = ProtocolError(
                405, "methodNotAllowed", "the \(operation.rawValue) operation is disabled on '\(name)'")
            error.headers = [("Allow", Self.allowedMethods(of: table, onItem: id != nil, version: version))]
            throw error
        }
        if operation == .insert, try await !dynamicTables.admit(table.name, storage: storage) {
            throw ProtocolError(
                403, "tooManyTables",
                "no table '\(name)', and this server holds the most tables writes may create (\(dynamicTables.limit), maxDynamicTables)"
            )
        }
        if operation == .insert, declaredTable(name) == nil {
            table.name = try await dynamicTables.claimed(table.name, storage: storage)
        }
        var context = RequestContext(
            request: request, version: version, table: table, identity: identity,
            storageTable: StorageTable(
                name: table.name, schema: table.schema))
        context.view = table.dataViewFilter
        switch operation {
        case .query: return .answered(try await query(context))
        case .read: return .answered(try await read(context, id: id!))
        default: break
        }
        guard configuration.offersPushExtensions else {
            return .answered(try await write(operation, context, id: id))
        }
        return .write(operation, context, id: id)
    }

    /// The methods of `Allow` (RFC 9110 §10.2.1, sent with every 405): those the protocol serves
    /// on a table's URL (or, `onItem`, an item's) in `version`, less what `table` does not serve
    /// (its disabled operations, and 2.0's undelete where it does not soft-delete), and `OPTIONS`.
    static func allowedMethods(of table: TableSettings?, onItem: Bool, version: ProtocolVersion) -> String {
        var methods: [(method: String, operation: TableOperation)] =
            onItem
            ? [
                ("GET", .read), ("HEAD", .read), ("POST", .undelete), ("PUT", .update), ("PATCH", .update),
                ("DELETE", .delete),
            ]
            : [("GET", .query), ("HEAD", .query), ("POST", .insert), ("PATCH", .update)]
        if onItem && (version == .v3 || table?.softDelete == false) { methods.removeAll { $0.operation == .undelete } }
        if let table { methods.removeAll { table.disabledOperations.contains($0.operation) } }
        return (methods.map(\.method) + ["OPTIONS"]).joined(separator: ", ")
    }

    /// 405 with `Allow`: the methods a table (or, `onItem`, an item) serves in `version`.
    static func methodNotAllowed(
        _ request: TableRequest, table: TableSettings?, onItem: Bool, version: ProtocolVersion
    ) -> ProtocolError {
        let allowed = allowedMethods(of: table, onItem: onItem, version: version)
        var message = "\(request.method) is not allowed on \(request.path)"
        if onItem && request.method == "POST" {
            message +=
                " in protocol 3.0.0 (it is 2.0.0's undelete; 3.0.0 undeletes with a PUT of the item with"
                + " \"deleted\": false and __includedeleted=true)"
        }
        var error = ProtocolError(405, "methodNotAllowed", message + "; use \(allowed)")
        error.headers = [("Allow", allowed)]
        return error
    }

    func write(_ operation: TableOperation, _ context: RequestContext, id: String?) async throws -> TableResponse {
        switch operation {
        case .insert: return try await insert(context)
        case .update: return try await update(context, urlID: id)
        case .delete: return try await delete(context, id: id!)
        case .undelete: return try await undelete(context, id: id!)
        case .query, .read: throw ProtocolError(405, "methodNotAllowed", "not a write")
        }
    }

    func health() async throws -> TableResponse {
        let tables = try await storage.tableNames()
        // The kind of storage, not where it is: anyone may ask (a file's path, a database's host,
        // are the operator's to know; the start-up line says them).
        let kind = storage.location.prefix { $0 != ":" }
        return .json(
            200,
            [
                "status": "ok", "server": .string(Self.serverVersion), "storage": .string(String(kind)),
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
        // The server's system tables (attachment metadata, `__attachments`) are not app tables.
        let names = Set(try await storage.tableNames().filter { !$0.hasPrefix("__") }).union(declared.keys).sorted()
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
}
