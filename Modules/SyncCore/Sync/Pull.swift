/// How a pull runs.
public struct PullOptions: Sendable, Hashable {
    /// The most items asked for per request (`$top`). At least 1; servers cap it (node 2.0 answers 400
    /// above 1000, and the pull's error then says that pages of at most 1,000 items are taken by
    /// every server).
    public var pageSize: Int
    /// Push the table's queued operations before pulling (legacy behaviour). Items that still have
    /// queued operations afterwards are not overwritten by the pull.
    public var pushesFirst: Bool
    /// After a complete pull (no query id, skip or top), remove the local items that match the
    /// query's filter but that the server did not return (hard-deleted on the server, or moved out of
    /// the filter). Items with queued operations are kept.
    public var removesMissingItems: Bool
    /// Ask the server, with the first page, how many items the pull will bring (`$count`), and
    /// report it as ``SyncEvent/pullCounted(table:queryID:total:)``: for progress with a total and
    /// an estimate of the time left. It costs the server one count of the matching rows.
    public var countsTotal: Bool

    public init(
        pageSize: Int = 50, pushesFirst: Bool = true, removesMissingItems: Bool = false, countsTotal: Bool = false
    ) {
        self.pageSize = pageSize
        self.pushesFirst = pushesFirst
        self.removesMissingItems = removesMissingItems
        self.countsTotal = countsTotal
    }
}

/// What a pull did.
public struct PullResult: Sendable, Hashable {
    /// Pages applied.
    public var pages: Int = 0
    /// The counts of every page together.
    public var items = PullCounts()
    /// Local items removed by ``PullOptions/removesMissingItems``.
    public var removedMissing: Int = 0
    /// The push the pull ran first, if it ran one.
    public var push: PushResult?

    public init() {}
}

extension SyncContext {
    /// Pulls a table's items from the server into the store. See ``SyncTable/pull(_:queryID:options:)``.
    @discardableResult
    public func pull(
        _ table: String, query: TableQuery = TableQuery(), queryID: String? = nil, options: PullOptions = PullOptions()
    ) async throws(SyncError) -> PullResult {
        do {
            try PullPlan.validate(table: table, query: query, queryID: queryID, options: options)
            try checkCancellation("pull of '\(table)'")
            return try await pullHoldingNothing(table, query: query, queryID: queryID, options: options)
        } catch {
            throw SyncError.wrapping(error, "pull of '\(table)'")
        }
    }

    private func pullHoldingNothing(
        _ table: String, query: TableQuery, queryID: String?, options: PullOptions
    ) async throws -> PullResult {
        try await holding([Self.tableGate(table)]) {
            hub.emit(.pullStarted(table: table, queryID: queryID))
            var result = PullResult()
            /// Whether the items' pages reached their end (what follows pulls attachment rows).
            var itemsPulled = false
            do {
                if options.pushesFirst, try await queuedOperationCount(table: table) > 0 {
                    result.push = try await holding([Self.pushGate]) { try await pushHoldingGate() }
                }
                if options.removesMissingItems {
                    // No push may run meanwhile: an item it creates on the server after its page was read
                    // would look missing.
                    try await holding([Self.pushGate]) {
                        try await pullPages(table, query, queryID, options, into: &result)
                    }
                } else {
                    try await pullPages(table, query, queryID, options, into: &result)
                }
                itemsPulled = true
                // The table's attachment rows, and eager downloads (AttachmentSync.swift).
                try await pullAttachments(table)
            } catch {
                let error = SyncError.wrapping(error, "pull of '\(table)'")
                hub.emit(.pullFinished(table: table, queryID: queryID, result: result, stoppedBy: error.description))
                // Pages applied (or operations pushed) before the failure: the device did sync, in
                // part ("never synced" after 15,000 items pulled was wrong).
                if result.pages > 0 || (result.push?.pushed ?? 0) > 0 { try? await recordSync() }
                // Not "everything synced" until a pull of the table finishes (a cancelled pull of
                // 19,600 of 40,000 items was then reported synced). One whose items all came is
                // finished, whatever became of its attachment rows: a sync stopped there (`auto off`
                // in the REPL) said "the last pull of 'todo' stopped before its end" of a table
                // whose every item was here.
                if result.pages > 0 || itemsPulled { try? await recordPull(of: table, finished: itemsPulled) }
                throw error
            }
            hub.emit(.pullFinished(table: table, queryID: queryID, result: result, stoppedBy: nil))
            try await recordSync()
            try await recordPull(of: table, finished: true)
            return result
        }
    }

