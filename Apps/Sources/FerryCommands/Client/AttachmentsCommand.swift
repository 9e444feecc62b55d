public import ArgumentParser
public import FerryClient
import FerryConsole
import Foundation
import SyncCore

/// `ferry attachments add|list|get|rm`: files that belong to items (docs/attachments.md).
public struct AttachmentsCommand: ParsableCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "attachments", abstract: "Attach files to items, list, fetch or remove them.",
        discussion: """
            Files sync with their items: `add` and `rm` work offline and queue the change, `push` uploads \
            and deletes (resuming a cut upload where the server stopped), `pull` brings the list of an \
            item's files, and `get` downloads a file the first time it is asked for. The files live in \
            <store>.attachments/ beside the store. The server must run with `ferry serve --attachments`.

            Examples:
              ferry attachments add notes a1 scan.pdf
              ferry attachments add notes a1 IMG_0042.jpg --name cover.jpg
              ferry push --server URL        (the uploads; progress on a terminal)
              ferry attachments list notes a1
              ferry attachments get notes a1 scan.pdf --output scan.pdf
              ferry attachments rm notes a1 cover.jpg
            """,
        subcommands: [
            AttachmentAddCommand.self, AttachmentListCommand.self, AttachmentGetCommand.self,
            AttachmentRemoveCommand.self,
        ])

    public init() {}

    /// The subcommands, for the REPL's help and completion.
    static var actions: [String] { configuration.subcommands.compactMap { $0.configuration.commandName } }
}

/// `ferry attachments add TABLE ID FILE [--name NAME] [--content-type TYPE]`
public struct AttachmentAddCommand: DeviceCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "add", abstract: "Attach a file to a local item and queue its upload (works offline).",
        discussion: """
            The file is copied into the store's attachments directory, so it may be deleted afterwards. \
            An attachment of the same name is replaced. The next `push` uploads it, after the item itself.

            Examples:
              ferry attachments add notes a1 scan.pdf
              ferry attachments add notes a1 photos/IMG_0042.jpg --name cover.jpg
              ferry attachments add notes a1 notes.md --content-type text/markdown
            """)
    @OptionGroup public var client: LocalOptions
    @Argument(help: "The item's table.") var table: String
    @Argument(help: "The item's id.") var id: String
    @Argument(help: "The file to attach.") var file: String
    @Option(help: "The attachment's name (default: the file's name).") var name: String?
    @Option(help: "The file's media type (default: from its extension).") var contentType: String?
    public init() {}

    public func execute(on device: Device, output: CommandOutput) async throws {
        let attachment = try await device.attach(table, id: id, file: file, name: name, contentType: contentType)
        if output.format.isJSON {
            output.print(JSONValue.object(AttachmentListCommand.object(attachment)).serialized())
        } else {
            output.print(
                "attached '\(attachment.name)' (\(Device.bytes(attachment.size))) to \(table)/\(id); "
                    + "the next push uploads it")
        }
    }
}

/// `ferry attachments list TABLE ID`
public struct AttachmentListCommand: DeviceCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "list", abstract: "List an item's attachments and where each stands.",
        discussion: """
            States: waiting to upload, uploaded, waiting to delete (removed here, deleted on the server at \
            the next push), on the server (not on this device yet: `get` downloads it), downloaded.

            Example: ferry attachments list notes a1 --json
            """)
    public var needsExistingStore: Bool { true }
    @OptionGroup public var client: LocalOptions
    @Argument(help: "The item's table.") var table: String
    @Argument(help: "The item's id.") var id: String
    public init() {}

    public func execute(on device: Device, output: CommandOutput) async throws {
        let list = try await device.attachments(table, id: id)
        switch output.format {
        case .json, .jsonLines, .csv:
            output.print(Rendering.items(list.map(Self.object), format: output.format, columns: Self.columns))
        case .table:
            guard !list.isEmpty else {
                output.print("\(table)/\(id) has no attachments")
                return
            }
            let rows = list.map { attachment in
                [
                    attachment.name, Device.bytes(attachment.size), attachment.contentType ?? "",
                    Self.words(attachment.state), String(attachment.sha256.prefix(12)),
                ]
            }
            // Rows of an item this device no longer holds stay (the server keeps a deleted item's
            // files for an undelete): say why the item is missing beside them.
            let absent =
                try await device.item(table, id: id) == nil
                ? " (\(table)/\(id) is not on this device: deleted, purged or not pulled)" : ""
            output.print(
                TextTable.render(
                    headers: ["name", "size", "type", "state", "sha256"], rows: rows, totalWidth: output.terminalWidth)
                    + "\n\(list.count) attachment\(list.count == 1 ? "" : "s")\(absent)")
        }
    }

    static let columns = ["name", "size", "contentType", "state", "sha256", "local", "pinned"]

    /// An attachment as JSON: `name`, `size` (bytes), `contentType`, `state`, `sha256`, `local`, `pinned`.
    static func object(_ attachment: ItemAttachment) -> JSONObject {
        [
            "name": .string(attachment.name), "size": .int(attachment.size),
            "contentType": attachment.contentType.map(JSONValue.string) ?? .null,
            "state": .string(attachment.state.rawValue), "sha256": .string(attachment.sha256),
            "local": .bool(attachment.isLocal), "pinned": .bool(attachment.pinned),
        ]
    }

    static func words(_ state: AttachmentState) -> String {
        switch state {
        case .pendingUpload: "waiting to upload"
        case .uploaded: "uploaded"
        case .pendingDelete: "waiting to delete"
        case .remote: "on the server"
        case .downloaded: "downloaded"
        }
    }
}

