import ServerStorageCore
import SyncCore

// `GET /tables/{name}`: the OData query, within the table's page size, owner scope and data view, and the
// next-page link of each protocol version.
extension TableService {
    func query(_ context: RequestContext) async throws -> TableResponse {
        let table = context.table
        let parsed: TableQuery
        do {
            parsed = try TableQuery(
                odata: context.request.rawQuery, protocolVersion: context.version,
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
                    includeTotalCount: parsed.includeTotalCount, owner: scope,
                    maximumBytes: configuration.limits.maximumPageBytes))
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
}
