import Foundation
import StoreSQLite
import SyncCore
import Transport

/// One device of the user: its own SQLite store, one context, and a network switch to go offline.
struct Device: Sendable {
    let name: String
    let context: SyncContext
    /// Stands in for the device's network (an app passes `NetworkPathConnectivity()` on Apple platforms).
    let network = ManualConnectivity(online: false)

    init(_ name: String, in directory: URL, server: URL, conflictHandler: some ConflictHandler) throws {
        self.name = name
        let store = try SQLiteStore(path: directory.appending(path: "\(name).sqlite").path)
        let remote = HTTPRemote(HTTPRemote.Configuration(serverURL: server, protocolVersion: .v3))
        context = SyncContext(store: store, remote: remote, conflictHandler: conflictHandler)
    }

    /// Syncs by itself from now on: pushes soon after each local write, pulls when the server's
    /// change feed says the table changed; nothing is sent while `network` is off.
    func startSyncing() async {
        await context.startAutomaticSync([SyncSubscription(table: Todo.tableName)], connectivity: network)
    }

    /// Waits until the status says "everything synced": online, nothing queued, nothing failed, and
    /// up to date with the server.
    func caughtUp(within limit: Duration = .seconds(20)) async throws {
        let context = context
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                for await status in context.status.updates() where status.isCaughtUp { return }
            }
            group.addTask { [name] in
                try await Task.sleep(for: limit)
                throw ExampleError("\(name) did not catch up in \(limit): \(context.status.snapshot.summary)")
            }
            try await group.next()
            group.cancelAll()
        }
    }
}

/// A failure of the example, printed as one line.
struct ExampleError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Throws when `condition` is false: the example checks what it shows.
func expect(_ condition: Bool, _ message: @autoclosure () -> String) throws {
    guard condition else { throw ExampleError(message()) }
}
