public import ArgumentParser
public import FerryClient
public import FerryConsole
import FerryServer
import Foundation
import SyncCore
import Synchronization

/// The client commands, shared by `ferry` and the REPL.
let deviceCommands: [any DeviceCommand.Type] = [
    InsertCommand.self, UpdateCommand.self, DeleteCommand.self, GetCommand.self, QueryCommand.self,
    PushCommand.self, PullCommand.self, PurgeCommand.self, StatusCommand.self, ConflictsCommand.self,
    ImportCommand.self,
]

/// The client commands that group device commands (`attachments add|list|get|rm`), shared too.
let commandGroups: [any ParsableCommand.Type] = [AttachmentsCommand.self]

/// The command tree the REPL parses each line with: the client commands, without `serve` or `repl`.
struct ReplCommands: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "", subcommands: deviceCommands.map { $0 as any ParsableCommand.Type } + commandGroups)
}

/// `ferry repl`: an exploratory sync session with several named devices.
///
/// ```
/// $ ferry repl --server http://127.0.0.1:8080
/// ferry(phone)> insert todo '{"title":"Milk"}'
/// ferry(phone)> use tablet
/// ferry(tablet)> pull todo
/// ```
public struct ReplCommand: AsyncParsableCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "repl", abstract: "An interactive sync session with named devices (scriptable from stdin).",
        discussion: """
            Type `help` inside. When stdin is not a terminal, commands are read line by line and echoed, \
            so a session can be scripted; the exit status is then 1 if any command failed.
            """)

    @Option(help: ArgumentHelp("The server's URL (default: $FERRY_SERVER).", valueName: "url"))
    var server: String?
    @Option(name: .customLong("protocol"), help: "The table protocol: 3 or 2.") var protocolVersion: Int = 3
    @Option(help: ArgumentHelp("A bearer token (default: $FERRY_TOKEN).", valueName: "token")) var token: String?
    @Option(help: "Where device stores live: a directory for sqlite stores, or memory.")
    var stores: String = "ferry-repl"
    @Option(help: "The conflict policy of new devices: keep, server, client or merge.") var conflicts: String = "keep"
    @Option(help: "The first device's name.") var device: String = "phone"

    public init() {}

    public func validate() throws {
        guard protocolVersion == 2 || protocolVersion == 3 else {
            throw ValidationError("--protocol must be 2 or 3, not \(protocolVersion)")
        }
    }

    public func run() async throws {
        var connection = ServerOptions()
        connection.server = server
        connection.protocolVersion = protocolVersion
        connection.token = token
        // Every option of a group made by hand must be set: reading one never parsed stops the process.
        connection.caFile = nil
        do {
            let session = try ReplSession(
                server: try connection.serverSettings(), policy: try ClientOptions.policy(conflicts), stores: stores,
                output: .standard(.table))
            try await session.use(device, store: nil)
            let failed = await session.run(editor: nil)
            if failed { throw ExitCode(1) }
        } catch let error as ExitCode {
            throw error
        } catch {
            throw CommandFailure.report(error)
        }
    }
}

