public import ArgumentParser
public import FerryClient
import FerryConsole
import Foundation
import SyncCore

/// `ferry push`
public struct PushCommand: DeviceCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "push", abstract: "Send the queued operations of every table to the server, in order.",
        discussion: """
            Then the queued attachment uploads and deletes (`ferry attachments`); a cut upload resumes where \
            the server stopped. Exits with 2 when some operations failed or conflicted (see `ferry conflicts`).
            """)
    @OptionGroup public var client: ClientOptions
    @Flag(help: "Show progress on stderr even when it is not a terminal (a line a second).") var progress = false
    public var needsExistingStore: Bool { true }
    public init() {}

    public func execute(on device: Device, output: CommandOutput) async throws {
        try await Self.requireServer(device, for: "push to")
        let output = output.askingForProgress(progress)
        let pending = output.showsProgress ? try await device.status().operations.count : nil
        let files = try await device.queuedAttachmentCount()
        let progress = await Progress.watch(device, output: output, operations: pending)
        let result: PushResult
        do {
            result = try await device.push()
        } catch {
            await progress.finish()
            throw error
        }
        await progress.finish()
        // The attachment uploads and deletes that ran after the operations (not those dropped with
        // their item: the rendering says so apart).
        output.print(
            Rendering.push(
                result, files: (result.attachmentsTransferred, files),
                bases: result.failed.isEmpty ? [:] : try await device.conflictBases(), format: output.format,
                width: output.terminalWidth))
        if !result.failed.isEmpty {
            let count = result.failed.count
            throw ClientError(
                .conflicts, "\(count) operation\(count == 1 ? "" : "s") failed", hint: "see `conflicts`")
        }
    }
}

extension PushCommand {
    /// A device without a server has nothing to push to or pull from: the command line lacks
    /// `--server` (exit 64), which is not a server that could not be reached.
    static func requireServer(_ device: Device, for what: String) async throws {
        guard await device.server == nil else { return }
        throw ClientError(.usage, "no server to \(what)", hint: "give --server URL, or set $FERRY_SERVER")
    }
}

/// `ferry pull TABLE [--filter …] [--query-id ID]`
public struct PullCommand: DeviceCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "pull", abstract: "Bring the server's items of a table into the local store.",
        discussion: """
            Pushes the table's queued operations first. With --query-id the pull is incremental: the next \
            pull with the same id only brings what changed since. Exits with 2 when operations of that push \
            failed or conflicted (see `ferry conflicts`).
            """)
    @OptionGroup public var client: ClientOptions
    @Argument(help: "The table.") var table: String
    @Option(help: "Only items matching this OData $filter.") var filter: String?
    @Option(help: "Remember where this pull ended, under this id, for incremental pulls.") var queryId: String?
    @Option(parsing: .unconditional, help: "Items per request.") var pageSize: Int = 100
    @Flag(help: "Show progress on stderr even when it is not a terminal (a line a second).") var progress = false
    public init() {}

    public func execute(on device: Device, output: CommandOutput) async throws {
        try await PushCommand.requireServer(device, for: "pull from")
        let output = output.askingForProgress(progress)
        let query = try makeQuery(filter: filter)
        let progress = await Progress.watch(device, output: output)
        let result: PullResult
        do {
            // A terminal shows progress: then the server also counts the rows, for a total and an ETA.
            result = try await device.pull(
                table, query: query, queryID: queryId, pageSize: pageSize, countsTotal: output.showsProgress)
        } catch {
            await progress.finish()
            throw error
        }
        await progress.finish()
        let pushFailed = !(result.push?.failed.isEmpty ?? true)
        let bases = pushFailed ? try await device.conflictBases() : [:]
        output.print(
            Rendering.pull(result, table: table, bases: bases, format: output.format, width: output.terminalWidth))
        if let failed = result.push?.failed, !failed.isEmpty {
            throw ClientError(
                .conflicts,
                "\(failed.count) operation\(failed.count == 1 ? "" : "s") failed in the push before the pull",
                hint: "see `conflicts`")
        }
    }
}

