public import ArgumentParser
import FerryClient
import FerryServer
import FerryConsole
import Foundation
import Logging
public import SyncCore
import Transport

/// `ferry demo`: the offline-to-online story with two devices against an embedded server.
///
/// ```
/// $ ferry demo
/// ```
public struct DemoCommand: AsyncParsableCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Walk through offline edits, a restart, sync, and a conflict, against an embedded server.",
        discussion: """
            Starts the reference server on SQLite (in a temporary directory, on a free loopback port), two \
            devices ("phone" and "tablet") with their own SQLite stores, and prints each step. Leaves nothing \
            behind unless --keep is given.
            """)

    @Option(name: .customLong("protocol"), help: "The table protocol: 3 or 2.") var protocolVersion: Int = 3
    @Flag(help: "Keep the temporary directory (server and device stores) and print where it is.") var keep = false

    public init() {}

    public func validate() throws {
        guard protocolVersion == 2 || protocolVersion == 3 else {
            throw ValidationError("--protocol must be 2 or 3, not \(protocolVersion)")
        }
    }

    public func run() async throws {
        do {
            try await Self.walkThrough(protocolVersion: protocolVersion == 2 ? .v2 : .v3, keep: keep) { line in
                StandardStreams.write(line + "\n")
            }
        } catch {
            throw CommandFailure.report(error)
        }
    }

    /// The walk-through, printing through `say`; tests run it in-process.
    public static func walkThrough(
        protocolVersion: ProtocolVersion, keep: Bool = false, say: @escaping @Sendable (String) -> Void
    ) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-demo-" + UUID().uuidString)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        // A reader that goes away mid-demo (`ferry demo | head -1`) ends the process: remove the
        // directory then too.
        let cleanup = StandardStreams.addCleanup {
            if !keep { try? FileManager.default.removeItem(at: directory) }
        }
        defer {
            StandardStreams.removeCleanup(cleanup)
            if keep { say("\nkept \(directory.path)") } else { try? FileManager.default.removeItem(at: directory) }
        }
        var step = 0
        func heading(_ text: String) {
            step += 1
            say("\n\(step). \(text)")
        }

        var logger = Logger(label: "ferry.demo")
        logger.logLevel = .warning
        var configuration = ServerConfiguration(host: "127.0.0.1", port: 0, logger: logger)
        configuration.dynamicTableDefaults.softDelete = true
        let database = ServerDatabase.sqlite(path: directory.appendingPathComponent("server.sqlite").path)
        let server = try await ReferenceServer.start(
            configuration, storage: try await database.open(logger: logger), ownsStorage: true)
        do {
            let settings = ServerSettings(url: URL(string: server.url)!, protocolVersion: protocolVersion)
            let online = HTTPRemote(HTTPRemote.Configuration(serverURL: settings.url, protocolVersion: protocolVersion))
                .onlineTable("todo")
            /// The server's todos (a table nobody has written to yet is empty).
            let serverTodos: @Sendable () async throws -> [JSONObject] = {
                try await online.all(TableQuery().orderBy("title"))
            }
            let protocolName = protocolVersion == .v2 ? "2.0.0" : "3.0.0"
            say("Ferry demo: a server on \(server.url) (SQLite, table protocol \(protocolName)), two devices.")

            heading("The phone is offline. Add three todos: they are saved locally and queued.")
            let phoneStore = StoreLocation.sqlite(directory.appendingPathComponent("phone.sqlite").path)
            var phone = try Device(name: "phone", store: phoneStore, server: settings)
            await phone.setOnline(false)
            var milk: JSONObject = [:]
            for (index, title) in ["Milk", "Bread", "Call mum"].enumerated() {
                let fields: JSONObject = ["title": .string(title), "done": false]
                let item = try await phone.insert("todo", fields)
                if index == 0 { milk = item }
            }
            say(Rendering.items(try await phone.query("todo", TableQuery().orderBy("title")).items, format: .table))
            let attempt = await Result(catching: { try await phone.push() })
            if case .failure(let error) = attempt { say("push while offline: \(ClientError.from(error).message)") }
            say(Rendering.status(try await phone.status(), format: .table))

            heading("Restart the phone app: close the store and open it again. Nothing is lost.")
            try await phone.close()
            phone = try Device(name: "phone", store: phoneStore, server: settings)
            await phone.setOnline(false)
            let pending = try await phone.status().operations.count
            say(
                "after the restart: \(pending) queued operations; the server has \(try await serverTodos().count) todos"
            )

            heading("The phone comes online and syncs.")
            await phone.setOnline(true)
            say(Rendering.push(try await phone.push(), format: .table))
            say("the server now has \(try await serverTodos().count) todos")

            heading("A second device, the tablet, pulls them.")
            let tablet = try Device(
                name: "tablet", store: .sqlite(directory.appendingPathComponent("tablet.sqlite").path), server: settings
            )
            say(
                Rendering.pull(
                    try await tablet.pull("todo", query: TableQuery(), queryID: "all", pageSize: 50), table: "todo",
                    format: .table))
            say(Rendering.items(try await tablet.query("todo", TableQuery().orderBy("title")).items, format: .table))

            heading("Both devices edit \"Milk\". The tablet syncs first.")
            let milkID = milk.id ?? ""
            _ = try await tablet.update("todo", id: milkID, changes: ["title": "Oat milk"])
            say("tablet: " + Rendering.push(try await tablet.push(), format: .table))
            _ = try await phone.update("todo", id: milkID, changes: ["title": "Milk, 2 litres", "done": true])
            let conflicted = try await phone.push()
            say("phone: " + Rendering.push(conflicted, format: .table))

            heading("Resolve the conflict on the phone: merge both edits and send them (keep mine, with a new item).")
            guard let error = try await phone.conflicts().first, let serverItem = error.serverItem else {
                say("(no conflict: the server accepted the phone's edit)")
                try await server.shutdown()
                return
            }
            // What each device changed: the base the phone started from, its edit, the tablet's.
            say(Rendering.conflict(error, base: try await phone.conflictBases()[error.operationID]))
            var merged = serverItem
            merged["title"] = "Oat milk, 2 litres"
            merged["done"] = true
            try await phone.resolve(error.id, ErrorResolution.useMerged(merged))
            say(Rendering.push(try await phone.push(), format: .table))

            heading("Both devices pull; they agree with the server.")
            _ = try await phone.pull("todo", query: TableQuery(), queryID: "all", pageSize: 50)
            _ = try await tablet.pull("todo", query: TableQuery(), queryID: "all", pageSize: 50)
            let onPhone = try await phone.query("todo", TableQuery().orderBy("title")).items
            let onTablet = try await tablet.query("todo", TableQuery().orderBy("title")).items
            say(Rendering.items(onTablet, format: .table))
            let serverItems = try await serverTodos()
            let same = onPhone == onTablet && onPhone.map(\.id) == serverItems.map(\.id)
            say(same ? "phone, tablet and server hold the same \(onPhone.count) todos." : "the devices differ!")
            try await phone.close()
            try await tablet.close()
        } catch {
            try? await server.shutdown()
            throw error
        }
        try await server.shutdown()
        say(
            "\nDone. Try it yourself: `ferry serve` in one terminal, `ferry repl --server http://127.0.0.1:8080` in another."
        )
    }
}

extension Result where Failure == any Error {
    init(catching body: () async throws -> Success) async {
        do {
            self = .success(try await body())
        } catch {
            self = .failure(error)
        }
    }
}
