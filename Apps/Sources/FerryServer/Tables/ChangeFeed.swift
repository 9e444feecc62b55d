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
/// Last-Event-ID: t1764130000123                   (optional: resume after this event)
///
/// retry: 2000
/// event: ready
/// id: t1764130000123
/// data: {"tables":{"notes":7,"todo":12}}
///
/// event: change
/// id: t1764130000456
/// data: {"table":"todo","version":13}
///
/// : heartbeat
/// ```
///
/// Without `Last-Event-ID` the feed starts with `ready`, the versions of the tables it watches that
/// the caller may read (one read of the catalog, plus one query per table the caller sees only in
/// part). With it, the feed first sends a `change` for every watched table written since the
/// position, then `caught-up` (every change since the position has been told; clients of earlier
/// versions ignore it), then goes on. A position is the server's clock when the event was sent (`t` and
/// milliseconds), whatever the number of tables: a resumed feed hints every watched table whose
/// newest write is later than the position less ``RequestLimits/changeFeedResumeMargin`` (writes
/// that committed late, clocks of several instances a little apart). Hints are hints: one more
/// than needed costs a pull that brings nothing; none is ever missing. (Positions of the form
/// `notes=7;todo=12`, which earlier Ferry servers sent, are still taken.)
///
/// A caller learns nothing about rows it could not read: tables it may not query are left out
/// (a table that requires a token, an anonymous caller on a per-user table, a table whose queries
/// are disabled); on a per-user table or one with a data view, the version is that of the newest
/// row the caller sees. The feed is fed by the storage's change stream, so on PostgreSQL a write
/// through one instance reaches feeds open on every other.
///
/// A feed's cost does not grow with tables it does not watch, nor with a reader that does not read:
/// changes waiting to be written are folded into one per table (they are hints), and a reader that
/// takes nothing is closed after the connection's write timeout. A comment line goes out every
/// ``RequestLimits/changeFeedHeartbeat`` so that proxies keep the connection. Feeds are bounded in
/// total and per token subject, and (on a server that takes tokens) anonymous ones per address and
/// together (429 above); a feed ends when its token expires, when its client goes away (its place
/// is free at once), and when the server shuts down.
extension TableService {
    static let changesSegment = "$changes"

    /// How a caller sees one table through the feed.
    enum FeedAccess: Sendable, Hashable {
        /// Every row: the table's own version.
        case all
        /// Only some rows (a per-user table, a data view): the version of the newest of them.
        case some(OwnerScope, QueryExpression?)
    }

    /// Where a feed resumes.
    enum FeedPosition: Sendable, Equatable {
        /// After the event sent at this time of the server's clock, in milliseconds since 1970.
        case time(Int64)
        /// After these versions (the positions of earlier Ferry servers).
        case versions([String: Int64])

        init?(parsing text: String) {
            if text.first == "t", let milliseconds = Int64(text.dropFirst()), milliseconds >= 0 {
                self = .time(milliseconds)
                return
            }
            guard text.utf8.count <= 64 << 10 else { return nil }
            var versions: [String: Int64] = [:]
            for entry in text.split(separator: ";") {
                let parts = entry.split(separator: "=", maxSplits: 1)
                guard parts.count == 2, let version = Int64(parts[1]), version >= 0,
                    (try? StoreValidation.validateTableName(String(parts[0]))) != nil
                else { return nil }
                versions[String(parts[0])] = version
            }
            self = .versions(versions)
        }

        /// The position of an event sent now.
        static func now() -> String { "t\(IdempotencyLedger.milliseconds(Date()))" }
    }

