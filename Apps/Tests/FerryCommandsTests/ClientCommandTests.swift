import ArgumentParser
import FerryClient
import FerryConsole
import FerryServer
import Foundation
import Logging
import ServerTestSupport
import Synchronization
import SyncCore
import Testing
import Transport

@testable import FerryCommands

/// Collects what commands print.
final class Transcript: Sendable {
    private let text = Mutex("")
    var value: String { text.withLock { $0 } }

    func append(_ line: String) { text.withLock { $0 += line } }

    var output: CommandOutput { output(.table) }

    func output(_ format: OutputFormat) -> CommandOutput {
        CommandOutput(format: format, showsProgress: false) { [self] line in text.withLock { $0 += line } }
    }
}

/// A reference server in-process on a free loopback port, tables soft-deleting.
func startServer() async throws -> ReferenceServer {
    var logger = Logger(label: "ferry.cli-test")
    logger.logLevel = .critical
    var configuration = ServerConfiguration(host: "127.0.0.1", port: 0, logger: logger)
    configuration.dynamicTableDefaults.softDelete = true
    return try await ReferenceServer.start(
        configuration, storage: try await ServerDatabase.memory.open(logger: logger), ownsStorage: true)
}

/// A line editor reading `script` from a pipe, as the REPL reads a piped session; close the
/// returned descriptor afterwards.
func scriptedEditor(_ script: String) throws -> (LineEditor, Int32) {
    var pipe: [Int32] = [0, 0]
    guard Foundation.pipe(&pipe) == 0 else { throw ClientError(.failed, "pipe() failed") }
    let bytes = Array((script + "\n").utf8)
    _ = bytes.withUnsafeBytes { write(pipe[1], $0.baseAddress, $0.count) }
    close(pipe[1])
    return (LineEditor(input: pipe[0], output: 1), pipe[0])
}

/// A REPL session with `server`, keeping conflicts, its stores in a new temporary directory (the
/// caller removes it), on the device `device`; what it prints goes to the transcript.
func replSession(_ server: ReferenceServer, device: String) async throws -> (ReplSession, Transcript, String) {
    let directory = try temporaryDirectory()
    let transcript = Transcript()
    let session = try ReplSession(
        server: ServerSettings(url: URL(string: server.url)!), policy: .keep, stores: directory,
        output: transcript.output)
    try await session.use(device, store: nil)
    return (session, transcript, directory)
}

