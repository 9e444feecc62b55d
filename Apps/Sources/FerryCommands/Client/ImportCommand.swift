public import ArgumentParser
public import FerryClient
import FerryConsole
import Foundation
import SyncCore

/// `ferry import TABLE FILE`: many items at once, from a JSON array or JSON lines.
public struct ImportCommand: DeviceCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "import", abstract: "Insert many items from a file and queue them for the server.",
        discussion: """
            FILE holds a JSON array of objects or JSON lines (one object per line; blank lines are \
            skipped); - reads standard input. The whole file is read and checked first, then imported in \
            one transaction: every item is imported, or, when one fails (a bad line, an id already \
            stored), none is, and the error names the line. Example: ferry import todo todos.jsonl
            """)
    @OptionGroup public var client: LocalOptions
    @Argument(help: "The table.") var table: String
    @Argument(help: "A JSON array or JSON lines file; - for standard input.") var file: String
    public init() {}

    public func execute(on device: Device, output: CommandOutput) async throws {
        let drawsProgress = output.showsProgress
        // Reading and checking a large file takes seconds: say so at once.
        if drawsProgress { output.writeProgress("reading \(file == "-" ? "standard input" : file)…") }
        let text = try Self.read(file, readsStandardInput: output.readsStandardInput)
        let (items, names) = try Self.items(in: text) { lines in
            guard drawsProgress else { return }
            output.writeProgress("\r\u{1B}[Kchecking: \(Rendering.grouped(lines)) lines read")
        }
        try Self.checkRepeatedIDs(items, names: names)
        if drawsProgress {
            output.writeProgress("\r\u{1B}[Kimporting \(Rendering.grouped(items.count)) items…")
        }
        let started = ContinuousClock.now
        let total = items.count
        let imported: Int
        do {
            imported = try await device.importItems(table, items, names: names) { count in
                guard drawsProgress else { return }
                let seconds = (ContinuousClock.now - started) / .seconds(1)
                output.writeProgress("\r\u{1B}[K" + Self.progressLine(count, of: total, seconds: seconds))
            }
        } catch {
            if drawsProgress { output.writeProgress("\r\u{1B}[K") }
            throw error
        }
        if drawsProgress { output.writeProgress("\r\u{1B}[K") }
        let seconds = (ContinuousClock.now - started) / .seconds(1)
        if output.format.isJSON {
            output.print(JSONValue.object(["imported": .int(Int64(imported)), "table": .string(table)]).serialized())
        } else {
            output.print(
                "imported \(Rendering.grouped(imported)) item\(imported == 1 ? "" : "s") into '\(table)' in "
                    + String(format: "%.1f s", seconds) + "; queued for the next push")
        }
    }

    /// `12,000 of 100,000 items (50,000 items/s, about 2 s left)`.
    static func progressLine(_ count: Int, of total: Int, seconds: Double) -> String {
        let rate = Double(count) / max(0.001, seconds)
        return
            "\(Rendering.grouped(count)) of \(Rendering.grouped(total)) items (\(Rendering.grouped(Int(rate))) items/s"
            + Progress.timeLeft(total - count, rate) + ")"
    }

    static func read(_ file: String, readsStandardInput: Bool) throws -> String {
        if file == "-" {
            guard readsStandardInput else {
                throw ClientError(.usage, "'-' (standard input) works in the CLI, not here", hint: "give a file path")
            }
            return String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
        }
        guard let data = FileManager.default.contents(atPath: file) else {
            throw ClientError(.notFound, "cannot read '\(file)'", hint: "give the path of a JSON or JSON lines file")
        }
        return String(decoding: data, as: UTF8.self)
    }

    /// The items of a JSON array or of JSON lines, and how to name item `i` in a message (`line 7`,
    /// `item 3`).
    static func items(in text: String, progress: (Int) -> Void = { _ in }) throws -> (
        [JSONObject], @Sendable (Int) -> String
    ) {
        let trimmed = text.drop { $0 == " " || $0 == "\n" || $0 == "\r" || $0 == "\t" || $0 == "\u{FEFF}" }
        if trimmed.hasPrefix("[") {
            let value: JSONValue
            do {
                value = try JSONValue(parsing: String(trimmed))
            } catch {
                throw ClientError(.usage, "the file is not a JSON array: \(error)", hint: "or give one object per line")
            }
            guard case .array(let values) = value else {
                throw ClientError(.usage, "the file is not a JSON array of objects")
            }
            try refuseWideIntegers(in: text, of: "the file", lines: true, outcome: "nothing was imported")
            var items: [JSONObject] = []
            items.reserveCapacity(values.count)
            for (index, value) in values.enumerated() {
                guard case .object(let item) = value else {
                    throw ClientError(
                        .usage, "item \(index + 1) of the array is not a JSON object; nothing was imported")
                }
                items.append(item)
            }
            return (items, { "item \($0 + 1)" })
        }
        var items: [JSONObject] = []
        var lines: [Int] = []
        for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            if index > 0, index % 10_000 == 0 { progress(index) }
            let content = line.hasSuffix("\r") ? line.dropLast() : line
            if content.allSatisfy({ $0 == " " || $0 == "\t" || $0 == "\u{FEFF}" }) { continue }
            let value: JSONValue
            do {
                value = try JSONValue(parsing: String(content))
            } catch {
                if index == 0, Self.looksLikeCSV(content) {
                    throw ClientError(
                        .usage,
                        "the file looks like CSV; import reads a JSON array or JSON lines, nothing was imported",
                        hint: "one object per line, as `ferry query TABLE --format jsonl` writes them"
                    )
                }
                throw ClientError(
                    .usage, "line \(index + 1) is not JSON: \(error); nothing was imported",
                    hint: jsonHint(String(content)))
            }
            guard case .object(let item) = value else {
                throw ClientError(.usage, "line \(index + 1) is not a JSON object; nothing was imported")
            }
            items.append(item)
            lines.append(index + 1)
        }
        let numbers = lines
        try refuseWideIntegers(in: text, of: "the file", lines: true, outcome: "nothing was imported")
        return (items, { "line \(numbers[$0])" })
    }

    /// A first line such as `id,title,done`: names separated by commas, no JSON brackets or quotes
    /// around names.
    static func looksLikeCSV(_ line: Substring) -> Bool {
        let trimmed = line.trimmingCharacters(in: .whitespaces)
        return trimmed.contains(",") && !trimmed.hasPrefix("{") && !trimmed.hasPrefix("[")
    }

    /// Two items of the file with the same id: an error naming both places (the store would only
    /// say the second "already exists", as if it had been there before).
    static func checkRepeatedIDs(_ items: [JSONObject], names: (Int) -> String) throws {
        // By their bytes: "café" composed and decomposed are two ids.
        var seen: [ItemID.Key: Int] = [:]
        for (index, item) in items.enumerated() {
            guard case .string(let id)? = item["id"] else { continue }
            if let first = seen[ItemID.Key(id)] {
                throw ClientError(
                    .usage, "\(names(index)) repeats the id '\(id)' of \(names(first)); nothing was imported",
                    hint: "each item of one import needs its own id, or none for a generated one")
            }
            seen[ItemID.Key(id)] = index
        }
    }
}
