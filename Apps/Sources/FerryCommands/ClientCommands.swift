public import ArgumentParser
public import FerryClient
import FerryConsole
import Foundation
import SyncCore

/// Which server, with which protocol and token: shared by the client commands and `ferry remote`.
public struct ServerOptions: ParsableArguments, Sendable {
    @Option(help: ArgumentHelp("The server's URL (default: $FERRY_SERVER).", valueName: "url"))
    var server: String?

    @Option(
        name: .customLong("protocol"), help: "The table protocol: 3 (Datasync 3.0.0) or 2 (Azure Mobile Apps 2.0.0).")
    var protocolVersion: Int = 3

    @Option(help: ArgumentHelp("A bearer token for the server (default: $FERRY_TOKEN).", valueName: "token"))
    var token: String?

    public init() {}

    /// The server the options (or `$FERRY_SERVER`, `$FERRY_TOKEN`) name, or `nil` for none.
    func serverSettings() throws(ClientError) -> ServerSettings? {
        let environment = ProcessInfo.processInfo.environment
        guard let text = server ?? environment["FERRY_SERVER"], !text.isEmpty else { return nil }
        guard let url = URL(string: text), url.scheme == "http" || url.scheme == "https", url.host != nil else {
            throw ClientError(.usage, "'\(text)' is not a server URL", hint: "for example http://127.0.0.1:8080")
        }
        let version: ProtocolVersion
        switch protocolVersion {
        case 2: version = .v2
        case 3: version = .v3
        default: throw ClientError(.usage, "--protocol must be 2 or 3, not \(protocolVersion)")
        }
        return ServerSettings(url: url, protocolVersion: version, token: token ?? environment["FERRY_TOKEN"])
    }
}

/// How a command prints: `--json`, or `--format table|json|csv|jsonl`.
public struct OutputOptions: ParsableArguments, Sendable {
    @Flag(help: "Print results as JSON, for scripts (the same as --format json).")
    var json = false

    @Option(
        help: ArgumentHelp(
            "table, json, csv or jsonl (one item per line); csv and jsonl shape lists of items.", valueName: "format"))
    var format: OutputFormat = .table

    public init() {}

    var outputFormat: OutputFormat { json ? .json : format }
}

/// The query options of `query` and `remote query`.
public struct QueryOptions: ParsableArguments, Sendable {
    @Option(help: "An OData $filter (3.0 syntax).") var filter: String?
    @Option(help: "An OData $orderby, for example \"year desc,title\".") var orderby: String?
    @Option(help: "At most this many items.") var top: Int?
    @Option(help: "Skip this many items first.") var skip: Int?
    @Option(help: "Only these fields, comma-separated.") var select: String?
    @Flag(help: "Include items marked deleted.") var includeDeleted = false
    @Flag(name: [.customShort("x"), .long], help: "One block per item, a field per line (for wide items).")
    var expanded = false

    public init() {}
}

/// The options every client command shares: which store, which server, how to print.
///
/// ```
/// ferry status --store sqlite:phone.ferry
/// ferry push --store sqlite:phone.ferry --server http://127.0.0.1:8080 --protocol 2 --token "$TOKEN"
/// ```
public struct ClientOptions: ParsableArguments, Sendable {
    @Option(help: ArgumentHelp("The local store: sqlite:PATH, lmdb:PATH or memory.", valueName: "store"))
    var store: String = "sqlite:ferry-client.sqlite"

    @OptionGroup var connection: ServerOptions

    @Option(help: "What a push does with a conflict: fail (keep it in `conflicts`), server, client or merge.")
    var conflicts: String = "fail"

    @OptionGroup var output: OutputOptions

    public init() {}

    var json: Bool { output.json }
    var outputFormat: OutputFormat { output.outputFormat }

    /// Whether store or server options were given (the REPL refuses them per command).
    var namesADevice: Bool {
        store != "sqlite:ferry-client.sqlite" || connection.server != nil || connection.token != nil
    }

    func serverSettings() throws(ClientError) -> ServerSettings? { try connection.serverSettings() }

