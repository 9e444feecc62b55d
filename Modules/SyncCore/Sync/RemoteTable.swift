/// What the sync engine needs from a backend's table: the protocol a transport implements.
///
/// It is protocol-agnostic: the same engine runs against the table protocol 2.0.0 and 3.0.0 (the
/// `Transport` module maps these calls to HTTP) and against in-process models in tests. Every call
/// throws only ``RemoteError``; a conformer maps its native failures (including task cancellation,
/// which becomes ``RemoteError/Code/cancelled``) at the boundary.
///
/// Contract:
/// - Item bodies passed to ``insert(_:)`` and ``update(_:ifVersion:)`` hold `id` and the app's fields;
///   the engine removes the system properties (`createdAt`, `updatedAt`, `version`, `deleted`) first.
///   The version precondition travels separately (HTTP: `If-Match: "<version>"`); `nil` means
///   unconditional.
/// - Insert and update answer the server's item as stored, with its system properties (an `ETag`
///   header overrides `version`).
/// - A version mismatch (412, or 409 for a stale body version) and an insert of an id that exists
///   (409) throw ``RemoteError/Code/conflict`` with the server's current item in
///   ``RemoteError/serverItem`` when the server sent one.
/// - An item that does not exist or is soft-deleted (404, 410) throws ``RemoteError/Code/notFound``
///   from update and delete; ``item(id:)`` answers `nil` instead.
/// - ``query(_:)`` runs one request. The engine always sets `includeDeleted` for pulls (soft-deleted
///   items come back with `deleted: true`), and the filter it builds uses only `eq`, `gt`, `and`,
///   `or` and date-time literals, so every server of both protocols understands it. A table with no
///   rows (one nobody has written to yet included) answers a page with no items; a query that finds
///   no table endpoint (HTTP 404) throws ``RemoteError/Code/notFound``, and the pull fails.
///
/// ```swift
/// struct HTTPTable: RemoteTable {
///     let name: String
///     func insert(_ item: JSONObject) async throws(RemoteError) -> JSONObject {
///         // POST /tables/{name}; map 409 to RemoteError(.conflict, status: 409, serverItem: body) …
///     }
///     // …
/// }
/// let context = SyncContext(store: store) { name in HTTPTable(name: name) }
/// ```
public protocol RemoteTable: Sendable {
    /// Creates an item. The body carries its `id`.
    func insert(_ item: JSONObject) async throws(RemoteError) -> JSONObject

    /// Replaces an item's fields (3.0 `PUT`, 2.0 `PATCH`), only if the server's version is
    /// `version` when one is given.
    func update(_ item: JSONObject, ifVersion version: String?) async throws(RemoteError) -> JSONObject

    /// Deletes an item, only if the server's version is `version` when one is given.
    func delete(id: String, ifVersion version: String?) async throws(RemoteError)

    /// The server's live item with `id`, or `nil` when it does not exist or is soft-deleted.
    func item(id: String) async throws(RemoteError) -> JSONObject?

    /// One page of a query's results.
    func query(_ query: TableQuery) async throws(RemoteError) -> RemotePage
}

/// One page of a remote query, as the server sent it.
///
/// The one page type of the client side: ``RemoteTable/query(_:)`` answers it, and the `Transport`
/// module's online tables answer it too. (``PullCounts`` says what a pulled page did to the store;
/// the server's storage has its own `StoragePage` of stored rows.)
public struct RemotePage: Sendable, Hashable {
    /// The items, in the server's order.
    public var items: [JSONObject]
    /// The number of items the query matches, when it asked for it (``TableQuery/includeTotalCount``)
    /// and the server sent it.
    public var totalCount: Int?
    /// The server's next-page link as a query (3.0 `nextLink`, 2.0 `Link: …; rel=next`), or `nil`
    /// when the server says this is the last page. The engine builds its own next request (a keyset
    /// cursor) and reads this only as a "more rows follow" hint.
    public var nextPage: TableQuery?

