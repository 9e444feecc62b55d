public import SyncCore
import Synchronization

/// An in-process model of a table-protocol server, for engine tests: tables of items with soft
/// delete, optimistic concurrency, paging, and scripted faults.
///
/// It behaves like the 3.0 servers (with the 2.0 404 for soft-deleted rows):
/// - every commit gets an `updatedAt` strictly after the previous commit's, in commit order, and a new
///   opaque `version`; a bulk commit (``seed(_:_:by:)``, ``touch(_:ids:set:by:)``) stamps all its rows
///   with the same millisecond;
/// - insert of an existing id (live or soft-deleted) is a 409 with the stored item; an `If-Match`
///   version that differs is a 412 with the stored item; update or delete of a missing or soft-deleted
///   item is a 404; delete is a soft delete (`deleted: true`, new version);
/// - queries run on `QueryEvaluator`; a page holds at most ``maximumPageSize`` items and says when
///   more follow (`RemotePage.nextPage`);
/// - a table nobody has written to is an empty table: its queries answer a page with no items, as
///   Ferry's server answers a dynamic table before its first write (a 404 on a query means "no table
///   endpoint here", which a client reports as an error: inject `.status(404, …)` for that).
///
/// ```swift
/// let server = ModelServer()
/// let context = SyncContext(store: MemoryStore(), remote: server.remote(device: "phone"))
/// server.inject(.dropAfterApply, on: .insert)        // the next insert is applied, its answer lost
/// ```
public final class ModelServer: Sendable {
    /// The kinds of request a `RemoteTable` makes.
    public enum RequestKind: String, Sendable, Hashable, CaseIterable {
        case insert, update, delete, read, query
    }

    /// One request the server received.
    public struct Request: Sendable, Hashable {
        public var kind: RequestKind
        public var table: String
        public var device: String
        public var itemID: String?
        public var ifVersion: String?
        public var query: TableQuery?
        /// The number of items the answer carried (queries), when it succeeded.
        public var resultCount: Int?
    }

    /// Something that goes wrong with a request.
    public enum Fault: Sendable {
        /// The request never reaches the server: `RemoteError.Code.network` (the client cannot tell
        /// whether the server applied it).
        case dropBeforeApply
        /// No connection can be made (offline, refused): `RemoteError.Code.network` with
        /// `RemoteError.wasNotSent`, so the client knows nothing was applied.
        case unreachable
        /// The server applies the request, then the answer is lost: `RemoteError.Code.network`.
        case dropAfterApply
        /// The server applies the request, then the calling task is cancelled: `RemoteError.Code.cancelled`.
        case cancelAfterApply
        /// The server answers this status without applying anything (401, 400, 500…).
        case status(Int, String)
        /// 503 asking the client to wait (`Retry-After`): `RemoteError.retryAfter`.
        case busy(retryAfter: Duration)
        /// Runs `hook` while the request is on the wire (before the server applies it), then carries on
        /// with the fault the hook returns (`nil`: normally). Use it to make local edits while an
        /// operation is in flight.
        case hook(@Sendable () async -> Fault?)
    }

    /// A write the server applied, for checks.
    public struct Commit: Sendable, Hashable {
        public var table: String
        public var itemID: String
        public var kind: RequestKind
        public var device: String
        /// The row after the write.
        public var row: JSONObject
    }

    fileprivate struct Rule {
        var kind: RequestKind?
        var table: String?
        var itemID: String?
        var remaining: Int
        var fault: Fault
    }

    fileprivate struct State {
        var tables: [String: [ItemID.Key: JSONObject]] = [:]
        var lastStamp: Int64
        var clock: Int64
        var nextVersion = 1
        var rules: [Rule] = []
        var policy: (@Sendable (Request) -> Fault?)?
        var requests: [Request] = []
        var commits: [Commit] = []
    }

    /// The most items in one page.
    public let maximumPageSize: Int
    private let state: Mutex<State>

    /// Creates an empty server whose clock starts at `start`.
    public init(maximumPageSize: Int = 50, start: Timestamp = Timestamp(millisecondsSince1970: 1_700_000_000_000)) {
        self.maximumPageSize = maximumPageSize
        state = Mutex(State(lastStamp: start.millisecondsSince1970 - 1, clock: start.millisecondsSince1970))
    }

    // MARK: - Remote access

    /// The remote tables as one device sees them (requests are recorded with `device`).
    public func remote(device: String = "device") -> some RemoteService {
        ModelService(server: self, device: device)
    }

