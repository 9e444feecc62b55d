/// What a queued operation does to the server's copy of an item.
public enum OperationKind: String, Sendable, Hashable, CaseIterable, Codable {
    case insert
    case update
    case delete
}

/// The state of a ``QueuedOperation``: every operation in the queue is queued; its state says
/// whether it waits (`pending`), is being sent (`inFlight`) or failed (`failed`).
public enum OperationState: String, Sendable, Hashable, CaseIterable, Codable {
    /// Waiting to be pushed.
    case pending
    /// Sent by a push that has not finished; never collapsed away.
    case inFlight
    /// The last push failed; an ``OperationErrorRecord`` says why.
    case failed
}

/// An operation to append to the queue; the store assigns its id.
public struct OperationDraft: Sendable, Hashable {
    public var table: String
    public var itemID: String
    public var kind: OperationKind
    /// The item the operation carries (for a delete, the item as it was, so its version is known).
    public var item: JSONObject?
    /// The server's copy of the item when it was first edited locally: the base of a three-way merge.
    public var baseItem: JSONObject?
    public var createdAt: Timestamp

    public init(
        table: String, itemID: String, kind: OperationKind, item: JSONObject? = nil,
        baseItem: JSONObject? = nil, createdAt: Timestamp = Timestamp(millisecondsSince1970: 0)
    ) {
        self.table = table
        self.itemID = itemID
        self.kind = kind
        self.item = item
        self.baseItem = baseItem
        self.createdAt = createdAt
    }
}

/// An entry of the durable operation queue, in any ``OperationState``: pending, in flight or failed.
public struct QueuedOperation: Sendable, Hashable, Identifiable {
    /// The queue position: strictly increasing, never reused.
    public var id: Int64
    public var table: String
    public var itemID: String
    public var kind: OperationKind
    public var state: OperationState
    public var item: JSONObject?
    public var baseItem: JSONObject?
    public var createdAt: Timestamp
    /// How many pushes have tried this operation.
    public var attempts: Int

    public init(
        id: Int64, table: String, itemID: String, kind: OperationKind, state: OperationState = .pending,
        item: JSONObject? = nil, baseItem: JSONObject? = nil, createdAt: Timestamp, attempts: Int = 0
    ) {
        self.id = id
        self.table = table
        self.itemID = itemID
        self.kind = kind
        self.state = state
        self.item = item
        self.baseItem = baseItem
        self.createdAt = createdAt
        self.attempts = attempts
    }

    /// The queued form of a draft with its assigned id.
    public init(id: Int64, draft: OperationDraft) {
        self.init(
            id: id, table: draft.table, itemID: draft.itemID, kind: draft.kind, item: draft.item,
            baseItem: draft.baseItem, createdAt: draft.createdAt)
    }

    /// The operation as one JSON object, the form stores persist (so new fields need no migration).
    public var json: JSONObject {
        var object: JSONObject = [
            "id": .int(id), "table": .string(table), "itemId": .string(itemID), "kind": .string(kind.rawValue),
            "state": .string(state.rawValue), "createdAt": .string(createdAt.iso8601),
            "attempts": .int(Int64(attempts)),
        ]
        if let item { object["item"] = .object(item) }
        if let baseItem { object["baseItem"] = .object(baseItem) }
        return object
    }

    /// Reads an operation written by ``json``.
    public init(json object: JSONObject) throws(StoreError) {
        guard case .int(let id)? = object["id"], let table = object["table"]?.stringValue,
            let itemID = object["itemId"]?.stringValue,
            let kind = object["kind"]?.stringValue.flatMap(OperationKind.init(rawValue:))
        else { throw StoreError(.corrupt, "a stored operation is missing its id, table, item id or kind") }
        self.init(
            id: id, table: table, itemID: itemID, kind: kind,
            state: object["state"]?.stringValue.flatMap(OperationState.init(rawValue:)) ?? .pending,
            item: object["item"]?.objectValue, baseItem: object["baseItem"]?.objectValue,
            createdAt: object["createdAt"]?.stringValue.flatMap { Timestamp(iso8601: $0) }
                ?? Timestamp(millisecondsSince1970: 0),
            attempts: Int(object["attempts"]?.intValue ?? 0))
    }
}

/// Why a queued operation failed, kept until the app resolves it (it survives restarts).
public struct OperationErrorRecord: Sendable, Hashable, Identifiable {
    /// The error's id, for ``SyncContext/resolveError(_:_:)``: the same for every failure of one
    /// operation until the error is resolved.
    public var id: String
    /// The failed operation's id (never lost: legacy bug #1).
    public var operationID: Int64
    public var table: String
    public var itemID: String
    public var kind: OperationKind
    /// The HTTP status, when the server answered.
    public var statusCode: Int?
    /// One line for people.
    public var message: String
    /// The item the client sent.
    public var clientItem: JSONObject?
    /// The server's item from a 409 or 412 answer.
    public var serverItem: JSONObject?
    /// When the operation first failed. A later failure of the same operation (the next push) keeps
    /// the error, its `id` and this time, and updates the rest.
    public var createdAt: Timestamp

