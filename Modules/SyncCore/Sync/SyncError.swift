/// An error of the sync engine: a stable code for programs and one line for people.
///
/// ```swift
/// do {
///     try await context.push()
/// } catch SyncError.Code.network {
///     // offline: the queue is intact, try again later
/// } catch SyncError.Code.unauthorized {
///     // sign in again, then push
/// }
/// ```
public struct SyncError: Error, Sendable, CustomStringConvertible {
    /// A broad classification of the failure.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }

        /// The server could not be reached or its answer was lost; nothing queued was lost.
        public static let network = Code("network")
        /// The server refused the credentials (401); nothing queued was lost.
        public static let unauthorized = Code("unauthorized")
        /// The task was cancelled; the store and the queue are consistent.
        public static let cancelled = Code("cancelled")
        /// An item without a valid id, or a value that is not a JSON object.
        public static let invalidItem = Code("invalidItem")
        /// A table name that ``StoreValidation/validateTableName(_:)`` refuses, whichever call was
        /// given it (a write, a pull, a purge), or that the server refused as a table name.
        public static let invalidTableName = Code("invalidTableName")
        /// An insert of an id that already exists locally.
        public static let itemExists = Code("itemExists")
        /// An update or delete of an item that does not exist locally.
        public static let itemNotFound = Code("itemNotFound")
        /// A local write that the item's queued operation does not allow (an update after a delete).
        public static let invalidOperation = Code("invalidOperation")
        /// A pull or purge query, query id or page size that is not allowed.
        public static let invalidQuery = Code("invalidQuery")
        /// A purge of a table that has queued operations, without `force`.
        public static let queuedOperations = Code("queuedOperations")
        /// An operation error or operation that no longer exists.
        public static let notFound = Code("notFound")
        /// A resolution that needs something the recorded error does not have (a server item).
        public static let invalidResolution = Code("invalidResolution")
        /// The server answered something the engine cannot use (pull pages out of order, items
        /// without `updatedAt` in an incremental pull).
        public static let invalidResponse = Code("invalidResponse")
        /// A remote failure that stopped a pull (the pull is resumable).
        public static let remote = Code("remote")
        /// The local store failed; see ``SyncError/underlying``.
        public static let store = Code("store")
        /// Another process, or another context on the same store, is pushing it: nothing was sent.
        /// Push again once it is done; a pusher that died gives its turn up within
        /// ``SyncContext/pushLeaseLifetime``.
        public static let pushInProgress = Code("pushInProgress")

        /// An attachment name that ``AttachmentName/validate(_:)`` refuses.
        public static let invalidAttachmentName = Code("invalidAttachmentName")
        /// No such attachment on the item (or it is being removed).
        public static let attachmentNotFound = Code("attachmentNotFound")
        /// The context has no ``AttachmentConfiguration`` (``SyncContext/useAttachments(_:)``).
        public static let attachmentsNotConfigured = Code("attachmentsNotConfigured")
        /// The attachment files directory failed (a file to attach that cannot be read, a full disk);
        /// see ``SyncError/underlying``.
        public static let attachmentFile = Code("attachmentFile")

        public var description: String { name }
    }

    public var code: Code
    /// One line for people.
    public var message: String
    /// The cause: a ``RemoteError``, a ``StoreError`` or a ``QueryError``.
    public var underlying: (any Error & Sendable)?
    /// The operations a push sent before this error stopped its attachment transfers (which come
    /// after the operations); 0 for any other error. The message starts with them too.
    public var operationsPushed = 0

    /// How a message about what stopped a push after `count` operations went through begins:
    /// `3 operations pushed; then ` (empty for none).
    ///
    /// ```swift
    /// SyncError.pushedPrefix(1) + "uploading 'scan.pdf' failed"  // "1 operation pushed; then uploading…"
    /// ```
    public static func pushedPrefix(_ count: Int) -> String {
        count > 0 ? "\(count) operation\(count == 1 ? "" : "s") pushed; then " : ""
    }

    public init(_ code: Code, _ message: String, underlying: (any Error & Sendable)? = nil) {
        self.code = code
        self.message = message
        self.underlying = underlying
    }

    public var description: String { message }

    /// The ``RemoteError`` behind this error, if any.
    public var remoteError: RemoteError? { underlying as? RemoteError }
}

extension SyncError.Code {
    /// Lets `catch SyncError.Code.network { … }` match a ``SyncError`` with that code.
    public static func ~= (pattern: SyncError.Code, error: any Error) -> Bool {
        (error as? SyncError)?.code == pattern
    }
}

extension SyncError {
    /// The error for a table name that ``StoreValidation/validateTableName(_:)`` refused.
    static func invalidTableName(_ error: StoreError) -> SyncError {
        SyncError(.invalidTableName, error.message, underlying: error)
    }

    /// Wraps any error from the store or the task into a ``SyncError``.
    static func wrapping(_ error: any Error, _ context: String) -> SyncError {
        if let error = error as? SyncError { return error }
        if error is CancellationError { return SyncError(.cancelled, "\(context): cancelled") }
        if let error = error as? StoreError {
            // The caller's mistake, whichever layer saw it: a negative local `top` was `store`
            // where the same query in a pull was `invalidQuery`.
            switch error.code {
            case .invalidTableName:
                return SyncError(.invalidTableName, "\(context): \(error.message)", underlying: error)
            case .invalidQuery:
                return SyncError(.invalidQuery, "\(context): \(error.message)", underlying: error)
            case .invalidItem:
                return SyncError(.invalidItem, "\(context): \(error.message)", underlying: error)
            default:
                break
            }
            return SyncError(.store, "\(context): \(error.message)", underlying: error)
        }
        if let error = error as? RemoteError {
            // The server (or its proxy) cannot take requests for now: as unreachable.
            if error.isUnavailable { return SyncError(.network, "\(context): \(error)", underlying: error) }
            switch error.code {
            case .network: return SyncError(.network, "\(context): \(error)", underlying: error)
            case .unauthorized: return SyncError(.unauthorized, "\(context): \(error)", underlying: error)
            case .cancelled: return SyncError(.cancelled, "\(context): cancelled", underlying: error)
            case .invalidTableName: return SyncError(.invalidTableName, "\(context): \(error)", underlying: error)
            case .noEndpoint: return SyncError(.notFound, "\(context): \(error)", underlying: error)
            default: return SyncError(.remote, "\(context): \(error)", underlying: error)
            }
        }
        return SyncError(.store, "\(context): \(error)", underlying: SendableDescription(String(describing: error)))
    }
}

/// A non-Sendable error kept as its description.
struct SendableDescription: Error, Sendable, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
