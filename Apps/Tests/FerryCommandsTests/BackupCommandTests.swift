import Foundation
import ServerStorageCore
import ServerStorageSQLite
import ServerTestSupport
import StoreSQLite
import Synchronization
import Testing

@testable import FerryCommands

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// `ferry backup`: a second process copies the database of a `ferry serve` that keeps writing, and
/// the copy is a consistent snapshot a server runs on.
@Suite("ferry backup", .timeLimit(.minutes(5)))
struct BackupCommandTests {
    /// Whether to stop writing, and the writes acknowledged so far.
    final class Progress: Sendable {
        let state = Mutex((stop: false, acknowledged: 0))
        var acknowledged: Int { state.withLock { $0.acknowledged } }
        func stop() { state.withLock { $0.stop = true } }
    }

    /// A new folder under the temporary directory.
    static func folder() throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-backup-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    /// Inserts `w0`, `w1`, … one after the other until told to stop.
    static func write(to url: String, _ progress: Progress) async throws {
        var index = 0
        while !progress.state.withLock({ $0.stop }) {
            var request = URLRequest(url: URL(string: url + "/tables/todo")!)
            request.httpMethod = "POST"
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            request.httpBody = Data(#"{"id":"w\#(index)","text":"\#(String(repeating: "x", count: 200))"}"#.utf8)
            let (_, response) = try await URLSession.shared.data(for: request)
            #expect((response as? HTTPURLResponse)?.statusCode == 201)
            index += 1
            progress.state.withLock { $0.acknowledged = index }
        }
    }

    @Test func aCopyTakenWhileTheServerWritesHoldsAPrefixOfItsWritesAndServes() async throws {
        let scratch = try Self.folder()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let directory = scratch.path
        let (server, url, _) = try await AttachmentCommandTests.serve(directory, attachments: false)
        defer {
            server.terminate()
            server.waitUntilExit()
        }
        let progress = Progress()
        let writer = Task { try await Self.write(to: url, progress) }
        try await eventually("the server wrote 300 items") { progress.acknowledged >= 300 }

        let before = progress.acknowledged
        let copy = directory + "/copy.sqlite"
        let result = try await FerryBinaryTests.run(["backup", "--db", "sqlite:\(directory)/server.sqlite", copy])
        let after = progress.acknowledged
        #expect(result.status == 0, "\(result.errors)")
        #expect(after > before, "the server wrote while the copy was taken")
        #expect(result.output.hasPrefix("backed up sqlite:\(directory)/server.sqlite to \(copy): "), "\(result.output)")
        #expect(result.output.contains("1 table, checked"), "\(result.output)")
        // The writes go on after the copy.
        try await eventually("the server wrote on") { progress.acknowledged > after + 50 }
        progress.stop()
        try await writer.value

        // The copy holds the writes acknowledged before it began, none after it ended, and no gap:
        // w0 … w(n-1) for one n.
        let storage = try SQLiteServerStorage(location: .file(copy))
        let ids = try await storage.query(StorageTable(name: "todo"), StorageQuery()).items.map(\.id)
        let count = ids.count
        #expect(count >= before && count <= after + 1, "\(count) items; \(before) acknowledged before, \(after) after")
        #expect(Set(ids) == Set((0..<count).map { "w\($0)" }), "the copy is not a prefix of the writes")
        try await storage.close()

        // A server runs on it.
        let restored = scratch.appendingPathComponent("restored")
        try FileManager.default.createDirectory(at: restored, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: copy, toPath: restored.path + "/server.sqlite")
        let (second, secondURL, _) = try await AttachmentCommandTests.serve(restored.path, attachments: false)
        defer {
            second.terminate()
            second.waitUntilExit()
        }
        let (body, response) = try await URLSession.shared.data(from: URL(string: secondURL + "/tables/todo/w0")!)
        #expect((response as? HTTPURLResponse)?.statusCode == 200, "\(String(decoding: body, as: UTF8.self))")
    }

    /// `ferry backup` finds the database where `ferry serve` does: `--db`, then
    /// `$FERRY_DATABASE_URL`, then the configuration file's `databaseURL` (`--config` or
    /// `$FERRY_CONFIG`); a bad file is one line, 64.
    @Test func theDatabaseIsFoundAsServeFindsIt() async throws {
        let scratch = try Self.folder()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let directory = scratch.path
        for name in ["file", "environment", "flag"] {
            try await SQLiteServerStorage(location: .file("\(directory)/\(name).sqlite")).close()
        }
        let config = "\(directory)/ferry.json"
        try Data(#"{"databaseURL": "sqlite:\#(directory)/file.sqlite", "port": 8080}"#.utf8)
            .write(to: URL(fileURLWithPath: config))
        let cases: [([String], [String: String], String)] = [
            (["--config", config], [:], "file"),
            ([], ["FERRY_CONFIG": config], "file"),
            (["--config", config], ["FERRY_DATABASE_URL": "sqlite:\(directory)/environment.sqlite"], "environment"),
            (
                ["--config", config, "--db", "sqlite:\(directory)/flag.sqlite"],
                ["FERRY_DATABASE_URL": "sqlite:\(directory)/environment.sqlite"], "flag"
            ),
        ]
        for (number, (arguments, environment, source)) in cases.enumerated() {
            let copy = "\(directory)/copy-\(number).sqlite"
            let result = try await FerryBinaryTests.run(["backup"] + arguments + [copy], environment: environment)
            #expect(result.status == 0, "\(arguments) \(environment): \(result.errors)")
            #expect(result.output.contains("sqlite:\(directory)/\(source).sqlite"), "\(result.output)")
        }

        let bad = "\(directory)/bad.json"
        try Data(#"{"databaseURL": "sqlite:x", "prot": 1}"#.utf8).write(to: URL(fileURLWithPath: bad))
        let wrongType = "\(directory)/wrong-type.json"
        try Data(#"{"databaseURL": 5}"#.utf8).write(to: URL(fileURLWithPath: wrongType))
        let badURL = "\(directory)/bad-url.json"
        try Data(#"{"databaseURL": "mysql://user:secret@x/db"}"#.utf8).write(to: URL(fileURLWithPath: badURL))
        let failures: [([String], String)] = [
            (["--config", "\(directory)/missing.json"], "missing.json"),
            (["--config", bad], "prot"),
            (["--config", wrongType], "databaseURL"),
            (["--config", badURL], "databaseURL in \(badURL)"),
        ]
        for (arguments, says) in failures {
            let result = try await FerryBinaryTests.run(["backup"] + arguments + ["\(directory)/never.sqlite"])
            #expect(result.status == 64, "\(arguments): \(result.status) \(result.errors)")
            #expect(result.errors.hasPrefix("error: ") && result.errors.contains(says), "\(result.errors)")
            #expect(result.errors.split(separator: "\n").count == 1, "\(result.errors)")
            #expect(!result.errors.contains("secret"), "\(result.errors)")
        }
        #expect(!FileManager.default.fileExists(atPath: "\(directory)/never.sqlite"))
    }

    @Test func badInputsAreOneLineWithTheirExitStatus() async throws {
        let scratch = try Self.folder()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let directory = scratch.path
        // A Ferry database, made by opening it.
        try await SQLiteServerStorage(location: .file(directory + "/server.sqlite")).close()
        // Another application's SQLite database: a device's local store.
        _ = try SQLiteStore(path: directory + "/other.sqlite")
        try Data("not a database".utf8).write(to: URL(fileURLWithPath: directory + "/junk.sqlite"))
        try Data().write(to: URL(fileURLWithPath: directory + "/taken.sqlite"))

        let cases: [([String], Int32, String)] = [
            (["--db", "sqlite:\(directory)/missing.sqlite", "\(directory)/a"], 5, "no database at"),
            (["--db", "sqlite:\(directory)/server.sqlite", "\(directory)/taken.sqlite"], 64, "exists already"),
            (
                ["--db", "sqlite:\(directory)/server.sqlite", "\(directory)/no/such/folder.sqlite"], 64,
                "does not exist"
            ),
            (["--db", "sqlite:\(directory)/other.sqlite", "\(directory)/b"], 1, "is not a Ferry server database"),
            (["--db", "sqlite:\(directory)/junk.sqlite", "\(directory)/c"], 1, "not a database"),
            (["--db", "memory", "\(directory)/d"], 64, "a memory database has nothing to back up"),
            (["--db", "postgres://ferry:secret@db/ferry", "\(directory)/e"], 64, "use pg_dump"),
            (["--db", "mysql://x", "\(directory)/f"], 64, "unknown database"),
            (["--db", "postgress://ferry:secret@db/ferry", "\(directory)/g"], 64, "'postgress://ferry:…@db/ferry'"),
        ]
        for (arguments, status, says) in cases {
            let result = try await FerryBinaryTests.run(["backup"] + arguments)
            #expect(result.status == status, "\(arguments): \(result.status) \(result.errors)")
            #expect(
                result.errors.hasPrefix("error: ") && result.errors.contains(says), "\(arguments): \(result.errors)")
            #expect(result.errors.split(separator: "\n").count == 1, "\(result.errors)")
            #expect(!result.errors.contains("secret"))
        }
        // Nothing was left behind by the failures.
        let left = try FileManager.default.contentsOfDirectory(atPath: directory).filter { !$0.hasPrefix("other.") }
        #expect(left.sorted() == ["junk.sqlite", "server.sqlite", "taken.sqlite"], "\(left)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: directory + "/taken.sqlite")).isEmpty)
    }
}