    public init(
        id: String, operationID: Int64, table: String, itemID: String, kind: OperationKind, statusCode: Int? = nil,
        message: String, clientItem: JSONObject? = nil, serverItem: JSONObject? = nil,
        createdAt: Timestamp = Timestamp(millisecondsSince1970: 0)
    ) {
        self.id = id
        self.operationID = operationID
        self.table = table
        self.itemID = itemID
        self.kind = kind
        self.statusCode = statusCode
        self.message = message
        self.clientItem = clientItem
        self.serverItem = serverItem
        self.createdAt = createdAt
    }

    /// The error as one JSON object, the form stores persist.
    public var json: JSONObject {
        var object: JSONObject = [
            "id": .string(id), "operationId": .int(operationID), "table": .string(table), "itemId": .string(itemID),
            "kind": .string(kind.rawValue), "message": .string(message), "createdAt": .string(createdAt.iso8601),
        ]
        if let statusCode { object["statusCode"] = .int(Int64(statusCode)) }
        if let clientItem { object["clientItem"] = .object(clientItem) }
        if let serverItem { object["serverItem"] = .object(serverItem) }
        return object
    }

    /// Reads an error written by ``json``.
    public init(json object: JSONObject) throws(StoreError) {
        guard let id = object["id"]?.stringValue, case .int(let operationID)? = object["operationId"],
            let table = object["table"]?.stringValue, let itemID = object["itemId"]?.stringValue,
            let kind = object["kind"]?.stringValue.flatMap(OperationKind.init(rawValue:))
        else { throw StoreError(.corrupt, "a stored operation error is missing its id, operation, table or kind") }
        self.init(
            id: id, operationID: operationID, table: table, itemID: itemID, kind: kind,
            statusCode: object["statusCode"]?.intValue.map { Int($0) }, message: object["message"]?.stringValue ?? "",
            clientItem: object["clientItem"]?.objectValue, serverItem: object["serverItem"]?.objectValue,
            createdAt: object["createdAt"]?.stringValue.flatMap { Timestamp(iso8601: $0) }
                ?? Timestamp(millisecondsSince1970: 0))
    }
}

extension TableDefinition {
    /// The definition as one JSON object, the form stores persist.
    public var json: JSONObject {
        var fields = JSONObject()
        for (name, type) in schema.fields { fields[name] = type.json }
        return [
            "name": .string(name), "fields": .object(fields),
            "allowsUndeclaredFields": .bool(schema.allowsUndeclaredFields),
            "indexes": .array(indexes.map { .array($0.map(JSONValue.string)) }),
        ]
    }

    /// Reads a definition written by ``json``.
    public init(json object: JSONObject) throws(StoreError) {
        guard let name = object["name"]?.stringValue else {
            throw StoreError(.corrupt, "a stored table definition has no name")
        }
        var fields: [String: FieldType] = [:]
        for (field, value) in object["fields"]?.objectValue ?? [:] {
            guard let type = FieldType(json: value) else {
                throw StoreError(.corrupt, "table '\(name)': field '\(field)' has an unknown type")
            }
            fields[field] = type
        }
        let indexes = (object["indexes"]?.arrayValue ?? []).map { ($0.arrayValue ?? []).compactMap(\.stringValue) }
        self.init(
            name: name,
            schema: TableSchema(
                fields: fields, allowsUndeclaredFields: object["allowsUndeclaredFields"]?.boolValue ?? true),
            indexes: indexes)
    }
}

extension FieldType {
    var json: JSONValue {
        switch self {
        case .string: "string"
        case .integer: "integer"
        case .double: "double"
        case .bool: "bool"
        case .dateTimeOffset: "dateTimeOffset"
        case .date: "date"
        case .timeOfDay: "timeOfDay"
        case .guid: "guid"
        case .json: "json"
        case .enumeration(let cases): ["enumeration": .array(cases.map(JSONValue.string))]
        }
    }

    init?(json: JSONValue) {
        switch json {
        case "string": self = .string
        case "integer": self = .integer
        case "double": self = .double
        case "bool": self = .bool
        case "dateTimeOffset": self = .dateTimeOffset
        case "date": self = .date
        case "timeOfDay": self = .timeOfDay
        case "guid": self = .guid
        case "json": self = .json
        default:
            guard let cases = json["enumeration"]?.arrayValue else { return nil }
            self = .enumeration(cases.compactMap(\.stringValue))
        }
    }
}
