import ArgumentParser
import FerryClient
import FerryServer
import Foundation
import Logging
import ServerTestSupport
import SyncCore
import Synchronization
import Testing
import Transport

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

@testable import FerryCommands

/// What a third newcomer's walk through the README and the docs found: each point as the user
/// meets it, with the binary as a process.
@Suite("ferry, third pass", .timeLimit(.minutes(10)))
struct ThirdPassCommandTests {
    static func run(_ arguments: [String]) async throws -> (status: Int32, output: String, errors: String) {
        try await FerryBinaryTests.run(arguments)
    }

    @Test func commandsThatWorkOnWhatAStoreHoldsNeverCreateOne() async throws {
        let directory = try SecondPassCommandTests.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = "sqlite:" + directory.appendingPathComponent("ghost.sqlite").path
        for command in [
            ["conflicts"], ["conflicts", "resolve", "x", "--take", "server"], ["purge", "todo"],
            ["purge", "todo", "--force"], ["push", "--server", "http://127.0.0.1:9"],
            ["watch", "todo", "--seconds", "1"],
        ] {
            let result = try await Self.run(command + ["--store", store])
            #expect(result.status == 5, "\(command): \(result.status) \(result.errors)")
            #expect(result.errors.contains("no store at '\(store)'"), "\(command): \(result.errors)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty)
    }

    /// A device's change conflicts with another's; `--conflicts server` drops it: the push says so.
    @Test func aConflictSettledForTheServerSaysWhichLocalChangeWasDropped() async throws {
        let server = try await startServer()
        defer { Task { try? await server.shutdown() } }
        let directory = try SecondPassCommandTests.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let phone = ["--store", "sqlite:" + directory.appendingPathComponent("phone.sqlite").path]
        let tablet = ["--store", "sqlite:" + directory.appendingPathComponent("tablet.sqlite").path]
        let remote = ["--server", server.url]
        #expect(try await Self.run(["insert", "todo", #"{"id":"u1","title":"base"}"#] + phone).status == 0)
        #expect(try await Self.run(["push"] + phone + remote).status == 0)
        #expect(try await Self.run(["pull", "todo"] + tablet + remote).status == 0)
        #expect(try await Self.run(["update", "todo", "u1", #"{"title":"phone"}"#] + phone).status == 0)
        #expect(try await Self.run(["push"] + phone + remote).status == 0)
        #expect(try await Self.run(["update", "todo", "u1", #"{"title":"tablet"}"#] + tablet).status == 0)
        let pushed = try await Self.run(["push", "--conflicts", "server"] + tablet + remote)
        #expect(pushed.status == 0, "\(pushed.errors)")
        #expect(pushed.output.contains("1 conflict settled for the server"), "\(pushed.output)")
        #expect(pushed.output.contains("update todo/u1"), "\(pushed.output)")
        // Nothing reached the server: the push says it pushed nothing (it said "pushed 1").
        #expect(pushed.output.hasPrefix("pushed 0 operations"), "\(pushed.output)")
        // And in JSON, for scripts.
        #expect(try await Self.run(["update", "todo", "u1", #"{"title":"phone 2"}"#] + phone).status == 0)
        #expect(try await Self.run(["push"] + phone + remote).status == 0)
        #expect(try await Self.run(["update", "todo", "u1", #"{"title":"tablet 2"}"#] + tablet).status == 0)
        let json = try await Self.run(["push", "--conflicts", "server", "--json"] + tablet + remote)
        let resolved = try JSONValue(parsing: json.output).objectValue?["resolvedConflicts"]?.arrayValue
        #expect(resolved == [["table": "todo", "id": "u1", "operation": "update", "took": "server"]], "\(json.output)")
        #expect(try JSONValue(parsing: json.output).objectValue?["pushed"] == 0, "\(json.output)")
    }

    @Test func aChangedOperationNeedsTheItemItSends() async throws {
        let command = try ConflictsCommand.parse([
            "resolve", "e1", "--take", "change", "--operation", "update", "--store", "memory",
        ])
        #expect(throws: ClientError.self) { try command.resolution() }
        do {
            _ = try command.resolution()
        } catch let error as ClientError {
            #expect(error.message.contains("needs --item with the fields to change"), "\(error.message)")
            #expect(error.hint?.contains("--take mine") == true)
        }
        let delete = try ConflictsCommand.parse([
            "resolve", "e1", "--take", "change", "--operation", "delete", "--store", "memory",
        ])
        #expect(try delete.resolution() == .changeOperation(.delete, item: nil))
    }

    @Test func aForcedPurgeSaysWhichQueuedChangesItDropped() async throws {
        let directory = try SecondPassCommandTests.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = ["--store", "sqlite:" + directory.appendingPathComponent("device.sqlite").path]
        #expect(try await Self.run(["insert", "todo", #"{"id":"a"}"#] + store).status == 0)
        let refused = try await Self.run(["purge", "todo"] + store)
        #expect(refused.status == 1)
        #expect(
            refused.errors
                == "error: purge of 'todo': the table has 1 queued operation not pushed yet (push first, or purge with --force, which drops them too)\n",
            "\(refused.errors)")
        let forced = try await Self.run(["purge", "todo", "--force"] + store)
        #expect(forced.output.contains("dropped 1 queued operation never pushed"), "\(forced.output)")
        let json = try await Self.run(["purge", "todo", "--force", "--json"] + store)
        #expect(try JSONValue(parsing: json.output) == ["purged": 0, "droppedOperations": 0], "\(json.output)")
        // Purged of every item, the table is still there, without items (it was "no table").
        let after = try await Self.run(["query", "todo"] + store)
        #expect(after.status == 0 && after.output.contains("(no items)"), "\(after.output) \(after.errors)")
        let count = try await Self.run(["query", "todo", "--count", "--json"] + store)
        #expect(count.status == 0, "\(count.errors)")
    }

