import ArgumentParser
import FerryClient
import FerryConsole
import FerryServer
import Foundation
import ServerTestSupport
import SyncCore
import Testing
import Transport

@testable import FerryCommands

/// What a newcomer meets in the CLI: clear errors, tokens for a development server, items from files.
@Suite("ferry for newcomers", .timeLimit(.minutes(10)))
struct NewcomerCommandTests {
    @Test func aFilterErrorPointsAtItsPositionOnce() async throws {
        let result = try await FerryBinaryTests.run([
            "query", "todo", "--filter", #"title eq "Milk""#, "--store", "memory",
        ])
        #expect(result.status == 64)
        let lines = result.errors.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        #expect(lines.first?.hasPrefix("error: invalid query: $filter at 9: ") == true, "\(result.errors)")
        #expect(result.errors.components(separatedBy: "invalid query").count == 2, "\(result.errors)")
        #expect(lines.first?.contains("single quotes") == true, "\(result.errors)")
        #expect(lines.count >= 3 && lines[1] == #"  title eq "Milk""# && lines[2] == "           ^", "\(result.errors)")
    }

    /// A file the server refuses for its size fails every push: the failure says how to take it
    /// off the queue.
    @Test func aRefusedFileSaysHowToTakeItOffTheQueue() {
        let refused = RemoteError(
            status: 413,
            "uploading attachment 'big.bin' of 'notes/k1': the file is 30000000 bytes; maxFileSize is 1000000")
        let error = ClientError.from(SyncError(.remote, refused.message, underlying: refused))
        #expect(error.hint?.contains("ferry attachments rm") == true, "\(error)")
    }

    /// Schemes are case-insensitive; a query or fragment would land before the paths the client
    /// adds (`…:8080?x=1/tables/todo`), so it is refused in words.
    @Test func serverURLsAreTakenInAnyCaseOfTheirSchemeAndWithoutAQuery() throws {
        let upper = try ServerOptions.parse(["--server", "HTTP://127.0.0.1:8080/sync"]).serverSettings()
        #expect(upper?.url.absoluteString == "http://127.0.0.1:8080/sync")
        for text in ["http://127.0.0.1:8080?x=1", "http://127.0.0.1:8080/#top"] {
            let options = try ServerOptions.parse(["--server", text])
            do {
                _ = try options.serverSettings()
                Issue.record("\(text) was taken")
            } catch {
                #expect(error.message.contains("has a query or a fragment"), "\(error.message)")
            }
        }
        #expect(throws: ClientError.self) { try ServerOptions.parse(["--server", "ftp://127.0.0.1"]).serverSettings() }
    }

