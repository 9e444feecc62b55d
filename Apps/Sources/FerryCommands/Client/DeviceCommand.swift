public import ArgumentParser
public import FerryClient
import FerryConsole
import Foundation
import SyncCore

/// Where a client command prints, and how.
public struct CommandOutput: Sendable {
    public var format: OutputFormat
    /// Whether progress lines may be drawn (a terminal on stderr, table format; or `--progress`).
    public var showsProgress: Bool
    /// Whether progress is drawn over itself and cleared at the end (a terminal); else it is
    /// written a line a second (`--progress` into a pipe or a file).
    public var drawsProgressInPlace = true
    /// Whether `-` may read an argument from standard input (the CLI; not the REPL, whose input it is).
    public var readsStandardInput: Bool
    /// The terminal's width when results go to one (tables fit it; long results are cut short).
    public var terminalWidth: Int?
    /// Measures the terminal again, for each command of a session (`ferry repl`), so that a resize
    /// is followed; `nil` keeps ``terminalWidth`` as it is.
    public var measureWidth: (@Sendable () -> Int?)?
    let write: @Sendable (String) -> Void
    /// Where progress lines go (standard error), drawn over each other with `\r` and cleared at
    /// the end.
    public var writeProgress: @Sendable (String) -> Void = { StandardStreams.writeError($0) }

    public init(
        format: OutputFormat, showsProgress: Bool, readsStandardInput: Bool = false, terminalWidth: Int? = nil,
        write: @escaping @Sendable (String) -> Void
    ) {
        self.format = format
        self.showsProgress = showsProgress
        self.readsStandardInput = readsStandardInput
        self.terminalWidth = terminalWidth
        self.write = write
    }

    public func print(_ text: String) { write(text + "\n") }

    /// The output of a command given `--progress`: progress shown even when stderr is not a
    /// terminal, then a line at a time.
    func askingForProgress(_ asked: Bool) -> CommandOutput {
        guard asked else { return self }
        var output = self
        output.showsProgress = true
        if isatty(2) != 1 { output.drawsProgressInPlace = false }
        return output
    }

    /// The output for the next command of a session: the terminal's width as it is now.
    func remeasured() -> CommandOutput {
        guard let measureWidth else { return self }
        var output = self
        output.terminalWidth = measureWidth() ?? terminalWidth
        return output
    }

    static func standard(_ format: OutputFormat) -> CommandOutput {
        var output = CommandOutput(
            format: format, showsProgress: format == .table && isatty(2) == 1, readsStandardInput: true,
            terminalWidth: TerminalSize.width()
        ) { text in
            StandardStreams.write(text)
        }
        if output.terminalWidth != nil { output.measureWidth = { TerminalSize.width() } }
        return output
    }
}

/// A command that works on one device: the CLI opens the device from its ``DeviceOptions``; the REPL
/// runs it on its current device.
public protocol DeviceCommand: AsyncParsableCommand {
    associatedtype Options: DeviceOptions
    /// The store, server and output options; each command lists only those it uses.
    var client: Options { get }
    /// Whether the command has nothing to work on in a new store: it only reads (`query`, `get`,
    /// `status`), or works on what a store already holds (`push`, `purge`, `conflicts`, `watch`
    /// without a server). The CLI then refuses a store that does not exist, naming its path,
    /// instead of creating an empty one and reporting that all is well (a mistyped `--store`).
    var needsExistingStore: Bool { get }
    func execute(on device: Device, output: CommandOutput) async throws
}

extension DeviceCommand {
    public var needsExistingStore: Bool { false }

    /// The CLI path: open the device, run, close; any failure becomes one line and an exit code.
    public func run() async throws {
        do {
            let location = try StoreLocation(parsing: client.local.store)
            // Such a command never creates a store: a mistyped path is an error naming it.
            if needsExistingStore { try location.requireExisting() }
            // A command that fails on a store it created (a pull that cannot reach the server, an
            // insert of bad JSON into a mistyped path) leaves no new store behind, unless the store
            // holds something by then: pages a pull applied, another process's writes.
            let created = !location.exists
            let device = try client.device(at: location)
            do {
                try await execute(on: device, output: .standard(client.outputFormat))
                try await device.close()
            } catch {
                try? await device.close()
                if created, await location.holdsNothing() { location.remove() }
                throw error
            }
        } catch let error as CleanExit {
            throw error
        } catch let error as ExitCode {
            throw error
        } catch {
            throw CommandFailure.report(error, format: client.outputFormat)
        }
    }
}

/// Prints a failure as one line on stderr and picks the exit code.
enum CommandFailure {
    /// With `--json`, the failure is one JSON document on stderr too:
    /// `{"error":{"message":"…","hint":"…","exit":2}}`.
    static func report(_ error: any Error, format: OutputFormat = .table) -> ExitCode {
        let failure = ClientError.from(error)
        switch format {
        case .json, .jsonLines:
            var object: JSONObject = ["message": .string(failure.message), "exit": .int(Int64(failure.code.rawValue))]
            if let hint = failure.hint { object["hint"] = .string(hint) }
            if let detail = failure.detail { object["detail"] = .string(detail) }
            StandardStreams.writeError(JSONValue.object(["error": .object(object)]).serialized() + "\n")
        case .table, .csv:
            let style = Style.for(descriptor: 2)
            StandardStreams.writeError(style.error("error:") + failure.report.dropFirst("error:".count) + "\n")
        }
        return ExitCode(failure.code.rawValue)
    }
}