    public init(items: [JSONObject], totalCount: Int? = nil, nextPage: TableQuery? = nil) {
        self.items = items
        self.totalCount = totalCount
        self.nextPage = nextPage
    }
}

/// Gives the engine the remote table for a table name.
///
/// ```swift
/// struct Backend: RemoteService {
///     func table(_ name: String) -> any RemoteTable { HTTPTable(name: name) }
/// }
/// let context = SyncContext(store: store, remote: Backend())
/// ```
public protocol RemoteService: Sendable {
    /// The remote table called `name`. Called often: keep it cheap.
    func table(_ name: String) -> any RemoteTable

    /// What the backend offers for pushing; by default nothing beyond the protocol
    /// (``RemoteWriteCapabilities/none``). Asked once per push: cache the answer.
    func writeCapabilities() async -> RemoteWriteCapabilities

    /// Sends one write, with its ``RemoteWrite/idempotencyKey`` when the backend honours keys. By
    /// default: ``RemoteTable/insert(_:)``, ``RemoteTable/update(_:ifVersion:)`` or
    /// ``RemoteTable/delete(id:ifVersion:)`` of ``table(_:)``. Throws as those do.
    func send(_ write: RemoteWrite) async throws(RemoteError) -> JSONObject?

    /// Sends writes in one request when ``writeCapabilities()`` offers batches, and answers one
    /// result per write, in order: each exactly what ``send(_:)`` would give alone. Throws when the
    /// batch as a whole failed (network, cancellation, 401, or a batch the server refused); the
    /// engine then sends the writes one by one with the same keys.
    func sendBatch(_ writes: [RemoteWrite]) async throws(RemoteError) -> [Result<JSONObject?, RemoteError>]

    /// Whether the backend has a change feed (``changeFeed(tables:after:)``); by default `false`.
    /// Asked before each feed is opened: cache the answer.
    func offersChangeFeed() async -> Bool

    /// Opens the backend's change feed: events until the connection ends (the stream finishes) or
    /// fails (it throws). `tables` limits it to those tables (`nil`: every table the caller may
    /// read); `position` resumes after an event's ``RemoteChangeEvent/position``. By default
    /// there is none: throws ``RemoteError/Code/notFound``.
    func changeFeed(tables: [String]?, after position: String?) async throws(RemoteError)
        -> AsyncThrowingStream<RemoteChangeEvent, any Error>
}

/// A ``RemoteService`` made from a closure.
struct RemoteTableFactory: RemoteService {
    let make: @Sendable (String) -> any RemoteTable
    func table(_ name: String) -> any RemoteTable { make(name) }
}

/// A failure of a remote call, classified so the engine knows what to do with the operation.
///
/// ```swift
/// throw RemoteError(.conflict, status: 412, "version mismatch", serverItem: body)
/// throw RemoteError(.network, "the server is unreachable")
/// ```
public struct RemoteError: Error, Sendable, CustomStringConvertible {
    /// What kind of failure this is.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }

        /// The request may not have reached the server, or its answer was lost (offline, timeout,
        /// connection reset, DNS). The push stops and keeps the operation.
        public static let network = Code("network")
        /// 401: the credentials were refused. The push stops and keeps the operation.
        public static let unauthorized = Code("unauthorized")
        /// 409 or 412: the server's item differs from what the client expected;
        /// ``RemoteError/serverItem`` holds it when the server sent it.
        public static let conflict = Code("conflict")
        /// 404 or 410: the item does not exist (or is soft-deleted) on the server.
        public static let notFound = Code("notFound")
        /// 404 from something that is no table endpoint (a server URL with a wrong path, a web
        /// page): it says nothing about the item, so the push stops and keeps the operation, as
        /// for ``network`` (an update taken for a deletion on the server could lose the item).
        public static let noEndpoint = Code("noEndpoint")
        /// 400 or another 4xx not listed above: the server refused the request as it is.
        public static let badRequest = Code("badRequest")
        /// 5xx: the server failed.
        public static let server = Code("server")
        /// The server answered something the transport could not read.
        public static let invalidResponse = Code("invalidResponse")
        /// The calling task was cancelled; the request may or may not have reached the server.
        public static let cancelled = Code("cancelled")
        /// The table name cannot be sent, or the server refused it as a table name (Ferry's server
        /// answers 404 with the code `invalidTableName`).
        public static let invalidTableName = Code("invalidTableName")

