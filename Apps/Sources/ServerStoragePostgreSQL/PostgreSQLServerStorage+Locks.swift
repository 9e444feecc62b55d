import PostgresNIO
public import ServerStorageCore

extension PostgreSQLServerStorage {
    /// A transaction that takes PostgreSQL's transaction-scoped advisory lock of the lock's name
    /// (`pg_advisory_xact_lock` of a 64-bit hash of it) before `body`: a holder in another instance
    /// waits until this one commits or rolls back, bounded by the statement timeout like any
    /// statement; a connection lost mid-way releases it with its transaction.
    public func exclusiveTransaction<T: Sendable>(
        _ lock: StorageLock, _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        try await transaction { [self] in
            guard let session = currentTransaction?.session else {
                throw StorageError(.io, "taking the lock '\(lock.name)' failed: no transaction")
            }
            do {
                _ = try await session.rows("SELECT pg_advisory_xact_lock(hashtextextended(\(lock.name), 0))")
            } catch {
                throw mapped(error, "taking the lock '\(lock.name)' on")
            }
            return try await body()
        }
    }
}
