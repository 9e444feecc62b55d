public import ArgumentParser

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
        subcommands: [ServeCommand.self, DemoCommand.self, ReplCommand.self, TokenCommand.self]
            + deviceCommands.map { $0 as any ParsableCommand.Type }
    )

    public init() {}
}
