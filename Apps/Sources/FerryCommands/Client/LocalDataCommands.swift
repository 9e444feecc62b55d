public import ArgumentParser
public import FerryClient
import FerryConsole
import Foundation
import SyncCore

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
        guard let item = try await device.item(table, id: id) else {
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
