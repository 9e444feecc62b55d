public import ArgumentParser
public import FerryClient
import FerryConsole
import Foundation
import SyncCore
import Synchronization

/// `ferry watch TABLE [--filter …]`: a live view of a table.
public struct WatchCommand: DeviceCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "watch",
        abstract: "Show a table live: it is redrawn whenever its rows change, here or on other devices.",
        discussion: """
            With a server, the device syncs the table by itself meanwhile: it pushes local changes and
            pulls when the server's change feed says the table changed (every 10 s against a server
            without one). Without one it shows the store as it is. Writes by other processes on the
            same store (another ferry command, an app) show within a second.
            Ctrl-C stops. On a terminal the view is redrawn in place; otherwise each new result is
            printed after the last (with --json, one JSON array per line).
              ferry watch todo --server http://127.0.0.1:8080
              ferry watch todo --filter "done eq false" --top 20
            """)
    @OptionGroup public var client: ClientOptions
    @Argument(help: "The table.") var table: String
    @Option(help: "An OData $filter, e.g. \"done eq false\".") var filter: String?
    @Option(parsing: .unconditional, help: "The most rows shown.") var top: Int = 50
    @Option(help: "Only these fields, comma-separated, in this order.") var select: String?
    @Option(parsing: .unconditional, help: "Stop after this many seconds (default: until Ctrl-C).") var seconds: Double?
    public init() {}

    /// Without a server there is nothing to show in a new store (a mistyped `--store`); with one,
    /// the first sync fills it, as `pull` does.
    public var needsExistingStore: Bool {
        do { return try client.serverSettings() == nil } catch { return false }
    }

    public func execute(on device: Device, output: CommandOutput) async throws {
        guard top >= 1 else { throw ClientError(.usage, "--top must be at least 1") }
        // `--seconds 0` (or less, or nan) ended the view before it showed anything, with status 0.
        if let seconds, !(seconds > 0) {
            throw ClientError(.usage, "--seconds must be more than 0 (leave it out to watch until Ctrl-C)")
        }
        let query = try makeQuery(filter: filter, top: top, select: select)
        let columns = select.map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } }
        let server = await device.server?.url.absoluteString
        // Without a server nothing will fill a table the store does not have (a mistyped name).
        if server == nil {
            try await QueryCommand.requireTable(table, on: device)
            // A selected field no item has showed as an empty column: said, as `query` says it
            // (in a table that has items: an empty one has no fields to name).
            if let columns, try await !device.query(table, try makeQuery(filter: nil, top: 1)).items.isEmpty {
                try await QueryCommand.requireFields(Set(columns), of: table, on: device)
            }
        }
        if server != nil { try await device.startAutomaticSync([table]) }
        let stream = await device.observe(table, query: query)
        let redraws = output.format == .table && isatty(1) == 1
        // Library warnings would land in the middle of a view drawn on the same terminal; with a
        // server, the view's status line says what automatic sync's warnings would say ("server
        // unreachable: …"), so a piped view's standard error does not repeat it every reconnection.
        let holdsLogs = (redraws && isatty(2) == 1) || server != nil
        if holdsLogs { TerminalView.holdsBackLogs = true }
        defer { if holdsLogs { TerminalView.holdsBackLogs = false } }
        let table = table
        let statuses = await device.syncStatusUpdates()
        let view = WatchView(
            table: table, place: server.map { "on \($0)" } ?? "on this device (no server)", output: output,
            redraws: redraws, columns: columns, waitsForFirstSync: server != nil)
        // The view is drawn again when the rows change, and (on a terminal) when the sync's status
        // does: a server that goes away shows at once, not at the next change of the rows.
        let watching = Task {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for try await items in stream {
                        // The status line counts the queue as automatic sync last did, which a
                        // local write's rows can come before: a new unsent row showed under
                        // "everything synced". The rows go with the queue counted after them.
                        view.show(items: items, queued: try? await device.queuedOperationCount())
                    }
                }
                group.addTask {
                    for await status in statuses {
                        guard view.show(status: status) else { continue }
                        // The first sync just ended: the rows are read again for its view (the
                        // observation's next rows could come after the status, and `[]` or
                        // "0 rows; everything synced" showed first). A store without the table
                        // (the sync failed) shows what the observation gave.
                        view.show(items: try? await device.query(table, query).items, afterFirstSync: true)
                    }
                }
                try await group.next()
                group.cancelAll()
            }
        }
        // Ctrl-C (and a deadline) end the view; the sync stops at a safe point and the store closes.
        signal(SIGINT, SIG_IGN)
        let interrupt = DispatchSource.makeSignalSource(signal: SIGINT)
        interrupt.setEventHandler { watching.cancel() }
        interrupt.resume()
        defer {
            interrupt.cancel()
            signal(SIGINT, SIG_DFL)
        }
        if let seconds {
            Task {
                try? await Task.sleep(for: .milliseconds(Int(seconds * 1000)))
                watching.cancel()
            }
        }
        // The caller's cancellation (a test, the REPL) ends the view too.
        let result = await withTaskCancellationHandler {
            await watching.result
        } onCancel: {
            watching.cancel()
        }
        if server != nil { await device.stopAutomaticSync() }
        if case .failure(let error) = result, !(error is CancellationError) {
            throw ClientError.from(error)
        }
    }
}

