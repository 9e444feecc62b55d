import Foundation
import ServerStorageCore
@_spi(StoreSupport) import SyncCore
import Synchronization

/// `GET /tables/$changes`, an extension of Ferry's server that legacy clients never ask for: a
/// stream of Server-Sent Events that says "table T changed up to version V", so that a client
/// pulls when something changed instead of polling.
///
/// ```text
/// GET /tables/$changes?tables=todo,notes          (optional: only these tables)
/// Last-Event-ID: notes=7;todo=12                  (optional: resume after this event)
///
/// retry: 2000
/// event: ready
/// id: notes=7;todo=12
/// data: {"tables":{"notes":7,"todo":12}}
///
/// event: change
/// id: notes=7;todo=13
/// data: {"table":"todo","version":13}
///
/// : heartbeat
/// ```
///
/// Without `Last-Event-ID` the feed starts with `ready`, the versions of every table the caller
/// may read. With it, the feed first sends a `change` for every table that moved past the version
/// the id gives (nothing is missed while a client was away), then goes on. An event's id is the
/// version of every table the feed has reported, so the last id received is all a client keeps.
///
/// A caller learns nothing about rows it could not read: tables it may not query are left out
/// (a table that requires a token, an anonymous caller on a per-user table, a table whose queries
/// are disabled); on a per-user table or one with a data view, the version is that of the newest
/// row the caller sees, checked on every change of the table. The feed is fed by the storage's
/// change stream, so on PostgreSQL a write through one instance reaches feeds open on every other.
/// A comment line goes out every ``RequestLimits/changeFeedHeartbeat`` so that proxies keep the
/// connection; feeds are bounded in total and per token subject (429 above), end when the token
/// expires, and end when the server shuts down.
extension TableService {
    static let changesSegment = "$changes"

    /// An open change feed: the bytes to write, and how to end it early (a server shutting down).
    struct OpenChangeFeed: Sendable {
        let frames: AsyncStream<[UInt8]>
        let end: @Sendable () -> Void
    }

    /// How a caller sees one table through the feed.
    enum FeedAccess: Sendable, Equatable {
        /// Every row: the table's own version.
        case all
        /// Only some rows (a per-user table, a data view): the version of the newest of them.
        case some(OwnerScope, QueryExpression?)
    }

    /// Opens a feed for `request`, or throws the error to answer instead.
    func openChangeFeed(_ request: TableRequest) async throws -> OpenChangeFeed {
        guard request.method == "GET" else {
            throw ProtocolError(405, "methodNotAllowed", "the change feed is read with GET")
        }
        let identity = try authenticate(request, table: configuration.dynamicTableDefaults)
        let parameters = ODataParameters(parsing: request.rawQuery)
        var wanted: Set<String>?
        if let list = parameters.value(for: "tables") {
            let names = list.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            for name in names {
                do {
                    try StoreValidation.validateTableName(name)
                } catch {
                    throw ProtocolError.badRequest("tables: \(error.message)", code: "invalidFeed")
                }
            }
            wanted = Set(names)
        }
        var resumeFrom: [String: Int64]?
        if let text = request.headers["last-event-id"] ?? parameters.value(for: "lastEventId"), !text.isEmpty {
            guard let parsed = Self.feedPosition(parsing: text) else {
                throw ProtocolError.badRequest(
                    "Last-Event-ID is not an id this feed sent (table=version;…)", code: "invalidFeed")
            }
            resumeFrom = parsed
        }
        let limits = configuration.limits
        let owner = identity?.subject ?? ""
        guard feeds.reserve(owner, total: limits.maximumChangeFeeds, perUser: limits.maximumChangeFeedsPerUser) else {
            var error = ProtocolError(429, "tooManyFeeds", "too many change feeds are open; retry later")
            error.retryAfter = 5
            throw error
        }
        // Subscribed before the state is read: a change in between shows in both, and is sent once.
        let changes = storage.changes()
        var sent: [String: Int64] = [:]
        var first: [UInt8] = Array("retry: 2000\n".utf8)
        var known: [String: FeedAccess?] = [:]
        do {
            let names = Set(try await storage.tableNames()).union(declared.keys)
            for name in names.sorted() where wanted?.contains(name) ?? true {
                guard let access = try await feedAccess(name, identity) else { continue }
                known.updateValue(access, forKey: name)
                let version = try await visibleVersion(name, access)
                if let resumeFrom {
                    let before = resumeFrom[name] ?? 0
                    sent[name] = before
                    if version > before {
                        sent[name] = version
                        first += Self.changeFrame(name, version, sent)
                    }
                } else {
                    sent[name] = version
                }
            }
            if resumeFrom == nil { first += Self.readyFrame(sent) }
        } catch {
            feeds.release(owner)
            throw error
        }
        let (frames, continuation) = AsyncStream.makeStream(of: [UInt8].self)
        continuation.yield(first)
        let producer = Task { [sent, known] in
            var sent = sent
            var known = known
            for await change in changes {
                let name = change.table
                if let wanted, !wanted.contains(name) { continue }
                if known[name] == nil {
                    let access = try? await feedAccess(name, identity)
                    known.updateValue(access, forKey: name)
                }
                guard let access = known[name] ?? nil else { continue }
                var version = change.version
                if access != .all {
                    guard let seen = try? await visibleVersion(name, access) else { continue }
                    version = seen
                }
                if version > sent[name] ?? 0 {
                    sent[name] = version
                    continuation.yield(Self.changeFrame(name, version, sent))
                }
            }
            continuation.finish()  // the storage closed
        }
        let heartbeat = limits.changeFeedHeartbeat
        let expiry = identity?.expiresAt
        let timer = Task {
            while !Task.isCancelled {
                if let expiry, expiry <= Date() {
                    continuation.finish()  // the token expired: the client reconnects with a new one
                    return
                }
                try? await Task.sleep(for: heartbeat)
                continuation.yield(Array(": heartbeat\n\n".utf8))
            }
        }
        let feeds = feeds
        continuation.onTermination = { _ in
            producer.cancel()
            timer.cancel()
            feeds.release(owner)
        }
        return OpenChangeFeed(frames: frames, end: { continuation.finish() })
    }

