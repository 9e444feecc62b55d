import ArgumentParser
import FerryClient
import FerryConsole
import Foundation
import SyncCore

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
        // An argument typed on the command line came through a shell, which may have eaten its quotes.
        let typed = readsStandardInput && !argument.hasPrefix("@") && argument != "-"
        throw ClientError(.usage, "the \(what) is not JSON: \(error)", hint: jsonHint(text, throughAShell: typed))
    }
    guard case .object(let object) = value else {
        throw ClientError(.usage, "the \(what) must be a JSON object", hint: #"for example '{"title":"Milk"}'"#)
    }
    try refuseWideIntegers(in: text, of: "the \(what)")
    return object
}

/// Refuses an integer written in `text` (JSON that parsed) beyond 64 bits: stored, it becomes a
/// double and loses its last digits (12345678901234567890 is read back as 12345678901234567000),
/// which nobody typing it expects. Its text keeps every digit. `lines` names the line it is on
/// (JSON lines). Numbers in strings are text and pass.
func refuseWideIntegers(
    in text: String, of what: String, lines: Bool = false, outcome: String = "nothing was written"
) throws {
    guard let (number, line) = wideInteger(in: text) else { return }
    let rounded = Double(number).map { "\($0)" } ?? number
    throw ClientError(
        .usage,
        "\(lines ? "line \(line) of " : "")\(what): the integer \(number) does not fit 64 bits; it would be stored "
            + "as the double \(rounded) and lose digits; \(outcome)",
        hint: "quote it to keep every digit as text: \"\(number)\"")
}

/// The first integer literal of JSON `text` (outside strings) that `Int64` cannot hold, and its line.
func wideInteger(in text: String) -> (String, Int)? {
    let bytes = Array(text.utf8)
    var index = 0
    var line = 1
    func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }
    while index < bytes.count {
        let byte = bytes[index]
        if byte == UInt8(ascii: "\n") {
            line += 1
        } else if byte == UInt8(ascii: "\"") {
            index += 1
            while index < bytes.count, bytes[index] != UInt8(ascii: "\"") {
                index += bytes[index] == UInt8(ascii: "\\") ? 2 : 1
            }
        } else if byte == UInt8(ascii: "-") || isDigit(byte) {
            // In JSON that parsed, a number starts here: read all of it.
            let start = index
            var isInteger = true
            index += 1
            while index < bytes.count, isDigit(bytes[index]) || ".eE+-".utf8.contains(bytes[index]) {
                if !isDigit(bytes[index]) { isInteger = false }  // a fraction or an exponent
                index += 1
            }
            let number = String(decoding: bytes[start..<index], as: UTF8.self)
            if isInteger, Int64(number) == nil { return (number, line) }
            continue
        }
        index += 1
    }
    return nil
}

/// What to do about JSON that did not parse. Quoting is the fix only when the shell ate the
/// double quotes (`{title:Milk}`); JSON that kept its quotes has a mistake of its own.
func jsonHint(_ text: String, throughAShell: Bool = false) -> String {
    let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
    if throughAShell, trimmed.hasPrefix("{"), !trimmed.contains("\""), trimmed.contains(":") {
        return #"the shell removed the double quotes: put the JSON in single quotes, '{"title":"Milk"}'"#
    }
    if trimmed.hasPrefix("{") || trimmed.hasPrefix("[") {
        return "names and strings take double quotes, and nothing may follow the last value"
    }
    return #"an item is a JSON object, for example '{"title":"Milk"}'"#
}

/// Parses the query options of `query`, `pull` and `purge` (filters in the 3.0 protocol version).
func makeQuery(
    filter: String?, orderBy: String? = nil, top: Int? = nil, skip: Int? = nil, select: String? = nil,
    count: Bool = false, includeDeleted: Bool = false
) throws -> TableQuery {
    var parameters: [String] = []
    func add(_ name: String, _ value: String) {
        parameters.append(name + "=" + PercentEncoding.queryComponent(value))
    }
    if let filter { add("$filter", filter) }
    if let orderBy { add("$orderby", orderBy) }
    if let top { add("$top", String(top)) }
    if let skip { add("$skip", String(skip)) }
    if let select { add("$select", select) }
    if count { add("$count", "true") }
    if includeDeleted { add("__includedeleted", "true") }
    do {
        return try TableQuery(odata: parameters.joined(separator: "&"), protocolVersion: .v3)
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