    @Test func aMistypedCommandGetsASuggestion() async throws {
        #expect(FerryCommand.unknownCommandMessage(["pusj"])?.contains("did you mean 'push'?") == true)
        #expect(FerryCommand.unknownCommandMessage(["push", "--json"]) == nil)
        #expect(FerryCommand.unknownCommandMessage(["--help"]) == nil)
        #expect(FerryCommand.unknownCommandMessage(["help", "push"]) == nil)
        // An action of a group, and `help` of an unknown command (they said "unknown option
        // '--server'", and printed the root help with status 0).
        let action = FerryCommand.unknownCommandMessage(["remote", "tabels", "--server", "http://h"])
        #expect(action?.contains("unknown command 'remote tabels' (did you mean 'tables'?") == true, "\(action ?? "")")
        #expect(FerryCommand.unknownCommandMessage(["attachments", "lst", "photos"])?.contains("'list'") == true)
        #expect(FerryCommand.unknownCommandMessage(["help", "nosuch"])?.contains("unknown command 'nosuch'") == true)
        #expect(FerryCommand.unknownCommandMessage(["remote", "tables", "--server", "http://h"]) == nil)
        #expect(FerryCommand.unknownCommandMessage(["help", "remote", "query"]) == nil)
        #expect(FerryCommand.unknownCommandMessage(["remote", "--help"]) == nil)
        let result = try await FerryBinaryTests.run(["qeury", "todo"])
        #expect(result.status == 64)
        #expect(
            result.errors
                == "error: unknown command 'qeury' (did you mean 'query'? `ferry --help` lists the commands)\n")
    }

    @Test func fileSystemFailuresAreOneLine() async throws {
        let denied = ClientError.from(CocoaError(.fileWriteNoPermission, userInfo: [NSFilePathErrorKey: "ferry-repl"]))
        #expect(denied.description == "cannot use 'ferry-repl': permission denied")
        let missing = ClientError.from(CocoaError(.fileNoSuchFile, userInfo: [NSFilePathErrorKey: "/nope"]))
        #expect(missing.description == "cannot use '/nope': no such file or directory")
        // The REPL in a directory it cannot write to says so in one line.
        let result = try await FerryBinaryTests.run(["repl", "--stores", "/proc/ferry-repl-test/x"])
        #expect(result.status == 1)
        #expect(result.errors.hasPrefix("error: cannot use '/proc/ferry-repl-test"), "\(result.errors)")
        #expect(!result.errors.contains("NSCocoaErrorDomain"))
    }

    @Test func jsonFailuresAreJSON() async throws {
        let result = try await FerryBinaryTests.run(["get", "todo", "nothing", "--store", "memory", "--json"])
        #expect(result.status == 5)
        let parsed = try JSONValue(parsing: result.errors.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(parsed.objectValue?["error"]?.objectValue?["exit"] == .int(5), "\(result.errors)")
        #expect(parsed.objectValue?["error"]?.objectValue?["message"]?.stringValue?.contains("nothing") == true)
    }

    @Test func readOnlyCommandsNeverCreateAStore() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        for command in [["query", "todo"], ["get", "todo", "x"], ["status"]] {
            let store = "sqlite:\(directory)/typo.sqlite"
            let result = try await RemoteCommandTests.run(command + ["--store", store])
            #expect(result.status == 5, "\(command): \(result.errors)")
            #expect(result.errors.contains("no store at '\(store)'"), "\(result.errors)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory).isEmpty)
        // A write creates the store; a clean exit leaves no -wal/-shm beside it.
        let store = "sqlite:\(directory)/device.sqlite"
        #expect(try await RemoteCommandTests.run(["insert", "todo", #"{"id":"a"}"#, "--store", store]).status == 0)
        #expect(try await RemoteCommandTests.run(["query", "todo", "--store", store]).status == 0)
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
        #expect(try await device.item("todo", id: "big")?["note"]?.stringValue?.count == 2_000_000)
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
        let printed = try await offThePool {
            let printed = output.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return printed
        }
        #expect(process.terminationStatus == 0)
        #expect(String(decoding: printed, as: UTF8.self).contains("from stdin"))
    }

    @Test func tokensForADevelopmentServer() async throws {
        let secret = "a-development-secret-0123"
        let result = try await FerryBinaryTests.run(["token", "--subject", "alice", "--secret", secret])
        #expect(result.status == 0, "\(result.errors)")
        let token = result.output.trimmingCharacters(in: .whitespacesAndNewlines)
        let identity = try TokenVerifier(secret: secret).verify(token)
        #expect(identity.subject == "alice")
        #expect(identity.expiresAt.map { $0 > Date() } == true)
        let short = try await FerryBinaryTests.run(["token", "--subject", "alice", "--secret", "short"])
        #expect(short.status == 64)
        #expect(short.errors.contains("at least 16 bytes"))
        let help = try await FerryBinaryTests.run(["serve", "--help"])
        let words = help.output.split(whereSeparator: \.isWhitespace).joined(separator: " ")
        #expect(words.contains("at least 16 bytes"), "\(help.output)")
    }
}

