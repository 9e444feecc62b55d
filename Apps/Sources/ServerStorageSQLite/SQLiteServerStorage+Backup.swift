import Foundation
import GRDB
public import ServerStorageCore

/// What ``SQLiteServerStorage/backUp(databaseAt:to:busyTimeout:progress:)`` made.
public struct SQLiteBackup: Sendable, Hashable {
    /// The size of the copy, in bytes.
    public var bytes: Int64
    /// The tables of items it holds (the catalog's rows).
    public var tables: Int
    /// How long the copy took, checks included.
    public var duration: Duration
}

extension SQLiteServerStorage {
    /// Copies the server database at `path` into the new file `target`: a consistent snapshot, taken
    /// while servers keep reading and writing the database (in this process or others), then
    /// checked.
    ///
    /// The copy is SQLite's `VACUUM INTO` on a read-only connection: one read transaction, so the
    /// copy holds exactly the transactions committed before it began, and writers go on meanwhile
    /// (WAL mode; a checkpoint waits for the copy to end). The copy is compact and stands alone (no
    /// `-wal` file), and a server opens it as it is. Copying the file with `cp` while a server
    /// runs can give a copy without the transactions still in the `-wal` file, or a torn one;
    /// SQLite's page-by-page backup API starts over whenever another connection writes, which a
    /// busy server does all the time.
    ///
    /// ```swift
    /// let backup = try await SQLiteServerStorage.backUp(
    ///     databaseAt: "ferry.sqlite", to: "ferry-2026-11-29.sqlite",
    ///     progress: { bytes in print("\(bytes) bytes copied") })
    /// print(backup.bytes, backup.tables)
    /// ```
    ///
    /// - Parameters:
    ///   - path: The database file a server uses (its `-wal` file beside it, if any).
    ///   - target: The new file to copy it to, in a folder that exists; never replaced.
    ///   - busyTimeout: Seconds to wait for a lock another connection holds.
    ///   - progress: Called about twice a second with the bytes written to `target` so far.
    /// - Throws: `StorageError`: `notFound` when `path` does not exist, `conflict` when `target`
    ///   does, `invalidName` when `target`'s folder does not exist, `corrupt` when `path` is not a
    ///   Ferry server database or the copy fails its check, `busy` when another connection keeps
    ///   the database locked longer than `busyTimeout` seconds, `io` or `full` otherwise. A failed
    ///   copy leaves no file at `target`.
    public static func backUp(
        databaseAt path: String, to target: String, busyTimeout: Double = 30,
        progress: (@Sendable (Int64) -> Void)? = nil
    ) async throws(StorageError) -> SQLiteBackup {
        let started = ContinuousClock.now
        let files = FileManager.default
        guard files.fileExists(atPath: path) else {
            throw StorageError(.notFound, "no database at '\(path)'")
        }
        guard !files.fileExists(atPath: target) else {
            throw StorageError(.conflict, "'\(target)' exists already; a backup never replaces a file")
        }
        let folder = URL(fileURLWithPath: target).deletingLastPathComponent().path
        var isFolder: ObjCBool = false
        guard files.fileExists(atPath: folder, isDirectory: &isFolder), isFolder.boolValue else {
            throw StorageError(.invalidName, "the folder '\(folder)' of '\(target)' does not exist")
        }
        var configuration = GRDB.Configuration()
        configuration.readonly = true
        configuration.busyMode = .timeout(busyTimeout)
        configuration.label = "ferry.backup"
        let source: DatabaseQueue
        do {
            source = try DatabaseQueue(path: path, configuration: configuration)
        } catch {
            throw storageError(error, "opening", "sqlite:\(path)")
        }
        defer { try? source.close() }
        let watcher = progress.map { report in
            Task {
                while !Task.isCancelled {
                    try? await Task.sleep(for: .milliseconds(500))
                    let size = (try? FileManager.default.attributesOfItem(atPath: target)[.size] as? NSNumber)?
                        .int64Value
                    if let size, !Task.isCancelled { report(size) }
                }
            }
        }
        defer { watcher?.cancel() }
        do {
            try await source.writeWithoutTransaction { db in
                guard try Int32.fetchOne(db, sql: "PRAGMA application_id") == applicationID else {
                    throw StorageError(.corrupt, "'\(path)' is not a Ferry server database")
                }
                try db.execute(sql: "VACUUM INTO ?", arguments: [target])
            }
        } catch let error as StorageError {
            try? files.removeItem(atPath: target)
            throw error
        } catch {
            try? files.removeItem(atPath: target)
            throw storageError(error, "backing up", "sqlite:\(path)")
        }
        watcher?.cancel()
        return try await checked(target, started: started)
    }

    /// Opens the copy read-only, checks it (`PRAGMA quick_check`) and counts its tables; removes it
    /// when the check fails.
    private static func checked(_ target: String, started: ContinuousClock.Instant) async throws(StorageError)
        -> SQLiteBackup
    {
        var configuration = GRDB.Configuration()
        configuration.readonly = true
        do {
            let copy = try DatabaseQueue(path: target, configuration: configuration)
            defer { try? copy.close() }
            let (check, tables) = try await copy.read { db in
                (
                    try String.fetchOne(db, sql: "PRAGMA quick_check") ?? "",
                    try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ferry_tables") ?? 0
                )
            }
            guard check == "ok" else {
                throw StorageError(.corrupt, "the copy '\(target)' failed SQLite's check: \(check.prefix(200))")
            }
            let size = (try FileManager.default.attributesOfItem(atPath: target)[.size] as? NSNumber)?.int64Value
            return SQLiteBackup(bytes: size ?? 0, tables: tables, duration: ContinuousClock.now - started)
        } catch let error as StorageError {
            try? FileManager.default.removeItem(atPath: target)
            throw error
        } catch {
            try? FileManager.default.removeItem(atPath: target)
            throw storageError(error, "checking the copy", "sqlite:\(target)")
        }
    }

    /// ``mapped(_:_:_:)`` as a `StorageError`.
    private static func storageError(_ error: any Error, _ action: String, _ place: String) -> StorageError {
        mapped(error, action, place) as? StorageError ?? StorageError(.io, "\(action) \(place) failed: \(error)")
    }
}