    /// Pulls page after page. The request for the next page is known as soon as a page has arrived
    /// (its last item is the next delta token), so the next page downloads and parses while this one is
    /// applied to the store: one page ahead, never more, so memory stays bounded by the page size.
    private func pullPages(
        _ table: String, _ query: TableQuery, _ queryID: String?, _ options: PullOptions,
        into result: inout PullResult
    ) async throws {
        let remote = remote.table(table)
        let filterKey = query.filter?.odata(protocolVersion: .v3) ?? ""
        let keyset = queryID != nil || (query.orderBy.isEmpty && query.skip == nil)
        var deltaToken: DeltaToken?
        if let queryID {
            let stored = try await read("pull") { try $0.deltaToken(table: table, queryID: queryID) }
            // A delta token saved for another filter means nothing for this one: start over.
            deltaToken = stored.flatMap(DeltaToken.init(stored:)).flatMap { $0.filter == filterKey ? $0 : nil }
        }
        var remaining = query.top
        var offset = query.skip ?? 0
        var seen = Set<ItemID.Key>()

        /// The request for the page after `deltaToken` (keyset) or at `offset`; `$top` is the page size,
        /// or what is left of `top` when less.
        func request(after deltaToken: DeltaToken?, offset: Int, remaining: Int?) -> TableQuery {
            var request = TableQuery(top: min(options.pageSize, remaining ?? Int.max), includeDeleted: true)
            if keyset {
                request.filter = PullPlan.filter(query.filter, after: deltaToken)
                request.orderBy = [.field("updatedAt"), .field("id")]
            } else {
                request.filter = query.filter
                request.orderBy = query.orderBy
                if !query.orderBy.contains(where: { $0.expression == .field("id") }) {
                    request.orderBy.append(.field("id"))
                }
                request.skip = offset
            }
            return request
        }

        guard remaining.map({ $0 > 0 }) ?? true else { return }
        var first = request(after: deltaToken, offset: offset, remaining: remaining)
        first.includeTotalCount = options.countsTotal
        var pending = PageFetch(remote, first)
        defer { pending.cancel() }
        while true {
            if Task.isCancelled {
                throw SyncError(.cancelled, "pull of '\(table)' cancelled after \(result.pages) pages")
            }
            let top = pending.request.top ?? options.pageSize
            let page: RemotePage
            do {
                page = try await pending.page(table)
            } catch {
                throw PullPlan.explained(error, pageSize: options.pageSize, asked: top)
            }
            if result.pages == 0, let total = page.totalCount {
                hub.emit(.pullCounted(table: table, queryID: queryID, total: remaining.map { min($0, total) } ?? total))
            }
            if page.items.isEmpty { break }
            var next: DeltaToken?
            if keyset {
                next = try PullPlan.deltaToken(after: page.items, previous: deltaToken, filter: filterKey, table: table)
            }
            let items = page.items
            let nextRemaining = remaining.map { $0 - items.count }
            let more = !(items.count < top && page.nextPage == nil) && (nextRemaining.map { $0 > 0 } ?? true)
            if more {
                pending = PageFetch(
                    remote, request(after: next, offset: offset + items.count, remaining: nextRemaining))
            }
            // The pull pages on past items dated in the future, but keeps the delta token at the last
            // item dated sooner: the next pull asks for them again, with whatever changed meanwhile.
            let stored = queryID.flatMap { _ in
                PullPlan.lastPlausible(items, filter: filterKey, horizon: PullPlan.horizon())?.stored
            }
            let (applied, removed) = try await write("pull") { tx in
                let applied = try PullSteps.apply(items, table: table, in: tx)
                if let queryID, let stored {
                    try tx.setDeltaToken(table: table, queryID: queryID, value: stored)
                }
                return applied
            }
            // The files of the attachments of items deleted on the server are freed (AttachmentSync.swift).
            if !removed.isEmpty { await freeAttachmentFiles(of: removed, table: table) }
            deltaToken = next
            offset += items.count
            remaining = nextRemaining
            if options.removesMissingItems { seen.formUnion(items.compactMap(\.id).itemKeys) }
            result.pages += 1
            result.items.add(applied)
            hub.emit(.pagePulled(table: table, queryID: queryID, counts: applied))
            if !more { break }
        }
        if options.removesMissingItems {
            let filter = query.filter
            let seenIDs = seen
            result.removedMissing = try await write("pull") { tx in
                try PullSteps.removeMissing(table: table, filter: filter, seen: seenIDs, in: tx)
            }
        }
    }
}