    func policy() throws(ClientError) -> ConflictPolicy { try Self.policy(conflicts) }

    /// `fail`, `server`, `client` or `merge`.
    static func policy(_ text: String) throws(ClientError) -> ConflictPolicy {
        guard let policy = ConflictPolicy(rawValue: text) else {
            throw ClientError(.usage, "unknown conflict policy '\(text)'", hint: "fail, server, client or merge")
        }
        return policy
    }

    /// The device the options name. With `readOnly`, a store that does not exist is an error naming
    /// its path, never created.
    func device(named name: String = "cli", readOnly: Bool = false) throws -> Device {
        let location = try StoreLocation(parsing: store)
        if readOnly { try location.requireExisting() }
        return try Device(name: name, store: location, server: try serverSettings(), policy: try policy())
    }
}

/// Where a client command prints, and how.
public struct CommandOutput: Sendable {
    public var format: OutputFormat
    /// Whether progress lines may be drawn (a terminal on stderr, table format).
    public var showsProgress: Bool
    /// Whether `-` may read an argument from standard input (the CLI; not the REPL, whose input it is).
    public var readsStandardInput: Bool
    /// The terminal's width when results go to one (tables fit it; long results are cut short).
    public var terminalWidth: Int?
    let write: @Sendable (String) -> Void

    public init(
        format: OutputFormat, showsProgress: Bool, readsStandardInput: Bool = false, terminalWidth: Int? = nil,
        write: @escaping @Sendable (String) -> Void
    ) {
        self.format = format
        self.showsProgress = showsProgress
        self.readsStandardInput = readsStandardInput
        self.terminalWidth = terminalWidth
        self.write = write
    }

    public func print(_ text: String) { write(text + "\n") }

    static func standard(_ format: OutputFormat) -> CommandOutput {
        CommandOutput(
            format: format, showsProgress: format == .table && isatty(2) == 1, readsStandardInput: true,
            terminalWidth: TerminalSize.width()
        ) { text in
            StandardStreams.write(text)
        }
    }
}

/// A command that works on one device: the CLI opens the device from ``ClientOptions``; the REPL
/// runs it on its current device.
public protocol DeviceCommand: AsyncParsableCommand {
    var client: ClientOptions { get }
    /// Whether the command only reads the store (`query`, `get`, `status`): the CLI then refuses a
    /// store that does not exist instead of creating it.
    static var readsOnly: Bool { get }
    func execute(on device: Device, output: CommandOutput) async throws
}

extension DeviceCommand {
    public static var readsOnly: Bool { false }

    /// The CLI path: open the device, run, close; any failure becomes one line and an exit code.
    public func run() async throws {
        do {
            let device = try client.device(readOnly: Self.readsOnly)
            do {
                try await execute(on: device, output: .standard(client.outputFormat))
                try await device.close()
            } catch {
                try? await device.close()
                throw error
            }
        } catch let error as CleanExit {
            throw error
        } catch let error as ExitCode {
            throw error
        } catch {
            throw CommandFailure.report(error, format: client.outputFormat)
        }
    }
}

/// Prints a failure as one line on stderr and picks the exit code.
enum CommandFailure {
    /// With `--json`, the failure is one JSON document on stderr too:
    /// `{"error":{"message":"…","hint":"…","exit":2}}`.
    static func report(_ error: any Error, format: OutputFormat = .table) -> ExitCode {
        let failure = ClientError.from(error)
        switch format {
        case .json, .jsonLines:
            var object: JSONObject = ["message": .string(failure.message), "exit": .int(Int64(failure.code.rawValue))]
            if let hint = failure.hint { object["hint"] = .string(hint) }
            if let detail = failure.detail { object["detail"] = .string(detail) }
            StandardStreams.writeError(JSONValue.object(["error": .object(object)]).serialized() + "\n")
        case .table, .csv:
            let style = Style.for(descriptor: 2)
            StandardStreams.writeError(style.error("error:") + failure.report.dropFirst("error:".count) + "\n")
        }
        return ExitCode(failure.code.rawValue)
    }
}

