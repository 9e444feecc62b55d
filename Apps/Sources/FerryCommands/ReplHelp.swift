import ArgumentParser
import Foundation
import Synchronization

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