    /// One remote table as one device sees it.
    public func table(_ name: String, device: String = "device") -> some RemoteTable {
        ModelRemoteTable(server: self, name: name, device: device)
    }

    // MARK: - Faults

    /// Makes the next `count` matching requests fail with `fault` (rules apply in the order given).
    public func inject(
        _ fault: Fault, on kind: RequestKind? = nil, table: String? = nil, itemID: String? = nil, count: Int = 1
    ) {
        state.withLock {
            $0.rules.append(Rule(kind: kind, table: table, itemID: itemID, remaining: count, fault: fault))
        }
    }

    /// Decides a fault for every request that no injected rule matched (`nil` removes the policy).
    public func setFaultPolicy(_ policy: (@Sendable (Request) -> Fault?)?) {
        state.withLock { $0.policy = policy }
    }

    /// Lets the first `count` queries through and drops every later one before it is applied (a
    /// pull cut after its first pages), until the policy is replaced or cleared.
    public func dropQueries(after count: Int) {
        let queries = Mutex(0)
        setFaultPolicy { request in
            guard request.kind == .query else { return nil }
            return queries.withLock { seen in
                seen += 1
                return seen
            } > count ? .dropBeforeApply : nil
        }
    }

    /// Removes every injected fault and the policy.
    public func clearFaults() {
        state.withLock {
            $0.rules = []
            $0.policy = nil
        }
    }

    // MARK: - Inspection

    /// Every request received so far, oldest first.
    public var requests: [Request] { state.withLock { $0.requests } }

    /// Forgets the recorded requests.
    public func clearRequests() { state.withLock { $0.requests = [] } }

    /// Every write applied so far, in commit order.
    public var commits: [Commit] { state.withLock { $0.commits } }

    /// The live rows of a table (soft-deleted ones too when asked), sorted by id.
    public func rows(_ table: String, includeDeleted: Bool = false) -> [JSONObject] {
        state.withLock { state in
            (state.tables[table] ?? [:]).values.filter { includeDeleted || !$0.isDeleted }
                .sorted { ($0.id ?? "") < ($1.id ?? "") }
        }
    }

    /// One row, soft-deleted or not.
    public func row(_ table: String, id: String) -> JSONObject? {
        state.withLock { $0.tables[table]?[ItemID.Key(id)] }
    }

    // MARK: - Server-side writes (another writer)

    /// Inserts or replaces rows in one commit: they all share one `updatedAt`.
    public func seed(_ table: String, _ items: [JSONObject], by device: String = "server") {
        state.withLock { state in
            let stamp = state.commitStamp()
            for item in items {
                guard let id = item.id else { continue }
                let created = state.tables[table]?[ItemID.Key(id)]?["createdAt"] ?? .string(stamp.iso8601)
                var row = ItemFieldsModel.body(item)
                row["id"] = .string(id)
                row["createdAt"] = created
                state.stamp(&row, stamp)
                state.tables[table, default: [:]][ItemID.Key(id)] = row
                state.commits.append(Commit(table: table, itemID: id, kind: .insert, device: device, row: row))
            }
        }
    }

    /// Sets fields on existing live rows in one commit (a bulk update).
    public func touch(_ table: String, ids: [String], set fields: JSONObject, by device: String = "server") {
        state.withLock { state in
            let stamp = state.commitStamp()
            for id in ids {
                guard var row = state.tables[table]?[ItemID.Key(id)], !row.isDeleted else { continue }
                for (key, value) in fields { row[key] = value }
                state.stamp(&row, stamp)
                state.tables[table]?[ItemID.Key(id)] = row
                state.commits.append(Commit(table: table, itemID: id, kind: .update, device: device, row: row))
            }
        }
    }

    /// Soft-deletes rows in one commit.
    public func softDelete(_ table: String, ids: [String], by device: String = "server") {
        state.withLock { state in
            let stamp = state.commitStamp()
            for id in ids {
                guard var row = state.tables[table]?[ItemID.Key(id)], !row.isDeleted else { continue }
                row["deleted"] = true
                state.stamp(&row, stamp)
                state.tables[table]?[ItemID.Key(id)] = row
                state.commits.append(Commit(table: table, itemID: id, kind: .delete, device: device, row: row))
            }
        }
    }

    /// Removes rows for good (a hard delete: pulls never hear about it).
    public func hardDelete(_ table: String, ids: [String]) {
        state.withLock { state in
            for id in ids { state.tables[table]?[ItemID.Key(id)] = nil }
        }
    }

