/// Decides what to do when the server's copy of an item is not the one the client expected.
///
/// A push calls the handler for each 409/412 answer (and for an update or delete of an item that
/// the server deleted). It runs on the push's task; the push waits for it.
///
/// ```swift
/// struct PreferNewestTitle: ConflictHandler {
///     func resolve(_ conflict: SyncConflict) async throws -> ConflictResolution {
///         guard var mine = conflict.clientItem, let theirs = conflict.serverItem else { return .useServer }
///         mine["tags"] = theirs["tags"]
///         return .useMerged(mine)
///     }
/// }
/// let context = SyncContext(store: store, remote: backend, conflictHandler: PreferNewestTitle())
/// ```
///
/// Built-in handlers: ``ConflictHandler/keep`` (the default: keep the conflict in the errors table),
/// ``ConflictHandler/serverWins``, ``ConflictHandler/clientWins`` and
/// ``ConflictHandler/threeWayMerge(preferring:)``. A handler that throws is treated as
/// ``ConflictResolution/keep``.
public protocol ConflictHandler: Sendable {
    /// Chooses the outcome of one conflict.
    func resolve(_ conflict: SyncConflict) async throws -> ConflictResolution
}

/// One conflict, as a push met it.
public struct SyncConflict: Sendable, Hashable {
    public var table: String
    public var itemID: String
    /// The queued operation that conflicted.
    public var kind: OperationKind
    /// The client's item: the local item for an insert or update, the deleted item for a delete.
    public var clientItem: JSONObject?
    /// The server's current item, or `nil` when the server deleted it (or did not send it).
    public var serverItem: JSONObject?
    /// The server's copy when the item was first edited locally (`nil` for an insert): the base of a
    /// three-way merge.
    public var baseItem: JSONObject?
    /// The HTTP status that reported the conflict (409, 412, 404 or 410), when there was one.
    public var status: Int?

    public init(
        table: String, itemID: String, kind: OperationKind, clientItem: JSONObject?, serverItem: JSONObject?,
        baseItem: JSONObject?, status: Int?
    ) {
        self.table = table
        self.itemID = itemID
        self.kind = kind
        self.clientItem = clientItem
        self.serverItem = serverItem
        self.baseItem = baseItem
        self.status = status
    }

    /// Whether the server no longer has the item (it was deleted there).
    public var serverDeleted: Bool { serverItem == nil || serverItem?.isDeleted == true }
}

/// What a ``ConflictHandler`` decided.
///
/// The decisions have the same names as in ``ErrorResolution``, which resolves a kept conflict later:
/// `useServer`, `useClient` and `useMerged(_:)` mean the same thing in both.
public enum ConflictResolution: Sendable, Hashable {
    /// Take the server's item: the local copy becomes the server's (or is removed when the server
    /// deleted it) and the operation is dropped.
    case useServer
    /// Keep the client's change: send it again, this time against the server's current version.
    case useClient
    /// Keep the client's change with this item instead (typically a merge of both sides): store it
    /// locally and send it as an update against the server's current version.
    case useMerged(JSONObject)
    /// Keep the conflict for the app: the operation stays in the queue and the conflict in the errors
    /// table, to be resolved later with ``SyncContext/resolveError(_:_:)``.
    case keep
}

/// The default handler: it keeps every conflict in the errors table for the app
/// (``ConflictResolution/keep``).
public struct KeepingConflictHandler: ConflictHandler {
    public init() {}
    public func resolve(_ conflict: SyncConflict) async throws -> ConflictResolution { .keep }
}

/// The server's item always wins.
public struct ServerWinsConflictHandler: ConflictHandler {
    public init() {}
    public func resolve(_ conflict: SyncConflict) async throws -> ConflictResolution { .useServer }
}

/// The client's change always wins (it is sent again against the server's version).
///
/// A deleted server item cannot be brought back through the table protocol (an insert of a
/// soft-deleted id is a 409 on every server), so when the server deleted the item the deletion
/// wins: see docs/sync-engine.md, "Conflicts".
public struct ClientWinsConflictHandler: ConflictHandler {
    public init() {}
    public func resolve(_ conflict: SyncConflict) async throws -> ConflictResolution { .useClient }
}

/// A three-way merge by top-level field, against the base captured when the item was first edited
/// locally.
///
/// For each field: changed only by the client (compared with the base) → the client's value;
/// changed only on the server → the server's value; changed on both sides to different values →
/// the preferred side's value. Without a base (an insert that met an existing id) every field that
/// differs counts as changed on both sides. A delete that conflicts is resolved by the preferred
/// side alone.
public struct ThreeWayMergeConflictHandler: ConflictHandler {
    /// Which side wins a field both sides changed.
    public enum Side: Sendable, Hashable {
        case client
        case server
    }

    public var preferring: Side

    public init(preferring: Side = .client) {
        self.preferring = preferring
    }

    public func resolve(_ conflict: SyncConflict) async throws -> ConflictResolution {
        guard conflict.kind != .delete, let client = conflict.clientItem, let server = conflict.serverItem,
            !conflict.serverDeleted
        else { return preferring == .client ? .useClient : .useServer }
        return .useMerged(Self.merge(base: conflict.baseItem, client: client, server: server, preferring: preferring))
    }

    /// The merged item (system properties come from the server's item).
    public static func merge(base: JSONObject?, client: JSONObject, server: JSONObject, preferring: Side)
        -> JSONObject
    {
        var merged = JSONObject()
        let base = base ?? [:]
        let hasBase = !base.isEmpty
        for field in Set(client.keys).union(server.keys).union(base.keys) {
            if SystemProperty.isSystemProperty(field), field != "id" {
                if let value = server[field] { merged[field] = value }
                continue
            }
            let clientValue = client[field]
            let serverValue = server[field]
            let baseValue = base[field]
            let clientChanged = hasBase ? clientValue != baseValue : clientValue != serverValue
            let serverChanged = hasBase ? serverValue != baseValue : clientValue != serverValue
            let chosen: JSONValue?
            switch (clientChanged, serverChanged) {
            case (true, false): chosen = clientValue
            case (false, true): chosen = serverValue
            case (false, false): chosen = clientValue
            case (true, true):
                chosen = clientValue == serverValue ? clientValue : (preferring == .client ? clientValue : serverValue)
            }
            if let chosen { merged[field] = chosen }
        }
        return merged
    }
}

extension ConflictHandler where Self == KeepingConflictHandler {
    /// Keeps every conflict in the errors table (the default).
    public static var keep: KeepingConflictHandler { KeepingConflictHandler() }
}

extension ConflictHandler where Self == ServerWinsConflictHandler {
    /// The server's item wins.
    public static var serverWins: ServerWinsConflictHandler { ServerWinsConflictHandler() }
}

extension ConflictHandler where Self == ClientWinsConflictHandler {
    /// The client's change wins.
    public static var clientWins: ClientWinsConflictHandler { ClientWinsConflictHandler() }
}

extension ConflictHandler where Self == ThreeWayMergeConflictHandler {
    /// Merges field by field against the base version; `preferring` wins fields both sides changed.
    public static func threeWayMerge(preferring: ThreeWayMergeConflictHandler.Side = .client)
        -> ThreeWayMergeConflictHandler
    {
        ThreeWayMergeConflictHandler(preferring: preferring)
    }
}
