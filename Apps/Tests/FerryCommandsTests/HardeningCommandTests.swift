import ArgumentParser
import FerryClient
import FerryServer
import Foundation
import ServerStorageSQLite
import ServerTestSupport
import SyncCore
import Testing

@testable import FerryCommands

/// Commands that used to answer success for a failure, or crash on odd surroundings.
@Suite("ferry commands under hostile conditions", .timeLimit(.minutes(10)))
struct HardeningCommandTests {
    @Test func aPullTellsAnEmptyTableFromAWrongServer() async throws {
        let server = try await startServer()
        let empty = try Device(
            name: "empty", store: .memory, server: ServerSettings(url: URL(string: server.url)!, protocolVersion: .v3))
        let transcript = Transcript()
        let pull = try #require(try FerryCommand.parseAsRoot(["pull", "todo", "--json"]) as? PullCommand)
        try await pull.execute(on: empty, output: transcript.output(.json))
        let answer = try JSONValue(parsing: transcript.value.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(answer.objectValue?["received"] == .int(0), "\(transcript.value)")
        try await empty.close()

        for wrong in [server.url + "/api", server.url + "/health"] {
            let device = try Device(
                name: "wrong", store: .memory, server: ServerSettings(url: URL(string: wrong)!, protocolVersion: .v3))
            do {
                try await pull.execute(on: device, output: Transcript().output)
                Issue.record("a pull from \(wrong) answered success")
            } catch {
                let failure = ClientError.from(error)
                #expect(failure.code != .conflicts, "\(failure)")
                #expect("\(failure)".contains("todo"), "\(failure)")
            }
            try await device.close()
        }
        try await server.shutdown()
    }

    @Test func aConflictInThePullsPushFailsThePull() async throws {
        let server = try await startServer()
        let settings = ServerSettings(url: URL(string: server.url)!, protocolVersion: .v3)
        let phone = try Device(name: "phone", store: .memory, server: settings)
        let tablet = try Device(name: "tablet", store: .memory, server: settings)
        _ = try await phone.insert("todo", ["id": "milk", "title": "Milk"])
        _ = try await phone.push()
        _ = try await tablet.pull("todo", query: TableQuery(), queryID: nil, pageSize: 100)
        _ = try await tablet.update("todo", id: "milk", changes: ["title": "Oat milk"])
        _ = try await tablet.push()
        _ = try await phone.update("todo", id: "milk", changes: ["title": "Milk, 2 litres"])

        let transcript = Transcript()
        let pull = try #require(try FerryCommand.parseAsRoot(["pull", "todo", "--json"]) as? PullCommand)
        await #expect(throws: ClientError.self) { try await pull.execute(on: phone, output: transcript.output(.json)) }
        do {
            try await pull.execute(on: phone, output: Transcript().output(.json))
        } catch {
            #expect(ClientError.from(error).code == .conflicts, "\(error)")
            #expect(ClientError.from(error).code.rawValue == 2)
        }
        let answer = try JSONValue(parsing: transcript.value.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(answer.objectValue?["failed"]?.arrayValue?.count == 1, "\(transcript.value)")
        try await phone.close()
        try await tablet.close()
        try await server.shutdown()
    }

    /// `ferry demo | head -1`: the demo ends quietly when its reader goes away, and removes its
    /// temporary directory.
    @Test func aClosedOutputEndsACommandQuietly() async throws {
        guard let url = FerryBinaryTests.ferryURL() else {
            Issue.record("the ferry executable was not built beside the tests")
            return
        }
        let temporary = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: temporary) }
        let process = Process()
        process.executableURL = url
        process.arguments = ["demo"]
        var environment = ProcessInfo.processInfo.environment
        environment["TMPDIR"] = temporary
        process.environment = environment
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let (first, stderr) = try await offThePool {
            // Read the first line, then go away as `head -1` does.
            var first = Data()
            while !first.contains(UInt8(ascii: "\n")) {
                let chunk = output.fileHandleForReading.availableData
                if chunk.isEmpty { break }
                first.append(chunk)
            }
            try output.fileHandleForReading.close()
            let stderr = errors.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return (first, stderr)
        }
        #expect(String(decoding: first, as: UTF8.self).hasPrefix("Ferry demo"))
        #expect(process.terminationReason == .exit)
        #expect([0, 141].contains(process.terminationStatus), "exit \(process.terminationStatus)")
        #expect(stderr.isEmpty, "\(String(decoding: stderr.prefix(300), as: UTF8.self))")
        let left = try FileManager.default.contentsOfDirectory(atPath: temporary)
        #expect(left.filter { $0.hasPrefix("ferry-demo-") }.isEmpty, "left behind: \(left)")
    }

    @Test func badProtocolsAndBusyPortsAreOneLine() async throws {
        #expect(throws: (any Error).self) { try FerryCommand.parseAsRoot(["demo", "--protocol", "4"]) }
        #expect(throws: (any Error).self) { try FerryCommand.parseAsRoot(["repl", "--protocol", "7"]) }
        #expect(try FerryCommand.parseAsRoot(["demo", "--protocol", "2"]) is DemoCommand)
        let server = try await startServer()
        let busy = try await FerryBinaryTests.run(["serve", "--port", "\(server.port)", "--db", "memory"])
        #expect(busy.status == 1)
        #expect(
            busy.errors.hasPrefix("error: cannot listen on 127.0.0.1:\(server.port): the address is already in use"))
        #expect(busy.errors.split(separator: "\n").count == 1, "\(busy.errors)")
        // A database the failed start created is removed; one that was there stays.
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        for _ in 0..<2 {
            let again = try await FerryBinaryTests.run([
                "serve", "--port", "\(server.port)", "--db", "sqlite:\(directory)/new.sqlite",
            ])
            #expect(again.status == 1, "\(again.errors)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory).isEmpty)
        }
        try await SQLiteServerStorage(location: .file("\(directory)/kept.sqlite")).close()
        let kept = try await FerryBinaryTests.run([
            "serve", "--port", "\(server.port)", "--db", "sqlite:\(directory)/kept.sqlite",
        ])
        #expect(kept.status == 1, "\(kept.errors)")
        #expect(FileManager.default.fileExists(atPath: "\(directory)/kept.sqlite"))
        try await server.shutdown()
    }

    @Test func aQueryWithExtremeNumbersDoesNotCrashTheClient() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        for store in ["sqlite:\(directory)/device.sqlite", "lmdb:\(directory)/device.lmdb"] {
            let row = #"{"id":"a","title":"hello","year":9223372036854775807,"small":-9223372036854775808}"#
            let inserted = try await RemoteCommandTests.run(["insert", "todo", row, "--store", store])
            #expect(inserted.status == 0, "\(store): \(inserted.errors)")
            for filter in [
                "substring('hello',1,9223372036854775807) eq 'x'", "substring(title,9223372036854775807) eq 'x'",
                "substring(title,1,year) eq 'x'", "(year add 1) gt 0", "(year mul year) gt 0", "(small sub 1) lt 0",
                "(small div -1) gt 0", "(small mod -1) eq 0", "(year div 0) eq 1", "round(year div 0.0) eq 1",
                "-small gt 0", "indexof(title,'l') eq year",
            ] {
                let result = try await RemoteCommandTests.run(["query", "todo", "--filter=\(filter)", "--store", store])
                #expect(
                    [0, 64].contains(result.status),
                    "\(store) \(filter): exit \(result.status) \(result.errors.prefix(300))")
                #expect(!result.errors.contains("Fatal error"), "\(store) \(filter): \(result.errors.prefix(300))")
            }
        }
    }
}
