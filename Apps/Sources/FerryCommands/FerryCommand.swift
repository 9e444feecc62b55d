public import ArgumentParser
import FerryClient
import FerryConsole
import Foundation

/// The root of the `ferry` command tree.
///
/// The `ferry` executable is one line, `exit(await FerryCommand.run(arguments))`; a REPL parses each line it reads
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
        subcommands: [
            ServeCommand.self, BackupCommand.self, DemoCommand.self, ReplCommand.self, TokenCommand.self,
            RemoteCommand.self,
        ]
            + deviceCommands.map { $0 as any ParsableCommand.Type } + commandGroups + [WatchCommand.self]
    )

    public init() {}

    /// The names `ferry` takes as its first argument.
    public static var commandNames: [String] {
        ["help"] + configuration.subcommands.compactMap { $0.configuration.commandName }
    }

    /// For a mistyped command (`ferry pusj`), the one line to print: swift-argument-parser would
    /// only say the argument is unexpected. `nil` when the first argument is a command or an option.
    /// Likewise for an action of a group (`ferry remote tabels`, which said "unknown option
    /// '--server'"), and for `ferry help nosuch` (which printed the root help with status 0).
    public static func unknownCommandMessage(_ arguments: [String]) -> String? {
        guard let first = arguments.first, !first.hasPrefix("-") else { return nil }
        guard commandNames.contains(first) else {
            let hint = Suggestion.hint(for: first, among: commandNames).replacingOccurrences(
                of: "`help` lists", with: "`ferry --help` lists")
            return "error: unknown command '\(first)' (\(hint))"
        }
        if first == "help", arguments.count > 1 { return unknownCommandMessage(Array(arguments.dropFirst())) }
        guard arguments.count > 1, !arguments[1].hasPrefix("-"),
            let group = configuration.subcommands.first(where: { $0.configuration.commandName == first }),
            !group.configuration.subcommands.isEmpty
        else { return nil }
        let actions = group.configuration.subcommands.compactMap { $0.configuration.commandName } + ["help"]
        guard !actions.contains(arguments[1]) else { return nil }
        let hint = Suggestion.hint(for: arguments[1], among: actions).replacingOccurrences(
            of: "`help` lists the commands", with: "`ferry \(first) --help` lists its commands")
        return "error: unknown command '\(first) \(arguments[1])' (\(hint))"
    }

    /// Parses `arguments` and runs the command; returns the exit status. Every failure is printed
    /// as Ferry prints its own: `error: …` on one line with where to look, never swift-argument-parser's
    /// `Error: …` with a usage block (help and `--version` still print as they do).
    public static func run(_ arguments: [String]) async -> Int32 {
        if let message = unknownCommandMessage(arguments) {
            StandardStreams.writeError(message + "\n")
            return ClientError.Code.usage.rawValue
        }
        do {
            var command = try parseAsRoot(arguments)
            if var asynchronous = command as? any AsyncParsableCommand {
                try await asynchronous.run()
            } else {
                try command.run()
            }
            return 0
        } catch {
            let code = exitCode(for: error)
            if code == .success {
                StandardStreams.write(fullMessage(for: error) + "\n")
            } else if let text = errorLine(error, code: code, arguments: arguments) {
                if asksForJSON(arguments) {
                    // As every other failure with `--json` (docs/cli.md): one JSON document.
                    var message = String(text.dropFirst("error: ".count))
                    var hint: String?
                    if let open = message.range(of: " (`", options: .backwards), message.hasSuffix(")") {
                        hint = String(message[message.index(after: open.lowerBound)...].dropFirst().dropLast())
                        message = String(message[..<open.lowerBound])
                    }
                    _ = CommandFailure.report(ClientError(.usage, message, hint: hint), format: .json)
                } else {
                    let style = Style.for(descriptor: 2)
                    StandardStreams.writeError(style.error("error:") + text.dropFirst("error:".count) + "\n")
                }
            }
            return code.rawValue
        }
    }

    /// `error: unknown option '--bogus' (`ferry query --help` lists the options)`: swift-argument-parser's
    /// message in Ferry's words, with where to look when the command line was wrong (exit 64);
    /// `nil` for errors the commands printed themselves (an `ExitCode`).
    static func errorLine(_ error: any Error, code: ExitCode, arguments: [String]) -> String? {
        let message = message(for: error).trimmingCharacters(in: .whitespacesAndNewlines)
        guard !message.isEmpty else { return nil }
        let first = message.split(whereSeparator: \.isNewline).first.map(String.init) ?? message
        let text = first.hasPrefix("Error: ") ? String(first.dropFirst("Error: ".count)) : first
        let lowered = text.prefix(1).lowercased() + text.dropFirst()
        guard code.rawValue == ClientError.Code.usage.rawValue else { return "error: \(lowered)" }
        return "error: \(lowered) (`\(commandPath(arguments)) --help` lists the options)"
    }

    /// Whether the command line asks for JSON (`--json`, `--format json|jsonl`), read from the
    /// words themselves: a command line that did not parse has no options to ask.
    static func asksForJSON(_ arguments: [String]) -> Bool {
        for (index, argument) in arguments.enumerated() {
            if argument == "--" { return false }
            if argument == "--json" { return true }
            let format: String?
            if argument == "--format" {
                format = index + 1 < arguments.count ? arguments[index + 1] : nil
            } else if argument.hasPrefix("--format=") {
                format = String(argument.dropFirst("--format=".count))
            } else {
                format = nil
            }
            if let format, format == "json" || format == "jsonl" { return true }
        }
        return false
    }

    /// `ferry remote query`: the commands `arguments` name, as far as they name commands.
    static func commandPath(_ arguments: [String]) -> String {
        var path = ["ferry"]
        var subcommands = configuration.subcommands
        for argument in arguments {
            guard let next = subcommands.first(where: { $0.configuration.commandName == argument }) else { break }
            path.append(argument)
            subcommands = next.configuration.subcommands
        }
        return path.joined(separator: " ")
    }
}