/// `ferry purge TABLE [--filter …] [--force]`
public struct PurgeCommand: DeviceCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "purge", abstract: "Remove items from the local store only (the server keeps them).",
        discussion: "Refuses while the table has queued operations, unless --force (which drops them too).")
    @OptionGroup public var client: LocalOptions
    @Argument(help: "The table.") var table: String
    @Option(help: "Only items matching this OData $filter.") var filter: String?
    @Flag(
        help:
            "Also drop the purged items' queued operations and errors (without --filter: all of the table's, and its delta tokens)."
    )
    var force = false
    public var needsExistingStore: Bool { true }
    public init() {}

    public func execute(on device: Device, output: CommandOutput) async throws {
        // A forced purge also drops the purged items' queued operations: say how many changes were lost.
        let before = force ? try await device.queuedOperationCount(table) : 0
        let removed = try await device.purge(table, query: try makeQuery(filter: filter), force: force)
        let dropped = force ? max(0, before - (try await device.queuedOperationCount(table))) : 0
        var text = "purged \(Rendering.grouped(removed)) item\(removed == 1 ? "" : "s") of '\(table)'"
        if dropped > 0 {
            text +=
                " and dropped \(Rendering.grouped(dropped)) queued operation\(dropped == 1 ? "" : "s") "
                + "never pushed (\(dropped == 1 ? "that change is" : "those changes are") not on the server)"
        }
        output.print(output.format.isJSON ? #"{"purged":\#(removed),"droppedOperations":\#(dropped)}"# : text)
    }
}

/// `ferry status`
public struct StatusCommand: DeviceCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "status", abstract: "Show queued operations per table, errors and delta tokens.")
    public var needsExistingStore: Bool { true }
    @OptionGroup public var client: StatusOptions
    public init() {}

    public func execute(on device: Device, output: CommandOutput) async throws {
        output.print(
            Rendering.status(try await device.status(), format: output.format, width: output.terminalWidth))
    }
}

