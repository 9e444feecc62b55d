import ArgumentParser
import FerryClient
import FerryServer
import Foundation
import SyncCore
import Testing

@testable import FerryCommands

/// What a newcomer meets in the CLI: clear errors, tokens for a development server, items from files.
@Suite("ferry for newcomers")
struct NewcomerCommandTests {
    @Test func aFilterErrorPointsAtItsPositionOnce() throws {
        let result = try FerryBinaryTests.run(["query", "todo", "--filter", #"title eq "Milk""#, "--store", "memory"])
        #expect(result.status == 64)
        let lines = result.errors.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        #expect(lines.first?.hasPrefix("error: invalid query: $filter at 9: ") == true, "\(result.errors)")
        #expect(result.errors.components(separatedBy: "invalid query").count == 2, "\(result.errors)")
        #expect(lines.first?.contains("single quotes") == true, "\(result.errors)")
        #expect(lines.count >= 3 && lines[1] == #"  title eq "Milk""# && lines[2] == "           ^", "\(result.errors)")
    }

    @Test func aMistypedCommandGetsASuggestion() throws {
        #expect(FerryCommand.unknownCommandMessage(["pusj"])?.contains("did you mean 'push'?") == true)
        #expect(FerryCommand.unknownCommandMessage(["push", "--json"]) == nil)
        #expect(FerryCommand.unknownCommandMessage(["--help"]) == nil)
        #expect(FerryCommand.unknownCommandMessage(["help", "push"]) == nil)
        let result = try FerryBinaryTests.run(["qeury", "todo"])
        #expect(result.status == 64)
        #expect(
            result.errors
                == "error: unknown command 'qeury' (did you mean 'query'? `ferry --help` lists the commands)\n")
    }

    @Test func fileSystemFailuresAreOneLine() throws {
        let denied = ClientError.from(CocoaError(.fileWriteNoPermission, userInfo: [NSFilePathErrorKey: "ferry-repl"]))
        #expect(denied.description == "cannot use 'ferry-repl': permission denied")
        let missing = ClientError.from(CocoaError(.fileNoSuchFile, userInfo: [NSFilePathErrorKey: "/nope"]))
        #expect(missing.description == "cannot use '/nope': no such file or directory")
        // The REPL in a directory it cannot write to says so in one line.
        let result = try FerryBinaryTests.run(["repl", "--stores", "/proc/ferry-repl-test/x"])
        #expect(result.status == 1)
        #expect(result.errors.hasPrefix("error: cannot use '/proc/ferry-repl-test"), "\(result.errors)")
        #expect(!result.errors.contains("NSCocoaErrorDomain"))
    }

    @Test func jsonFailuresAreJSON() throws {
        let result = try FerryBinaryTests.run(["get", "todo", "nothing", "--store", "memory", "--json"])
        #expect(result.status == 5)
        let parsed = try JSONValue(parsing: result.errors.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(parsed.objectValue?["error"]?.objectValue?["exit"] == .int(5), "\(result.errors)")
        #expect(parsed.objectValue?["error"]?.objectValue?["message"]?.stringValue?.contains("nothing") == true)
    }

    @Test func readOnlyCommandsNeverCreateAStore() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        for command in [["query", "todo"], ["get", "todo", "x"], ["status"]] {
            let store = "sqlite:\(directory)/typo.sqlite"
            let result = try FerryBinaryTests.run(command + ["--store", store])
            #expect(result.status == 5, "\(command): \(result.errors)")
            #expect(result.errors.contains("no store at '\(store)'"), "\(result.errors)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory).isEmpty)
        // A write creates the store; a clean exit leaves no -wal/-shm beside it.
        let store = "sqlite:\(directory)/device.sqlite"
        #expect(try FerryBinaryTests.run(["insert", "todo", #"{"id":"a"}"#, "--store", store]).status == 0)
        #expect(try FerryBinaryTests.run(["query", "todo", "--store", store]).status == 0)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["device.sqlite"])
    }

    @Test func itemsComeFromFilesAndStandardInput() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let big = String(repeating: "x", count: 2_000_000)
        let path = directory + "/item.json"
        try Data(#"{"id":"big","note":"\#(big)"}"#.utf8).write(to: URL(fileURLWithPath: path))
        let device = try Device(name: "files", store: .memory, server: nil)
        let insert = try #require(try FerryCommand.parseAsRoot(["insert", "todo", "@" + path]) as? InsertCommand)
        try await insert.execute(on: device, output: Transcript().output)
        #expect(try await device.get("todo", id: "big")?["note"]?.stringValue?.count == 2_000_000)
        let missing = try #require(
            try FerryCommand.parseAsRoot(["insert", "todo", "@/no/such.json"]) as? InsertCommand)
        await #expect(throws: ClientError.self) { try await missing.execute(on: device, output: Transcript().output) }
        // In the REPL standard input is the session itself: '-' is refused there.
        let dash = try #require(try FerryCommand.parseAsRoot(["insert", "todo", "-"]) as? InsertCommand)
        await #expect(throws: ClientError.self) { try await dash.execute(on: device, output: Transcript().output) }
        try await device.close()

        // The CLI reads '-' from standard input.
        guard let url = FerryBinaryTests.ferryURL() else {
            Issue.record("the ferry executable was not built beside the tests")
            return
        }
        let store = "sqlite:\(directory)/device.sqlite"
        let process = Process()
        process.executableURL = url
        process.arguments = ["insert", "todo", "-", "--store", store, "--json"]
        let input = Pipe()
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        input.fileHandleForWriting.write(Data(#"{"id":"piped","title":"from stdin"}"#.utf8))
        try input.fileHandleForWriting.close()
        let printed = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        #expect(String(decoding: printed, as: UTF8.self).contains("from stdin"))
    }

    @Test func tokensForADevelopmentServer() throws {
        let secret = "a-development-secret-0123"
        let result = try FerryBinaryTests.run(["token", "--subject", "alice", "--secret", secret])
        #expect(result.status == 0, "\(result.errors)")
        let token = result.output.trimmingCharacters(in: .whitespacesAndNewlines)
        let identity = try TokenVerifier(secret: secret).verify(token)
        #expect(identity.subject == "alice")
        #expect(identity.expiresAt.map { $0 > Date() } == true)
        let short = try FerryBinaryTests.run(["token", "--subject", "alice", "--secret", "short"])
        #expect(short.status == 64)
        #expect(short.errors.contains("at least 16 bytes"))
        let help = try FerryBinaryTests.run(["serve", "--help"])
        let words = help.output.split(whereSeparator: \.isWhitespace).joined(separator: " ")
        #expect(words.contains("at least 16 bytes"), "\(help.output)")
    }
}