/// What `watch` shows: the newest rows and status, drawn again when either changes.
final class WatchView: Sendable {
    private let table: String
    /// "on URL", or where the rows are when there is no server.
    private let place: String
    private let output: CommandOutput
    private let redraws: Bool
    /// `--select`'s fields, in order.
    private let columns: [String]?
    private struct State {
        var items: [JSONObject]?
        var status: SyncStatus.Snapshot?
        /// With a server, JSON waits for the first sync: the store's rows before it are not the
        /// table (a new store printed `[]`).
        var synced: Bool
        /// The rows printed last as JSON, not printed twice in a row.
        var printed: [JSONObject]?
        /// The first sync ended, and its rows are being read: nothing is shown until they are.
        var readingAfterFirstSync = false
    }
    private let state: Mutex<State>
    /// Whether the view's rows sync with a server (their status line then speaks of the queue).
    private let syncs: Bool

    init(
        table: String, place: String, output: CommandOutput, redraws: Bool, columns: [String]? = nil,
        waitsForFirstSync: Bool = false
    ) {
        self.table = table
        self.place = place
        self.output = output
        self.redraws = redraws
        self.columns = columns
        state = Mutex(State(synced: !waitsForFirstSync))
        syncs = waitsForFirstSync
    }

    /// Whether `items` are older than the queue `status` counts: an empty queue, and a row the
    /// server never stamped. The push that emptied the queue stamped it, and the rows saying so
    /// are on their way: drawn now, the row showed unsent under "everything synced".
    private func lagsTheQueue(_ items: [JSONObject], _ status: SyncStatus.Snapshot?) -> Bool {
        guard syncs, let status, status.pendingOperations == 0 else { return false }
        return items.contains { $0["version"] == nil }
    }

    // Rows and status come from two tasks: each view is decided and written under the state's
    // lock, so views leave in the order of the changes (two written at once could end with the
    // older one, and a stale last view).

    /// Shows the rows; `afterFirstSync`: those read once the first sync ended (`nil`: the
    /// observation's last); `queued`: the operations queued, counted after the rows were read.
    func show(items: [JSONObject]?, afterFirstSync: Bool = false, queued: Int? = nil) {
        state.withLock { state in
            if let items { state.items = items }
            if let queued { state.status?.pendingOperations = queued }
            if afterFirstSync { state.readingAfterFirstSync = false }
            guard !state.readingAfterFirstSync, let items = state.items else { return }
            switch output.format {
            case .json, .jsonLines: printJSON(&state)
            case .table, .csv: if !lagsTheQueue(items, state.status) { draw(items, state.status) }
            }
        }
    }

    /// Shows the status; answers whether it ends the first sync (the caller then reads the rows
    /// again and shows them with `afterFirstSync`, and nothing is shown until then).
    func show(status: SyncStatus.Snapshot) -> Bool {
        state.withLock { state in
            let changed = state.status?.summary != status.summary
            state.status = status
            // The first sync is over once it caught up, pulled the table (a feed that never says
            // it is ready held the pulled rows back), or failed (then the local rows are all there
            // is to show).
            if !state.synced,
                status.isCaughtUp || status.lastSyncedAt != nil || status.downloadProblem != nil
                    || status.uploadProblem != nil || !status.isOnline
            {
                state.synced = true
                state.readingAfterFirstSync = true
                return true
            }
            if state.readingAfterFirstSync { return false }
            switch output.format {
            case .json, .jsonLines:
                printJSON(&state)
            case .table, .csv:
                // A table is drawn again with the new status line.
                guard let items = state.items, changed, !lagsTheQueue(items, status) else { return false }
                draw(items, status)
            }
            return false
        }
    }

    /// Prints the rows as one JSON array per line, once the first sync is over, never the same
    /// rows twice in a row.
    private func printJSON(_ state: inout State) {
        guard state.synced, let items = state.items, items != state.printed else { return }
        state.printed = items
        output.print(JSONValue.array(items.map(JSONValue.object)).serialized())
    }

    private func draw(_ items: [JSONObject], _ status: SyncStatus.Snapshot?) {
        let rows = Rendering.items(items, format: output.format, columns: columns, width: output.terminalWidth)
        let header =
            "\(table) \(place): \(items.count) row\(items.count == 1 ? "" : "s"); \(status?.summary ?? "starting")"
        // Clear the screen and draw from the top, or print after the last view.
        output.write(redraws ? "\u{1B}[H\u{1B}[2J" + header + "\n" + rows + "\n" : header + "\n" + rows + "\n\n")
    }
}