/// One page request running in its own task, so that it downloads while the page before is applied.
struct PageFetch {
    let request: TableQuery
    private let task: Task<RemotePage, any Error>

    init(_ remote: any RemoteTable, _ request: TableQuery) {
        self.request = request
        task = Task { try await Self.fetch(remote, request) }
    }

    @concurrent
    private static func fetch(_ remote: any RemoteTable, _ request: TableQuery) async throws -> RemotePage {
        try await remote.query(request)
    }

    /// The page; cancelling the waiting task cancels the request, and a page that arrives after the
    /// cancellation is dropped.
    func page(_ table: String) async throws(SyncError) -> RemotePage {
        let task = task
        let page: RemotePage
        do {
            page = try await withTaskCancellationHandler {
                try await task.value
            } onCancel: {
                task.cancel()
            }
        } catch {
            throw SyncError.wrapping(error, "pull of '\(table)'")
        }
        if Task.isCancelled { throw SyncError(.cancelled, "pull of '\(table)': cancelled") }
        return page
    }

    func cancel() { task.cancel() }
}

/// Where an incremental pull stands (the protocol's "delta token"): the last item applied, in
/// (updatedAt, id) order. It is stored as text in the store's delta-token table.
struct DeltaToken: Sendable, Hashable {
    var updatedAt: Timestamp
    var id: String
    /// The filter (OData 3.0 text) the delta token belongs to.
    var filter: String

    init(updatedAt: Timestamp, id: String, filter: String) {
        self.updatedAt = updatedAt
        self.id = id
        self.filter = filter
    }

    /// Reads a stored delta token; `nil` when it is not one of ours.
    init?(stored: String) {
        guard case .object(let object)? = try? JSONValue(parsing: stored),
            let time = object["updatedAt"]?.stringValue.flatMap({ Timestamp(iso8601: $0) }),
            let id = object["id"]?.stringValue
        else { return nil }
        self.init(updatedAt: time, id: id, filter: object["filter"]?.stringValue ?? "")
    }

    /// The stored form: `{"filter":"…","id":"…","updatedAt":"…"}`.
    var stored: String {
        JSONValue.object(["updatedAt": .string(updatedAt.iso8601), "id": .string(id), "filter": .string(filter)])
            .serialized()
    }

    /// Whether the token's filter selects `item` (an unreadable filter selects everything).
    static func filterMatches(_ filter: String, _ item: JSONObject) -> Bool {
        if filter.isEmpty { return true }
        guard let expression = try? QueryExpression(odataFilter: filter, protocolVersion: .v3) else { return true }
        return QueryEvaluator().matches(expression, item)
    }
}

/// Pull validation and request building.
enum PullPlan {
    /// The longest query id.
    static let maximumQueryIDLength = 255

    /// The largest page every server of the protocol family takes (the Node server's default
    /// `maxTop`; the .NET servers take 128,000): above it a server may refuse the request with a 400.
    static let largestPageEveryServerTakes = 1_000

    /// A page refused with a 400 when it asked for more items than some servers allow says so:
    /// the server's own words name `$top`, which the caller never wrote.
    static func explained(_ error: SyncError, pageSize: Int, asked top: Int) -> SyncError {
        guard error.code == .remote, error.remoteError?.status == 400, top == pageSize,
            pageSize > largestPageEveryServerTakes
        else { return error }
        var explained = error
        explained.message +=
            " (pages of \(pageSize) items are more than some servers allow; a page size of at most "
            + "\(largestPageEveryServerTakes) is taken by every server)"
        return explained
    }

