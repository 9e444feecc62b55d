public import ArgumentParser
import Foundation

/// The root of the `ferry` command tree.
///
/// The `ferry` executable is one line, `await FerryCommand.main()`; a REPL parses each line it reads
/// with `FerryCommand.parseAsRoot(arguments)` and runs the same commands.
///
/// ```
/// ferry serve --port 0 --db memory
/// ```
public struct FerryCommand: AsyncParsableCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "ferry",
        abstract: "Ferry: offline-first data sync for Swift. Serve tables, or work with a local store.",
        version: "0.1.0",
        subcommands: [ServeCommand.self, DemoCommand.self, ReplCommand.self, TokenCommand.self, RemoteCommand.self]
            + deviceCommands.map { $0 as any ParsableCommand.Type } + [WatchCommand.self]
    )

    public init() {}

    /// The names `ferry` takes as its first argument.
    public static var commandNames: [String] {
        ["help"] + configuration.subcommands.compactMap { $0.configuration.commandName }
    }

    /// For a mistyped command (`ferry pusj`), the one line to print: swift-argument-parser would
    /// only say the argument is unexpected. `nil` when the first argument is a command or an option.
    public static func unknownCommandMessage(_ arguments: [String]) -> String? {
        guard let first = arguments.first, !first.hasPrefix("-"), !commandNames.contains(first) else { return nil }
        let hint = Suggestion.hint(for: first, among: commandNames).replacingOccurrences(
            of: "`help` lists", with: "`ferry --help` lists")
        return "error: unknown command '\(first)' (\(hint))"
    }
}