/// The REPL's state: devices, the current one, and the loop.
public actor ReplSession {
    let server: ServerSettings?
    let policy: ConflictPolicy
    let stores: String
    let output: CommandOutput
    private(set) var devices: [String: Device] = [:]
    private(set) var current: String = ""
    private var tables: [String] = []
    /// The command running now, which Ctrl-C cancels.
    private let interrupter = Interrupter()

    public init(server: ServerSettings?, policy: ConflictPolicy, stores: String, output: CommandOutput) throws {
        self.server = server
        self.policy = policy
        self.stores = stores
        self.output = output
        if stores != "memory" {
            try FileManager.default.createDirectory(atPath: stores, withIntermediateDirectories: true)
        }
    }

    /// Switches to device `name`, creating it (with its own store) the first time.
    public func use(_ name: String, store: String?) async throws {
        guard !name.isEmpty, name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }) else {
            throw ClientError(.usage, "'\(name)' is not a device name", hint: "letters, digits, - and _")
        }
        if devices[name] == nil {
            let location =
                try store.map { text throws(ClientError) in try StoreLocation(parsing: text) }
                ?? (stores == "memory" ? .memory : .sqlite(stores + "/" + name + ".sqlite"))
            devices[name] = try Device(name: name, store: location, server: server, policy: policy)
        } else if store != nil {
            throw ClientError(.usage, "device '\(name)' exists already", hint: "use it without --store")
        }
        current = name
        await refreshTables()
    }

    /// Devices switched offline with `offline`.
    private var offline: Set<String> = []
    /// Colours for the prompt and errors, when stdout is a terminal that takes them.
    let style = Style.for(descriptor: 1)

    var prompt: String {
        offline.contains(current) ? "ferry(\(current), \(style.warning("offline")))> " : "ferry(\(current))> "
    }

    /// What the REPL says first: version, server, stores, and where to start.
    public func banner() -> String {
        let server =
            self.server.map {
                "server \($0.url.absoluteString) (protocol \($0.protocolVersion == .v2 ? "2.0.0" : "3.0.0"))"
            }
            ?? "no server (start with --server URL to sync)"
        let stores = self.stores == "memory" ? "stores in memory" : "stores in \(self.stores)/"
        return "Ferry \(ReferenceServer.version) · \(server) · \(stores)\n"
            + style.dim("Type `help` for the commands, Ctrl-D to leave.")
    }

    /// `$HOME/.ferry_history`.
    static var historyFile: String {
        let home = ProcessInfo.processInfo.environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
        return home + "/.ferry_history"
    }

    /// Reads and runs lines until the end of input; answers whether any command failed.
    public func run(editor: LineEditor?) async -> Bool {
        let names = commandNames
        let completionState = CompletionState()
        await completionState.update(commands: names, tables: tables, devices: knownDevices)
        let editor =
            editor
            ?? LineEditor(historyFile: Self.historyFile) { line, _ in
                completionState.candidates(for: line)
            }
        // While a command runs the terminal is out of raw mode, so Ctrl-C is SIGINT: it cancels the
        // command (a pull or push stops cleanly; its operations stay queued), not the REPL.
        var signals: (any DispatchSourceSignal)?
        if editor.isInteractive {
            signal(SIGINT, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
            let interrupter = self.interrupter
            source.setEventHandler { interrupter.cancel() }
            source.resume()
            signals = source
        }
        defer {
            signals?.cancel()
            if signals != nil { signal(SIGINT, SIG_DFL) }
        }
        if editor.isInteractive { output.print(banner()) }
        var failed = false
        while let line = await editor.line(prompt: prompt) {
            if !editor.isInteractive { output.print(prompt + line) }
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            let words = (try? ShellWords.split(trimmed)) ?? []
            if words.first == "exit" || words.first == "quit" { break }
            let task = Task { try await self.execute(trimmed) }
            interrupter.set(task)
            do {
                try await task.value
            } catch  where task.isCancelled {
                output.print(Self.cancelled(words.first ?? ""))
            } catch {
                failed = true
                let failure = ClientError.from(error)
                // A push that met conflicts printed them, with "see `conflicts`": the error only
                // carries the CLI's exit status 2, and repeating it here said the same thing twice.
                if failure.code != .conflicts {
                    // Hints name CLI commands (`ferry query todo --top 1`); here they are typed without `ferry`.
                    let report = failure.report.dropFirst("error:".count).replacingOccurrences(of: "`ferry ", with: "`")
                    output.print(style.error("error:") + report)
                }
            }
            interrupter.set(nil)
            await completionState.update(commands: names, tables: tables, devices: knownDevices)
        }
        for device in devices.values { try? await device.close() }
        return failed && !editor.isInteractive
    }

    /// What a command cancelled by Ctrl-C leaves behind.
    static func cancelled(_ command: String) -> String {
        switch command {
        case "push": "cancelled (what was not sent stays queued; `status` shows it)"
        case "pull": "cancelled (the items pulled so far are kept; with --query-id the next pull goes on from there)"
        default: "cancelled"
        }
    }

    /// Cancels the command running now, as Ctrl-C does.
    public nonisolated func interrupt() { interrupter.cancel() }

    /// Runs one line.
    public func execute(_ line: String) async throws {
        let words = try ShellWords.split(line)
        guard let first = words.first else { return }
        let rest = Array(words.dropFirst())
        // `insert --help` is `help insert` (it said "unknown command 'insert'").
        if first != "help", let flag = words.firstIndex(where: { $0 == "--help" || $0 == "-h" }) {
            output.print(try help(Array(words[..<min(flag, 2)])))
            return
        }
        switch first {
        case "help":
            output.print(try help(rest))
        case "use":
            guard let name = rest.first else { throw ClientError(.usage, "use which device?", hint: "use NAME") }
            var store: String?
            if rest.count == 3, rest[1] == "--store" {
                store = rest[2]
            } else if rest.count != 1 {
                throw ClientError(.usage, "use NAME [--store sqlite:PATH|lmdb:PATH|memory]")
            }
            try await use(name, store: store)
            output.print("using \(name)")
        case "devices", "offline", "online", "restart":
            guard rest.isEmpty else {
                throw ClientError(
                    .usage, "\(first) takes no arguments, not '\(rest.joined(separator: " "))'", hint: "`help \(first)`"
                )
            }
            try await runWithoutArguments(first)
        case "auto":
            try await auto(rest)
        default:
            try await runDeviceCommand(words)
        }
    }

    /// `devices`, `offline`, `online`, `restart`.
    private func runWithoutArguments(_ command: String) async throws {
        switch command {
        case "devices":
            var rows: [[String]] = []
            for (name, device) in devices.sorted(by: { $0.key < $1.key }) {
                let status = try await device.status()
                rows.append([
                    name == current ? "* " + name : "  " + name, status.store, status.online ? "online" : "offline",
                    Rendering.grouped(status.operations.count), Rendering.grouped(status.errors.count),
                ])
            }
            let closed = Self.storedDevices(in: stores).filter { devices[$0] == nil }
            if !closed.isEmpty {
                rows += closed.map { ["  " + $0, "sqlite:\(stores)/\($0).sqlite", "not opened", "", ""] }
            }
            output.print(
                TextTable.render(
                    headers: ["device", "store", "network", "queued", "errors"], rows: rows,
                    totalWidth: output.remeasured().terminalWidth))
        case "offline", "online":
            try await currentDevice().setOnline(command == "online")
            if command == "online" { offline.remove(current) } else { offline.insert(current) }
            output.print("\(current) is \(command)")
        default:  // restart
            // An app restarted starts its automatic sync again: so does the device.
            let device = try currentDevice()
            guard await device.location != .memory else {
                // Reopened, a memory store is a new empty one: the restart would show data lost.
                throw ClientError(
                    .usage, "\(current) keeps its store in memory, which a restart would empty",
                    hint: "a device on a file survives it: use NAME --store sqlite:PATH")
            }
            let automatic = await device.automaticTables
            try await device.restart()
            if let automatic {
                try await device.startAutomaticSync(automatic)
                output.print(
                    "\(current) restarted (store closed and reopened); it syncs \(automatic.joined(separator: ", ")) by itself again"
                )
            } else {
                output.print("\(current) restarted (store closed and reopened)")
            }
        }
    }

    /// The devices of earlier sessions: the stores in the stores directory.
    static func storedDevices(in stores: String) -> [String] {
        guard stores != "memory", let files = try? FileManager.default.contentsOfDirectory(atPath: stores) else {
            return []
        }
        return files.filter { $0.hasSuffix(".sqlite") }.map { String($0.dropLast(".sqlite".count)) }.sorted()
    }

    /// `auto`, `auto on [TABLE…]`, `auto off`.
    private func auto(_ rest: [String]) async throws {
        let device = try currentDevice()
        switch rest.first {
        case nil:
            let tables = await device.automaticTables
            let summary = await device.syncStatus.summary
            output.print(
                tables.map { "\(current) syncs \($0.joined(separator: ", ")) by itself: \(summary)" }
                    ?? "\(current) syncs only when asked (auto on [TABLE…] starts automatic sync)")
        case "on":
            var tables: [String] = []
            for table in rest.dropFirst() where !tables.contains(table) { tables.append(table) }
            if tables.isEmpty { tables = try await device.tableNames() }
            guard !tables.isEmpty else {
                throw ClientError(.usage, "which tables?", hint: "auto on TABLE [TABLE…]")
            }
            try await device.startAutomaticSync(tables)
            await holdBackLogsWhileSyncing()
            output.print(
                "\(current) now syncs \(tables.joined(separator: ", ")) by itself (`auto` says how it goes)")
        case "off":
            await device.stopAutomaticSync()
            await holdBackLogsWhileSyncing()
            output.print("\(current) syncs only when asked")
        default:
            throw ClientError(.usage, "auto on [TABLE…] | auto off | auto")
        }
    }

    /// A device command (`insert`, `pull`, …), parsed as the CLI's.
    private func runDeviceCommand(_ words: [String]) async throws {
        let first = words[0]
        let parsed: any ParsableCommand
        guard commandNames.contains(first) else {
            throw ClientError(
                .usage, "unknown command '\(first)'",
                hint: ReplHelp.cliOnly[first] ?? Suggestion.hint(for: first, among: commandNames))
        }
        do {
            parsed = try ReplCommands.parseAsRoot(words)
        } catch {
            let message = ReplCommands.message(for: error).split(whereSeparator: \.isNewline).first ?? ""
            throw ClientError(
                .usage, message.prefix(1).lowercased() + message.dropFirst(),
                hint: "`help \(first)` shows its options")
        }
        guard let command = parsed as? any DeviceCommand else {
            if let group = commandGroups.first(where: { $0.configuration.commandName == first }) {
                let actions = group.configuration.subcommands.compactMap { $0.configuration.commandName }
                throw ClientError(
                    .usage, "\(first) what?", hint: "\(first) \(actions.joined(separator: "|")); `help \(first)`")
            }
            throw ClientError(.usage, "unknown command '\(first)'", hint: "`help` lists the commands")
        }
        if command.client.namesADevice {
            throw ClientError(
                .usage, "--store, --server and --token name a device here",
                hint: "use `use NAME --store …`, or start the REPL with --server")
        }
        let format = command.client.outputFormat
        // The terminal is measured for each command: a resize between commands is followed.
        var commandOutput = output.remeasured()
        commandOutput.format = format
        // Progress goes to stderr, drawn and cleared while the command runs (the line editor is
        // idle then), when stderr is a terminal, as in the CLI.
        commandOutput.showsProgress = format == .table && isatty(2) == 1
        commandOutput.readsStandardInput = false
        try await command.execute(on: try currentDevice(), output: commandOutput)
        await refreshTables()
    }

    /// On a terminal, library warnings of automatic sync (one a second while the server is away)
    /// would land in the middle of the prompt: while a device syncs by itself they are held back,
    /// and `auto` says how the sync goes. Piped sessions keep every line.
    private func holdBackLogsWhileSyncing() async {
        guard isatty(0) == 1, isatty(2) == 1 else { return }
        var syncing = false
        for device in devices.values where await device.automaticTables != nil { syncing = true }
        TerminalView.holdsBackLogs = syncing
    }

    func currentDevice() throws -> Device {
        guard let device = devices[current] else { throw ClientError(.notFound, "no device in use") }
        return device
    }

    /// The devices of this session and those whose stores earlier sessions left.
    private var knownDevices: [String] { Array(Set(devices.keys).union(Self.storedDevices(in: stores))).sorted() }

    private func refreshTables() async {
        tables = (try? await devices[current]?.tableNames()) ?? tables
    }

    /// The REPL's own commands, beside the device commands.
    static let replCommandNames = ReplHelp.replCommands.flatMap(\.names)

    var commandNames: [String] {
        Self.replCommandNames
            + (deviceCommands.map { $0 as any ParsableCommand.Type } + commandGroups)
            .compactMap { $0.configuration.commandName }
    }

    /// `help`, `help COMMAND` or `help attachments add`.
    func help(_ words: [String]) throws(ClientError) -> String {
        let topic = words.first
        let commands = deviceCommands.map { $0 as any ParsableCommand.Type } + commandGroups
        if let topic, var command = commands.first(where: { $0.configuration.commandName == topic }) {
            // `query todo --help`: the words after a command without actions are its arguments.
            if words.count > 1, !command.configuration.subcommands.isEmpty {
                guard
                    let action = command.configuration.subcommands.first(where: {
                        $0.configuration.commandName == words[1]
                    })
                else {
                    throw ClientError(.usage, "no command '\(words.joined(separator: " "))'", hint: "`help \(topic)`")
                }
                command = action
            }
            return ReplHelp.forREPL(
                ReplCommands.helpMessage(for: command).trimmingCharacters(in: .whitespacesAndNewlines))
        }
        if let topic, let entry = ReplHelp.replCommands.first(where: { $0.names.contains(topic) }) {
            return "usage: \(entry.usage)\n\n\(entry.what)"
        }
        if let topic {
            throw ClientError(
                .usage, "no command '\(topic)'",
                hint: ReplHelp.cliOnly[topic] ?? Suggestion.hint(for: topic, among: commandNames))
        }
        var rows = deviceCommands.map { [$0.configuration.commandName ?? "", $0.configuration.abstract] }
        rows += commandGroups.map { group in
            let actions = group.configuration.subcommands.compactMap { $0.configuration.commandName }
            return [
                "\(group.configuration.commandName ?? "") \(actions.joined(separator: "|"))",
                group.configuration.abstract,
            ]
        }
        rows += ReplHelp.replCommands.map { [$0.usage, $0.summary] }
        return TextTable.render(
            headers: ["command", "what it does"], rows: rows, maximumWidth: 80,
            totalWidth: output.remeasured().terminalWidth)
    }
}

/// The task of the command running now, for Ctrl-C.
final class Interrupter: Sendable {
    private let task = Mutex<Task<Void, any Error>?>(nil)

    func set(_ running: Task<Void, any Error>?) { task.withLock { $0 = running } }
    func cancel() { task.withLock { $0?.cancel() } }
}