    /// Rejects what a pull cannot honour (legacy §5.1, plus the checks the legacy client lacked).
    static func validate(table: String, query: TableQuery, queryID: String?, options: PullOptions) throws {
        func reject(_ message: String) -> SyncError {
            SyncError(.invalidQuery, "pull of '\(table)': \(message)")
        }
        do {
            try StoreValidation.validateTableName(table)
        } catch {
            throw SyncError.invalidTableName(error)
        }
        try query.validateShape("pull of '\(table)'")
        if query.select != nil {
            throw reject("select is not allowed: a partial item would replace the whole local item")
        }
        if query.includeTotalCount { throw reject("includeTotalCount is not allowed: a pull does not count") }
        if options.pageSize < 1 { throw reject("the page size must be at least 1, not \(options.pageSize)") }
        if let skip = query.skip, skip < 0 { throw reject("skip must not be negative") }
        if let top = query.top, top < 0 { throw reject("top must not be negative") }
        if let queryID {
            let allowed = queryID.utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                    UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"), UInt8(ascii: "-"), UInt8(ascii: "."),
                    UInt8(ascii: ":"):
                    true
                default: false
                }
            }
            guard !queryID.isEmpty, queryID.utf8.count <= maximumQueryIDLength, allowed else {
                throw reject(
                    "invalid query id '\(queryID.prefix(40))': use 1 to \(maximumQueryIDLength) letters, digits, "
                        + "'_', '-', '.' or ':'")
            }
            if !query.orderBy.isEmpty {
                throw reject("orderBy is not allowed with a query id: an incremental pull orders by updatedAt and id")
            }
            if query.skip != nil || query.top != nil {
                throw reject("skip and top are not allowed with a query id: an incremental pull pages by itself")
            }
        }
        if options.removesMissingItems, queryID != nil || query.skip != nil || query.top != nil {
            throw reject("removesMissingItems needs a complete pull: no query id, skip or top")
        }
    }

    /// `filter and ((updatedAt ge T) and ((updatedAt gt T) or ((updatedAt eq T) and (id gt 'ID'))))`: the
    /// rows after the delta token. The leading `updatedAt ge T` changes nothing but lets a server seek
    /// its `updatedAt` index to the delta token instead of scanning from the start (an `or` alone defeats most
    /// SQL planners, which made every page cost more than the one before).
    static func filter(_ filter: QueryExpression?, after deltaToken: DeltaToken?) -> QueryExpression? {
        guard let deltaToken else { return filter }
        let time = QueryExpression.literal(.dateTimeOffset(deltaToken.updatedAt))
        let after = QueryExpression.binary(
            .and, .binary(.greaterThanOrEqual, .field("updatedAt"), time),
            .binary(
                .or, .binary(.greaterThan, .field("updatedAt"), time),
                .binary(
                    .and, .binary(.equal, .field("updatedAt"), time),
                    .binary(.greaterThan, .field("id"), .literal(.string(deltaToken.id))))))
        guard let filter else { return after }
        return .binary(.and, filter, after)
    }

    /// How far past the device's clock an item's `updatedAt` may be and still move a saved delta
    /// token. A server whose clock jumped ahead (or a bug that stamped 9999-12-31) would otherwise
    /// move it past every change made after, and the device would never pull them.
    static let futureTolerance: Int64 = 24 * 3_600_000

    static func horizon() -> Timestamp {
        Timestamp(millisecondsSince1970: ItemFields.now().millisecondsSince1970 + futureTolerance)
    }

    /// The delta token to save after a page: its last item dated no later than `horizon` (items come
    /// in `updatedAt` order, so those after it are all dated later), or `nil` to keep the saved one.
    static func lastPlausible(_ items: [JSONObject], filter: String, horizon: Timestamp) -> DeltaToken? {
        for item in items.reversed() {
            if let time = item.updatedAt, time <= horizon, let id = item.id {
                return DeltaToken(updatedAt: time, id: id, filter: filter)
            }
        }
        return nil
    }

    /// The delta token after a page: its last item, which must come after the previous delta token.
    static func deltaToken(after items: [JSONObject], previous: DeltaToken?, filter: String, table: String) throws
        -> DeltaToken
    {
        guard let last = items.last, let id = last.id else {
            throw SyncError(.invalidResponse, "pull of '\(table)': the last item of a page has no id")
        }
        guard let time = last.updatedAt else {
            throw SyncError(
                .invalidResponse,
                "pull of '\(table)': item '\(id)' has no updatedAt; paging by (updatedAt, id) needs it on every item")
        }
        let next = DeltaToken(updatedAt: time, id: id, filter: filter)
        if let previous, time < previous.updatedAt || (time == previous.updatedAt && id == previous.id) {
            throw SyncError(
                .invalidResponse,
                "pull of '\(table)': the server sent a page that does not move past (\(previous.updatedAt), "
                    + "'\(previous.id)'); does it ignore the filter or the order?")
        }
        return next
    }
}

