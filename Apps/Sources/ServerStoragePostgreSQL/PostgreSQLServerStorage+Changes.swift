import Logging
import PostgresNIO
import QuerySQL
import ServerStorageCore
import SyncCore
import Synchronization

/// The change stream on PostgreSQL: every write's statement calls `pg_notify` on the channel
/// `ferry_changes` with "version updatedAt table", which PostgreSQL delivers when (and only when)
/// the write commits, to every listening connection of every instance. Each storage keeps one
/// listening connection outside the pool. When that connection drops, notifications sent meanwhile
/// are lost to it, so after reconnecting it reads every table's sequence from `ferry_tables` and
/// announces the tables that moved past what it last announced: no change goes unannounced.
///
/// A listening connection can also go quiet without closing (a dead network path, or a driver that
/// lost a wake-up): every ``listenerCheckInterval`` the listener reads the sequences on the same
/// connection, bounded like every statement. That announces anything a notification missed, and a
/// check that fails or does not answer closes the connection, so the listener reconnects.
extension PostgreSQLServerStorage {
    /// How often the listener checks its connection and catches up from the sequences.
    static let listenerCheckInterval: Duration = .seconds(10)

    /// Every table's newest stamp.
    static func sequences(_ session: PostgreSQLSession) async throws -> [String: StorageChange] {
        var result: [String: StorageChange] = [:]
        for row in try await session.rows("SELECT name, last_version, last_updated_at FROM ferry_tables") {
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
        let announced = AnnouncedVersions(start.mapValues(\.version))
        var delay: Duration = .milliseconds(100)
        while !Task.isCancelled {
            do {
                let connection = try await connect(id: 1, applicationName: "ferry-listener")
                delay = .milliseconds(100)
                let session = session(connection)
                do {
                    try await connection.listen(on: channel) { notifications in
                        try await withThrowingTaskGroup(of: Void.self) { group in
                            group.addTask { try await self.checkListener(session, announced) }
                            for try await notification in notifications {
                                guard let change = Self.change(notification.payload) else { continue }
                                announced.raise(change.table, to: change.version)
                                self.announcements.publish(change)
                            }
                            group.cancelAll()
                        }
                    }
                } catch {
                    if !Task.isCancelled {
                        logOutage(
                            "the change listener lost its connection; reconnecting",
                            Self.mapped(error, "listening to", location).message)
                    }
                }
                try? await connection.close()
            } catch {
                if !Task.isCancelled {
                    logOutage(
                        "the change listener cannot connect; retrying",
                        Self.mapped(error, "listening to", location).message)
                }
            }
            if Task.isCancelled { break }
            try? await Task.sleep(for: delay)
            delay = min(delay * 2, .seconds(2))
        }
    }

    /// A line of an outage (``outageLines``): the first of its kind is a warning, its repeats are
    /// counted in one at most once a minute (each is a `debug` line).
    private func logOutage(_ message: String, _ reason: String) {
        switch outageLines.occurred(message) {
        case .log:
            logger.warning("\(message)", metadata: ["ferry.error": "\(reason)"])
        case .summary(let repeats, let over):
            logger.warning(
                "\(message) (\(repeats) more in the last \(over.components.seconds) s)",
                metadata: ["ferry.error": "\(reason)"])
        case .quiet:
            logger.debug("\(message)", metadata: ["ferry.error": "\(reason)"])
        }
    }

    /// Catches up from the sequences now and every ``listenerCheckInterval``; closes the
    /// connection (ending the listen) when a check fails. The first check that succeeds ends an
    /// outage, in one line.
    private func checkListener(_ session: PostgreSQLSession, _ announced: AnnouncedVersions) async throws {
        var first = true
        while true {
            do {
                for (name, change) in try await Self.sequences(session).sorted(by: { $0.key < $1.key })
                where announced.raise(name, to: change.version) {
                    announcements.publish(change)
                }
                if first, let outage = outageLines.ended() {
                    let seconds = outage.lasted.components.seconds
                    logger.notice(
                        "the change listener is connected again, \(seconds) s after the first failure (\(outage.lines) failures, repeats logged at most once a minute)"
                    )
                }
                first = false
            } catch is CancellationError {
                return
            } catch {
                try? await session.connection.close()
                throw error
            }
            try await Task.sleep(for: Self.listenerCheckInterval)
        }
    }
}

/// The newest version announced per table, shared by the listener's two tasks.
final class AnnouncedVersions: Sendable {
    private let versions: Mutex<[String: Int64]>

    init(_ start: [String: Int64]) { versions = Mutex(start) }

    /// Records `version` for `table`; whether it is newer than what was announced.
    @discardableResult
    func raise(_ table: String, to version: Int64) -> Bool {
        versions.withLock { versions in
            guard version > versions[table] ?? 0 else { return false }
            versions[table] = version
            return true
        }
    }
}