/// Parses a JSON object argument: the JSON itself, `@PATH` for a file, or `-` for standard input
/// (where `readsStandardInput`; a large item does not fit in an argument list).
func parseObject(_ argument: String, what: String, readsStandardInput: Bool = false) throws -> JSONObject {
    var text = argument
    if argument.hasPrefix("@") {
        let path = String(argument.dropFirst())
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ClientError(.notFound, "cannot read the \(what) from '\(path)'", hint: "@PATH names a JSON file")
        }
        text = String(decoding: data, as: UTF8.self)
    } else if argument == "-" {
        guard readsStandardInput else {
            throw ClientError(.usage, "'-' (standard input) works in the CLI, not here", hint: "use @PATH or the JSON")
        }
        text = String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
    }
    let value: JSONValue
    do {
        value = try JSONValue(parsing: text)
    } catch {
        throw ClientError(.usage, "the \(what) is not JSON: \(error)", hint: #"quote it: '{"title":"Milk"}'"#)
    }
    guard case .object(let object) = value else {
        throw ClientError(.usage, "the \(what) must be a JSON object", hint: #"for example '{"title":"Milk"}'"#)
    }
    return object
}

/// Parses the query options of `query`, `pull` and `purge` (filters in the 3.0 dialect).
func makeQuery(
    filter: String?, orderBy: String? = nil, top: Int? = nil, skip: Int? = nil, select: String? = nil,
    count: Bool = false, includeDeleted: Bool = false
) throws -> TableQuery {
    var parameters: [String] = []
    func add(_ name: String, _ value: String) {
        parameters.append(name + "=" + (value.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? value))
    }
    if let filter { add("$filter", filter) }
    if let orderBy { add("$orderby", orderBy) }
    if let top { add("$top", String(top)) }
    if let skip { add("$skip", String(skip)) }
    if let select { add("$select", select) }
    if count { add("$count", "true") }
    if includeDeleted { add("__includedeleted", "true") }
    do {
        return try TableQuery(odata: parameters.joined(separator: "&"), dialect: .v3)
    } catch {
        let text: String? =
            switch error.option?.lowercased() {
            case "$filter"?: filter
            case "$orderby"?: orderBy
            case "$select"?: select
            default: nil
            }
        throw ClientError.query(error, text: text)
    }
}

// MARK: - Local data

/// `ferry insert TABLE JSON`
public struct InsertCommand: DeviceCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "insert", abstract: "Insert an item into the local store and queue it for the server.",
        discussion: #"Example: ferry insert todo '{"title":"Milk","done":false}'  (an id is generated when missing)"#)
    @OptionGroup public var client: ClientOptions
    @Argument(help: "The table.") var table: String
    @Argument(help: "The item: a JSON object, @PATH for a file, or - for standard input.") var item: String
    public init() {}

    public func execute(on device: Device, output: CommandOutput) async throws {
        let object = try parseObject(item, what: "item", readsStandardInput: output.readsStandardInput)
        let inserted = try await device.insert(table, object)
        output.print(Rendering.item(inserted, format: output.format, width: output.terminalWidth))
    }
}

/// `ferry update TABLE ID JSON`
public struct UpdateCommand: DeviceCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "update", abstract: "Change fields of a local item and queue the update.",
        discussion: #"Example: ferry update todo 0193… '{"done":true}'  (the given fields replace the item's)"#)
    @OptionGroup public var client: ClientOptions
    @Argument(help: "The table.") var table: String
    @Argument(help: "The item's id.") var id: String
    @Argument(help: "The fields to change: a JSON object, @PATH for a file, or - for standard input.")
    var changes: String
    public init() {}

    public func execute(on device: Device, output: CommandOutput) async throws {
        let object = try parseObject(changes, what: "change", readsStandardInput: output.readsStandardInput)
        let updated = try await device.update(table, id: id, changes: object)
        output.print(Rendering.item(updated, format: output.format, width: output.terminalWidth))
    }
}

