import Foundation
import GRDB
import QuerySQLite
import SyncCore

/// Opening a store: GRDB's configuration, and the checks of an existing file before anything is
/// written to it.
extension SQLiteStore {

    static func grdbConfiguration(_ configuration: Configuration) -> GRDB.Configuration {
        var grdb = GRDB.Configuration()
        grdb.label = "Ferry.SQLiteStore"
        grdb.busyMode = .timeout(configuration.busyTimeout)
        grdb.maximumReaderCount = max(1, configuration.maximumReaderCount)
        let maximumSize = configuration.maximumSize
        grdb.prepareDatabase { db in
            try SQLiteQueryFunctions.register(db)
            if let maximumSize {
                let pageSize = try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 4096
                try db.execute(sql: "PRAGMA max_page_count = \(max(1, maximumSize / max(1, pageSize)))")
            }
        }
        return grdb
    }

    static func openFile(_ path: String, _ configuration: Configuration, place: String) throws -> DatabasePool {
        try preflight(path, configuration, place: place)
        let deadline = ContinuousClock.now + .milliseconds(Int(configuration.busyTimeout * 1000))
        while true {
            do {
                let pool = try DatabasePool(path: path, configuration: grdbConfiguration(configuration))
                try migrateTakingTurns(pool)
                return pool
            } catch let error as DatabaseError where error.resultCode == .SQLITE_BUSY && ContinuousClock.now < deadline
            {
                // Another process is making the file a store: GRDB turns a new file to WAL with a
                // write in a deferred transaction, whose SQLITE_BUSY no busy timeout waits out
                // (2 of 100 opens, 4 connections at once on a loaded machine). Opened again.
                Thread.sleep(forTimeInterval: 0.02)
            } catch let error as DatabaseError {
                throw openError(error, path: path, place: place)
            }
        }
    }

    /// Migrates `pool`, taking turns with other processes that create or upgrade the same file.
    /// GRDB reads which migrations ran before it takes the write lock for each, so processes
    /// opening a new store at once all ran its first migration, and all but one failed ("table
    /// ferry_meta already exists"). A migration that fails after another process applied one is
    /// tried again, from what is applied now.
    static func migrateTakingTurns(_ pool: DatabasePool) throws {
        let migrator = StoreSchema.migrator
        var applied = try pool.read { try migrator.appliedIdentifiers($0) }
        for attempt in 1... {
            do {
                try migrator.migrate(pool)
                return
            } catch let error as DatabaseError {
                let now = (try? pool.read { try migrator.appliedIdentifiers($0) }) ?? applied
                // Each retry follows a migration another process applied: at most one per migration.
                guard now != applied, attempt <= StoreSchema.migrationIdentifiers.count else { throw error }
                applied = now
            }
        }
    }

    /// Checks an existing file without writing to it: SQLite's header, a Ferry store, a schema this
    /// version knows, and (optionally) SQLite's quick integrity check.
    static func preflight(_ path: String, _ configuration: Configuration, place: String) throws(StoreError) {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else { return }
        if isDirectory.boolValue { throw StoreError(.io, "cannot open \(place): the path is a directory") }
        let header: Data
        do {
            guard let handle = FileHandle(forReadingAtPath: path) else {
                throw StoreError(.readOnly, "cannot open \(place): the file cannot be read")
            }
            defer { try? handle.close() }
            header = try handle.read(upToCount: 16) ?? Data()
        } catch let error as StoreError {
            throw error
        } catch {
            throw StoreError(.io, "cannot open \(place): reading the file failed: \(error)", underlying: error)
        }
        // An empty file is an empty database, which becomes the store.
        if header.isEmpty { return }
        guard header == Data("SQLite format 3\u{0}".utf8) else {
            throw StoreError(
                .corrupt, "cannot open \(place): the file is not a SQLite database (its header is not SQLite's)")
        }
        var readOnly = GRDB.Configuration()
        readOnly.readonly = true
        readOnly.busyMode = .timeout(configuration.busyTimeout)
        // A read-only connection to a WAL database may create the -wal and -shm files; when the
        // check fails, remove the ones it created (they are empty) so that nothing is left behind.
        let companions = [path + "-wal", path + "-shm"].filter { !FileManager.default.fileExists(atPath: $0) }
        do {
            try check(path, readOnly, configuration, place: place)
        } catch {
            for companion in companions { try? FileManager.default.removeItem(atPath: companion) }
            throw error
        }
    }