/// The store transactions of a pull.
enum PullSteps {
    /// Applies one page: deleted items are removed, others stored, except items with queued local
    /// operations and items the store holds in a newer version. Answers the page's counts and the
    /// ids of the local items it removed because the server deleted them.
    static func apply(_ items: [JSONObject], table: String, in tx: any StoreTransaction) throws -> (
        PullCounts, removed: [String]
    ) {
        var page = PullCounts()
        page.received = items.count
        // The queued operations and local copies of this page's items only, each read with one call:
        // reading the table's whole queue for every page made a pull behind a long queue cost
        // pages × queue.
        let ids = items.compactMap { item -> String? in
            if case .string(let id)? = item["id"], ItemID.isValid(id) { return id }
            return nil
        }
        let pending = try tx.operations(table: table, itemIDs: ids).map(\.itemID).itemKeys
        let locals = try tx.items(table, ids: ids)
        // A page that repeats an id means its last copy (a deletion after an update, say): the
        // earlier copies are passed over, whatever their kind.
        // Ids are told apart by their bytes (ItemID.Key): "café" in two Unicode forms is two
        // items, and with `String` keys the second was skipped as a repeat of the first.
        var last: [ItemID.Key: Int] = [:]
        for (index, item) in items.enumerated() {
            if case .string(let id)? = item["id"] { last[ItemID.Key(id)] = index }
        }
        var upserts: [JSONObject] = []
        var deletions: [String] = []
        for (index, item) in items.enumerated() {
            guard case .string(let id)? = item["id"], ItemID.isValid(id) else {
                page.invalid += 1
                continue
            }
            let key = ItemID.Key(id)
            if last[key] != index || pending.contains(key) {
                page.skipped += 1
                continue
            }
            if let local = locals[key], let localTime = local.updatedAt,
                let serverTime = item.updatedAt, localTime > serverTime
            {
                page.skipped += 1
                continue
            }
            if item.isDeleted {
                deletions.append(id)
            } else {
                upserts.append(ItemFields.localCopy(of: item))
            }
        }
        let removed = deletions.filter { locals[ItemID.Key($0)] != nil }
        if !deletions.isEmpty { page.deleted = try tx.delete(table, ids: deletions) }
        if !upserts.isEmpty {
            try tx.upsert(table, upserts)
            page.upserted = upserts.count
        }
        return (page, removed)
    }

    /// Removes local items that match `filter` but were not in a complete pull.
    static func removeMissing(
        table: String, filter: QueryExpression?, seen: Set<ItemID.Key>, in tx: any StoreTransaction
    )
        throws -> Int
    {
        let pending = try tx.operations(after: nil, table: table, limit: nil).map(\.itemID).itemKeys
        let local = try tx.query(table, TableQuery(filter: filter, select: ["id"], includeDeleted: true)).items
        let missing = local.compactMap(\.id).filter {
            let key = ItemID.Key($0)
            return !seen.contains(key) && !pending.contains(key)
        }
        return missing.isEmpty ? 0 : try tx.delete(table, ids: missing)
    }
}

extension PullCounts {
    mutating func add(_ other: PullCounts) {
        received += other.received
        upserted += other.upserted
        deleted += other.deleted
        skipped += other.skipped
        invalid += other.invalid
    }
}
