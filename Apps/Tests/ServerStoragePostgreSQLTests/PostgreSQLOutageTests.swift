import Foundation
import ServerStorageCore
import ServerStoragePostgreSQL
import ServerTestSupport
import Synchronization
import SyncCore
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The operator probe: with PostgreSQL unreachable, requests waited `connectionWait` and failed
/// `busy` (503 `busy`, `Retry-After: 1`, counted as a wait timeout), as if the pool were exhausted:
/// postgres-nio's pool retries a connection it cannot open and never fails the waiting request.
/// A wait that times out with room in the pool and no lease since it began is `unavailable`.
@Suite(
    "PostgreSQLServerStorage while the database is unreachable",
    .enabled(if: TestPostgreSQL.isAvailable, TestPostgreSQL.skipReason),
    .timeLimit(.minutes(2)))
struct PostgreSQLOutageTests {
    /// A relay to the test server that can stop: then it refuses new connections and resets its
    /// own, as a database that went away does.
    final class Relay: Sendable {
        let listener: LoopbackListener
        private let sockets = Sockets()

        /// The relay's open sockets, both ends of each connection.
        final class Sockets: Sendable {
            let list = Mutex<Set<Int32>>([])
        }

        init(to target: Int) throws {
            listener = try LoopbackListener()
            let sockets = sockets
            listener.start { client in
                guard let upstream = LoopbackSockets.connect(port: target) else {
                    close(client)
                    return
                }
                sockets.list.withLock { $0.formUnion([client, upstream]) }
                let answered = DispatchSemaphore(value: 0)
                Thread.detachNewThread {
                    Self.pipe(from: upstream, to: client)
                    answered.signal()
                }
                Self.pipe(from: client, to: upstream)
                answered.wait()
                // Closed once both directions ended, and forgotten first, so that cut() never
                // touches a descriptor number the process has reused.
                sockets.list.withLock { $0.subtract([client, upstream]) }
                LoopbackSockets.reset(client)
                LoopbackSockets.reset(upstream)
            }
        }

        private static func pipe(from source: Int32, to target: Int32) {
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while true {
                let count = read(source, &buffer, buffer.count)
                if count <= 0 || !LoopbackSockets.writeAll(target, buffer[0..<count]) { break }
            }
            shutdown(source, Int32(SHUT_RDWR))
            shutdown(target, Int32(SHUT_RDWR))
        }

        /// The database goes away: no new connection, and the open ones end (then reset).
        func cut() {
            listener.stop()
            sockets.list.withLock { list in
                for socket in list { shutdown(socket, Int32(SHUT_RDWR)) }
            }
        }
    }

    @Test func aWaitForAConnectionThatCannotBeOpenedIsUnavailableNotBusy() async throws {
        let schema = await TestPostgreSQL.freshSchema()
        defer { Task { await TestPostgreSQL.drop(schema: schema) } }
        var url = try #require(TestPostgreSQL.url)
        let relay = try Relay(to: url.port)
        url.host = "127.0.0.1"
        url.port = relay.listener.port
        let storage = try await PostgreSQLServerStorage.open(
            url,
            configuration: .init(
                maximumConnections: 4, connectionWait: .milliseconds(500), statementTimeout: .seconds(5),
                schema: schema))
        let table = StorageTable(name: "outage")
        // The pool opens its first connection on demand: on a loaded machine that can take longer
        // than the wait, so the first write is tried until it goes through.
        var written = false
        for _ in 0..<40 where !written {
            do {
                _ = try await storage.insert(into: table, id: "a", content: [:], owner: nil)
                written = true
            } catch let error as StorageError where error.code == .busy || error.code == .unavailable {
                try await Task.sleep(for: .milliseconds(250))
            }
        }
        try #require(written, "the pool never opened a connection through the relay")

        relay.cut()
        var failures: [StorageError] = []
        // Until a read waited for a connection (one on a cut connection fails at once).
        let waited = { (error: StorageError) in error.message.hasPrefix("no database connection could be opened") }
        for _ in 0..<40 where !failures.contains(where: waited) {
            do {
                _ = try await storage.item(in: table, id: "a", owner: .all)
                Issue.record("a read succeeded with the database cut off")
            } catch let error as StorageError {
                failures.append(error)
                // A connection the pool has not seen close yet fails at once: give it a moment.
                if !waited(error) { try await Task.sleep(for: .milliseconds(100)) }
            }
        }
        // A request on a connection that was cut may fail at once; the others wait, and each is
        // `unavailable`, never `busy`: the pool had room and could open nothing.
        #expect(failures.allSatisfy { $0.code == .unavailable }, "\(failures.map { "\($0.code): \($0.message)" })")
        #expect(failures.contains(where: waited), "\(failures.map(\.message))")
        try await storage.close()
    }
}