    @Test func aSortKeyNoItemHasIsAnErrorNamingTheNearField() async throws {
        let directory = try SecondPassCommandTests.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = ["--store", "sqlite:" + directory.appendingPathComponent("device.sqlite").path]
        #expect(try await Self.run(["insert", "todo", #"{"id":"a","title":"Milk"}"#] + store).status == 0)
        let typo = try await Self.run(["query", "todo", "--orderby", "titel desc"] + store)
        #expect(typo.status == 64, "\(typo.output)")
        #expect(typo.errors.contains("no item of 'todo' has a field 'titel'"), "\(typo.errors)")
        #expect(typo.errors.contains("did you mean 'title'?"), "\(typo.errors)")
        #expect(try await Self.run(["query", "todo", "--orderby", "title desc"] + store).status == 0)
        #expect(try await Self.run(["query", "todo", "--orderby", "updatedAt desc"] + store).status == 0)
    }

    @Test func negativeNumbersGetTheirRangeMessage() async throws {
        let top = try await Self.run(["query", "todo", "--top", "-1", "--store", "memory"])
        #expect(top.status == 64)
        #expect(!top.errors.contains("missing value"), "\(top.errors)")
        let token = try await Self.run([
            "token", "--subject", "a", "--expires-in", "-5", "--secret", String(repeating: "s", count: 20),
        ])
        #expect(token.status == 64)
        #expect(token.errors.contains("--expires-in must be between"), "\(token.errors)")
    }

    @Test func aHostThatIsNoAddressIsABadValue() async throws {
        let result = try await Self.run(["serve", "--host", "999.1.1.1", "--port", "0", "--db", "memory"])
        #expect(result.status == 64, "\(result.errors)")
        #expect(result.errors.contains("'999.1.1.1' is not an address or a host name"), "\(result.errors)")
        #expect(!result.errors.contains("socketAddressError"), "\(result.errors)")
    }

