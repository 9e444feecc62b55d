/// An error from a local store: a stable code for programs and one line for people.
///
/// ```swift
/// do {
///     try await store.upsert("todo", [["title": "no id"]])
/// } catch StoreError.Code.invalidItem {
///     // the item has no valid id
/// }
/// ```
public struct StoreError: Error, Sendable, CustomStringConvertible {
    /// A broad classification that stays the same across store backends.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }

        /// Something that was required is absent (for example an operation to update).
        public static let notFound = Code("notFound")
        /// A uniqueness or integrity rule was broken.
        public static let constraint = Code("constraint")
        /// An item without a valid id.
        public static let invalidItem = Code("invalidItem")
        /// A table name that ``StoreValidation/validateTableName(_:)`` refuses. The same code name
        /// is used by ``SyncError``, ``RemoteError`` and the server for the same mistake.
        public static let invalidTableName = Code("invalidTableName")
        /// A query the store cannot run (see `underlying` for the ``QueryError``).
        public static let invalidQuery = Code("invalidQuery")
        /// The store was closed.
        public static let closed = Code("closed")
        /// The store's data is damaged or is not a store of this kind.
        public static let corrupt = Code("corrupt")
        /// The store is locked by another process or connection.
        public static let busy = Code("busy")
        /// The location cannot be written.
        public static let readOnly = Code("readOnly")
        /// The disk or the store's map is full.
        public static let full = Code("full")
        /// Another input or output failure.
        public static let io = Code("io")

        public var description: String { name }
    }

    public var code: Code
    /// One line for people: what failed, with the table or path involved.
    public var message: String
    /// The backend's native error, when there is one.
    public var underlying: (any Error & Sendable)?

    public init(_ code: Code, _ message: String, underlying: (any Error & Sendable)? = nil) {
        self.code = code
        self.message = message
        self.underlying = underlying
    }

    public var description: String { message }
}

extension StoreError.Code {
    /// Lets `catch StoreError.Code.notFound { … }` match a ``StoreError`` with that code.
    public static func ~= (pattern: StoreError.Code, error: any Error) -> Bool {
        (error as? StoreError)?.code == pattern
    }
}