/// `ferry attachments get TABLE ID NAME --output FILE`
public struct AttachmentGetCommand: DeviceCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "get", abstract: "Write an attachment to a file, downloading it first if needed.",
        discussion: """
            A file that is not on this device yet is downloaded from the server (give --server); offline, \
            `get` says it is not on the device. --output - writes it to standard output.

            Examples:
              ferry attachments get notes a1 scan.pdf --output scan.pdf --server URL
              ferry attachments get notes a1 scan.pdf -o - | sha256sum
            """)
    public var needsExistingStore: Bool { true }
    @OptionGroup public var client: StatusOptions
    @Argument(help: "The item's table.") var table: String
    @Argument(help: "The item's id.") var id: String
    @Argument(help: "The attachment's name.") var name: String
    @Option(
        name: [.customShort("o"), .long],
        help: ArgumentHelp("Where to write it (- for standard output).", valueName: "file"))
    var output: String
    @Flag(help: "Show the download's progress on stderr even when it is not a terminal.") var progress = false
    public init() {}

    public func execute(on device: Device, output commandOutput: CommandOutput) async throws {
        let commandOutput = commandOutput.askingForProgress(progress)
        let watcher = await Progress.watch(device, output: commandOutput)
        let found: AttachmentFile
        do {
            found = try await device.attachmentFile(table, id: id, name: name)
        } catch {
            await watcher.finish()
            throw error
        }
        await watcher.finish()
        if output == "-" {
            try Self.copy(found.url, toStandardOutput: ())
            return
        }
        try Self.copy(found.url, to: output)
        let size = found.attachment.size
        if commandOutput.format.isJSON {
            commandOutput.print(
                JSONValue.object([
                    "file": .string(output), "size": .int(size), "sha256": .string(found.attachment.sha256),
                    "downloaded": .bool(found.downloaded),
                ]).serialized())
        } else {
            commandOutput.print(
                "wrote '\(output)' (\(Device.bytes(size))\(found.downloaded ? ", downloaded" : ""))")
        }
    }

    /// Copies through a temporary file beside the target, renamed into place: the target is the
    /// whole file or what it was.
    static func copy(_ source: URL, to path: String) throws {
        let target = URL(fileURLWithPath: path)
        let temporary = target.deletingLastPathComponent().appendingPathComponent(
            ".\(target.lastPathComponent).\(UUID().uuidString).part")
        do {
            try FileManager.default.copyItem(at: source, to: temporary)
        } catch {
            try? FileManager.default.removeItem(at: temporary)
            if (error as? CocoaError)?.code == .fileNoSuchFile || (error as? CocoaError)?.code == .fileWriteNoPermission
                || !FileManager.default.fileExists(atPath: target.deletingLastPathComponent().path)
            {
                throw ClientError(.failed, "cannot write '\(path)': its directory is missing or read-only")
            }
            throw error
        }
        guard rename(temporary.path, target.path) == 0 else {
            let reason = String(cString: strerror(errno))
            try? FileManager.default.removeItem(at: temporary)
            throw ClientError(.failed, "cannot write '\(path)': \(reason)")
        }
    }

    /// Streams the file to standard output, 1 MiB at a time.
    static func copy(_ source: URL, toStandardOutput: Void) throws {
        let handle = try FileHandle(forReadingFrom: source)
        defer { try? handle.close() }
        while let chunk = try handle.read(upToCount: 1 << 20), !chunk.isEmpty {
            FileHandle.standardOutput.write(chunk)
        }
    }
}

/// `ferry attachments rm TABLE ID NAME`
public struct AttachmentRemoveCommand: DeviceCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "rm", abstract: "Remove an attachment here and queue its delete (works offline).",
        discussion: """
            The file goes from this device at once; the next `push` deletes it on the server.

            Example: ferry attachments rm notes a1 cover.jpg
            """)
    @OptionGroup public var client: LocalOptions
    @Argument(help: "The item's table.") var table: String
    @Argument(help: "The item's id.") var id: String
    @Argument(help: "The attachment's name.") var name: String
    public init() {}

    public func execute(on device: Device, output: CommandOutput) async throws {
        let queued = try await device.removeAttachment(table, id: id, name: name)
        if output.format.isJSON {
            output.print(
                JSONValue.object(["removed": .string(name), "deleteQueued": .bool(queued)]).serialized())
        } else {
            output.print(
                "removed '\(name)' of \(table)/\(id)"
                    + (queued ? "; the next push deletes it on the server" : " (the server never had it)"))
        }
    }
}
