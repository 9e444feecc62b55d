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
                try await recordPull(of: table, finished: true)
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
        /// The ids of the page before, when paging by `$skip`, and how many pages in a row had them.
        var previousIDs: (ids: [String?], times: Int)?

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
            } else {
                try PullPlan.checkMovedOn(page.items, from: &previousIDs, skip: offset, table: table)
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
            // The first of several pages marks the table's pull unfinished, with the page, until it
            // ends: a process killed midway (SIGKILL, a Ctrl-C it dies of) runs no code on its way
            // out, and its store said "everything synced" with 1,100 of 5,001 items.
            let marksUnfinished = more && result.pages == 0
            let (applied, removed) = try await write("pull") { tx in
                let applied = try PullSteps.apply(items, table: table, in: tx)
                if let queryID, let stored {
                    try tx.setDeltaToken(table: table, queryID: queryID, value: stored)
                }
                if marksUnfinished {
                    try tx.setDeltaToken(
                        table: Self.engineSlot, queryID: Self.unfinishedPullPrefix + table,
                        value: String(ItemFields.now().millisecondsSince1970))
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
            guard case .string(let id)? = item["id"], ItemID.isValid(id), Self.hasProtocolTypes(item) else {
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

    /// Whether the item's `version` is a string and its `deleted` a Boolean, when it has them (or
    /// `null`). Kept as it came, a number or an object for a version went back without `If-Match`
    /// (the client sends string versions only): every later edit of the item overwrote the
    /// server's copy, whatever other devices had changed; `"deleted": "yes"` was taken as not
    /// deleted.
    static func hasProtocolTypes(_ item: JSONObject) -> Bool {
        switch item["version"] {
        case nil, .null?, .string?: break
        default: return false
        }
        switch item["deleted"] {
        case nil, .null?, .bool?: return true
        default: return false
        }
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
