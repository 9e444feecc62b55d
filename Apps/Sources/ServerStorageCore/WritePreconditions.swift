/// The errors and checks every backend shares for its writes, so that a client sees the same code
/// and the same line from SQLite and from PostgreSQL.
extension StorageError {
    /// An insert found a row with the same id (`current`: that row).
    package static func alreadyExists(id: String, in table: String, current: StoredItem?) -> StorageError {
        StorageError(.conflict, "an item with id '\(id)' already exists in '\(table)'", current: current)
    }

    /// A read or an insert named a table that was never created.
    package static func noSuchTable(_ table: String) -> StorageError {
        StorageError(.noSuchTable, "table '\(table)' does not exist")
    }

    /// An update or a delete named an item of a table that was never created.
    package static func noItem(id: String, inMissingTable table: String) -> StorageError {
        StorageError(.notFound, "no item with id '\(id)' in '\(table)' (the table does not exist)")
    }

    /// Why an update's or a delete's precondition does not hold: `notFound` when the item is absent
    /// (or outside the caller's owner scope), otherwise `versionMismatch` with the item as it is now.
    package static func writePreconditionFailed(id: String, in table: String, current: StoredItem?) -> StorageError {
        guard let current else { return StorageError(.notFound, "no item with id '\(id)' in '\(table)'") }
        return StorageError(
            .versionMismatch, "the item '\(id)' of '\(table)' changed since it was read", current: current)
    }
}

extension StoredItem {
    /// The precondition of an update or a delete (the reference server's `If-Match`, a client's
    /// version check): the item exists for the caller and still has the version the caller read.
    ///
    /// - Parameters:
    ///   - current: The item as the write's transaction reads it, `nil` when absent or another
    ///     owner's.
    ///   - expectedVersion: The version the caller read.
    /// - Returns: `current`, which the write may go on with.
    /// - Throws: ``StorageError/writePreconditionFailed(id:in:current:)``.
    package static func checkWritePrecondition(
        _ current: StoredItem?, id: String, expectedVersion: Int64, in table: String
    ) throws -> StoredItem {
        guard let current, current.version == expectedVersion else {
            throw StorageError.writePreconditionFailed(id: id, in: table, current: current)
        }
        return current
    }
}