    static func check(
        _ path: String, _ readOnly: GRDB.Configuration, _ configuration: Configuration, place: String
    ) throws(StoreError) {
        do {
            let queue = try DatabaseQueue(path: path, configuration: readOnly)
            defer { try? queue.close() }
            try queue.read { db in
                let tables = try String.fetchSet(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table'")
                // Empty, or being made a store by another process (GRDB's table of migrations comes
                // first, the store's tables with the first migration): it was "not a Ferry store".
                if tables.isSubset(of: ["grdb_migrations"]) { return }
                guard tables.contains("ferry_meta") else {
                    throw StoreError(
                        .corrupt, "cannot open \(place): the file is a SQLite database but not a Ferry store")
                }
                if try StoreSchema.migrator.hasBeenSuperseded(db) {
                    let known = Set(StoreSchema.migrationIdentifiers)
                    let unknown = try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations")
                        .filter { !known.contains($0) }
                    throw StoreError(
                        .corrupt,
                        "cannot open \(place): it was written by a newer version of Ferry (schema migrations \(unknown.joined(separator: ", ")) are unknown to this version)"
                    )
                }
                if configuration.verifiesIntegrityOnOpen {
                    let problems = try String.fetchAll(db, sql: "PRAGMA quick_check(5)")
                    guard problems == ["ok"] else {
                        throw StoreError(
                            .corrupt,
                            "cannot open \(place): the file is damaged (SQLite's integrity check: \(StoreErrors.oneLine(problems.joined(separator: "; "))))"
                        )
                    }
                }
            }
        } catch let error as StoreError {
            throw error
        } catch let error as DatabaseError {
            throw openError(error, path: path, place: place)
        } catch {
            throw StoreError(.io, "cannot open \(place): \(error)", underlying: error)
        }
    }

    /// An error from opening: `CANTOPEN` and `READONLY` in a location that cannot be written become
    /// `readOnly`.
    static func openError(_ error: DatabaseError, path: String, place: String) -> StoreError {
        switch error.resultCode {
        case .SQLITE_CANTOPEN, .SQLITE_READONLY, .SQLITE_PERM, .SQLITE_AUTH:
            let directory = (path as NSString).deletingLastPathComponent
            if !directory.isEmpty, !FileManager.default.fileExists(atPath: directory) {
                return StoreError(
                    .io, "cannot open \(place): the directory '\(directory)' does not exist", underlying: error)
            }
            if isReadOnlyLocation(path) { return StoreErrors.map(error, "opening", place, code: .readOnly) }
            return StoreErrors.map(
                error, "opening", place, code: error.resultCode == .SQLITE_READONLY ? .readOnly : .io)
        default:
            return StoreErrors.map(error, "opening", place)
        }
    }

    /// Whether `path` is an existing file that cannot be written, or a new file that cannot be
    /// created (the probe file is removed at once).
    static func isReadOnlyLocation(_ path: String) -> Bool {
        if FileManager.default.fileExists(atPath: path) {
            let directory = (path as NSString).deletingLastPathComponent
            return !FileManager.default.isWritableFile(atPath: path)
                || !FileManager.default.isWritableFile(atPath: directory.isEmpty ? "." : directory)
        }
        return !canCreateFile(path)
    }
}

/// Whether a file can be created at `path` (a new file is created and removed at once).
private func canCreateFile(_ path: String) -> Bool {
    let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL, 0o600)
    if descriptor >= 0 {
        close(descriptor)
        unlink(path)
        return true
    }
    return errno != EACCES && errno != EROFS && errno != EPERM
}