/// `ferry delete TABLE ID`
public struct DeleteCommand: DeviceCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "delete", abstract: "Delete a local item and queue the delete.")
    @OptionGroup public var client: ClientOptions
    @Argument(help: "The table.") var table: String
    @Argument(help: "The item's id.") var id: String
    public init() {}

    public func execute(on device: Device, output: CommandOutput) async throws {
        try await device.delete(table, id: id)
        output.print(output.format.isJSON ? #"{"deleted":\#(JSONValue.string(id).serialized())}"# : "deleted \(id)")
    }
}

/// `ferry get TABLE ID`
public struct GetCommand: DeviceCommand, Sendable {
    public static let configuration = CommandConfiguration(commandName: "get", abstract: "Show one local item.")
    public static let readsOnly = true
    @OptionGroup public var client: ClientOptions
    @Argument(help: "The table.") var table: String
    @Argument(help: "The item's id.") var id: String
    public init() {}

    public func execute(on device: Device, output: CommandOutput) async throws {
        guard let item = try await device.get(table, id: id) else {
            throw ClientError(.notFound, "no item '\(id)' in '\(table)'", hint: "`query \(table)` lists them")
        }
        output.print(Rendering.item(item, format: output.format, width: output.terminalWidth))
    }
}

/// `ferry query TABLE [--filter …]`
public struct QueryCommand: DeviceCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "query", abstract: "Query the local store with the OData query language.",
        discussion: "Example: ferry query todo --filter \"done eq false\" --orderby \"title desc\" --top 10")
    public static let readsOnly = true
    @OptionGroup public var client: ClientOptions
    @Argument(help: "The table.") var table: String
    @OptionGroup var query: QueryOptions
    @Flag(help: "Also print the total count of matching items.") var count = false
    @Flag(help: "Print every matching item on a terminal too (by default a terminal shows the first 100).")
    var all = false

    var top: Int? { query.top }
    public init() {}

    /// How many items a terminal shows when neither --top nor --all is given.
    static let terminalLimit = 100

    public func execute(on device: Device, output: CommandOutput) async throws {
        // On a terminal, fetch one beyond the limit to know whether to say there are more.
        let limited = output.terminalWidth != nil && output.format == .table && top == nil && !all
        let tableQuery = try makeQuery(
            filter: query.filter, orderBy: query.orderby, top: limited ? Self.terminalLimit + 1 : top,
            skip: query.skip, select: query.select, count: count, includeDeleted: query.includeDeleted)
        let result = try await device.query(table, tableQuery)
        var items = result.items
        let more = limited && items.count > Self.terminalLimit
        if more { items.removeLast(items.count - Self.terminalLimit) }
        let columns = try selectedColumns(items)
        output.print(
            Rendering.items(
                items, count: result.totalCount, format: output.format, columns: columns, width: output.terminalWidth,
                expanded: query.expanded))
        if more {
            output.print("(more follow: --top N or --all shows more; --json prints all)")
        }
    }

    /// The `--select` fields in their order; a field no item has is an error naming it.
    func selectedColumns(_ items: [JSONObject]) throws -> [String]? {
        guard let select = query.select else { return nil }
        let fields = select.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        if !items.isEmpty {
            for field in fields where !items.contains(where: { $0[field] != nil }) {
                throw ClientError(
                    .usage, "no item of '\(table)' has a field '\(field)'",
                    hint: "`ferry query \(table) --top 1` shows its fields")
            }
        }
        return fields
    }
}

// MARK: - Sync

/// `ferry push`
public struct PushCommand: DeviceCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "push", abstract: "Send the queued operations of every table to the server, in order.",
        discussion: "Exits with 2 when some operations failed or conflicted (see `ferry conflicts`).")
    @OptionGroup public var client: ClientOptions
    public init() {}

    public func execute(on device: Device, output: CommandOutput) async throws {
        let pending = output.showsProgress ? try await device.status().operations.count : nil
        let progress = await Progress.watch(device, output: output, operations: pending)
        let result: PushResult
        do {
            result = try await device.push()
        } catch {
            progress.finish()
            throw error
        }
        progress.finish()
        output.print(Rendering.push(result, format: output.format))
        if !result.failed.isEmpty {
            let count = result.failed.count
            throw ClientError(
                .conflicts, "\(count) operation\(count == 1 ? "" : "s") failed", hint: "see `conflicts`")
        }
    }
}