@Suite("tables that fit", .timeLimit(.minutes(10)))
struct TablesThatFitTests {
    @Test func wideCharactersCountTwoColumns() {
        #expect(TextTable.displayWidth("abc") == 3)
        #expect(TextTable.displayWidth("東京") == 4)
        #expect(TextTable.displayWidth("🗼") == 2)
        #expect(TextTable.displayWidth("e\u{301}") == 1)
        #expect(TextTable.displayWidth("👍🏽") == 2)
        let table = TextTable.render(headers: ["city", "n"], rows: [["東京", "1"], ["Paris", "2"]])
        // The second column starts at the same terminal column on every line.
        let starts = table.split(separator: "\n").map { line -> Int in
            let text = String(line)
            let cut = text.lastIndex(of: " ").map { text[...$0] } ?? ""
            return TextTable.displayWidth(String(cut))
        }
        #expect(Set(starts).count == 1, "\(table)")
    }

    @Test func tablesFitTheTerminalWidth() {
        let rows = (0..<5).map {
            ["id\($0)", String(repeating: "x", count: 200), "東京タワー 🗼 " + String(repeating: "y", count: 90)]
        }
        for width in [40, 60, 100] {
            let table = TextTable.render(headers: ["id", "note", "title"], rows: rows, totalWidth: width)
            for line in table.split(separator: "\n") {
                #expect(TextTable.displayWidth(String(line)) <= width, "\(width): \(line)")
            }
        }
        let expanded = TextTable.renderExpanded(headers: ["id", "note"], rows: rows, totalWidth: 50)
        #expect(expanded.hasPrefix("-[ 1 ]"))
        for line in expanded.split(separator: "\n") { #expect(TextTable.displayWidth(String(line)) <= 50) }
    }

    @Test func aTerminalGetsTheFirstHundredAndSelectKeepsItsOrder() async throws {
        let device = try Device(name: "many", store: .memory, server: nil)
        for index in 0..<120 {
            _ = try await device.insert(
                "todo", ["id": .string(String(format: "i%03d", index)), "n": .int(Int64(index))])
        }
        let text = Transcript()
        let terminal = CommandOutput(format: .table, showsProgress: false, terminalWidth: 80) { line in
            text.append(line)
        }
        let query = try #require(try FerryCommand.parseAsRoot(["query", "todo"]) as? QueryCommand)
        try await query.execute(on: device, output: terminal)
        #expect(text.value.contains("100 items\n"), "\(text.value.suffix(200))")
        #expect(text.value.contains("(more follow"))
        let all = Transcript()
        let everything = try #require(try FerryCommand.parseAsRoot(["query", "todo", "--all"]) as? QueryCommand)
        try await everything.execute(
            on: device,
            output: CommandOutput(format: .table, showsProgress: false, terminalWidth: 80) { all.append($0) })
        #expect(all.value.contains("120 items"))
        let piped = Transcript()
        try await query.execute(on: device, output: piped.output)
        #expect(piped.value.contains("120 items"), "not a terminal: everything")

        let selected = Transcript()
        let select = try #require(
            try FerryCommand.parseAsRoot(["query", "todo", "--select", "n,id", "--top", "1"]) as? QueryCommand)
        try await select.execute(on: device, output: selected.output)
        #expect(selected.value.hasPrefix("n  id"), "\(selected.value)")
        let missing = try #require(
            try FerryCommand.parseAsRoot(["query", "todo", "--select", "n,nope"]) as? QueryCommand)
        do {
            try await missing.execute(on: device, output: Transcript().output)
            Issue.record("a missing selected field was not reported")
        } catch {
            #expect("\(ClientError.from(error))".contains("no item of 'todo' has a field 'nope'"))
        }
        try await device.close()
    }
}

