import Crypto
import FerryClient
import Foundation
import ServerTestSupport
import SyncCore
import Testing

@testable import FerryCommands

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// `ferry attachments add|list|get|rm` and push/pull of their files, through `ferry serve
/// --attachments` on SQLite, every command a `ferry` process (issue 30).
@Suite("ferry attachments", .timeLimit(.minutes(10)))
struct AttachmentCommandTests {
    static func ferry(_ arguments: [String]) async throws -> (status: Int32, output: String, errors: String) {
        try await FerryBinaryTests.run(arguments)
    }

    /// `ferry serve` on a SQLite file in `directory` (with `--attachments` unless told otherwise), as a
    /// child process; its URL and port.
    static func serve(_ directory: String, attachments: Bool = true) async throws -> (Process, String, Int) {
        let ferry = try #require(FerryBinaryTests.ferryURL(), "the ferry executable was not built beside the tests")
        let process = Process()
        process.executableURL = ferry
        process.arguments =
            ["serve", "--port", "0", "--db", "sqlite:\(directory)/server.sqlite", "--log-level", "warning"]
            + (attachments ? ["--attachments"] : [])
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let line = try await ServeCommandTests.firstLine(of: output.fileHandleForReading, from: process)
        guard let url = line.split(separator: " ").first(where: { $0.hasPrefix("http://") }).map(String.init),
            let port = URL(string: url)?.port
        else {
            process.terminate()
            throw ClientError(.failed, "ferry serve did not say where it listens: \(line)")
        }
        return (process, url, port)
    }

    /// A URL where nothing listens (a port just bound and closed).
    static func unreachableURL() throws -> String {
        let proxy = try ThrottlingProxy(target: 1, bytesPerSecond: 0)
        proxy.stop()
        return "http://127.0.0.1:\(proxy.port)"
    }

    /// Writes `size` random bytes to `path`; answers their SHA-256 (hex).
    static func randomFile(_ path: String, size: Int) throws -> String {
        var generator = SystemRandomNumberGenerator()
        var bytes = [UInt8](repeating: 0, count: size)
        bytes.withUnsafeMutableBytes { raw in
            let words = raw.bindMemory(to: UInt64.self)
            for index in words.indices { words[index] = generator.next() }
        }
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return hex(SHA256.hash(data: bytes))
    }

    static func hex(_ digest: SHA256.Digest) -> String { digest.map { String(format: "%02x", $0) }.joined() }

    static func sha256(ofFile path: String) throws -> String {
        hex(SHA256.hash(data: try Data(contentsOf: URL(fileURLWithPath: path))))
    }

    /// One request to the server, as the table protocol 3.0.0 asks.
    static func request(_ method: String, _ url: String, headers: [String: String] = [:]) async throws -> (
        status: Int, headers: [String: String], body: Data
    ) {
        var request = URLRequest(url: try #require(URL(string: url)))
        request.httpMethod = method
        request.setValue("3.0.0", forHTTPHeaderField: "ZUMO-API-VERSION")
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        if method == "PUT" { request.httpBody = Data() }
        let (data, response) = try await URLSession.shared.data(for: request)
        let http = try #require(response as? HTTPURLResponse)
        var fields: [String: String] = [:]
        for (name, value) in http.allHeaderFields {
            if let name = name as? String, let value = value as? String { fields[name.lowercased()] = value }
        }
        return (http.statusCode, fields, data)
    }

    /// The names the server lists for an item.
    static func serverNames(_ server: String, item: String) async throws -> [String] {
        let answer = try await request("GET", "\(server)/tables/notes/\(item)/$attachments")
        guard answer.status == 200,
            case .array(let rows)? = try? JSONValue(parsing: String(decoding: answer.body, as: UTF8.self))
        else { return ["status \(answer.status)"] }
        return rows.compactMap { $0.objectValue?["name"]?.stringValue }.sorted()
    }

    /// `attachments list --json` on `store`, by name.
    static func list(_ store: String, item: String) async throws -> [String: JSONObject] {
        let listed = try await ferry(["attachments", "list", "notes", item, "--store", store, "--json"])
        #expect(listed.status == 0, "\(listed.errors)")
        guard case .array(let rows) = try JSONValue(parsing: listed.output) else { return [:] }
        var byName: [String: JSONObject] = [:]
        for row in rows {
            if let object = row.objectValue, let name = object["name"]?.stringValue { byName[name] = object }
        }
        return byName
    }

    /// A table nobody has written yet pulls empty from a server with attachments, as from one
    /// without: its attachment rows were a 404 ("no table"), and a pull, or automatic sync, failed
    /// on it for good.
    @Test func aTableNobodyWroteYetPullsEmptyWithAttachmentsOn() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (server, url, _) = try await Self.serve(directory)
        defer { server.terminate() }
        let rows = try await Self.request("GET", "\(url)/tables/$attachments/neverwritten")
        #expect(rows.status == 200, "\(String(decoding: rows.body, as: UTF8.self))")
        let pulled = try await Self.ferry([
            "pull", "neverwritten", "--server", url, "--store", "sqlite:\(directory)/phone.ferry",
        ])
        #expect(pulled.status == 0, "\(pulled.errors)")
        #expect(pulled.output.hasPrefix("pulled 0 items of 'neverwritten'"), "\(pulled.output)")
    }

