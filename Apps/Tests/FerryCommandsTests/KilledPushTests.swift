import FerryClient
import Foundation
import SyncCore
import Testing
import Transport

/// `ferry push` killed with SIGKILL in the middle of its pushes, again and again, then run to the
/// end: the server holds every item once, each applied exactly once, nothing failed, and the
/// device's queue is empty. With batches and keys, and against a server without them.
@Suite("ferry push killed mid-push", .timeLimit(.minutes(10)))
struct KilledPushTests {
    static let items = 6_000

    /// `ferry serve` on an in-memory database, as a child process (an in-process server would share
    /// the test process's threads with the blocking process calls below).
    /// Its request log (one line per request) goes to `log`.
    static func serve(_ ferry: URL, pushExtensions: Bool, log: URL) async throws -> (Process, String) {
        let process = Process()
        process.executableURL = ferry
        process.arguments =
            ["serve", "--port", "0", "--db", "memory", "--log-level", "debug"]
            + (pushExtensions ? [] : ["--protocol-only"])
        let output = Pipe()
        process.standardOutput = output
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        process.standardError = try FileHandle(forWritingTo: log)
        try process.run()
        let line = try await ServeCommandTests.firstLine(of: output.fileHandleForReading, from: process)
        guard let url = line.split(separator: " ").first(where: { $0.hasPrefix("http://") }) else {
            process.terminate()
            throw ClientError(.failed, "ferry serve did not say where it listens: \(line)")
        }
        return (process, String(url))
    }

    @Test(arguments: [true, false])
    func nothingIsLostOrAppliedTwice(pushExtensions: Bool) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "ferry-kill-" + UUID().uuidString)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        guard let ferry = FerryBinaryTests.ferryURL() else {
            Issue.record("the ferry executable was not built beside the tests")
            return
        }
        let (serverProcess, serverURL) = try await Self.serve(
            ferry, pushExtensions: pushExtensions, log: directory.appendingPathComponent("serve.log"))
        // Not waited for: its graceful stop could hold a thread of the tests' pool for seconds.
        defer { serverProcess.terminate() }
        let store = "sqlite:" + directory.appendingPathComponent("device.ferry").path
        let lines = directory.appendingPathComponent("items.jsonl").path
        try (0..<Self.items).map { #"{"id":"k\#($0)","n":\#($0),"text":"item \#($0)"}"# }.joined(separator: "\n")
            .write(toFile: lines, atomically: true, encoding: .utf8)
        let imported = try await Self.run(["import", "things", lines, "--store", store])
        #expect(imported.status == 0, "\(imported.errors)")
        // Kills that land mid-push: the server held more items after the kill than before it, and
        // not all of them. The delay adapts: longer when a push was killed before it sent anything,
        // shorter when one finished first.
        let remote = HTTPRemote(HTTPRemote.Configuration(serverURL: URL(string: serverURL)!))
        var delay = 400
        var midPush: [Int] = []
        var missed: [String] = []
        var onServerBefore = 0
        for _ in 0..<30 where midPush.count < 3 {
            let outcome = try await Self.pushKilled(after: delay, ferry: ferry, store: store, server: serverURL)
            if let early = outcome, early.contains("another process is pushing") {
                // The push before was killed holding the store's push lease, which ends by itself
                // (within 3 s for the CLI): this one sent nothing.
                try await Task.sleep(for: .milliseconds(500))
                continue
            }
            let onServer =
                try await remote.onlineTable("things").query(TableQuery().top(0).includingTotalCount()).totalCount ?? 0
            if let early = outcome {
                missed.append("after \(delay) ms: \(early)")
                delay = max(50, delay / 2)
            } else if onServer == onServerBefore {
                missed.append("after \(delay) ms: killed before it sent anything")
                delay += 300
            } else if onServer < Self.items {
                midPush.append(onServer)
            }
            onServerBefore = onServer
            if onServer == Self.items { break }
        }
        #expect(!midPush.isEmpty, "no kill landed mid-push: \(missed)")
        var finished = try await Self.run(["push", "--store", store, "--server", serverURL])
        for _ in 0..<20 where finished.errors.contains("another process is pushing") {
            try await Task.sleep(for: .milliseconds(500))
            finished = try await Self.run(["push", "--store", store, "--server", serverURL])
        }
        #expect(finished.status == 0, "\(finished.errors)")
        let status = try await Self.run(["status", "--store", store, "--server", serverURL])
        #expect(status.output.contains("everything synced (last sync"), "\(status.output)")
        // Without a server nothing is asked: the queue is empty, and that is all it says.
        let unasked = try await Self.run(["status", "--store", store])
        #expect(
            unasked.output.contains("nothing waiting to be pushed (no server given to ask; last sync"),
            "\(unasked.output)")
        #expect(!status.output.contains("conflict"), "\(status.output)")
        // The CLI used what the server offers: batches from Ferry's server, single requests otherwise.
        let log = try String(contentsOf: directory.appendingPathComponent("serve.log"), encoding: .utf8)
        #expect(log.contains("POST /tables/$batch 200") == pushExtensions, "\(log.suffix(400))")

        let onServer = try await remote.onlineTable("things").all(TableQuery(), limit: 10 * Self.items)
        #expect(onServer.count == Self.items)
        #expect(Set(onServer.compactMap(\.id)).count == Self.items)
        // Every insert took one stamp of the table's write sequence: the newest is the count.
        let newest = onServer.compactMap { $0.version.flatMap(Self.sequenceNumber) }.max()
        #expect(newest == Int64(Self.items), "the server applied \(newest ?? -1) writes for \(Self.items) inserts")
    }

    /// `ferry` with `arguments`, waited for on a thread of its own: blocking one of the few threads
    /// that run the tests' tasks (two on this machine) for seconds would stall the servers other
    /// suites run in-process.
    static func run(_ arguments: [String]) async throws -> (status: Int32, output: String, errors: String) {
        try await FerryBinaryTests.run(arguments)
    }

    /// Starts `ferry push` and kills it with SIGKILL after `milliseconds`, timed on a thread of its
    /// own (the tests' tasks may wait for a thread far longer on a loaded machine). Answers `nil`
    /// when it was killed, or how it ended before.
    static func pushKilled(after milliseconds: Int, ferry: URL, store: String, server: String) async throws -> String? {
        let process = Process()
        process.executableURL = ferry
        process.arguments = ["push", "--store", store, "--server", server]
        process.standardOutput = FileHandle.nullDevice
        let errors = Pipe()
        process.standardError = errors
        try process.run()
        return await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                usleep(useconds_t(milliseconds * 1000))
                var killed = false
                if process.isRunning {
                    kill(process.processIdentifier, SIGKILL)
                    killed = true
                }
                process.waitUntilExit()
                if killed && process.terminationReason == .uncaughtSignal {
                    continuation.resume(returning: nil)
                } else {
                    let said = String(decoding: errors.fileHandleForReading.availableData, as: UTF8.self)
                    continuation.resume(returning: "exit \(process.terminationStatus): \(said.prefix(300))")
                }
            }
        }
    }

    /// The write-sequence number in a reference-server version (base64 of a big-endian Int64).
    static func sequenceNumber(_ version: String) -> Int64? {
        guard let data = Data(base64Encoded: version), data.count == 8 else { return nil }
        return data.prefix(8).reduce(0) { $0 << 8 | Int64($1) }
    }
}