        public var description: String { name }
    }

    public var code: Code
    /// The HTTP status, when the server answered.
    public var status: Int?
    /// One line for people.
    public var message: String
    /// The server's current item, carried by 409 and 412 answers.
    public var serverItem: JSONObject?
    /// The transport's native error, when there is one.
    public var underlying: (any Error & Sendable)?
    /// Whether the transport knows the request never left the device (a ``Code/network`` error
    /// where no connection could be made: offline, host not found, connection refused). A push then
    /// puts the operation back to pending at once; otherwise, not knowing whether the server applied
    /// it, the next push asks the server first.
    ///
    /// ```swift
    /// RemoteError(.network, "the device is offline", wasNotSent: true)
    /// ```
    public var wasNotSent: Bool
    /// How long the server asked the client to wait before trying again (`Retry-After` of a 503 or
    /// 429, say), when it did. Retries wait at least this long (``Backoff``).
    public var retryAfter: Duration?

    public init(
        _ code: Code, status: Int? = nil, _ message: String, serverItem: JSONObject? = nil,
        underlying: (any Error & Sendable)? = nil, wasNotSent: Bool = false, retryAfter: Duration? = nil
    ) {
        self.code = code
        self.status = status
        self.message = message
        self.serverItem = serverItem
        self.underlying = underlying
        self.wasNotSent = wasNotSent
        self.retryAfter = retryAfter
    }

    /// The error a transport reports for an HTTP status of 400 or more.
    ///
    /// ```swift
    /// RemoteError(status: 412, "precondition failed", serverItem: body).code  // .conflict
    /// RemoteError(status: 503, "unavailable").code                            // .server
    /// ```
    public init(status: Int, _ message: String, serverItem: JSONObject? = nil, retryAfter: Duration? = nil) {
        let code: Code =
            switch status {
            case 401: .unauthorized
            case 404, 410: .notFound
            case 409, 412: .conflict
            case 500...: .server
            default: .badRequest
            }
        self.init(code, status: status, message, serverItem: serverItem, retryAfter: retryAfter)
    }

    public var description: String {
        // A message that names its status already ("the server answered HTTP 501 …") keeps it once.
        if let status, !message.contains("HTTP \(status)") { return "\(message) (HTTP \(status))" }
        return message
    }

    /// Whether the request's effect on the server is unknown: it may or may not have been applied.
    var outcomeIsUnknown: Bool { code == .network || code == .cancelled }

    /// Whether the answer says the server cannot take requests for now, whatever they hold: 429
    /// (too many), 503 (unavailable: its database down, say), or a proxy's 502 and 504 (the server
    /// behind it failed or did not answer). A push stops and keeps the operation, as when the
    /// server cannot be reached: recording such an answer as the operation's own failure turned a
    /// short outage into thousands of errors to resolve by hand.
    ///
    /// ```swift
    /// RemoteError(status: 503, "the database cannot be reached").isUnavailable  // true
    /// RemoteError(status: 500, "internal").isUnavailable                        // false
    /// ```
    public var isUnavailable: Bool { [429, 502, 503, 504].contains(status ?? 0) }

    /// Whether an ``isUnavailable`` answer leaves the request's effect unknown: a proxy's 502 or
    /// 504 may come after the server read it; a 429 or 503 says it was not applied.
    var unavailableAfterArrival: Bool { status == 502 || status == 504 }
}

extension RemoteError.Code {
    /// Lets `catch RemoteError.Code.conflict { … }` match a ``RemoteError`` with that code.
    public static func ~= (pattern: RemoteError.Code, error: any Error) -> Bool {
        (error as? RemoteError)?.code == pattern
    }
}