    /// How the caller sees `name`, or `nil` when it may not query it.
    func feedAccess(_ name: String, _ identity: TokenVerifier.Identity?) async throws -> FeedAccess? {
        let table: TableSettings
        if let declared = declared[name] {
            table = declared
        } else if configuration.allowsDynamicTables {
            table = configuration.dynamicTableDefaults
        } else {
            return nil
        }
        if table.requiresAuth && identity == nil { return nil }
        if table.disabledOperations.contains(.query) { return nil }
        if table.perUser {
            guard let identity else { return nil }
            return .some(.owner(identity.subject), table.dataViewFilter)
        }
        if let view = table.dataViewFilter { return .some(.all, view) }
        return .all
    }

    /// The version of the newest row of `name` the caller sees (deleted rows too), or 0.
    func visibleVersion(_ name: String, _ access: FeedAccess) async throws -> Int64 {
        var query = StorageQuery(
            orderBy: [SortKey(.field("updatedAt"), descending: true)], limit: 1, includeDeleted: true)
        if case .some(let owner, let view) = access {
            query.owner = owner
            query.filter = view
        }
        let schema = declared[name]?.schema ?? configuration.dynamicTableDefaults.schema
        do {
            return try await storage.query(StorageTable(name: name, schema: schema), query).items.first?.version ?? 0
        } catch let error as StorageError where error.code == .noSuchTable {
            return 0
        }
    }

    // MARK: - Frames

    /// `notes=7;todo=12`: the position of a feed, sorted by table.
    static func feedPosition(_ sent: [String: Int64]) -> String {
        sent.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ";")
    }

    /// The versions an event id gives, or `nil` when it is not one.
    static func feedPosition(parsing text: String) -> [String: Int64]? {
        var result: [String: Int64] = [:]
        guard text.utf8.count <= 1 << 20 else { return nil }
        for entry in text.split(separator: ";") {
            let parts = entry.split(separator: "=", maxSplits: 1)
            guard parts.count == 2, let version = Int64(parts[1]), version >= 0 else { return nil }
            let name = String(parts[0])
            guard (try? StoreValidation.validateTableName(name)) != nil else { return nil }
            result[name] = version
        }
        return result
    }

    static func readyFrame(_ sent: [String: Int64]) -> [UInt8] {
        var tables: JSONObject = [:]
        for (name, version) in sent { tables[name] = .int(version) }
        let data = JSONValue.object(["tables": .object(tables)]).serialized()
        return Array("event: ready\nid: \(feedPosition(sent))\ndata: \(data)\n\n".utf8)
    }

    static func changeFrame(_ name: String, _ version: Int64, _ sent: [String: Int64]) -> [UInt8] {
        let data = JSONValue.object(["table": .string(name), "version": .int(version)]).serialized()
        return Array("event: change\nid: \(feedPosition(sent))\ndata: \(data)\n\n".utf8)
    }
}

/// The change feeds open on one server, in total and by token subject.
final class FeedRegistry: Sendable {
    private let open = Mutex<(total: Int, byOwner: [String: Int])>((0, [:]))

    /// Takes a place for a feed of `owner`; `false` when a limit is reached.
    func reserve(_ owner: String, total: Int, perUser: Int) -> Bool {
        open.withLock { open in
            guard open.total < total, open.byOwner[owner, default: 0] < perUser else { return false }
            open.total += 1
            open.byOwner[owner, default: 0] += 1
            return true
        }
    }

    func release(_ owner: String) {
        open.withLock { open in
            open.total -= 1
            open.byOwner[owner, default: 1] -= 1
            if open.byOwner[owner] == 0 { open.byOwner.removeValue(forKey: owner) }
        }
    }

    /// How many feeds are open.
    var count: Int { open.withLock { $0.total } }
}
