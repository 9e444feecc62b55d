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
    @OptionGroup public var client: LocalOptions
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
    @OptionGroup public var client: LocalOptions
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
    @OptionGroup public var client: LocalOptions
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
    public var needsExistingStore: Bool { true }
    @OptionGroup public var client: LocalOptions
    @Argument(help: "The table.") var table: String
    @Argument(help: "The item's id.") var id: String
    public init() {}

    public func execute(on device: Device, output: CommandOutput) async throws {
        guard let item = try await device.item(table, id: id) else {
            try await QueryCommand.requireTable(table, on: device, message: "no item '\(id)' in '\(table)'")
            throw ClientError(.notFound, "no item '\(id)' in '\(table)'", hint: "`query \(table)` lists them")
        }
        output.print(Rendering.item(item, format: output.format, width: output.terminalWidth))
    }
}

/// `ferry query TABLE [--filter …]`
public struct QueryCommand: DeviceCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "query", abstract: "Query the local store with the OData query language.",
        discussion: """
            Example: ferry query todo --filter "done eq false" --orderby "title desc" --top 10
            A table the store does not have, and a field no item has (in --filter or --select), are \
            errors that name the near names, not an empty answer.
            """)
    public var needsExistingStore: Bool { true }
    @OptionGroup public var client: LocalOptions
    @Argument(help: "The table.") var table: String
    @OptionGroup var query: QueryOptions
    @Flag(help: "Print only how many items match (with --filter, those matching).") var count = false
    @Flag(help: "Print every matching item on a terminal too (by default a terminal shows the first 100).")
    var all = false

    var top: Int? { query.top }
    public init() {}

    /// How many items a terminal shows when neither --top nor --all is given.
    static let terminalLimit = 100

    public func execute(on device: Device, output: CommandOutput) async throws {
        if count {
            let tableQuery = try makeQuery(
                filter: query.filter, top: 0, count: true, includeDeleted: query.includeDeleted)
            try await Self.requireTable(table, on: device)
            let total = try await device.query(table, tableQuery).totalCount ?? 0
            try await checkFields(of: tableQuery, on: device)
            output.print(Rendering.count(total, format: output.format))
            return
        }
        // On a terminal, fetch one beyond the limit to know whether to say there are more.
        let limited = output.terminalWidth != nil && output.format == .table && top == nil && !all
        let tableQuery = try makeQuery(
            filter: query.filter, orderBy: query.orderby, top: limited ? Self.terminalLimit + 1 : top,
            skip: query.skip, select: query.select, includeDeleted: query.includeDeleted)
        try await Self.requireTable(table, on: device)
        let result = try await device.query(table, tableQuery)
        var items = result.items
        // Also when items matched: `nosuch1 eq nosuch2` is null = null, every item.
        try await checkFields(of: tableQuery, on: device, seenIn: items)
        if !items.isEmpty { try await checkOrderFields(of: tableQuery, on: device) }
        let more = limited && items.count > Self.terminalLimit
        if more { items.removeLast(items.count - Self.terminalLimit) }
        let columns = try await selectedColumns(items, on: device)
        output.print(
            Rendering.items(
                items, format: output.format, columns: columns, width: output.terminalWidth,
                expanded: query.expanded))
        if more {
            output.print("(more follow: --top N or --all shows more; --json prints all)")
        }
        if output.format == .table, output.terminalWidth != nil, !query.expanded, query.select == nil,
            let width = output.terminalWidth, Rendering.cutsCells(items, columns: columns, width: width)
        {
            let note = "(cut to fit \(width) columns: -x shows items whole, --select picks fields)"
            output.print(Rendering.wrapped(note, width: width).joined(separator: "\n"))
        }
    }

    /// A table the store does not have is an error naming the near name, not an empty answer.
    /// `message` replaces the first words ("the store has no table 'todoo'").
    static func requireTable(_ table: String, on device: Device, message: String? = nil) async throws {
        let tables = try await device.tableNames()
        guard !tables.contains(table) else { return }
        let missing = "the store has no table '\(table)'"
        let hint = Suggestion.table(table, among: tables, of: "the store")
        throw ClientError(.notFound, message ?? missing, hint: message == nil ? hint : missing + "; " + hint)
    }

    /// A field of the query's filter that no item of the table has is an error naming the near
    /// field (as --select's), for a table that has items at all. Fields that `seen` items hold
    /// exist: they are not looked for.
    func checkFields(of tableQuery: TableQuery, on device: Device, seenIn seen: [JSONObject] = []) async throws {
        guard let filter = tableQuery.filter else { return }
        let unseen = Self.fields(in: filter).filter { field in !seen.contains { $0[field] != nil } }
        guard !unseen.isEmpty else { return }
        // A table with no items has no fields to name.
        let any = try await device.query(table, try makeQuery(filter: nil, top: 1, includeDeleted: true)).items
        guard !any.isEmpty else { return }
        try await Self.requireFields(unseen, of: table, on: device)
    }

    /// A sort key on a field no item of the table has is an error naming the near field: the items
    /// would otherwise come in `id` order as if sorted (`--orderby "titel desc"`).
    func checkOrderFields(of tableQuery: TableQuery, on device: Device) async throws {
        try await Self.requireFields(
            Set(tableQuery.orderBy.flatMap { Self.fields(in: $0.expression) }), of: table, on: device)
    }

    /// The first of `named` (system fields aside) that no item of `table` has is an error naming
    /// the near field among those of the table's first items (read only then). `watch --select`
    /// checks its fields with it too.
    static func requireFields(_ named: Set<String>, of table: String, on device: Device) async throws {
        for field in named.subtracting(Rendering.systemColumns + ["id"]).sorted() {
            let having = try await device.query(
                table, try makeQuery(filter: "\(field) ne null", top: 1, includeDeleted: true))
            guard having.items.isEmpty else { continue }
            let known = try await device.query(table, try makeQuery(filter: nil, top: 100, includeDeleted: true)).items
            throw noSuchField(field, in: table, known: Rendering.defaultColumns(known))
        }
    }

    /// `no item of 'todo' has a field 'titel' (did you mean 'title'?)`.
    static func noSuchField(_ field: String, in table: String, known: [String]) -> ClientError {
        ClientError(
            .usage, "no item of '\(table)' has a field '\(field)'",
            hint: Suggestion.nearest(to: field, among: known).map { "did you mean '\($0)'?" }
                ?? "`ferry query \(table) --top 1` shows its fields")
    }

    /// The field names an expression reads.
    static func fields(in expression: QueryExpression) -> Set<String> {
        var names: Set<String> = []
        var stack = [expression]
        while let next = stack.popLast() {
            switch next {
            case .literal: break
            case .field(let name): names.insert(name)
            case .unary(_, let operand): stack.append(operand)
            case .binary(_, let lhs, let rhs): stack += [lhs, rhs]
            case .function(_, let arguments): stack += arguments
            case .isIn(let value, let list): stack += [value] + list
            case .cast(let value, _): stack.append(value)
            }
        }
        return names
    }

    /// The `--select` fields in their order; a field no item has is an error naming it.
    func selectedColumns(_ items: [JSONObject], on device: Device) async throws -> [String]? {
        guard let select = query.select else { return nil }
        let fields = select.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        if !items.isEmpty, let missing = fields.first(where: { field in !items.contains { $0[field] != nil } }) {
            // The items hold the selected fields only: the near names come from whole items.
            let sample = try await device.query(table, try makeQuery(filter: nil, top: 100, includeDeleted: true))
            throw Self.noSuchField(missing, in: table, known: Rendering.defaultColumns(sample.items))
        }
        return fields
    }
}