/// `ferry conflicts [list | resolve ERROR --take …]`
public struct ConflictsCommand: DeviceCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "conflicts", abstract: "List failed and conflicting operations, or resolve one.",
        discussion: """
            ferry conflicts                               list them
            ERROR is an error id from the list, or the id of the item it is about.
            ferry conflicts resolve ERROR --take server   take the server's item, drop my change
            ferry conflicts resolve ERROR --take mine     retry my change against the server's version
            ferry conflicts resolve ERROR --take mine --item '{"title":"merged"}'   (mine, with that field changed)
            ferry conflicts resolve ERROR --take discard  drop my change, keep the local copy as before it
            ferry conflicts resolve ERROR --take change --operation update --item '{…}'
            ferry conflicts resolve ERROR --take change --operation delete
            """)
    @OptionGroup public var client: LocalOptions
    @Argument(help: "list (the default) or resolve.") var action: String = "list"
    @Argument(help: "The error to resolve: its id, or its item's id.") var errorID: String?
    @Option(help: "How to resolve: server, mine, discard or change.") var take: String?
    @Option(
        help:
            "With mine or change: a JSON object; for mine and an update, the fields to change in mine (others are kept), for an insert the item (change: needed for insert and update)."
    )
    var item: String?
    @Option(help: "With change: the new operation, insert, update or delete.") var operation: String?
    @Flag(name: [.customShort("x"), .long], help: "One block per error, its message whole (for long messages).")
    var expanded = false
    public var needsExistingStore: Bool { true }
    public init() {}

    public func execute(on device: Device, output: CommandOutput) async throws {
        switch action {
        case "list":
            output.print(
                Rendering.errors(
                    try await device.conflicts(), bases: try await device.conflictBases(), format: output.format,
                    width: output.terminalWidth, expanded: expanded))
        case "resolve":
            guard let errorID else {
                throw ClientError(.usage, "which error?", hint: "give its id (or its item's id) from `conflicts`")
            }
            let resolution = try resolution()
            let errors = try await device.conflicts()
            guard let error = errors.first(where: { $0.id == errorID }) ?? errors.first(where: { $0.itemID == errorID })
            else {
                throw ClientError(.notFound, "no error '\(errorID)'", hint: "`conflicts` lists them")
            }
            let given: JSONObject? =
                switch resolution {
                case .useMerged(let object), .changeOperation(_, item: let object?): object
                default: nil
                }
            if let given = given?["id"], given != .string(error.itemID) {
                // The resolution keeps the failed operation's item; another id is another item.
                throw ClientError(
                    .usage,
                    "--item names id \(given.serialized()), but the error is about '\(error.itemID)'",
                    hint: "leave \"id\" out of --item (it keeps '\(error.itemID)'); to write another item, "
                        + "use `ferry insert` or `ferry update`")
            }
            let applied = try await device.resolve(error.id, try await mergedOntoMine(resolution, error, device))
            // Keeping mine of an item the server deleted takes the deletion (deletions win).
            let deletionWon: Bool
            switch (resolution, applied) {
            case (.useClient, .useServer), (.useMerged, .useServer): deletionWon = true
            default: deletionWon = false
            }
            if output.format.isJSON {
                output.print(
                    JSONValue.object([
                        "resolved": .string(errorID), "took": .string(deletionWon ? "server" : take ?? ""),
                    ]).serialized())
            } else if deletionWon {
                output.print(
                    "resolved \(errorID): the server deleted it, and a deletion wins (it cannot be brought back): "
                        + "removed here too")
            } else {
                output.print("resolved \(errorID)")
            }
        default:
            throw ClientError(.usage, "unknown action '\(action)'", hint: "list or resolve")
        }
    }

    /// `--item` of `mine` or of an update changes the fields it names, as `ferry update` does: the
    /// other fields are mine's (the local item's), not dropped. It was sent as the whole item, and a
    /// resolution naming the one field both devices changed deleted every other field on the server.
    func mergedOntoMine(_ resolution: ErrorResolution, _ error: OperationErrorRecord, _ device: Device) async throws
        -> ErrorResolution
    {
        let changes: JSONObject
        switch resolution {
        case .useMerged(let item), .changeOperation(.update, item: let item?): changes = item
        default: return resolution
        }
        var merged = try await device.item(error.table, id: error.itemID) ?? error.clientItem ?? [:]
        for column in Rendering.systemColumns { merged[column] = nil }
        for (field, value) in changes { merged[field] = value }
        merged["id"] = .string(error.itemID)
        if case .useMerged = resolution { return .useMerged(merged) }
        return .changeOperation(.update, item: merged)
    }

    func resolution() throws -> ErrorResolution {
        let object = try item.map { try parseObject($0, what: "item") }
        switch take {
        case "server": return .useServer
        case "mine": return object.map { .useMerged($0) } ?? .useClient
        case "discard": return .discardLocalChange
        case "change":
            guard let operation, let kind = OperationKind(rawValue: operation) else {
                throw ClientError(.usage, "--take change needs --operation insert, update or delete")
            }
            // The change is the item given: without one, an insert or update would send the whole
            // local item over the server's, which is what `--take mine` says in so many words.
            if kind != .delete, object == nil {
                let what = kind == .insert ? "the item to send" : "the fields to change"
                throw ClientError(
                    .usage, "--take change --operation \(operation) needs --item with \(what)",
                    hint: "to send the local item as it is over the server's, use --take mine")
            }
            return .changeOperation(kind, item: object)
        case nil: throw ClientError(.usage, "how to resolve?", hint: "--take server, mine, discard or change")
        case let other?:
            throw ClientError(.usage, "unknown resolution '\(other)'", hint: "server, mine, discard or change")
        }
    }
}
