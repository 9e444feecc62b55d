import FerryClient
import Foundation
import SyncCore
import Testing
import Transport

/// `ferry push` killed with SIGKILL in the middle of its pushes, again and again, then run to the
/// end: the server holds every item once, each applied exactly once, nothing failed, and the
/// device's queue is empty. With batches and keys, and against a server without them.
@Suite("ferry push killed mid-push")
struct KilledPushTests {
    static let items = 6_000

    /// `ferry serve` on an in-memory database, as a child process (an in-process server would share
    /// the test process's threads with the blocking process calls below).
    static func serve(_ ferry: URL, pushExtensions: Bool) async throws -> (Process, String) {
        let process = Process()
        process.executableURL = ferry
        process.arguments =
            ["serve", "--port", "0", "--db", "memory", "--log-level", "error"]
            + (pushExtensions ? [] : ["--protocol-only"])
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
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
        let (serverProcess, serverURL) = try await Self.serve(ferry, pushExtensions: pushExtensions)
        defer {
            serverProcess.terminate()
            serverProcess.waitUntilExit()
        }
        let store = "sqlite:" + directory.appendingPathComponent("device.ferry").path
        let lines = directory.appendingPathComponent("items.jsonl").path
        try (0..<Self.items).map { #"{"id":"k\#($0)","n":\#($0),"text":"item \#($0)"}"# }.joined(separator: "\n")
            .write(toFile: lines, atomically: true, encoding: .utf8)
        let imported = try FerryBinaryTests.run(["import", "things", lines, "--store", store])
        #expect(imported.status == 0, "\(imported.errors)")
        var random = SystemRandomNumberGenerator()
        var killed = 0
        for _ in 0..<4 {
            let process = Process()
            process.executableURL = ferry
            process.arguments = ["push", "--store", store, "--server", serverURL]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            try await Task.sleep(for: .milliseconds(Int.random(in: 200...900, using: &random)))
            if process.isRunning {
                kill(process.processIdentifier, SIGKILL)
                killed += 1
            }
            process.waitUntilExit()
        }
        #expect(killed > 0, "no push was killed: the pushes were too quick for the test")
        let finished = try FerryBinaryTests.run(["push", "--store", store, "--server", serverURL])
        #expect(finished.status == 0, "\(finished.errors)")
        let status = try FerryBinaryTests.run(["status", "--store", store])
        #expect(status.output.contains("nothing waiting to be pushed"), "\(status.output)")
        #expect(!status.output.contains("conflict"), "\(status.output)")

        let remote = HTTPRemote(HTTPRemote.Configuration(serverURL: URL(string: serverURL)!))
        let onServer = try await remote.onlineTable("things").all(TableQuery(), limit: 10 * Self.items)
        #expect(onServer.count == Self.items)
        #expect(Set(onServer.compactMap(\.id)).count == Self.items)
        // Every insert took one stamp of the table's write sequence: the newest is the count.
        let newest = onServer.compactMap { $0.version.flatMap(Self.sequenceNumber) }.max()
        #expect(newest == Int64(Self.items), "the server applied \(newest ?? -1) writes for \(Self.items) inserts")
    }

    /// The write-sequence number in a reference-server version (base64 of a big-endian Int64).
    static func sequenceNumber(_ version: String) -> Int64? {
        guard let data = Data(base64Encoded: version), data.count == 8 else { return nil }
        return data.prefix(8).reduce(0) { $0 << 8 | Int64($1) }
    }
}
