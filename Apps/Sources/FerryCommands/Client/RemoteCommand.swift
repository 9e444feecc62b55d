public import ArgumentParser
import FerryClient
import FerryConsole
import Foundation
import SyncCore
import Transport

/// `ferry remote tables` and `ferry remote query TABLE`: the server's data, with no local store
/// (the online table API; nothing is written on the device).
///
/// ```
/// ferry remote tables --server http://127.0.0.1:8080
/// ferry remote query todo --filter "done eq false" --server http://127.0.0.1:8080
/// ```
public struct RemoteCommand: AsyncParsableCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "remote", abstract: "Look at the server's data directly, without a local store.",
        subcommands: [RemoteTablesCommand.self, RemoteQueryCommand.self])

    public init() {}
}

/// The options of the `remote` commands: the server, and how to print.
public struct RemoteOptions: ParsableArguments, Sendable {
    @OptionGroup var connection: ServerOptions
    @OptionGroup var output: OutputOptions

    public init() {}

    var outputFormat: OutputFormat { output.outputFormat }

    func remote() throws -> HTTPRemote {
        guard let settings = try connection.serverSettings() else {
            throw ClientError(.usage, "which server?", hint: "give --server URL or set $FERRY_SERVER")
        }
        return settings.remote()
    }

    /// Runs `body`, printing a failure as one line (or JSON) with its exit code.
    func run(_ body: (CommandOutput) async throws -> Void) async throws {
        let output = CommandOutput.standard(outputFormat)
        do {
            try await body(output)
        } catch let error as CleanExit {
            throw error
        } catch let error as ExitCode {
            throw error
        } catch {
            throw CommandFailure.report(error, format: outputFormat)
        }
    }
}

/// `ferry remote tables`
public struct RemoteTablesCommand: AsyncParsableCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "tables", abstract: "List the server's tables (Ferry's server lists them; others answer 404).")
    @OptionGroup var options: RemoteOptions
    public init() {}

    public func run() async throws {
        try await options.run { output in
            let names = try await options.remote().tableNames()
            if output.format.isJSON {
                output.print(JSONValue.array(names.map { .string($0) }).serialized())
            } else {
                output.print(names.isEmpty ? "(no tables yet)" : names.joined(separator: "\n"))
            }
        }
    }
}

/// `ferry remote query TABLE`
public struct RemoteQueryCommand: AsyncParsableCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "query", abstract: "Query a table on the server directly (nothing is stored on the device).")
    @OptionGroup var options: RemoteOptions
    @Argument(help: "The table.") var table: String
    @OptionGroup var query: QueryOptions
    public init() {}

    public func run() async throws {
        try await options.run { output in
            let tableQuery = try makeQuery(
                filter: query.filter, orderBy: query.orderby, skip: query.skip, select: query.select,
                includeDeleted: query.includeDeleted)
            // Follows the server's pages up to --top; a terminal gets the first 100 unless told otherwise.
            let limit = query.top ?? (output.terminalWidth != nil && output.format == .table ? 100 : 1_000_000)
            let remote = try options.remote()
            let items = try await remote.onlineTable(table).all(tableQuery, limit: limit)
            // A server with dynamic tables answers any name with no items: when it lists its tables
            // (Ferry's does), a name it does not have is an error with the near name.
            if items.isEmpty, let tables = try? await remote.tableNames(), !tables.contains(table) {
                throw ClientError(
                    .notFound, "the server has no table '\(table)'",
                    hint: Suggestion.table(table, among: tables, of: "the server"))
            }
            let columns = query.select.map {
                $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            }
            output.print(
                Rendering.items(
                    items, format: output.format, columns: columns, width: output.terminalWidth,
                    expanded: query.expanded))
        }
    }
}
