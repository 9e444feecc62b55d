import ArgumentParser
import FerryConsole
import FerryServer
import Foundation
import ServerTestSupport
import SyncCore
import Synchronization
import Testing
import Transport

@testable import FerryClient
@testable import FerryCommands

/// Issue 32: what bothered a new user of the CLI, each point as the user meets it (the binary as a
/// process where it can be).
@Suite("ferry, second pass", .timeLimit(.minutes(10)))
struct SecondPassCommandTests {
    static func run(_ arguments: [String]) async throws -> (status: Int32, output: String, errors: String) {
        try await FerryBinaryTests.run(arguments)
    }

    /// A fresh directory for stores, removed by the caller.
    static func directory() throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-32-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    /// The long options a command's help lists.
    static func options(of command: String) async throws -> Set<String> {
        let help = try await run([command, "--help"])
        return Set(ReplHelp.options(in: help.output) + ReplHelp.hidden.filter { help.output.contains($0 + " ") })
    }

    @Test func eachCommandListsOnlyTheOptionsItUses() async throws {
        for local in ["query", "get", "insert", "update", "delete", "import", "purge", "conflicts"] {
            let options = try await Self.options(of: local)
            #expect(options.contains("--store"), "\(local): \(options)")
            for unused in ["--server", "--token", "--protocol", "--conflicts", "--ca-file"] {
                #expect(!options.contains(unused), "\(local) lists \(unused)")
            }
        }
        let status = try await Self.options(of: "status")
        #expect(status.contains("--server") && !status.contains("--conflicts"), "\(status)")
        for syncing in ["push", "pull", "watch"] {
            let options = try await Self.options(of: syncing)
            #expect(options.isSuperset(of: ["--store", "--server", "--token", "--conflicts"]), "\(syncing)")
        }
        // An option a command does not take is refused in Ferry's words.
        let refused = try await Self.run(["query", "todo", "--server", "http://127.0.0.1:9", "--store", "memory"])
        #expect(refused.status == 64)
        #expect(refused.errors.hasPrefix("error: unknown option '--server'"), "\(refused.errors)")
    }

    @Test func usageErrorsSpeakFerrysOneLineStyle() async throws {
        for arguments in [
            ["query", "todo", "--bogus"], ["insert"], ["query", "todo", "--top", "many"],
            ["remote", "query", "todo", "--top", "x"],
        ] {
            let result = try await Self.run(arguments)
            #expect(result.status == 64, "\(arguments)")
            #expect(result.errors.hasPrefix("error: "), "\(arguments): \(result.errors)")
            #expect(!result.errors.contains("Error:") && !result.errors.contains("Usage:"), "\(result.errors)")
            #expect(result.errors.split(separator: "\n").count == 1, "\(result.errors)")
        }
        let remote = try await Self.run(["remote", "query", "todo", "--top", "x"])
        #expect(remote.errors.contains("`ferry remote query --help`"), "\(remote.errors)")
        // With --json (or --format json), a command line that did not parse is one JSON document
        // too, as every other failure (it was the plain line).
        for arguments in [
            ["get", "todo", "t1", "--bogus", "--json"], ["query", "todo", "--top", "x", "--format", "json"],
            ["insert", "--json"],
        ] {
            let result = try await Self.run(arguments)
            #expect(result.status == 64, "\(arguments)")
            let document = try JSONValue(parsing: result.errors)
            let error = document["error"]
            #expect(error?["exit"] == .int(64), "\(result.errors)")
            #expect(error?["message"]?.stringValue?.isEmpty == false, "\(result.errors)")
            #expect(error?["hint"]?.stringValue?.hasSuffix("--help` lists the options") == true, "\(result.errors)")
        }
        // Help and the version still print on standard output with exit 0.
        let help = try await Self.run(["query", "--help"])
        #expect(help.status == 0 && help.output.contains("USAGE: ferry query"))
        let version = try await Self.run(["--version"])
        #expect(version.status == 0 && !version.output.isEmpty)
    }