    /// Moves the server's clock forward; commits are stamped at least at this time.
    public func advanceClock(by milliseconds: Int64) {
        state.withLock { $0.clock += milliseconds }
    }

    // MARK: - Requests

    fileprivate func handle(_ request: Request, _ apply: (inout State) throws(RemoteError) -> RemoteAnswer)
        async throws(RemoteError) -> RemoteAnswer
    {
        var fault = state.withLock { state -> Fault? in
            var request = request
            request.resultCount = nil
            state.requests.append(request)
            if let index = state.rules.firstIndex(where: { rule in
                (rule.kind == nil || rule.kind == request.kind) && (rule.table == nil || rule.table == request.table)
                    && (rule.itemID == nil || rule.itemID == request.itemID)
            }) {
                let fault = state.rules[index].fault
                state.rules[index].remaining -= 1
                if state.rules[index].remaining <= 0 { state.rules.remove(at: index) }
                return fault
            }
            return state.policy?(request)
        }
        if case .hook(let hook)? = fault {
            fault = await hook()
        }
        switch fault {
        case .dropBeforeApply?:
            throw RemoteError(.network, "the connection was lost before the request was sent")
        case .unreachable?:
            throw RemoteError(.network, "could not connect to the server", wasNotSent: true)
        case .status(let status, let message)?:
            throw RemoteError(status: status, message.isEmpty ? "scripted failure" : message)
        case .busy(let retryAfter)?:
            throw RemoteError(status: 503, "scripted: busy", retryAfter: retryAfter)
        default:
            break
        }
        let answer = try state.withLock { state throws(RemoteError) in
            let answer = try apply(&state)
            if case .page(let page) = answer, let index = state.requests.lastIndex(where: { $0 == request }) {
                state.requests[index].resultCount = page.items.count
            }
            return answer
        }
        switch fault {
        case .dropAfterApply?:
            throw RemoteError(.network, "the connection was lost before the answer arrived")
        case .cancelAfterApply?:
            throw RemoteError(.cancelled, "the request was cancelled")
        default:
            return answer
        }
    }

    fileprivate enum RemoteAnswer: Sendable {
        case item(JSONObject?)
        case page(RemotePage)
    }

    fileprivate static func insert(_ item: JSONObject, table: String, device: String, _ state: inout State)
        throws(RemoteError) -> RemoteAnswer
    {
        guard let id = item.id else { throw RemoteError(status: 400, "the item has no id") }
        if let existing = state.tables[table]?[ItemID.Key(id)] {
            throw RemoteError(status: 409, "an item with id '\(id)' exists", serverItem: existing)
        }
        let stamp = state.commitStamp()
        var row = ItemFieldsModel.body(item)
        row["createdAt"] = .string(stamp.iso8601)
        state.stamp(&row, stamp)
        state.tables[table, default: [:]][ItemID.Key(id)] = row
        state.commits.append(Commit(table: table, itemID: id, kind: .insert, device: device, row: row))
        return .item(row)
    }

    fileprivate static func update(
        _ item: JSONObject, ifVersion: String?, table: String, device: String, _ state: inout State
    ) throws(RemoteError) -> RemoteAnswer {
        guard let id = item.id else { throw RemoteError(status: 400, "the item has no id") }
        guard let existing = state.tables[table]?[ItemID.Key(id)], !existing.isDeleted else {
            throw RemoteError(status: 404, "no item with id '\(id)'")
        }
        if let ifVersion, existing.version != ifVersion {
            throw RemoteError(status: 412, "the version does not match", serverItem: existing)
        }
        let stamp = state.commitStamp()
        var row = ItemFieldsModel.body(item)
        row["createdAt"] = existing["createdAt"]
        state.stamp(&row, stamp)
        state.tables[table]?[ItemID.Key(id)] = row
        state.commits.append(Commit(table: table, itemID: id, kind: .update, device: device, row: row))
        return .item(row)
    }

    fileprivate static func delete(
        id: String, ifVersion: String?, table: String, device: String, _ state: inout State
    ) throws(RemoteError) -> RemoteAnswer {
        guard var row = state.tables[table]?[ItemID.Key(id)], !row.isDeleted else {
            throw RemoteError(status: 404, "no item with id '\(id)'")
        }
        if let ifVersion, row.version != ifVersion {
            throw RemoteError(status: 412, "the version does not match", serverItem: row)
        }
        row["deleted"] = true
        state.stamp(&row, state.commitStamp())
        state.tables[table]?[ItemID.Key(id)] = row
        state.commits.append(Commit(table: table, itemID: id, kind: .delete, device: device, row: row))
        return .item(nil)
    }

