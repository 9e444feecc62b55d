import Logging
import PostgresNIO
import QuerySQL
import ServerStorageCore
import SyncCore

/// The change stream on PostgreSQL: every write's statement calls `pg_notify` on the channel
/// `ferry_changes` with "version updatedAt table", which PostgreSQL delivers when (and only when)
/// the write commits, to every listening connection of every instance. Each storage keeps one
/// listening connection outside the pool. When that connection drops, notifications sent meanwhile
/// are lost to it, so after reconnecting it reads every table's sequence from `ferry_tables` and
/// announces the tables that moved past what it last announced: no change goes unannounced.
extension PostgreSQLServerStorage {
    /// Every table's newest stamp.
    static func sequences(_ connection: PostgresConnection, _ logger: Logger) async throws -> [String: StorageChange] {
        var result: [String: StorageChange] = [:]
        for row in try await rows(connection, "SELECT name, last_version, last_updated_at FROM ferry_tables", logger) {
            let (name, version, updatedAt) = try row.decode((String, Int64, Int64).self)
            result[name] = StorageChange(
                table: name, version: version, updatedAt: Timestamp(millisecondsSince1970: updatedAt))
        }
        return result
    }

    /// Parses a notification's payload, "version updatedAt table".
    static func change(_ payload: String) -> StorageChange? {
        let parts = payload.split(separator: " ", maxSplits: 2)
        guard parts.count == 3, let version = Int64(parts[0]), let updatedAt = Int64(parts[1]) else { return nil }
        return StorageChange(
            table: String(parts[2]), version: version, updatedAt: Timestamp(millisecondsSince1970: updatedAt))
    }

    /// Listens until the storage closes, reconnecting with a growing delay (100 ms to 2 s) and
    /// catching up after each reconnection. `announced` starts as the tables' state at opening.
    func listen(from start: [String: StorageChange]) async {
        var announced = start.mapValues(\.version)
        var delay: Duration = .milliseconds(100)
        let logger = logger
        while !Task.isCancelled {
            do {
                let connection = try await connect(id: 1, applicationName: "ferry-listener")
                delay = .milliseconds(100)
                do {
                    try await connection.listen(on: channel) { notifications in
                        for (name, change) in try await Self.sequences(connection, logger).sorted(by: {
                            $0.key < $1.key
                        })
                        where change.version > announced[name] ?? 0 {
                            announced[name] = change.version
                            announcements.publish(change)
                        }
                        for try await notification in notifications {
                            guard let change = Self.change(notification.payload) else { continue }
                            if change.version > announced[change.table] ?? 0 {
                                announced[change.table] = change.version
                            }
                            announcements.publish(change)
                        }
                    }
                } catch {
                    if !Task.isCancelled {
                        logger.warning(
                            "the change listener lost its connection; reconnecting",
                            metadata: ["ferry.error": "\(Self.mapped(error, "listening to", location).message)"])
                    }
                }
                try? await connection.close()
            } catch {
                if !Task.isCancelled {
                    logger.warning(
                        "the change listener cannot connect; retrying",
                        metadata: ["ferry.error": "\(Self.mapped(error, "listening to", location).message)"])
                }
            }
            if Task.isCancelled { break }
            try? await Task.sleep(for: delay)
            delay = min(delay * 2, .seconds(2))
        }
    }
}