    @Test func aFileAttachedOfflineReachesAnotherDeviceByteIdentical() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (server, url, _) = try await Self.serve(directory)
        defer { server.terminate() }
        let phone = "sqlite:\(directory)/phone.ferry"
        let tablet = "sqlite:\(directory)/tablet.ferry"
        let file = "\(directory)/scan.bin"
        let digest = try Self.randomFile(file, size: 5 << 20)

        // Offline: the item and its file are queued; a push to a server that cannot be reached
        // sends nothing and keeps both.
        let inserted = try await Self.ferry(["insert", "notes", #"{"id":"n1","title":"scan"}"#, "--store", phone])
        #expect(inserted.status == 0, "\(inserted.errors)")
        let added = try await Self.ferry(["attachments", "add", "notes", "n1", file, "--store", phone])
        #expect(added.status == 0, "\(added.errors)")
        #expect(added.output.contains("attached 'scan.bin' (5.2 MB) to notes/n1"), "\(added.output)")
        let unreachable = try await Self.ferry(["push", "--store", phone, "--server", try Self.unreachableURL()])
        #expect(unreachable.status == 3, "\(unreachable.errors)")
        #expect(try await Self.list(phone, item: "n1")["scan.bin"]?["state"] == .string("pendingUpload"))
        #expect(FileManager.default.fileExists(atPath: "\(directory)/phone.ferry.attachments"))
        let waiting = try await Self.ferry(["status", "--store", phone])
        #expect(waiting.output.contains("1 file waiting to be sent (attachments)"), "\(waiting.output)")

        let pushed = try await Self.ferry(["push", "--store", phone, "--server", url])
        #expect(pushed.status == 0, "\(pushed.errors)")
        #expect(pushed.output == "pushed 1 operation\nsent 1 of 1 queued file (attachments)\n", "\(pushed.output)")
        // `--json` counts the files too, and leaves them out when none were queued.
        let files = try JSONValue(parsing: Rendering.push(PushResult(pushed: 1), files: (1, 2), format: .json))
        #expect(files["files"] == ["sent": 1, "queued": 2], "\(files)")
        #expect(try JSONValue(parsing: Rendering.push(PushResult(), files: (0, 0), format: .json))["files"] == nil)
        // A delete another device's newer file made moot is told, not counted as sent.
        var superseded = PushResult()
        superseded.attachmentsSuperseded = [AttachmentTransfer(.delete, table: "notes", itemID: "n1", name: "a")]
        #expect(
            Rendering.push(superseded, files: (0, 1), format: .table)
                == "pushed 0 operations\nsent 0 of 1 queued file (attachments); 1 not deleted: another device "
                + "replaced it since (the next pull brings it back)")
        let supersededJSON = try JSONValue(parsing: Rendering.push(superseded, files: (0, 1), format: .json))
        #expect(supersededJSON["files"] == ["sent": 0, "queued": 1, "superseded": 1], "\(supersededJSON)")
        #expect(try await Self.list(phone, item: "n1")["scan.bin"]?["state"] == .string("uploaded"))
        #expect(try await Self.serverNames(url, item: "n1") == ["scan.bin"])
        let synced = try await Self.ferry(["status", "--store", phone, "--server", url])
        #expect(synced.output.contains("everything synced"), "\(synced.output)")

        // The tablet learns of the file with the item, and downloads it when asked.
        let pulled = try await Self.ferry(["pull", "notes", "--store", tablet, "--server", url])
        #expect(pulled.status == 0, "\(pulled.errors)")
        let known = try await Self.list(tablet, item: "n1")["scan.bin"]
        #expect(known?["state"] == .string("remote"))
        #expect(known?["sha256"] == .string(digest))
        let target = "\(directory)/copy.bin"
        let notHere = try await Self.ferry([
            "attachments", "get", "notes", "n1", "scan.bin", "-o", target, "--store", tablet,
        ])
        #expect(notHere.status == 3)
        #expect(notHere.errors.contains("is not on this device"), "\(notHere.errors)")
        #expect(!FileManager.default.fileExists(atPath: target))
        let fetched = try await Self.ferry([
            "attachments", "get", "notes", "n1", "scan.bin", "--output", target, "--store", tablet, "--server", url,
        ])
        #expect(fetched.status == 0, "\(fetched.errors)")
        #expect(fetched.output.contains("downloaded"), "\(fetched.output)")
        #expect(try Self.sha256(ofFile: target) == digest)
        // Now on the tablet: no server needed.
        try FileManager.default.removeItem(atPath: target)
        let again = try await Self.ferry([
            "attachments", "get", "notes", "n1", "scan.bin", "-o", target, "--store", tablet,
        ])
        #expect(again.status == 0, "\(again.errors)")
        #expect(!again.output.contains("downloaded"), "\(again.output)")
        #expect(try Self.sha256(ofFile: target) == digest)
        #expect(try await Self.list(tablet, item: "n1")["scan.bin"]?["state"] == .string("downloaded"))

        // The phone deletes the item: the tablet's pull of the delete frees its copy of the file.
        let kept = "\(directory)/tablet.ferry.attachments/\(digest.prefix(2))/\(digest.dropFirst(2))"
        #expect(FileManager.default.fileExists(atPath: kept))
        let phoneCopy = kept.replacingOccurrences(of: "/tablet.", with: "/phone.")
        #expect(FileManager.default.fileExists(atPath: phoneCopy))
        #expect(try await Self.ferry(["delete", "notes", "n1", "--store", phone]).status == 0)
        #expect(try await Self.ferry(["push", "--store", phone, "--server", url]).status == 0)
        let deleted = try await Self.ferry(["pull", "notes", "--store", tablet, "--server", url])
        #expect(deleted.status == 0, "\(deleted.errors)")
        #expect(deleted.output.contains("1 deleted"), "\(deleted.output)")
        #expect(!FileManager.default.fileExists(atPath: kept))
        // The phone's own copy went with the push of its delete.
        #expect(!FileManager.default.fileExists(atPath: phoneCopy))
        // The rows stay (the server keeps them for an undelete); the list says where the item went.
        let listed = try await Self.ferry(["attachments", "list", "notes", "n1", "--store", tablet])
        #expect(listed.status == 0, "\(listed.errors)")
        #expect(
            listed.output.contains("1 attachment (notes/n1 is not on this device: deleted, purged or not pulled)"),
            "\(listed.output)")
    }

    @Test func anAttachmentRemovedOfflineIsGoneFromTheServerAfterThePush() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (server, url, _) = try await Self.serve(directory)
        defer { server.terminate() }
        let phone = "sqlite:\(directory)/phone.ferry"
        try "alpha".write(toFile: "\(directory)/a.txt", atomically: true, encoding: .utf8)
        try "beta".write(toFile: "\(directory)/b.txt", atomically: true, encoding: .utf8)
        #expect(try await Self.ferry(["insert", "notes", #"{"id":"n2"}"#, "--store", phone]).status == 0)
        for name in ["a.txt", "b.txt"] {
            let added = try await Self.ferry([
                "attachments", "add", "notes", "n2", "\(directory)/\(name)", "--store", phone,
            ])
            #expect(added.status == 0, "\(added.errors)")
        }
        #expect(try await Self.ferry(["push", "--store", phone, "--server", url]).status == 0)
        #expect(try await Self.serverNames(url, item: "n2") == ["a.txt", "b.txt"])
        let listed = try await Self.ferry(["attachments", "list", "notes", "n2", "--store", phone])
        #expect(listed.output.contains("a.txt") && listed.output.contains("text/plain"), "\(listed.output)")
        #expect(listed.output.contains("2 attachments"), "\(listed.output)")

        let removed = try await Self.ferry(["attachments", "rm", "notes", "n2", "a.txt", "--store", phone])
        #expect(removed.status == 0, "\(removed.errors)")
        #expect(removed.output.contains("the next push deletes it on the server"), "\(removed.output)")
        var rows = try await Self.list(phone, item: "n2")
        #expect(rows["a.txt"]?["state"] == .string("pendingDelete"))
        #expect(rows["b.txt"]?["state"] == .string("uploaded"))
        let offline = try await Self.ferry(["push", "--store", phone, "--server", try Self.unreachableURL()])
        #expect(offline.status == 3, "\(offline.errors)")
        #expect(try await Self.serverNames(url, item: "n2") == ["a.txt", "b.txt"])

        let pushed = try await Self.ferry(["push", "--store", phone, "--server", url])
        #expect(pushed.status == 0, "\(pushed.errors)")
        #expect(try await Self.serverNames(url, item: "n2") == ["b.txt"])
        rows = try await Self.list(phone, item: "n2")
        #expect(Array(rows.keys) == ["b.txt"])
        let twice = try await Self.ferry(["attachments", "rm", "notes", "n2", "a.txt", "--store", phone])
        #expect(twice.status == 5)
        #expect(
            twice.errors == "error: 'notes/n2' has no attachment 'a.txt' (`attachments list notes n2` lists them)\n")
    }

    @Test func failuresAreOneLineWithAnExitCode() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let phone = "sqlite:\(directory)/phone.ferry"
        let file = "\(directory)/photo.jpg"
        try Data([1, 2, 3]).write(to: URL(fileURLWithPath: file))
        #expect(try await Self.ferry(["insert", "notes", #"{"id":"n3"}"#, "--store", phone]).status == 0)
        for (arguments, status, message) in [
            (["add", "notes", "nope", file], 5, "error: no item 'nope' in 'notes'"),
            (["add", "notes", "n3", "\(directory)/missing.jpg"], 5, "error: no file '\(directory)/missing.jpg'"),
            (["add", "notes", "n3", directory], 64, "error: '\(directory)' is a directory"),
            (["add", "notes", "n3", file, "--name", "a/b"], 64, "error: invalid attachment name 'a/b'"),
            (["list", "notes", "nope"], 5, "error: no item 'nope' in 'notes'"),
            (["get", "notes", "n3", "photo.jpg", "-o", "\(directory)/x"], 5, "error: 'notes/n3' has no attachment"),
            (["rm", "notes", "n3", "photo.jpg"], 5, "error: 'notes/n3' has no attachment 'photo.jpg'"),
        ] {
            let result = try await Self.ferry(["attachments"] + arguments + ["--store", phone])
            #expect(result.status == Int32(status), "\(arguments): \(result.errors)")
            #expect(result.errors.hasPrefix(message), "\(arguments): \(result.errors)")
            #expect(result.errors.split(separator: "\n").count == 1, "\(result.errors)")
        }
        // A server without attachments: said so, and the file stays queued.
        let added = try await Self.ferry(["attachments", "add", "notes", "n3", file, "--store", phone])
        #expect(added.status == 0, "\(added.errors)")
        #expect(try await Self.list(phone, item: "n3")["photo.jpg"]?["contentType"] == .string("image/jpeg"))
        let (server, url, _) = try await Self.serve(directory, attachments: false)
        defer { server.terminate() }
        // n3's insert goes through first: the line starts with it.
        let pushed = try await Self.ferry(["push", "--store", phone, "--server", url])
        #expect(pushed.status == 1)
        #expect(
            pushed.errors
                == "error: 1 operation pushed; then the server does not offer attachments; the files stay queued (start it with `ferry serve --attachments`)\n"
        )
        let again = try await Self.ferry(["push", "--store", phone, "--server", url])
        #expect(again.status == 1)
        #expect(
            again.errors
                == "error: the server does not offer attachments; the files stay queued (start it with `ferry serve --attachments`)\n"
        )
        #expect(try await Self.list(phone, item: "n3")["photo.jpg"]?["state"] == .string("pendingUpload"))
    }

    /// The REPL runs `attachments add` and `list` through its own command path, on its device.
    @Test func theReplAddsAndListsAttachments() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = "\(directory)/IMG_0042.png"
        try Data(repeating: 7, count: 2_000).write(to: URL(fileURLWithPath: file))
        let transcript = Transcript()
        let session = try ReplSession(
            server: nil, policy: .keep, stores: "\(directory)/repl", output: transcript.output)
        try await session.use("phone", store: nil)
        for line in [
            #"insert notes {"id":"r1"}"#, "attachments add notes r1 '\(file)' --name cover.png",
            "attachments list notes r1", "help attachments", "help",
        ] {
            try await session.execute(line)
        }
        let text = transcript.value
        #expect(text.contains("attached 'cover.png' (2 KB) to notes/r1"), "\(text)")
        let row = text.split(separator: "\n").first { $0.hasPrefix("cover.png") }
        #expect(row?.contains("image/png") == true && row?.contains("waiting to upload") == true, "\(text)")
        #expect(text.contains("attachments add|list|get|rm"), "\(text)")
        #expect(FileManager.default.fileExists(atPath: "\(directory)/repl/phone.sqlite.attachments"))
        await #expect(throws: ClientError.self) { try await session.execute("attachments") }
        await #expect(throws: ClientError.self) { try await session.execute("attachments get notes r1 nope -o x") }
    }
}
