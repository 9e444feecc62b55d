/// A storage failure: a code that is the same for every backend, one line for people, and for
/// conflicts the row as it is now.
///
/// ```swift
/// do {
///     _ = try await storage.insert(into: table, id: "1", content: [:], owner: nil)
/// } catch let error as StorageError where error.code == .conflict {
///     print("already there:", error.current?.versionTag ?? "?")
/// }
/// ```
public struct StorageError: Error, Sendable, CustomStringConvertible {
    /// A classification that stays the same across backends.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }

        /// The row does not exist (or is outside the caller's owner scope).
        public static let notFound = Code("notFound")
        /// An insert found a row with the same id.
        public static let conflict = Code("conflict")
        /// A compare-and-set write found another version.
        public static let versionMismatch = Code("versionMismatch")
        /// The table has never been created.
        public static let noSuchTable = Code("noSuchTable")
        /// A query the table's schema rejects.
        public static let invalidQuery = Code("invalidQuery")
        /// A value of another JSON kind than the field already holds.
        public static let fieldKind = Code("fieldKind")
        /// An id or owner the storage cannot accept.
        public static let invalidName = Code("invalidName")
        /// A table name that `StoreValidation.validateTableName(_:)` refuses (the code name of
        /// SyncCore's errors for the same mistake).
        public static let invalidTableName = Code("invalidTableName")
        /// The storage was closed.
        public static let closed = Code("closed")
        /// The database is locked by another process for longer than the configured timeout, every
        /// connection stayed in use for longer than the configured wait, or a statement ran past its
        /// timeout. The server answers 503 with `Retry-After`.
        public static let busy = Code("busy")
        /// The database cannot be reached now (down, restarting, or refusing connections); a
        /// request may succeed later. The server answers 503 with `Retry-After`.
        public static let unavailable = Code("unavailable")
        /// The database's disk (or its configured size limit) is full: nothing was written, and a
        /// write may succeed once room is made. The server answers 507 with `Retry-After`.
        public static let full = Code("full")
        /// The database is damaged or is not a Ferry server database.
        public static let corrupt = Code("corrupt")
        /// Another input or output failure.
        public static let io = Code("io")

        public var description: String { name }
    }

    /// What kind of failure this is.
    public var code: Code
    /// One line: what failed, with the table involved.
    public var message: String
    /// For ``Code/conflict`` and ``Code/versionMismatch``: the row as it is now.
    public var current: StoredItem?
    /// The backend's native error, when there is one.
    public var underlying: (any Error & Sendable)?

    public init(_ code: Code, _ message: String, current: StoredItem? = nil, underlying: (any Error & Sendable)? = nil)
    {
        self.code = code
        self.message = message
        self.current = current
        self.underlying = underlying
    }

    public var description: String { "\(code): \(message)" }
}

extension StorageError {
    /// The ``Code/fieldKind`` error of a value of `given` kind for a field that holds `held` values
    /// (the one message of every storage).
    public static func fieldKind(table: String, field: String, holds held: String, given: FieldKind) -> StorageError {
        let article = given == .array || given == .object ? "an" : "a"
        return StorageError(
            .fieldKind,
            "field '\(field)' of table '\(table)' holds \(held) values; \(article) \(given.rawValue) cannot be stored in it"
        )
    }
}
