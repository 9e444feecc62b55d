import ArgumentParser
import Foundation
import Synchronization

/// The REPL's own commands, for `help` and `help COMMAND`.
struct ReplCommandHelp: Sendable {
    var names: [String]
    var usage: String
    /// One line, for the list.
    var summary: String
    /// What `help COMMAND` says.
    var what: String
}

extension ReplHelp {
    static let replCommands: [ReplCommandHelp] = [
        ReplCommandHelp(
            names: ["use"], usage: "use NAME [--store sqlite:PATH|lmdb:PATH|memory]",
            summary: "switch to device NAME (created with its own store the first time)",
            what: """
                Switches to device NAME. The first time, NAME gets a store of its own (in the stores directory, \
                or the one --store names); a store an earlier session left is opened again, with its queue.
                """),
        ReplCommandHelp(
            names: ["devices"], usage: "devices", summary: "list the devices",
            what: "Lists this session's devices (the one in use starred) and the stores earlier sessions left."),
        ReplCommandHelp(
            names: ["offline", "online"], usage: "offline | online",
            summary: "cut or restore this device's connection",
            what: "Cuts this device's connection (writes are queued, push and pull fail) or restores it."),
        ReplCommandHelp(
            names: ["restart"], usage: "restart", summary: "close and reopen this device's store, as an app restart",
            what: "Closes this device's store and opens it again, as an app restart; automatic sync starts again."),
        ReplCommandHelp(
            names: ["auto"], usage: "auto on [TABLE…] | auto off | auto",
            summary: "let this device sync by itself (push after writes, pull on changes)",
            what: """
                auto on [TABLE…]: this device syncs the tables by itself (every table it has when none is \
                named): it pushes right after local writes and pulls when the server's change feed says a \
                table changed. auto off stops it; auto says how it goes.
                """),
        ReplCommandHelp(
            names: ["help"], usage: "help [COMMAND]", summary: "this list, or one command's options",
            what: "Lists the commands, or shows one command's options (help attachments add)."),
        ReplCommandHelp(
            names: ["exit", "quit"], usage: "exit | quit", summary: "leave (Ctrl-D too)",
            what: "Leaves the REPL (Ctrl-D too). Queued changes stay in each device's store."),
    ]

    /// CLI commands that are not the REPL's, and what to use here instead.
    static let cliOnly: [String: String] = [
        "watch": "`watch` is the CLI's; here `auto on TABLE` syncs live and `query TABLE` shows the rows",
        "serve": "`serve` is the CLI's: start the server in another terminal (`ferry serve`)",
        "repl": "this is the REPL already",
        "demo": "`demo` is the CLI's (`ferry demo`)",
    ]
}

/// What Tab completes: command names first, then table names or device names.
final class CompletionState: Sendable {
    private let state = Mutex<(commands: [String], tables: [String], devices: [String])>(([], [], []))
    /// Each device command's options that work in the REPL.
    let options: [String: [String]] = Dictionary(
        uniqueKeysWithValues: deviceCommands.compactMap { command in
            command.configuration.commandName.map { ($0, ReplHelp.options(in: ReplCommands.helpMessage(for: command))) }
        })

    func update(commands: [String], tables: [String], devices: [String]) async {
        state.withLock { $0 = (commands, tables, devices) }
    }

    func candidates(for line: String) -> [String] {
        let words = line.split(separator: " ", omittingEmptySubsequences: true)
        let startsNewWord = line.hasSuffix(" ")
        let position = startsNewWord ? words.count : words.count - 1
        let snapshot = state.withLock { $0 }
        if position <= 0 { return snapshot.commands }
        if !startsNewWord, let word = words.last, word.hasPrefix("-"), let command = words.first {
            return options[String(command)] ?? []
        }
        if position == 1, let first = words.first,
            let group = commandGroups.first(where: { $0.configuration.commandName == String(first) })
        {
            // `attachments ` completes its actions.
            return group.configuration.subcommands.compactMap { $0.configuration.commandName }
        }
        if words.first == "use" || words.first == "help" {
            return words.first == "use" ? snapshot.devices : snapshot.commands
        }
        return snapshot.tables
    }
}

/// A command's help as the REPL shows it: without the options that name a device or the process
/// (`--store`, `--server`, `--protocol`, `--token`, `--conflicts`, `--version`, `--help`), which the
/// REPL sets per device or has no use for.
enum ReplHelp {
    static let hidden: Set<String> = [
        "--store", "--server", "--protocol", "--token", "--ca-file", "--conflicts", "--version", "--help",
    ]

    static func forREPL(_ help: String) -> String {
        var lines: [String] = []
        var skipping = false
        for line in help.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            if line.hasPrefix("USAGE:") {
                var rest = line.dropFirst("USAGE:".count).drop { $0 == " " }
                if rest.hasPrefix("ferry ") { rest = rest.dropFirst("ferry ".count) }
                var usage = "USAGE: " + rest
                for name in hidden {
                    usage = usage.replacingOccurrences(
                        of: #"\s\[\#(name)( <[^>]+>)?\]"#, with: "", options: .regularExpression)
                }
                lines.append(usage)
                continue
            }
            let trimmed = line.drop { $0 == " " }
            let indent = line.count - trimmed.count
            if indent == 2, trimmed.hasPrefix("-") {
                // "  -x, --expanded  …" or "  --store <store>  …": the option's names.
                let names = trimmed.split(separator: " ").prefix { $0.hasPrefix("-") }.map {
                    String($0.trimmingCharacters(in: CharacterSet(charactersIn: ",")))
                }
                skipping = names.contains { hidden.contains($0) || $0 == "-h" }
                if skipping { continue }
            } else if skipping, indent > 2 {
                continue
            } else {
                skipping = false
            }
            lines.append(line)
        }
        return lines.joined(separator: "\n")
    }

    /// The long options a help text lists, less the hidden ones.
    static func options(in help: String) -> [String] {
        let pattern = #"(?m)^  (?:-\w, )?(--[a-z][a-z-]*)"#
        guard let expression = try? NSRegularExpression(pattern: pattern) else { return [] }
        let range = NSRange(help.startIndex..., in: help)
        return expression.matches(in: help, range: range).compactMap { match in
            Range(match.range(at: 1), in: help).map { String(help[$0]) }
        }.filter { !hidden.contains($0) }
    }
}