func temporaryDirectory() throws -> String {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-cli-" + UUID().uuidString).path
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

@Suite("ferry client commands", .timeLimit(.minutes(10)))
struct ClientCommandTests {
    /// Issue 32: the help of `--conflicts` offered `fail`, which was then refused. Every policy it
    /// names now parses, and it names every policy.
    @Test func theConflictPoliciesTheHelpOffersAreAccepted() async throws {
        let help = try await FerryBinaryTests.run(["push", "--help"])
        let text = help.output.replacingOccurrences(of: "\n", with: " ")
            .replacingOccurrences(of: #"\s+"#, with: " ", options: .regularExpression)
        let offered = try #require(text.range(of: "What a push does with a conflict:")).upperBound
        let named = text[offered...].prefix { $0 != "." }
            .replacingOccurrences(of: #"\([^)]*\)"#, with: "", options: .regularExpression)
            .replacingOccurrences(of: " or ", with: ", ")
            .split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        #expect(Set(named) == Set(ConflictPolicy.allCases.map(\.rawValue)), "\(named)")
        for policy in named { #expect(ConflictPolicy(rawValue: policy) != nil, "\(policy) is offered, not accepted") }
        let refused = try await FerryBinaryTests.run([
            "push", "--store", "memory", "--conflicts", "fail",
        ])
        #expect(refused.status == 64)
        #expect(refused.errors.contains("keep, server, client, merge"), "\(refused.errors)")
    }

    @Test func theCommandTreeParsesEveryClientCommand() throws {
        let query = try FerryCommand.parseAsRoot([
            "query", "todo", "--filter", "done eq false", "--orderby", "title desc", "--top", "5", "--store", "memory",
            "--json",
        ])
        let parsed = try #require(query as? QueryCommand)
        #expect(parsed.table == "todo" && parsed.top == 5 && parsed.client.json)
        #expect(try FerryCommand.parseAsRoot(["push", "--protocol", "2"]) is PushCommand)
        #expect(try FerryCommand.parseAsRoot(["pull", "todo", "--query-id", "all"]) is PullCommand)
        #expect(try FerryCommand.parseAsRoot(["purge", "todo", "--force"]) is PurgeCommand)
        #expect(try FerryCommand.parseAsRoot(["conflicts", "resolve", "e1", "--take", "server"]) is ConflictsCommand)
        #expect(try FerryCommand.parseAsRoot(["repl", "--stores", "memory"]) is ReplCommand)
        #expect(try FerryCommand.parseAsRoot(["demo"]) is DemoCommand)
        #expect(throws: (any Error).self) { try FerryCommand.parseAsRoot(["frobnicate"]) }
        #expect(throws: (any Error).self) { try FerryCommand.parseAsRoot(["insert", "todo"]) }
    }

    @Test func commandsRunOnADeviceAndPrintTablesOrJSON() async throws {
        let device = try Device(name: "test", store: .memory, server: nil)
        let transcript = Transcript()
        var insert = try #require(
            try FerryCommand.parseAsRoot(["insert", "todo", #"{"id":"a","title":"Milk","done":false}"#])
                as? InsertCommand)
        try await insert.execute(on: device, output: transcript.output)
        let update = try #require(
            try FerryCommand.parseAsRoot(["update", "todo", "a", #"{"done":true}"#]) as? UpdateCommand)
        try await update.execute(on: device, output: transcript.output)
        #expect(try await device.item("todo", id: "a")?["done"] == true)
        #expect(try await device.item("todo", id: "a")?["title"] == "Milk")

        let json = Transcript()
        let query = try #require(try FerryCommand.parseAsRoot(["query", "todo", "--json"]) as? QueryCommand)
        try await query.execute(on: device, output: json.output(.json))
        let parsed = try JSONValue(parsing: json.value.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(parsed == [["id": "a", "title": "Milk", "done": true]])
        #expect(transcript.value.contains("Milk"))

        let get = try #require(try FerryCommand.parseAsRoot(["get", "todo", "zzz"]) as? GetCommand)
        let missing = await #expect(throws: ClientError.self) {
            try await get.execute(on: device, output: transcript.output)
        }
        #expect(missing?.code == .notFound)
        insert = try #require(try FerryCommand.parseAsRoot(["insert", "todo", "{not json"]) as? InsertCommand)
        let bad = await #expect(throws: ClientError.self) {
            try await insert.execute(on: device, output: transcript.output)
        }
        #expect(bad?.code == .usage)
        #expect(bad?.description.contains("\n") == false)
        try await device.close()
    }

    /// The REPL read from a pipe: two devices, offline edits, a restart, a conflict and its resolution.
    @Test func theReplSaysWhatItDoesNotKnow() async throws {
        let transcript = Transcript()
        let session = try ReplSession(server: nil, policy: .keep, stores: "memory", output: transcript.output)
        try await session.use("phone", store: nil)
        for (line, expected) in [
            ("help nosuch", "no command 'nosuch'"), ("psuh", "did you mean 'push'?"),
            ("help qurey", "did you mean 'query'?"), ("frobnicate", "unknown command 'frobnicate'"),
        ] {
            do {
                try await session.execute(line)
                Issue.record("'\(line)' was accepted")
            } catch {
                #expect("\(ClientError.from(error))".contains(expected), "\(line): \(ClientError.from(error))")
            }
        }
        try await session.execute("help push")
        #expect(transcript.value.contains("USAGE") || transcript.value.contains("Usage"), "\(transcript.value)")
        #expect(!Suggestion.hint(for: "frobnicate", among: ["push", "pull"]).contains("did you mean"))
        #expect(Suggestion.distance("kitten", "sitting") == 3)
    }

    @Test func aScriptedReplSessionSyncsTwoDevicesThroughAConflict() async throws {
        let server = try await startServer()
        let (session, transcript, directory) = try await replSession(server, device: "phone")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let script = """
            offline
            insert todo '{"id":"milk","title":"Milk"}'
            push
            restart
            status
            online
            push
            use tablet
            pull todo --query-id all
            update todo milk '{"title":"Oat milk"}'
            push
            use phone
            update todo milk '{"title":"Milk, 2 litres"}'
            push
            conflicts
            conflicts resolve milk --take change --operation update --item '{"id":"bread","title":"Bread"}'
            conflicts resolve milk --take mine
            push
            use tablet
            pull todo --query-id all
            get todo milk
            devices
            exit
            """
        let (editor, input) = try scriptedEditor(script)
        #expect(!editor.isInteractive)
        let failed = await session.run(editor: editor)
        close(input)
        let text = transcript.value
        #expect(failed, "the offline push and the conflicting push fail, so a scripted session reports failure")
        #expect(text.contains("ferry(phone)> offline"))
        #expect(text.contains("the device is offline"))
        // The hint once, and the operation that never left the device is waiting, not sent.
        #expect(text.components(separatedBy: "say `online` to reconnect").count == 2, "\(text)")
        #expect(text.split(separator: "\n").contains { $0.contains("milk") && $0.hasSuffix("waiting") }, "\(text)")
        #expect(!text.contains("inFlight"), "\(text)")
        #expect(text.contains("1 queued operation"))
        #expect(text.contains("pushed 1 operation"))
        #expect(text.contains("1 failed (see `conflicts`)"))
        // A change naming another item is refused with what to do instead.
        #expect(text.contains(#"--item names id "bread", but the error is about 'milk'"#), "\(text)")
        #expect(text.contains(#"leave "id" out of --item"#), "\(text)")
        // The push's own conflict view shows the base and who changed what, as `conflicts` does.
        let pushed = try #require(text.range(of: "1 failed (see `conflicts`)"))
        let listed = try #require(text.range(of: "ferry(phone)> conflicts\n"))
        #expect(text[pushed.upperBound..<listed.lowerBound].contains("changed by"), "\(text)")
        #expect(!text.contains("error: 1 operation failed"), "said once, by the push itself: \(text)")
        #expect(text.contains("resolved"))
        #expect(text.contains("Milk, 2 litres"))
        let onServer = try await HTTPRemote(HTTPRemote.Configuration(serverURL: URL(string: server.url)!))
            .onlineTable("todo").item(id: "milk")
        #expect(onServer?["title"] == "Milk, 2 litres")
        try await server.shutdown()
    }

    @Test func shellWordsSplitLikeAShell() throws {
        #expect(
            try ShellWords.split(#"insert todo '{"a": 1}' "x y" z\ w"#) == [
                "insert", "todo", #"{"a": 1}"#, "x y", "z w",
            ])
        #expect(try ShellWords.split("  ") == [])
        // Trailing comments, as the README's REPL tour writes them; '#' inside a word or quotes stays.
        #expect(try ShellWords.split("push                       # fails: the phone is offline") == ["push"])
        #expect(try ShellWords.split("# only a comment") == [])
        #expect(
            try ShellWords.split(#"insert todo '{"id":"a#1","t":"x # y"}' # note"#)
                == ["insert", "todo", #"{"id":"a#1","t":"x # y"}"#])
        #expect(try ShellWords.split("get todo a#1") == ["get", "todo", "a#1"])
        // Raw JSON needs no quoting: brackets and quotes inside its strings are text.
        #expect(
            try ShellWords.split(#"insert todo {"title":"x y # } ]","tags":["a b"]} # note"#)
                == ["insert", "todo", #"{"title":"x y # } ]","tags":["a b"]}"#])
        #expect(
            try ShellWords.split(#"update todo milk {"q":"say \"hi\" {"}"#) == [
                "update", "todo", "milk", #"{"q":"say \"hi\" {"}"#,
            ])
        #expect(throws: ClientError.self) { try ShellWords.split(#"insert todo {"title":"x""#) }
        #expect(throws: ClientError.self) { try ShellWords.split("'open") }
    }
}

/// The built `ferry` binary, run as a user would.
@Suite("ferry binary", .timeLimit(.minutes(10)))
struct FerryBinaryTests {
    static func ferryURL() -> URL? {
        let executable = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        var directory = executable.deletingLastPathComponent()
        for _ in 0..<4 {
            let candidate = directory.appendingPathComponent("ferry")
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
            directory = directory.deletingLastPathComponent()
        }
        return nil
    }

    /// Runs the binary to its end, off the cooperative pool.
    /// Runs `ferry` with `arguments`, and `environment` added to the test's own.
    static func run(_ arguments: [String], environment: [String: String] = [:]) async throws -> (
        status: Int32, output: String, errors: String
    ) {
        try await offThePool { try runBlocking(arguments, environment: environment) }
    }

    private static func runBlocking(_ arguments: [String], environment: [String: String]) throws -> (
        status: Int32, output: String, errors: String
    ) {
        let process = Process()
        guard let url = ferryURL() else {
            throw ClientError(.notFound, "the ferry executable was not built beside the tests")
        }
        process.executableURL = url
        process.arguments = arguments
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let out = output.fileHandleForReading.readDataToEndOfFile()
        let err = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: out, as: UTF8.self), String(decoding: err, as: UTF8.self))
    }

    @Test func theDemoRunsFromStartToEnd() async throws {
        let result = try await Self.run(["demo"])
        #expect(result.status == 0, "\(result.errors)")
        #expect(result.output.contains("phone, tablet and server hold the same 3 todos"), "\(result.output)")
        // The conflict step shows what each device changed against the base.
        #expect(result.output.contains("changed by"), "\(result.output)")
        #expect(
            result.output.split(separator: "\n").contains { $0.contains("title") && $0.hasSuffix("both") },
            "\(result.output)")
    }

    @Test func failuresAreOneLineWithAnExitCode() async throws {
        let result = try await Self.run(["get", "todo", "nothing", "--store", "memory"])
        #expect(result.status == 5)
        #expect(result.errors.hasPrefix("error: no item 'nothing' in 'todo'"))
        #expect(result.errors.split(separator: "\n").count == 1)
        let usage = try await Self.run(["insert", "todo", "[1]", "--store", "memory"])
        #expect(usage.status == 64)
        let noAuthority = try await Self.run([
            "remote", "tables", "--server", "https://127.0.0.1:9", "--ca-file", "/nonexistent/ca.pem",
        ])
        #expect(noAuthority.status == 64)
        #expect(
            noAuthority.errors.hasPrefix("error: cannot read the authority's certificate '/nonexistent/ca.pem'"),
            "\(noAuthority.errors)")
    }
}

@Suite("ferry import", .timeLimit(.minutes(10)))
struct ImportCommandTests {
    @Test func importsJSONLinesAndArraysAtomically() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "ferry-import-" + UUID().uuidString)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = "sqlite:" + directory.appendingPathComponent("device.ferry").path
        let lines = directory.appendingPathComponent("items.jsonl").path
        try (0..<2_500).map { #"{"id":"i\#($0)","n":\#($0)}"# }.joined(separator: "\n").write(
            toFile: lines, atomically: true, encoding: .utf8)
        let array = directory.appendingPathComponent("items.json").path
        try #"[{"title":"a"},{"title":"b"}]"#.write(toFile: array, atomically: true, encoding: .utf8)
        let bad = directory.appendingPathComponent("bad.jsonl").path
        try "{\"id\":\"x1\"}\n\n{\"id\": oops}\n".write(toFile: bad, atomically: true, encoding: .utf8)

        let imported = try await FerryBinaryTests.run(["import", "todo", lines, "--store", store])
        #expect(imported.status == 0, "\(imported.errors)")
        #expect(imported.output.contains("imported 2,500 items into 'todo'"), "\(imported.output)")
        #expect(
            try await FerryBinaryTests.run(["import", "todo", array, "--store", store, "--json"]).output.contains(
                #""imported":2"#))

        // A bad line: named by its number, nothing imported.
        let refused = try await FerryBinaryTests.run(["import", "todo", bad, "--store", store])
        #expect(refused.status == 64)
        #expect(refused.errors.hasPrefix("error: line 3 is not JSON"), "\(refused.errors)")
        // An id already stored, on the first line: the whole file is refused, nothing half-imported.
        let again = try await FerryBinaryTests.run(["import", "todo", lines, "--store", store])
        #expect(again.status == 64)
        #expect(again.errors.contains("line 1 was not imported"), "\(again.errors)")
        let count = try await FerryBinaryTests.run(["status", "--store", store, "--json"])
        #expect(
            count.output.contains(#""todo":2502"#), "2,500 + 2 queued inserts, no more: \(count.output.prefix(200))")

        // An integer beyond 64 bits would be stored as a double without its last digits: refused,
        // with its line, and nothing imported; in a string it is text and passes.
        let wide = directory.appendingPathComponent("wide.jsonl").path
        try "{\"id\":\"w1\",\"n\":\"12345678901234567890\"}\n{\"id\":\"w2\",\"n\":12345678901234567890}\n".write(
            toFile: wide, atomically: true, encoding: .utf8)
        let widened = try await FerryBinaryTests.run(["import", "todo", wide, "--store", store])
        #expect(widened.status == 64)
        #expect(
            widened.errors.hasPrefix(
                "error: line 2 of the file: the integer 12345678901234567890 does not fit 64 bits; it would be stored as the double 1.2345678901234567e+19 and lose digits; nothing was imported"
            ), "\(widened.errors)")
        let inserted = try await FerryBinaryTests.run(
            ["insert", "todo", #"{"id":"w3","big":[1,-99999999999999999999]}"#, "--store", store])
        #expect(inserted.status == 64)
        #expect(
            inserted.errors.contains("the integer -99999999999999999999 does not fit 64 bits"), "\(inserted.errors)")
        #expect(inserted.errors.contains(#"(quote it to keep every digit as text: "-99999999999999999999")"#))
    }

    /// The scan finds integer literals outside strings only, and leaves fractions, exponents and
    /// integers that fit alone.
    @Test func wideIntegersAreFoundOutsideStrings() {
        #expect(wideInteger(in: #"{"a":9223372036854775807,"b":-9223372036854775808}"#) == nil)
        #expect(wideInteger(in: #"{"a":1.5e300,"b":12345678901234567890.0,"c":1E+30,"d":-2e-5}"#) == nil)
        #expect(wideInteger(in: #"{"s":"9223372036854775808 \" 99999999999999999999"}"#) == nil)
        #expect(wideInteger(in: "{\"a\":1,\n\"b\":9223372036854775808}")! == ("9223372036854775808", 2))
        #expect(wideInteger(in: #"[-9223372036854775809]"#)?.0 == "-9223372036854775809")
    }
}

@Suite("ferry pull: the summary")
struct PullSummaryTests {
    /// Every item the server sent is accounted for: the server's deletions of items this device
    /// never had are said, not left out of "3 items: 2 written, 0 deleted".
    @Test func deletionsOfItemsNotHereAreCounted() {
        var result = PullResult()
        result.pages = 1
        result.items.received = 3
        result.items.upserted = 2
        #expect(
            Rendering.pull(result, table: "todo", format: .table)
                == "pulled 3 items of 'todo' in 1 page: 2 written, 0 deleted, 1 deletion of items not on this device")
        result.items.received = 2
        #expect(
            Rendering.pull(result, table: "todo", format: .table)
                == "pulled 2 items of 'todo' in 1 page: 2 written, 0 deleted")
    }
}