@Suite("Conflicts you can read", .timeLimit(.minutes(10)))
struct ConflictViewTests {
    @Test func mineAndTheServersSideBySideWithTheDifferencesMarked() {
        let error = OperationErrorRecord(
            id: "e1", operationID: 7, table: "todo", itemID: "milk", kind: .update, statusCode: 412,
            message: "conflict", clientItem: ["id": "milk", "title": "Milk, 2 litres", "done": false, "version": "v1"],
            serverItem: [
                "id": "milk", "title": "Oat milk", "done": false, "shop": "corner", "version": "v2", "deleted": false,
            ])
        let view = Rendering.conflict(error)
        let lines = view.split(separator: "\n").map(String.init)
        #expect(lines.first == "todo/milk (update, 412): mine from version v1, the server's at v2", "\(view)")
        #expect(
            lines.contains {
                $0.hasPrefix("≠") && $0.contains("title") && $0.contains("Milk, 2 litres") && $0.contains("Oat milk")
            })
        #expect(
            lines.contains {
                $0.hasPrefix("≠") && $0.contains("shop") && $0.contains("(absent)") && $0.contains("corner")
            })
        #expect(lines.contains { !$0.hasPrefix("≠") && $0.contains("done") }, "\(view)")
        #expect(!view.contains("deleted"), "system properties stay out of the field view")
        let table = Rendering.errors([error], format: .table)
        #expect(table.contains("≠"), "the errors listing includes the field view")
    }

    @Test func theBaseColumnSaysWhichSideChangedEachField() {
        let error = OperationErrorRecord(
            id: "e1", operationID: 7, table: "todo", itemID: "milk", kind: .update, statusCode: 412,
            message: "conflict", clientItem: ["title": "Milk, 2 litres", "done": false, "note": "mine"],
            serverItem: ["title": "Oat milk", "done": true, "note": "mine"])
        let base: JSONObject = ["title": "Milk", "done": false, "note": "mine", "gone": 1]
        let view = Rendering.conflict(error, base: base)
        let lines = view.split(separator: "\n").map(String.init)
        #expect(lines.count > 1 && lines[1].contains("base") && lines[1].contains("changed by"), "\(view)")
        func line(_ field: String) -> String { lines.first { $0.contains(" \(field) ") } ?? "" }
        #expect(line("title").hasPrefix("≠") && line("title").hasSuffix("both"), "\(view)")
        #expect(line("done").hasPrefix("≠") && line("done").hasSuffix("server"), "\(view)")
        #expect(!line("note").hasPrefix("≠") && !line("note").contains("both"), "\(view)")
        #expect(line("gone").contains("(absent)") && line("gone").hasSuffix("both"), "\(view)")
        let listed = Rendering.errors([error], bases: [7: base], format: .table)
        #expect(listed.contains("changed by"), "the listing shows the base when it is known")
        #expect(!Rendering.errors([error], format: .table).contains("changed by"))
    }

    /// A refusal without the server's item (a 400) is not a conflict: the view shows what the
    /// change sets, not a server column of "(none)" with every field marked as differing.
    @Test func aRefusalShowsTheChangeNotAServerWithoutTheItem() {
        let refused = OperationErrorRecord(
            id: "e2", operationID: 8, table: "todo", itemID: "i1", kind: .update, statusCode: 400,
            message: "field 'n' of table 'todo' holds number values",
            clientItem: ["id": "i1", "n": "x", "title": "t1", "version": "v1"], serverItem: nil)
        let view = Rendering.conflict(refused, base: ["id": "i1", "n": 1, "title": "t1", "version": "v1"])
        let lines = view.split(separator: "\n").map(String.init)
        func line(_ field: String) -> String { lines.first { $0.contains(" \(field) ") } ?? "" }
        #expect(
            lines.first?.hasPrefix("todo/i1 (update, 400): mine from version v1 (the server refused") == true,
            "\(view)")
        #expect(!view.contains("(none)") && !view.contains("server's") && !view.contains("changed by"), "\(view)")
        #expect(line("n").hasPrefix("≠") && line("n").contains("1") && line("n").hasSuffix("x"), "\(view)")
        #expect(!line("title").hasPrefix("≠"), "an unchanged field is not marked: \(view)")

        // An insert refused: what was sent, one column.
        var insert = refused
        insert.kind = .insert
        let sent = Rendering.conflict(insert).split(separator: "\n").map(String.init)
        #expect(sent.count > 1 && sent[1].split(separator: " ") == ["field", "mine"], "\(sent)")

        // A 404 does say the server has no such item: its column stays.
        var gone = refused
        gone.statusCode = 404
        #expect(Rendering.conflict(gone).contains("(none)"))
    }
}