    /// `https://` to a plain HTTP server: the TLS failure in words, without library internals.
    @Test func aTLSFailureIsSaidInWords() async throws {
        let server = try await startServer()
        defer { Task { try? await server.shutdown() } }
        let secure = server.url.replacingOccurrences(of: "http://", with: "https://")
        let result = try await Self.run(["pull", "todo", "--store", "memory", "--server", secure])
        #expect(result.status == 3)
        #expect(result.errors.contains("the server does not speak TLS there"), "\(result.errors)")
        #expect(result.errors.contains("check the URL's scheme"), "\(result.errors)")
        #expect(!result.errors.contains("BoringSSL") && !result.errors.contains(".build"), "\(result.errors)")
    }

    /// Load balancers check health with HEAD; other methods are 405, as server.md says.
    @Test func healthAnswersHeadAndRefusesOtherMethods() async throws {
        let server = try await startServer()
        defer { Task { try? await server.shutdown() } }
        for path in ["/health", "/health/ready", "/health/live"] {
            var head = URLRequest(url: URL(string: server.url + path)!)
            head.httpMethod = "HEAD"
            let (_, headAnswer) = try await URLSession.shared.data(for: head)
            #expect((headAnswer as? HTTPURLResponse)?.statusCode == 200, "HEAD \(path)")
            var post = URLRequest(url: URL(string: server.url + path)!)
            post.httpMethod = "POST"
            let (body, postAnswer) = try await URLSession.shared.data(for: post)
            #expect((postAnswer as? HTTPURLResponse)?.statusCode == 405, "POST \(path)")
            #expect(String(decoding: body, as: UTF8.self).contains("methodNotAllowed"))
        }
    }