    /// Opens a feed for `request` from `peer` (the client's address), or throws the error to
    /// answer instead.
    func openChangeFeed(_ request: TableRequest, peer: String?) async throws -> ChangeFeed {
        guard request.method == "GET" else {
            throw ProtocolError.methodNotAllowed("the change feed is read with GET", allow: ["GET"])
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
            // The tables as the server names them: a feed of `todoitem` tells of `TodoItem`.
            var stored: Set<String> = []
            for name in names { stored.insert(try await tableName(name)) }
            wanted = stored
        }
        var resume: FeedPosition?
        if let text = request.headers["last-event-id"] ?? parameters.value(for: "lastEventId"), !text.isEmpty {
            guard let position = FeedPosition(parsing: text) else {
                throw ProtocolError.badRequest("Last-Event-ID is not a position this feed sent", code: "invalidFeed")
            }
            resume = position
        }
        let limits = configuration.limits
        // Anonymous callers of a server that takes tokens are counted by address, and together
        // hold at most their share: they cannot take every place from users with tokens.
        let takesTokens = verifier != nil
        let place = FeedRegistry.Place(
            owner: identity.map { "user:" + $0.subject } ?? (takesTokens ? "address:" + (peer ?? "?") : nil),
            anonymous: identity == nil && takesTokens)
        guard feeds.reserve(place, limits: limits) else {
            var error = ProtocolError(429, "tooManyFeeds", "too many change feeds are open; retry later")
            error.retryAfter = 5
            throw error
        }
        let feed = ChangeFeed(service: self, identity: identity, wanted: wanted, place: place)
        // Subscribed before the state is read: a change in between shows in both, and is sent once.
        feed.subscribe()
        var sent: [String: Int64] = [:]
        var first: [UInt8] = Array("retry: 2000\n".utf8)
        var hints = 0
        let position = FeedPosition.now()
        do {
            let margin =
                Int64(limits.changeFeedResumeMargin.components.seconds) * 1000
                + limits.changeFeedResumeMargin.components.attoseconds / 1_000_000_000_000_000
            var since: Int64?
            if case .time(let milliseconds)? = resume { since = milliseconds - margin }
            for stamp in try await storage.tableStamps(named: wanted, changedSince: since) {
                guard let seen = feedAccess(stamp.table, identity) else { continue }
                var (version, updatedAt) = (stamp.version, stamp.updatedAt.millisecondsSince1970)
                if seen != .all { (version, updatedAt) = try await visibleNewest(stamp.table, seen) }
                switch resume {
                case nil:
                    sent[stamp.table] = version
                case .time?:
                    sent[stamp.table] = version
                    if version > 0 && updatedAt >= since ?? 0 {
                        first += Self.changeFrame(stamp.table, version, position: position)
                        hints += 1
                    }
                case .versions(let before)?:
                    let known = before[stamp.table] ?? 0
                    sent[stamp.table] = max(known, version)
                    if version > known {
                        first += Self.changeFrame(stamp.table, version, position: position)
                        hints += 1
                    }
                }
            }
            // After the hints of a resumed position: every table that changed since has been told.
            first += resume == nil ? Self.readyFrame(sent, position: position) : Self.caughtUpFrame(position: position)
        } catch {
            feed.close()
            throw error
        }
        feed.open(first: first, sent: sent, firstEvents: hints)
        return feed
    }

    /// How the caller sees `name`, or `nil` when it may not query it.
    func feedAccess(_ name: String, _ identity: TokenVerifier.Identity?) -> FeedAccess? {
        // The server's system tables (attachment metadata) are not app tables.
        if name.hasPrefix("__") { return nil }
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

    /// The version and `updatedAt` of the newest row of `name` the caller sees (deleted rows too),
    /// or zeros.
    func visibleNewest(_ name: String, _ access: FeedAccess) async throws -> (version: Int64, updatedAt: Int64) {
        var query = StorageQuery(
            orderBy: [SortKey(.field("updatedAt"), descending: true)], limit: 1, includeDeleted: true)
        if case .some(let owner, let view) = access {
            query.owner = owner
            query.filter = view
        }
        let schema = declared[name]?.schema ?? configuration.dynamicTableDefaults.schema
        do {
            let newest = try await storage.query(StorageTable(name: name, schema: schema), query).items.first
            return (newest?.version ?? 0, newest?.updatedAt.millisecondsSince1970 ?? 0)
        } catch let error as StorageError where error.code == .noSuchTable {
            return (0, 0)
        }
    }

    // MARK: - Frames

    static func readyFrame(_ sent: [String: Int64], position: String) -> [UInt8] {
        var tables: JSONObject = [:]
        for (name, version) in sent { tables[name] = .int(version) }
        let data = JSONValue.object(["tables": .object(tables)]).serialized()
        return Array("event: ready\nid: \(position)\ndata: \(data)\n\n".utf8)
    }

    static func caughtUpFrame(position: String) -> [UInt8] {
        Array("event: caught-up\nid: \(position)\ndata: {}\n\n".utf8)
    }

    static func changeFrame(_ name: String, _ version: Int64, position: String) -> [UInt8] {
        let data = JSONValue.object(["table": .string(name), "version": .int(version)]).serialized()
        return Array("event: change\nid: \(position)\ndata: \(data)\n\n".utf8)
    }
}