/// `ferry pull TABLE [--filter …] [--query-id ID]`
public struct PullCommand: DeviceCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "pull", abstract: "Bring the server's items of a table into the local store.",
        discussion: """
            Pushes the table's pending operations first. With --query-id the pull is incremental: the next \
            pull with the same id only brings what changed since. Exits with 2 when operations of that push \
            failed or conflicted (see `ferry conflicts`).
            """)
    @OptionGroup public var client: ClientOptions
    @Argument(help: "The table.") var table: String
    @Option(help: "Only items matching this OData $filter.") var filter: String?
    @Option(help: "Remember where this pull ended, under this id, for incremental pulls.") var queryId: String?
    @Option(help: "Items per request.") var pageSize: Int = 100
    public init() {}

    public func execute(on device: Device, output: CommandOutput) async throws {
        let query = try makeQuery(filter: filter)
        let progress = await Progress.watch(device, output: output)
        let result: PullResult
        do {
            result = try await device.pull(table, query: query, queryID: queryId, pageSize: pageSize)
        } catch {
            progress.finish()
            throw error
        }
        progress.finish()
        output.print(Rendering.pull(result, table: table, format: output.format))
        if let failed = result.push?.failed, !failed.isEmpty {
            throw ClientError(
                .conflicts,
                "\(failed.count) operation\(failed.count == 1 ? "" : "s") failed in the push before the pull",
                hint: "see `conflicts`")
        }
    }
}

/// `ferry purge TABLE [--filter …] [--force]`
public struct PurgeCommand: DeviceCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "purge", abstract: "Remove items from the local store only (the server keeps them).",
        discussion: "Refuses while the table has pending operations, unless --force (which drops them too).")
    @OptionGroup public var client: ClientOptions
    @Argument(help: "The table.") var table: String
    @Option(help: "Only items matching this OData $filter.") var filter: String?
    @Flag(help: "Also drop the table's pending operations, errors and pull cursors.") var force = false
    public init() {}

    public func execute(on device: Device, output: CommandOutput) async throws {
        let removed = try await device.purge(table, query: try makeQuery(filter: filter), force: force)
        output.print(
            output.format.isJSON
                ? #"{"purged":\#(removed)}"# : "purged \(removed) item\(removed == 1 ? "" : "s") of '\(table)'")
    }
}

/// `ferry status`
public struct StatusCommand: DeviceCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "status", abstract: "Show pending operations per table, errors and pull cursors.")
    public static let readsOnly = true
    @OptionGroup public var client: ClientOptions
    public init() {}

    public func execute(on device: Device, output: CommandOutput) async throws {
        output.print(Rendering.status(try await device.status(), format: output.format))
    }
}