    @Test func aMistypedTableOrFieldIsSaidNotAnsweredEmpty() async throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = "sqlite:" + directory.appendingPathComponent("s.sqlite").path
        let inserted = try await Self.run([
            "insert", "todo", #"{"id":"a","title":"Milk","done":false}"#, "--store", store,
        ])
        #expect(inserted.status == 0, "\(inserted.errors)")

        let table = try await Self.run(["query", "todoo", "--store", store])
        #expect(table.status == 5)
        #expect(table.errors.contains("the store has no table 'todoo'"), "\(table.errors)")
        #expect(table.errors.contains("did you mean 'todo'?"), "\(table.errors)")
        let get = try await Self.run(["get", "todoo", "a", "--store", store])
        #expect(get.status == 5 && get.errors.contains("did you mean 'todo'?"), "\(get.errors)")

        let filter = try await Self.run(["query", "todo", "--filter", "titel eq 'Milk'", "--store", store])
        #expect(filter.status == 64)
        #expect(filter.errors.contains("no item of 'todo' has a field 'titel'"), "\(filter.errors)")
        #expect(filter.errors.contains("did you mean 'title'?"), "\(filter.errors)")
        let select = try await Self.run(["query", "todo", "--select", "titel", "--store", store])
        #expect(select.status == 64 && select.errors.contains("did you mean 'title'?"), "\(select.errors)")
        // A known field that matches nothing is an empty answer, as it should be.
        let nothing = try await Self.run(["query", "todo", "--filter", "title eq 'Bread'", "--store", store])
        #expect(nothing.status == 0 && nothing.output.contains("(no items)"), "\(nothing.errors)")

