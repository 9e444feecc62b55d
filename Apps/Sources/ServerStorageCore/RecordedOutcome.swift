import SyncCore

/// The answer the server gave to a write sent with an idempotency key, kept so that the same
/// request sent again (a retry after a lost answer) gets the same answer instead of being applied
/// twice.
///
/// The server records it; a storage keeps it (``ServerStorage/recordOutcome(_:)``) and gives it
/// back (``ServerStorage/recordedOutcome(scope:key:)``) until it is forgotten
/// (``ServerStorage/forgetOutcomes(recordedBefore:)``).
///
/// ```swift
/// let outcome = RecordedOutcome(
///     scope: "user-1", key: "ferry-3F2A…-17-1", fingerprint: "POST /tables/todo 9c1d…", status: 201,
///     headers: ["ETag": "\"42\""], body: #"{"id":"a","version":"42"}"#, recordedAt: 1_700_000_000_000)
/// try await storage.recordOutcome(outcome)
/// let again = try await storage.recordedOutcome(scope: "user-1", key: outcome.key)   // == outcome
/// ```
public struct RecordedOutcome: Sendable, Hashable {
    /// Whose key it is: the authenticated subject, or the empty string for anonymous requests.
    /// Keys of different scopes never meet.
    public var scope: String
    /// The client's idempotency key.
    public var key: String
    /// What the request was (its method, path and a digest of its body), so that a key reused for
    /// another request is told apart from a retry.
    public var fingerprint: String
    /// The HTTP status of the answer.
    public var status: Int
    /// The answer's headers that matter to a client (`ETag`, `Location`, `Last-Modified`, …).
    public var headers: [String: String]
    /// The answer's body (JSON text), if it had one.
    public var body: String?
    /// When the outcome was recorded, in milliseconds since 1970.
    public var recordedAt: Int64

    public init(
        scope: String, key: String, fingerprint: String, status: Int, headers: [String: String], body: String?,
        recordedAt: Int64
    ) {
        self.scope = scope
        self.key = key
        self.fingerprint = fingerprint
        self.status = status
        self.headers = headers
        self.body = body
        self.recordedAt = recordedAt
    }

    /// The longest idempotency key a storage accepts, in UTF-8 bytes.
    public static let maximumKeyLength = 255

    /// Checks the key's length and characters (printable ASCII, as an HTTP header value).
    ///
    /// ```swift
    /// try RecordedOutcome.validateKey("ferry-3F2A-17-1")   // fine
    /// try RecordedOutcome.validateKey("")                  // StorageError(.invalidName)
    /// ```
    public static func validateKey(_ key: String) throws(StorageError) {
        guard !key.isEmpty, key.utf8.count <= maximumKeyLength,
            key.utf8.allSatisfy({ $0 >= 0x21 && $0 <= 0x7E })
        else {
            throw StorageError(
                .invalidName,
                "an idempotency key is 1 to \(maximumKeyLength) printable ASCII characters without spaces")
        }
    }
}

extension RecordedOutcome {
    /// The headers as JSON text, as storages keep them.
    public var headersText: String {
        JSONValue.object(headers.mapValues { .string($0) }).serialized()
    }

    /// Headers read back from ``headersText``; a damaged value gives no headers.
    public static func headers(fromText text: String) -> [String: String] {
        guard case .object(let object)? = try? JSONValue(parsing: text) else { return [:] }
        return object.compactMapValues(\.stringValue)
    }
}