/// `ferry conflicts [list | resolve ERROR --take …]`
public struct ConflictsCommand: DeviceCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "conflicts", abstract: "List failed and conflicting operations, or resolve one.",
        discussion: """
            ferry conflicts                               list them
            ERROR is an error id from the list, or the id of the item it is about.
            ferry conflicts resolve ERROR --take server   take the server's item, drop my change
            ferry conflicts resolve ERROR --take mine     retry my change against the server's version
            ferry conflicts resolve ERROR --take mine --item '{"title":"merged"}'
            ferry conflicts resolve ERROR --take discard  drop my change, keep the local copy as before it
            ferry conflicts resolve ERROR --take change --operation update --item '{…}'
            """)
    @OptionGroup public var client: ClientOptions
    @Argument(help: "list (the default) or resolve.") var action: String = "list"
    @Argument(help: "The error to resolve: its id, or its item's id.") var errorID: String?
    @Option(help: "How to resolve: server, mine, discard or change.") var take: String?
    @Option(help: "With mine or change: the item to send, a JSON object.") var item: String?
    @Option(help: "With change: the new operation, insert, update or delete.") var operation: String?
    public init() {}

    public func execute(on device: Device, output: CommandOutput) async throws {
        switch action {
        case "list":
            output.print(
                Rendering.errors(try await device.conflicts(), format: output.format, width: output.terminalWidth))
        case "resolve":
            guard let errorID else {
                throw ClientError(.usage, "which error?", hint: "give its id (or its item's id) from `conflicts`")
            }
            let resolution = try resolution()
            let errors = try await device.conflicts()
            guard let error = errors.first(where: { $0.id == errorID }) ?? errors.first(where: { $0.itemID == errorID })
            else {
                throw ClientError(.notFound, "no error '\(errorID)'", hint: "`conflicts` lists them")
            }
            try await device.resolve(error.id, resolution)
            output.print(
                output.format.isJSON
                    ? #"{"resolved":\#(JSONValue.string(errorID).serialized())}"# : "resolved \(errorID)")
        default:
            throw ClientError(.usage, "unknown action '\(action)'", hint: "list or resolve")
        }
    }

    func resolution() throws -> ErrorResolution {
        let object = try item.map { try parseObject($0, what: "item") }
        switch take {
        case "server": return .useServerItem
        case "mine": return .retry(with: object)
        case "discard": return .discardLocalChange
        case "change":
            guard let operation, let kind = OperationKind(rawValue: operation) else {
                throw ClientError(.usage, "--take change needs --operation insert, update or delete")
            }
            return .changeOperation(kind, item: object)
        case nil: throw ClientError(.usage, "how to resolve?", hint: "--take server, mine, discard or change")
        case let other?:
            throw ClientError(.usage, "unknown resolution '\(other)'", hint: "server, mine, discard or change")
        }
    }
}

/// Draws "rows, rows/s" while a push or pull runs, when stderr is a terminal.
final class Progress: Sendable {
    private let task: Task<Void, Never>?

    private init(task: Task<Void, Never>?) { self.task = task }

    /// Draws progress on stderr while the device pulls or pushes. `operations` is how many
    /// operations a push will send, when known: then the line has a total and an estimate of the
    /// time left.
    static func watch(_ device: Device, output: CommandOutput, operations total: Int? = nil) async -> Progress {
        guard output.showsProgress else { return Progress(task: nil) }
        let events = await device.events()
        let task = Task {
            let start = ContinuousClock.now
            var rows = 0
            var operations = 0
            for await event in events {
                switch event {
                case .pagePulled(_, _, let page): rows += page.received
                case .operationPushed: operations += 1
                default: continue
                }
                let seconds = (ContinuousClock.now - start) / .seconds(1)
                StandardStreams.writeError(
                    "\r\u{1B}[K" + line(rows: rows, operations: operations, total: total, seconds: seconds))
            }
        }
        return Progress(task: task)
    }

    /// `1,200 rows (4,800 rows/s)`, or `120 of 500 operations (35/s, about 11 s left)`.
    static func line(rows: Int, operations: Int, total: Int?, seconds: Double) -> String {
        let elapsed = max(0.001, seconds)
        if rows > 0 {
            return "\(grouped(rows)) rows (\(grouped(Int(Double(rows) / elapsed))) rows/s)"
        }
        let rate = Double(operations) / elapsed
        guard let total, total >= operations else {
            return "\(grouped(operations)) operations (\(grouped(Int(rate)))/s)"
        }
        var text = "\(grouped(operations)) of \(grouped(total)) operations (\(grouped(Int(rate)))/s"
        if rate > 0 {
            let left = Int((Double(total - operations) / rate).rounded(.up))
            text += left >= 60 ? ", about \(left / 60) min \(left % 60) s left" : ", about \(left) s left"
        }
        return text + ")"
    }

    static func grouped(_ number: Int) -> String {
        let digits = String(number.magnitude)
        var result = ""
        for (index, digit) in digits.enumerated() {
            if index > 0 && (digits.count - index) % 3 == 0 { result += "," }
            result.append(digit)
        }
        return number < 0 ? "-" + result : result
    }

    func finish() {
        guard let task else { return }
        task.cancel()
        StandardStreams.writeError("\r\u{1B}[K")
    }
}

extension OutputFormat: ExpressibleByArgument {}