    fileprivate static func query(_ query: TableQuery, table: String, pageSize: Int, _ state: State)
        throws(RemoteError) -> RemoteAnswer
    {
        var all = query
        all.skip = nil
        all.top = nil
        let matching: [JSONObject]
        do {
            matching = try QueryEvaluator().evaluate(all, over: (state.tables[table] ?? [:]).values).items
        } catch {
            throw RemoteError(status: 400, error.description)
        }
        let skip = max(0, query.skip ?? 0)
        let take = min(query.top ?? pageSize, pageSize)
        let items = Array(matching.dropFirst(skip).prefix(take))
        var next: TableQuery?
        let moreWanted = query.top.map { $0 > items.count } ?? true
        if skip + items.count < matching.count, moreWanted, !items.isEmpty {
            next = query
            next?.skip = skip + items.count
            next?.top = query.top.map { $0 - items.count }
        }
        return .page(
            RemotePage(items: items, totalCount: query.includeTotalCount ? matching.count : nil, nextPage: next))
    }
}

extension ModelServer.State {
    /// The stamp of a new commit: after every earlier commit, and not before the clock.
    fileprivate mutating func commitStamp() -> Timestamp {
        lastStamp = max(clock, lastStamp + 1)
        return Timestamp(millisecondsSince1970: lastStamp)
    }

    fileprivate mutating func stamp(_ row: inout JSONObject, _ stamp: Timestamp) {
        row["updatedAt"] = .string(stamp.iso8601)
        row["version"] = .string("v\(nextVersion)")
        nextVersion += 1
        if row["deleted"] == nil { row["deleted"] = false }
    }
}

/// The server-owned properties the model strips from request bodies.
enum ItemFieldsModel {
    static func body(_ item: JSONObject) -> JSONObject {
        item.filter { !["createdAt", "updatedAt", "version", "deleted"].contains($0.key) }
    }
}

private struct ModelService: RemoteService {
    let server: ModelServer
    let device: String

    func table(_ name: String) -> any RemoteTable {
        ModelRemoteTable(server: server, name: name, device: device)
    }
}

private struct ModelRemoteTable: RemoteTable {
    let server: ModelServer
    let name: String
    let device: String

    private func request(_ kind: ModelServer.RequestKind, id: String? = nil, version: String? = nil)
        -> ModelServer
        .Request
    {
        ModelServer.Request(kind: kind, table: name, device: device, itemID: id, ifVersion: version, query: nil)
    }

    func insert(_ item: JSONObject) async throws(RemoteError) -> JSONObject {
        let (name, device) = (name, device)
        let answer = try await server.handle(request(.insert, id: item.id)) { state throws(RemoteError) in
            try ModelServer.insert(item, table: name, device: device, &state)
        }
        guard case .item(let row?) = answer else { throw RemoteError(.invalidResponse, "no item") }
        return row
    }

    func update(_ item: JSONObject, ifVersion version: String?) async throws(RemoteError) -> JSONObject {
        let (name, device) = (name, device)
        let answer = try await server.handle(request(.update, id: item.id, version: version)) {
            state throws(RemoteError) in
            try ModelServer.update(item, ifVersion: version, table: name, device: device, &state)
        }
        guard case .item(let row?) = answer else { throw RemoteError(.invalidResponse, "no item") }
        return row
    }

    func delete(id: String, ifVersion version: String?) async throws(RemoteError) {
        let (name, device) = (name, device)
        _ = try await server.handle(request(.delete, id: id, version: version)) { state throws(RemoteError) in
            try ModelServer.delete(id: id, ifVersion: version, table: name, device: device, &state)
        }
    }

    func item(id: String) async throws(RemoteError) -> JSONObject? {
        let name = name
        let answer = try await server.handle(request(.read, id: id)) { state throws(RemoteError) in
            .item(state.tables[name]?[ItemID.Key(id)].flatMap { $0.isDeleted ? nil : $0 })
        }
        guard case .item(let row) = answer else { throw RemoteError(.invalidResponse, "no item") }
        return row
    }

    func query(_ query: TableQuery) async throws(RemoteError) -> RemotePage {
        let (name, pageSize) = (name, server.maximumPageSize)
        var request = request(.query)
        request.query = query
        let answer = try await server.handle(request) { state throws(RemoteError) in
            try ModelServer.query(query, table: name, pageSize: pageSize, state)
        }
        guard case .page(let page) = answer else { throw RemoteError(.invalidResponse, "no page") }
        return page
    }
}