        // --count prints the count alone.
        let count = try await Self.run(["query", "todo", "--count", "--store", store])
        #expect(count.status == 0 && count.output == "1 item\n", "\(count.output)")
        let countJSON = try await Self.run(["query", "todo", "--count", "--json", "--store", store])
        #expect(try JSONValue(parsing: countJSON.output) == ["count": 1])
    }

    @Test func theServerSaysWhichTablesItHas() async throws {
        let server = try await startServer()
        defer { Task { try? await server.shutdown() } }
        let remote = HTTPRemote(HTTPRemote.Configuration(serverURL: URL(string: server.url)!))
        _ = try await remote.onlineTable("todo").insert(["id": "a", "title": "Milk"])
        let result = try await Self.run(["remote", "query", "todoo", "--server", server.url])
        #expect(result.status == 5)
        #expect(result.errors.contains("the server has no table 'todoo'"), "\(result.errors)")
        #expect(result.errors.contains("did you mean 'todo'?"), "\(result.errors)")
        let empty = try await Self.run(["remote", "query", "todo", "--filter", "title eq 'x'", "--server", server.url])
        #expect(empty.status == 0 && empty.output.contains("(no items)"), "\(empty.errors)")
    }

    /// A table pulled empty (or emptied by its pull) is a table of the store: `query` says it has
    /// no items, not that the store has no such table (exit 5).
    @Test func aTablePulledEmptyIsQueriedEmpty() async throws {
        let server = try await startServer()
        defer { Task { try? await server.shutdown() } }
        let remote = HTTPRemote(HTTPRemote.Configuration(serverURL: URL(string: server.url)!))
        _ = try await remote.onlineTable("todo").insert(["id": "a", "title": "Milk"])
        try await remote.onlineTable("todo").delete(id: "a", ifVersion: nil)
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = "sqlite:" + directory.appendingPathComponent("s.sqlite").path
        let pull = try await Self.run(["pull", "todo", "--store", store, "--server", server.url])
        #expect(pull.status == 0, "\(pull.errors)")
        let query = try await Self.run(["query", "todo", "--store", store])
        #expect(query.status == 0 && query.output.contains("(no items)"), "\(query.status) \(query.errors)")
        // A table never pulled nor written is still unknown.
        let other = try await Self.run(["query", "todoo", "--store", store])
        #expect(other.status == 5 && other.errors.contains("no table 'todoo'"), "\(other.errors)")
        // And a watch needs a time to run.
        let watch = try await Self.run(["watch", "todo", "--store", store, "--seconds", "0"])
        #expect(watch.status == 64 && watch.errors.contains("--seconds must be more than 0"), "\(watch.errors)")
        // A selected field no item has is said, not shown as an empty column.
        _ = try await Self.run(["insert", "todo", #"{"id":"b","title":"Bread"}"#, "--store", store])
        let select = try await Self.run(["watch", "todo", "--store", store, "--select", "titel", "--seconds", "1"])
        #expect(select.status == 64 && select.errors.contains("did you mean 'title'?"), "\(select.errors)")
    }

    @Test func aFailedCommandLeavesNoNewStoreBehind() async throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let sqlite = directory.appendingPathComponent("pulled.sqlite").path
        let pull = try await Self.run(["pull", "todo", "--store", "sqlite:" + sqlite, "--server", "http://127.0.0.1:9"])
        #expect(pull.status == 3, "\(pull.errors)")
        let lmdb = directory.appendingPathComponent("pulled.lmdb").path
        let lmdbPull = try await Self.run(["pull", "todo", "--store", "lmdb:" + lmdb, "--server", "http://127.0.0.1:9"])
        #expect(lmdbPull.status == 3, "\(lmdbPull.errors)")
        let typo = directory.appendingPathComponent("typo.sqlite").path
        let insert = try await Self.run(["insert", "todo", "{title:Milk}", "--store", "sqlite:" + typo])
        #expect(insert.status == 64)
        let left = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        #expect(left.isEmpty, "\(left)")
        // A store that was there stays, whatever fails.
        let made = try await Self.run(["insert", "todo", #"{"id":"a"}"#, "--store", "sqlite:" + typo])
        #expect(made.status == 0)
        let failed = try await Self.run(["insert", "todo", "{bad", "--store", "sqlite:" + typo])
        #expect(failed.status == 64)
        #expect(FileManager.default.fileExists(atPath: typo))
    }

    @Test func badJSONGetsAHintThatFitsIt() async throws {
        let eaten = try await Self.run(["insert", "todo", "{title:Milk}", "--store", "memory"])
        #expect(eaten.errors.contains("the shell removed the double quotes"), "\(eaten.errors)")
        let trailing = try await Self.run(["insert", "todo", #"{"title":"Milk",}"#, "--store", "memory"])
        #expect(trailing.status == 64)
        #expect(!trailing.errors.contains("quote it"), "\(trailing.errors)")
        #expect(!trailing.errors.contains("shell removed"), "\(trailing.errors)")
    }

    @Test func importNamesRepeatedIdsAndCSV() async throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let repeated = directory.appendingPathComponent("repeated.jsonl")
        try #"{"id":"q"}"#.appending("\n{\"id\":\"r\"}\n{\"id\":\"q\"}\n").write(
            to: repeated, atomically: true, encoding: .utf8)
        let store = "sqlite:" + directory.appendingPathComponent("s.sqlite").path
        let result = try await Self.run(["import", "todo", repeated.path, "--store", store])
        #expect(result.status == 64)
        #expect(result.errors.contains("line 3 repeats the id 'q' of line 1"), "\(result.errors)")
        #expect(!result.errors.contains("already exists"), "\(result.errors)")

        // "café" composed and decomposed are two ids (the server and the stores keep both).
        let forms = directory.appendingPathComponent("forms.jsonl")
        try "{\"id\":\"caf\u{E9}\"}\n{\"id\":\"cafe\u{301}\"}\n".write(to: forms, atomically: true, encoding: .utf8)
        let formsResult = try await Self.run(["import", "todo", forms.path, "--store", store])
        #expect(formsResult.status == 0, "\(formsResult.errors)")
        let listed = try await Self.run(["query", "todo", "--store", store, "--json"])
        // By bytes: `String.contains` would find either form in the other.
        let bytes = Data(listed.output.utf8)
        #expect(bytes.range(of: Data("caf\u{E9}".utf8)) != nil, "\(listed.output)")
        #expect(bytes.range(of: Data("cafe\u{301}".utf8)) != nil, "\(listed.output)")

        let csv = directory.appendingPathComponent("todo.csv")
        try "id,title\na,Milk\n".write(to: csv, atomically: true, encoding: .utf8)
        let csvResult = try await Self.run(["import", "todo", csv.path, "--store", store])
        #expect(csvResult.status == 64)
        #expect(csvResult.errors.contains("looks like CSV"), "\(csvResult.errors)")
    }

    @Test func longFailureMessagesAreWholeWhenPipedAndWithX() throws {
        let message = String(repeating: "the server refused this update because the item changed meanwhile; ", count: 2)
        let error = OperationErrorRecord(
            id: "e1", operationID: 1, table: "todo", itemID: "milk", kind: .update, statusCode: 412,
            message: message, clientItem: nil, serverItem: nil)
        // Piped (no width): nothing is cut.
        let piped = Rendering.errors([error], format: .table)
        #expect(piped.contains(message.trimmingCharacters(in: .whitespaces)), "\(piped)")
        // At 60 columns the table fits and says how to read the rest; -x prints it whole.
        let narrow = Rendering.errors([error], format: .table, width: 60)
        let lines = narrow.split(separator: "\n")
        #expect(lines.allSatisfy { TextTable.displayWidth(String($0)) <= 60 }, "\(narrow)")
        #expect(narrow.contains("`conflicts -x`"), "\(narrow)")
        let expanded = Rendering.errors([error], format: .table, width: 60, expanded: true)
        #expect(expanded.contains(message.trimmingCharacters(in: .whitespaces)), "\(expanded)")
        #expect(try FerryCommand.parseAsRoot(["conflicts", "-x"]) is ConflictsCommand)
        // A push's failures fit the width too.
        var result = PushResult()
        result.pushed = 100_000
        result.failed = [error]
        let push = Rendering.push(result, format: .table, width: 60)
        #expect(push.hasPrefix("pushed 100,000 operations; 1 failed"), "\(push)")
        #expect(push.split(separator: "\n").allSatisfy { TextTable.displayWidth(String($0)) <= 60 }, "\(push)")
    }

    @Test func statusFitsNarrowTerminalsAndSaysWhereThePullStands() throws {
        let now = Timestamp(millisecondsSince1970: 1_764_162_584_000)
        let pulledAt = Timestamp(millisecondsSince1970: now.millisecondsSince1970 - 300_000)
        let token = JSONValue.object([
            "updatedAt": .string(pulledAt.iso8601), "id": .string("milk"), "filter": .string("done eq false"),
        ]).serialized()
        let status = DeviceStatus(
            device: "cli", store: "sqlite:/a/long/path/to/the/store/of/this/device.sqlite", online: true,
            queued: [:], operations: [], errors: [], deltaTokens: ["todo": ["all": token, "$attachments": token]])
        let text = Rendering.status(status, format: .table, now: now, width: 60)
        #expect(text.contains("(attachment rows)") && !text.contains("$attachments"), "\(text)")
        #expect(!text.contains("{\"filter\""), "\(text)")
        #expect(text.contains("5 min ago") && text.contains("done eq false"), "\(text)")
        #expect(text.split(separator: "\n").allSatisfy { TextTable.displayWidth(String($0)) <= 60 }, "\(text)")
        // A token another client wrote shows as it is.
        #expect(Rendering.deltaToken("opaque-42", now: now) == ["opaque-42", ""])
    }

    @Test func watchSelectsFieldsAndItsJSONStartsWithTheSyncedRows() async throws {
        let server = try await startServer()
        defer { Task { try? await server.shutdown() } }
        let url = URL(string: server.url)!
        let remote = HTTPRemote(HTTPRemote.Configuration(serverURL: url))
        _ = try await remote.onlineTable("todo").insert(["id": "a", "title": "Milk", "done": false])

        // A SQLite file too: there the observation's rows came after the sync's status, and the
        // first view was `[]` (JSON) or "0 rows; everything synced" (text) every time.
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-watch-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        for (index, (store, format)) in [
            (StoreLocation.memory, OutputFormat.json), (.sqlite(directory.path + "/w0.sqlite"), .json),
            (.sqlite(directory.path + "/w1.sqlite"), .table),
        ].enumerated() {
            let watcher = try Device(name: "watcher\(index)", store: store, server: ServerSettings(url: url))
            let transcript = Transcript()
            let watch = try #require(
                try FerryCommand.parseAsRoot(["watch", "todo", "--seconds", "20"]) as? WatchCommand)
            var output = transcript.output
            output.format = format
            let formatted = output
            let watching = Task { try await watch.execute(on: watcher, output: formatted) }
            try await eventually("the server's row") { transcript.value.contains("Milk") }
            watching.cancel()
            _ = await watching.result
            try await watcher.close()
            // The first view is the table as the server has it, not the empty store before the pull.
            let first = try #require(transcript.value.split(separator: "\n").first)
            if format == .json {
                #expect(first.contains("Milk"), "\(store): \(transcript.value)")
                #expect(!transcript.value.contains("[]"), "\(store): \(transcript.value)")
            } else {
                #expect(!transcript.value.contains("0 rows; everything synced"), "\(store): \(transcript.value)")
            }
        }

        let local = try Device(name: "local", store: .memory, server: nil)
        _ = try await local.insert("todo", ["id": "b", "title": "Bread", "done": true, "notes": "wholemeal"])
        let selecting = Transcript()
        let selected = try #require(
            try FerryCommand.parseAsRoot(["watch", "todo", "--select", "title,done", "--seconds", "1"])
                as? WatchCommand)
        try await selected.execute(on: local, output: selecting.output)
        try await local.close()
        #expect(selecting.value.contains("title  done"), "\(selecting.value)")
        #expect(!selecting.value.contains("notes"), "\(selecting.value)")
    }

    /// Issue 32: the REPL measured the terminal once; now each command gets the width it has then.
    @Test func theReplFollowsAResizedTerminal() async throws {
        let width = Mutex(80)
        let transcript = Transcript()
        var output = transcript.output
        output.terminalWidth = 80
        output.measureWidth = { width.withLock { $0 } }
        let session = try ReplSession(server: nil, policy: .keep, stores: "memory", output: output)
        try await session.use("phone", store: nil)
        let title = String(repeating: "a long title ", count: 8)
        try await session.execute("insert todo '{\"id\":\"a\",\"title\":\"\(title)\"}'")
        let wide = transcript.value.count
        try await session.execute("query todo")
        let atEighty = String(transcript.value.dropFirst(wide))
        width.withLock { $0 = 40 }
        let narrowStart = transcript.value.count
        try await session.execute("query todo")
        let atForty = String(transcript.value.dropFirst(narrowStart))
        let widest = { (text: String) in
            text.split(separator: "\n").map { TextTable.displayWidth(String($0)) }.max() ?? 0
        }
        #expect(widest(atEighty) > 40 && widest(atEighty) <= 80, "\(atEighty)")
        #expect(widest(atForty) <= 40, "\(atForty)")
    }

    /// Issue 32: after a long push the progress line was left on the screen: the line drawn last
    /// came after the clear. Now the clear is the last thing written, and nothing follows it.
    @Test func aLongPushLeavesNoProgressLineBehind() async throws {
        let server = try await startServer()
        defer { Task { try? await server.shutdown() } }
        let device = try Device(name: "cli", store: .memory, server: ServerSettings(url: URL(string: server.url)!))
        let items = (0..<3_000).map { index -> JSONObject in ["id": .string("i\(index)"), "n": .int(Int64(index))] }
        _ = try await device.importItems("todo", items, names: { "item \($0)" }, progress: { _ in })
        let progress = Transcript()
        let transcript = Transcript()
        var output = transcript.output
        output.showsProgress = true
        output.writeProgress = { progress.append($0) }
        let push = try #require(try FerryCommand.parseAsRoot(["push"]) as? PushCommand)
        try await push.execute(on: device, output: output)
        let written = progress.value
        try await Task.sleep(for: .milliseconds(300))
        #expect(progress.value == written, "progress was drawn after the push ended")
        #expect(written.hasSuffix("\r\u{1B}[K"), "\(written.suffix(80))")
        #expect(transcript.value == "pushed 3,000 operations\n", "\(transcript.value)")
        try await device.close()
    }

    @Test func deletingWhatIsNotThereIsAnError() async throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = "sqlite:" + directory.appendingPathComponent("s.sqlite").path
        _ = try await Self.run(["insert", "todo", #"{"id":"a"}"#, "--store", store])
        let result = try await Self.run(["delete", "todo", "nosuch", "--store", store])
        #expect(result.status == 5, "\(result.errors)")
        #expect(result.errors.hasPrefix("error: table 'todo': no item with id 'nosuch'"), "\(result.errors)")
        #expect(!result.output.contains("deleted"))
    }

    /// Issue 32: `import` was silent for its first seconds while it read and checked the file.
    @Test func importSaysWhatItDoesBeforeItImports() async throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("todos.jsonl")
        let lines = (0..<25_000).map { #"{"id":"i\#($0)"}"# }.joined(separator: "\n")
        try lines.write(to: file, atomically: true, encoding: .utf8)
        let device = try Device(name: "cli", store: .memory, server: nil)
        let progress = Transcript()
        let transcript = Transcript()
        var output = transcript.output
        output.showsProgress = true
        output.writeProgress = { progress.append($0) }
        let command = try #require(try FerryCommand.parseAsRoot(["import", "todo", file.path]) as? ImportCommand)
        try await command.execute(on: device, output: output)
        try await device.close()
        let drawn = progress.value
        let reading = try #require(drawn.range(of: "reading \(file.path)…"))
        let checking = try #require(drawn.range(of: "checking: 20,000 lines read"))
        let importing = try #require(drawn.range(of: "importing 25,000 items…"))
        #expect(reading.upperBound <= checking.lowerBound && checking.upperBound <= importing.lowerBound)
        #expect(drawn.hasSuffix("\r\u{1B}[K"), "the last progress line is cleared")
        #expect(transcript.value.hasPrefix("imported 25,000 items into 'todo'"), "\(transcript.value)")
    }

    /// `--conflicts merge` said the local change was "sent again over the server's", as for
    /// `client`; a mistyped table was matched to another case first ('tod' → 'Todo').
    @Test func mergedConflictsAndNearNamesAreSaidRight() {
        let text = Rendering.resolvedConflicts([
            ResolvedConflict(table: "todo", itemID: "a", kind: .update, resolution: .useMerged(["id": "a"])),
            ResolvedConflict(table: "todo", itemID: "b", kind: .update, resolution: .useClient),
        ])
        #expect(text.contains("1 conflict merged: the local change was merged with the server's copy and sent"))
        #expect(text.contains("1 conflict settled for this device: its change was sent again over the server's"))
        #expect(Rendering.took(.useMerged([:])) == "merged")
        #expect(Suggestion.nearest(to: "tod", among: ["Todo", "todo"]) == "todo")
        #expect(Suggestion.nearest(to: "TOD", among: ["todo", "TODO"]) == "TODO")
    }
}
