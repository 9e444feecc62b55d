/// One write the engine sends: an insert, update or delete of one item, with the key that lets a
/// server recognise it when it is sent again.
///
/// ```swift
/// let write = RemoteWrite(
///     table: "todo", kind: .update, itemID: "a", body: ["id": "a", "title": "Milk"], ifVersion: "7",
///     idempotencyKey: "ferry-5E1C…-42-1")
/// let stored = try await remote.send(write)   // the server's item (nil for a delete)
/// ```
public struct RemoteWrite: Sendable, Hashable {
    /// The table.
    public var table: String
    /// Insert, update or delete.
    public var kind: OperationKind
    /// The item's id.
    public var itemID: String
    /// What is sent (insert, update): `id` and the app's fields, without system properties.
    public var body: JSONObject
    /// The version the server must still have (update, delete); `nil` for none.
    public var ifVersion: String?
    /// The key of this attempt (HTTP `Idempotency-Key`): the same for every resend of one attempt,
    /// different for each new attempt. `nil` when the server does not honour keys.
    public var idempotencyKey: String?

    public init(
        table: String, kind: OperationKind, itemID: String, body: JSONObject, ifVersion: String? = nil,
        idempotencyKey: String? = nil
    ) {
        self.table = table
        self.kind = kind
        self.itemID = itemID
        self.body = body
        self.ifVersion = ifVersion
        self.idempotencyKey = idempotencyKey
    }
}

/// What a backend offers for pushing beyond one request per operation. The engine asks once per
/// push (``RemoteService/writeCapabilities()``) and uses what is offered.
///
/// ```swift
/// RemoteWriteCapabilities(maximumBatchSize: 1000, honoursIdempotencyKeys: true)   // Ferry's server
/// RemoteWriteCapabilities.none                                                      // any other
/// ```
public struct RemoteWriteCapabilities: Sendable, Hashable {
    /// The most writes in one ``RemoteService/sendBatch(_:)``; 0 when there is no batch request.
    public var maximumBatchSize: Int
    /// The most bytes of item bodies in one batch.
    public var maximumBatchBytes: Int
    /// Whether the server records the outcome of keyed writes and answers a resent key with it.
    /// The engine then resends a write whose answer was lost instead of reading the item first.
    public var honoursIdempotencyKeys: Bool

    public init(maximumBatchSize: Int = 0, maximumBatchBytes: Int = 1 << 20, honoursIdempotencyKeys: Bool = false) {
        self.maximumBatchSize = max(0, maximumBatchSize)
        self.maximumBatchBytes = max(1, maximumBatchBytes)
        self.honoursIdempotencyKeys = honoursIdempotencyKeys
    }

    /// One request per operation, no keys: every server of the protocol family.
    public static let none = RemoteWriteCapabilities()

    /// Whether writes can be sent in batches.
    public var batches: Bool { maximumBatchSize > 1 }
}

extension RemoteService {
    /// No extensions: one request per operation.
    public func writeCapabilities() async -> RemoteWriteCapabilities { .none }

    /// Sends one write through ``table(_:)``, without its key.
    public func send(_ write: RemoteWrite) async throws(RemoteError) -> JSONObject? {
        let remote = table(write.table)
        switch write.kind {
        case .insert:
            return try await remote.insert(write.body)
        case .update:
            return try await remote.update(write.body, ifVersion: write.ifVersion)
        case .delete:
            try await remote.delete(id: write.itemID, ifVersion: write.ifVersion)
            return nil
        }
    }

    /// No batches: throws without sending anything (the engine asks only when
    /// ``writeCapabilities()`` offers batches, and otherwise sends one write at a time).
    public func sendBatch(_ writes: [RemoteWrite]) async throws(RemoteError) -> [Result<JSONObject?, RemoteError>] {
        throw RemoteError(.badRequest, "this backend takes no batches; send the \(writes.count) writes one by one")
    }
}