    @Test func anUpdateThatWouldDoNothingOrSomethingElseIsRefused() async throws {
        let directory = try SecondPassCommandTests.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = ["--store", "sqlite:" + directory.appendingPathComponent("device.sqlite").path]
        #expect(try await Self.run(["insert", "todo", #"{"id":"u1","title":"Milk"}"#] + store).status == 0)
        for (change, words) in [
            (#"{"id":"u2"}"#, "an id cannot change"), (#"{"deleted":true}"#, "an update cannot delete"),
            ("{}", "nothing to change"), (#"{"version":"x","updatedAt":"y"}"#, "nothing to change"),
        ] {
            let result = try await Self.run(["update", "todo", "u1", change] + store)
            #expect(result.status == 64, "\(change): \(result.errors)")
            #expect(result.errors.contains(words), "\(change): \(result.errors)")
        }
        // The item as `get` prints it, edited, is still an update.
        let edited = try await Self.run(
            ["update", "todo", "u1", #"{"id":"u1","title":"Oat milk","deleted":false}"#] + store)
        #expect(edited.status == 0, "\(edited.errors)")
    }

    @Test func wrongInputExitsAs64AndNoServerIsNotAnOutage() async throws {
        let directory = try SecondPassCommandTests.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = ["--store", "sqlite:" + directory.appendingPathComponent("device.sqlite").path]
        #expect(try await Self.run(["insert", "bad/table", #"{"id":"a"}"#] + store).status == 64)
        #expect(try await Self.run(["insert", "todo", #"{"id":"a"}"#] + store).status == 0)
        let twice = try await Self.run(["insert", "todo", #"{"id":"a"}"#] + store)
        #expect(twice.status == 64, "\(twice.errors)")
        let push = try await Self.run(["push"] + store)
        #expect(push.status == 64, "\(push.errors)")
        #expect(
            push.errors == "error: no server to push to (give --server URL, or set $FERRY_SERVER)\n", "\(push.errors)")
        #expect(try await Self.run(["pull", "todo"] + store).status == 64)
        // Without a server, a table the store does not have is named, not watched empty.
        let watch = try await Self.run(["watch", "todoo", "--seconds", "1"] + store)
        #expect(watch.status == 5 && watch.errors.contains("did you mean 'todo'?"), "\(watch.errors)")
    }

    /// A push to a URL that is no table endpoint says so as a pull does, each status said once, and
    /// stops.
    @Test func aPushToAURLThatIsNoTableEndpointSaysSo() async throws {
        let server = try await startServer()
        defer { Task { try? await server.shutdown() } }
        let directory = try SecondPassCommandTests.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = ["--store", "sqlite:" + directory.appendingPathComponent("device.sqlite").path]
        #expect(try await Self.run(["insert", "todo", #"{"id":"a"}"#] + store).status == 0)
        let push = try await Self.run(["push", "--server", server.url + "/nothing"] + store)
        // The push stops (it recorded the 404 as a failed operation to resolve): nothing to resolve.
        #expect(push.status == 5, "\(push.errors)")
        let message = push.errors
        #expect(message.contains("there is no table endpoint at \(server.url)/nothing/tables/todo"), "\(message)")
        #expect(message.contains("the server URL is not the base URL"))
        #expect(message.contains("(check --server)"), "\(message)")
        #expect(message.components(separatedBy: "HTTP 404").count <= 2, "\(message)")
        let errors = try await Self.run(["conflicts", "--json"] + store)
        #expect(errors.output.trimmingCharacters(in: .whitespacesAndNewlines) == "[]", "\(errors.output)")
        // `status` no longer calls it reachable.
        let status = try await Self.run(["status", "--server", server.url + "/nothing"] + store)
        #expect(status.output.contains("/nothing: is no table-protocol server: "), "\(status.output)")
        #expect(
            RemoteError(status: 501, "the server answered HTTP 501 (Not Implemented)").description.components(
                separatedBy: "HTTP 501"
            ).count == 2)
    }

    /// A server that refuses the token is there: `status` says it refuses the token, not that it
    /// cannot be reached.
    @Test func statusSaysARefusedTokenIsARefusal() async throws {
        var logger = Logger(label: "ferry.cli-test")
        logger.logLevel = .critical
        var configuration = ServerConfiguration(host: "127.0.0.1", port: 0, logger: logger)
        configuration.authSecret = String(repeating: "k", count: 32)
        let server = try await ReferenceServer.start(
            configuration, storage: try await ServerDatabase.memory.open(logger: logger), ownsStorage: true)
        defer { Task { try? await server.shutdown() } }
        let directory = try SecondPassCommandTests.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = ["--store", "sqlite:" + directory.appendingPathComponent("device.sqlite").path]
        #expect(try await Self.run(["insert", "todo", #"{"id":"a"}"#] + store).status == 0)
        let status = try await Self.run(["status", "--server", server.url] + store)
        #expect(status.output.contains("server \(server.url): refuses the token: "), "\(status.output)")
    }

    /// `watch` hears of rows and of the sync's status from two tasks: a view written slowly (a
    /// full pipe) must not let a newer one pass it, or the last line shows rows that are gone.
    @Test func aSlowlyWrittenViewIsNotOvertakenByANewerOne() async throws {
        let lines = Mutex<[String]>([])
        let output = CommandOutput(format: .jsonLines, showsProgress: false) { text in
            // The first view takes a while to leave, as into a pipe nobody reads for a moment.
            if text.contains("gone") { Thread.sleep(forTimeInterval: 0.3) }
            lines.withLock { $0.append(text) }
        }
        let view = WatchView(table: "todo", place: "here", output: output, redraws: false)
        let older = Task.detached { view.show(items: [["id": "a", "title": "gone"], ["id": "b"]]) }
        try await Task.sleep(for: .milliseconds(100))
        view.show(items: [["id": "b"]])
        await older.value
        let written = lines.withLock { $0 }
        #expect(written.count == 2)
        #expect(written.last?.contains("gone") == false, "the last view is stale: \(written)")
    }

    /// A local write's rows can reach `watch` before automatic sync counts the queue again: they
    /// are shown with the queue counted after them, never under a status line that still says
    /// "everything synced" (a piped view recorded that for 10 of 10 unsent inserts).
    @Test func newRowsAreShownWithTheQueueCountedAfterThem() async throws {
        let written = Mutex<[String]>([])
        let output = CommandOutput(format: .table, showsProgress: false) { text in
            written.withLock { $0.append(text) }
        }
        let view = WatchView(table: "todo", place: "here", output: output, redraws: false, waitsForFirstSync: true)
        var synced = SyncStatus.Snapshot()
        synced.isRunning = true
        synced.reachability = .reachable(since: Timestamp(millisecondsSince1970: 0))
        synced.isCaughtUp = true
        #expect(synced.summary == "everything synced")
        #expect(view.show(status: synced), "the first sync is over")
        view.show(items: [["id": "a", "version": "1"]], afterFirstSync: true, queued: 0)
        view.show(items: [["id": "a", "version": "1"], ["id": "b"]], queued: 1)
        let last = try #require(written.withLock { $0 }.last)
        #expect(last.hasPrefix("todo here: 2 rows; 1 change waiting to be pushed"), "\(last)")
        // The push that empties the queue is heard before the rows it stamped: they are not drawn
        // as they were under "everything synced", and the stamped rows are.
        _ = view.show(status: synced)
        view.show(items: [["id": "a", "version": "1"], ["id": "b", "version": "2"]], queued: 0)
        let frames = written.withLock { $0 }
        #expect(!frames.contains { $0.contains("everything synced") && $0.contains("b  \n") }, "\(frames)")
        #expect(frames.last?.hasPrefix("todo here: 2 rows; everything synced") == true, "\(frames)")
        #expect(frames.count == 3, "\(frames)")
    }

    /// A port above 65535 stopped `ferry` with a Swift runtime trap and a backtrace (exit 132),
    /// leaving the store it had just made.
    @Test func aServerPortOutOfRangeIsAUsageError() async throws {
        let directory = try SecondPassCommandTests.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = "sqlite:" + directory.appendingPathComponent("device.sqlite").path
        let pulled = try await Self.run(["pull", "todo", "--server", "http://127.0.0.1:70000", "--store", store])
        #expect(pulled.status == 64, "\(pulled.status) \(pulled.errors)")
        #expect(
            pulled.errors.hasPrefix("error: the port of 'http://127.0.0.1:70000' is not 1 to 65535"), "\(pulled.errors)"
        )
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty)
    }

    /// What a newcomer met in the REPL's own commands: `help` of them printed the whole list,
    /// `restart` turned automatic sync off without a word, `devices` forgot the stores of earlier
    /// sessions, extra words were ignored or took `exit 3` for a device command, hints named
    /// `ferry …` commands, `watch` was only "unknown".
    @Test func theReplsOwnCommandsSayWhatTheyDo() async throws {
        let server = try await startServer()
        defer { Task { try? await server.shutdown() } }
        let directory = try SecondPassCommandTests.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let transcript = Transcript()
        let session = try ReplSession(
            server: ServerSettings(url: URL(string: server.url)!), policy: .keep, stores: directory.path,
            output: transcript.output)
        try await session.use("tablet", store: nil)
        try await session.use("phone", store: nil)
        try await session.execute("help auto")
        #expect(transcript.value.hasPrefix("usage: auto on [TABLE…] | auto off | auto\n"), "\(transcript.value)")
        try await session.execute("insert todo '{\"id\":\"a\"}'")
        try await session.execute("auto on todo todo")
        #expect(transcript.value.contains("phone now syncs todo by itself"), "\(transcript.value)")
        try await session.execute("restart")
        #expect(transcript.value.contains("phone restarted (store closed and reopened); it syncs todo by itself again"))
        #expect(await session.devices["phone"]?.automaticTables == ["todo"])
        await #expect(throws: ClientError.self) { try await session.execute("restart now") }
        // A memory store reopened is a new empty one: refused, not "restarted" with nothing left.
        try await session.use("scratch", store: "memory")
        try await session.execute("insert todo '{\"id\":\"m\"}'")
        do {
            try await session.execute("restart")
            Issue.record("a memory device was restarted")
        } catch {
            #expect(ClientError.from(error).message.contains("in memory"), "\(error)")
        }
        #expect(try await session.devices["scratch"]?.query("todo", TableQuery()).items.count == 1)
        try await session.use("phone", store: nil)
        await #expect(throws: ClientError.self) { try await session.execute("devices extra") }
        for command in ["watch todo", "help watch"] {
            do {
                try await session.execute(command)
                Issue.record("'\(command)' was accepted")
            } catch {
                #expect(ClientError.from(error).hint?.contains("auto on TABLE") == true, "\(error)")
            }
        }
        await session.devices["phone"]?.stopAutomaticSync()

        // A session of its own: the devices of the one before are listed, a hint is without
        // `ferry`, and `exit 3` leaves.
        let next = Transcript()
        let later = try ReplSession(server: nil, policy: .keep, stores: directory.path, output: next.output)
        try await later.use("phone", store: nil)
        let (editor, input) = try scriptedEditor("devices\nquery todo --filter 'nosuch1 eq nosuch2'\nexit 3\nstatus")
        _ = await later.run(editor: editor)
        close(input)
        #expect(next.value.contains("tablet  sqlite:\(directory.path)/tablet.sqlite  not opened"), "\(next.value)")
        // Every item matched (null = null), and the unknown field is still named.
        #expect(next.value.contains("no item of 'todo' has a field 'nosuch1'"), "\(next.value)")
        #expect(next.value.contains("(`query todo --top 1` shows its fields)"), "\(next.value)")
        #expect(!next.value.contains("ferry(phone)> status"), "\(next.value)")
    }

    /// A server URL with a wrong path (`…/metrics`) answered every write 404: an insert was recorded
    /// as a failed operation to "resolve", and an update or a delete could be taken for a deletion
    /// on the server. The push stops instead, keeps every operation and says to check the URL.
    @Test func aPushToAURLThatIsNoTableEndpointStopsAndKeepsEverything() async throws {
        let server = try await startServer()
        defer { Task { try? await server.shutdown() } }
        let directory = try SecondPassCommandTests.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = StoreLocation.sqlite(directory.appendingPathComponent("device.sqlite").path)
        let good = try Device(name: "device", store: store, server: ServerSettings(url: URL(string: server.url)!))
        _ = try await good.insert("todo", ["id": "u", "title": "on the server"])
        _ = try await good.insert("todo", ["id": "d", "title": "on the server"])
        _ = try await good.push()
        try await good.close()
        // The same device, its server URL mistyped.
        let wrong = try Device(
            name: "device", store: store, server: ServerSettings(url: URL(string: server.url + "/metrics")!))
        _ = try await wrong.insert("todo", ["id": "n", "title": "new"])
        _ = try await wrong.update("todo", id: "u", changes: ["title": "mine, edited"])
        try await wrong.delete("todo", id: "d")
        do {
            _ = try await wrong.push()
            Issue.record("a push to a wrong URL went through")
        } catch {
            let failure = ClientError.from(error)
            #expect(failure.code == .notFound, "\(failure)")
            #expect(failure.message.contains("there is no table endpoint at"), "\(failure)")
            #expect(failure.hint == "check --server", "\(failure)")
        }
        let status = try await wrong.status()
        #expect(status.operations.count == 3)
        #expect(status.errors.isEmpty)
        #expect(try await wrong.query("todo", TableQuery()).items.count == 2)
        try await wrong.close()
    }
}