@Suite("Output formats for scripts", .timeLimit(.minutes(10)))
struct OutputFormatTests {
    @Test func csvAndJSONLines() async throws {
        let device = try Device(name: "formats", store: .memory, server: nil)
        _ = try await device.insert("todo", ["id": "a", "title": "Milk, \"oat\"", "done": false, "tags": ["x"]])
        _ = try await device.insert("todo", ["id": "b", "title": "Bread\nwhite", "done": true])
        let csv = Transcript()
        let query = try #require(
            try FerryCommand.parseAsRoot(["query", "todo", "--format", "csv", "--select", "id,title,done,tags"])
                as? QueryCommand)
        try await query.execute(on: device, output: csv.output(.csv))
        #expect(
            csv.value
                == "id,title,done,tags\na,\"Milk, \"\"oat\"\"\",false,\"[\"\"x\"\"]\"\nb,\"Bread\nwhite\",true,\n",
            "\(csv.value)")
        let lines = Transcript()
        try await query.execute(on: device, output: lines.output(.jsonLines))
        let parsed = try lines.value.split(separator: "\n").map { try JSONValue(parsing: String($0)) }
        #expect(parsed.count == 2)
        #expect(parsed.first?.objectValue?["title"] == "Milk, \"oat\"")
        #expect(throws: (any Error).self) { try FerryCommand.parseAsRoot(["query", "todo", "--format", "xml"]) }
        let options = try #require(try FerryCommand.parseAsRoot(["status", "--format", "jsonl"]) as? StatusCommand)
        #expect(options.client.outputFormat == .jsonLines)
        try await device.close()
    }
}

@Suite("Progress lines", .timeLimit(.minutes(10)))
struct ProgressLineTests {
    @Test func rowsRatesTotalsAndTimeLeft() {
        #expect(Progress.line(rows: 1_200, operations: 0, total: nil, seconds: 0.25) == "1,200 rows (4,800 rows/s)")
        #expect(Progress.line(rows: 0, operations: 120, total: nil, seconds: 2) == "120 operations (60/s)")
        #expect(
            Progress.line(rows: 0, operations: 120, total: 500, seconds: 2)
                == "120 of 500 operations (60/s, about 7 s left)")
        #expect(
            Progress.line(rows: 0, operations: 10, total: 10_000, seconds: 1)
                == "10 of 10,000 operations (10/s, about 16 min 39 s left)")
        #expect(
            Progress.line(rows: 1_200, rowTotal: 10_000, operations: 0, total: nil, seconds: 0.25)
                == "1,200 of 10,000 rows (4,800 rows/s, about 2 s left)")
        #expect(
            Progress.line(rows: 0, rowTotal: 10_000, operations: 3, total: 3, seconds: 0.25)
                == "0 of 10,000 rows (0 rows/s)", "counted, nothing pulled yet: no estimate")
        #expect(Rendering.grouped(1_234_567) == "1,234,567" && Rendering.grouped(999) == "999")
    }

    /// A resumed upload's rate counts the bytes this run moved, not those the server had: it
    /// said "20.2 MB of 40.0 MB (20.19 GB/s, about 1 s left)" through a 5 MB/s link.
    @Test func aResumedTransfersRateIsOfTheBytesItMoved() {
        let upload = AttachmentTransfer(.upload, table: "notes", itemID: "k1", name: "f.bin")
        #expect(
            Progress.attachmentLine(upload, bytes: 25_000_000, total: 40_000_000, moved: 5_000_000, seconds: 1)
                == "uploading 'f.bin': 25.0 MB of 40.0 MB (5.0 MB/s, about 3 s left)")
        // Too soon for a rate (a fresh upload's first progress said 4.19 GB/s).
        #expect(
            Progress.attachmentLine(upload, bytes: 20_200_000, total: 40_000_000, moved: 0, seconds: 0.001)
                == "uploading 'f.bin': 20.2 MB of 40.0 MB")
    }
}

@Suite("The server's data without a local store", .timeLimit(.minutes(10)))
struct RemoteCommandTests {
    /// Runs the binary on a Dispatch thread: the in-process server needs the cooperative pool.
    static func run(_ arguments: [String]) async throws -> (status: Int32, output: String, errors: String) {
        try await FerryBinaryTests.run(arguments)
    }

    @Test func listTablesAndQueryOneDirectly() async throws {
        let server = try await startServer()
        let remote = HTTPRemote(HTTPRemote.Configuration(serverURL: URL(string: server.url)!))
        #expect(try await remote.tableNames() == [])
        _ = try await remote.onlineTable("todo").insert(["id": "a", "title": "Milk", "done": false])
        _ = try await remote.onlineTable("shops").insert(["id": "s", "name": "Corner"])
        #expect(try await remote.tableNames() == ["shops", "todo"])

        let tables = try await Self.run(["remote", "tables", "--server", server.url])
        #expect(tables.status == 0, "\(tables.errors)")
        #expect(tables.output == "shops\ntodo\n")
        let query = try await Self.run([
            "remote", "query", "todo", "--filter", "done eq false", "--select", "id,title", "--json", "--server",
            server.url,
        ])
        #expect(query.status == 0, "\(query.errors)")
        #expect(try JSONValue(parsing: query.output) == [["id": "a", "title": "Milk"]])
        let notListing = try await Self.run(["remote", "tables", "--server", server.url + "/api"])
        #expect(notListing.status == 5)
        // A wrong path is said to be one (it was "the server does not list its tables").
        #expect(notListing.errors.contains("there is no table endpoint at"), "\(notListing.errors)")
        #expect(notListing.errors.hasSuffix("(check --server)\n"), "\(notListing.errors)")
        let noServer = try await Self.run(["remote", "tables"])
        #expect(noServer.status == 64 || !noServer.errors.isEmpty)
        try await server.shutdown()
    }
}

@Suite("Status of a device with many queued operations", .timeLimit(.minutes(10)))
struct StatusSummaryTests {
    static func status(_ count: Int) -> DeviceStatus {
        var operations: [QueuedOperation] = []
        for index in 0..<count {
            let table = index % 3 == 0 ? "lists" : "todo"
            let kind: OperationKind = index % 5 == 0 ? .update : .insert
            let draft = OperationDraft(
                table: table, itemID: "i\(index)", kind: kind, createdAt: Timestamp(millisecondsSince1970: 0))
            operations.append(QueuedOperation(id: Int64(index + 1), draft: draft))
        }
        return DeviceStatus(
            device: "phone", store: "memory", online: true, queued: [:], operations: operations, errors: [],
            deltaTokens: [:])
    }

    @Test func manyOperationsAreCountedNotListed() {
        let many = Rendering.status(Self.status(1_200), format: .table)
        let lines = many.split(separator: "\n").map(String.init)
        #expect(lines[0].contains("1,200 queued operations"), "\(many)")
        #expect(lines.count < 12, "a line per operation: \(lines.count) lines")
        #expect(lines.contains { $0.contains("todo") && $0.contains("insert") && $0.contains("waiting") }, "\(many)")
        let counted = lines.compactMap { line in
            Int(line.split(separator: " ").last?.replacingOccurrences(of: ",", with: "") ?? "")
        }
        #expect(counted.reduce(0, +) == 1_200, "the counts add up: \(many)")

        let few = Rendering.status(Self.status(3), format: .table)
        #expect(few.contains("i2"), "a few operations are listed one by one: \(few)")
        let none = Rendering.status(Self.status(0), format: .table)
        #expect(none.contains("nothing waiting to be pushed"), "\(none)")
    }
}
