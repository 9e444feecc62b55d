import Foundation
import ServerTestSupport
import StoreMemory
import SyncCore
import Testing
import Transport

/// `ferry serve` killed (SIGKILL, SIGTERM) and restarted on its port and database under a device
/// that syncs by itself, several rounds: the status says the server is unreachable, and a change
/// made after the restart reaches the device's query. The bounds here are liveness bounds, far
/// above what a healthy run takes; `SyncBenchmark --outage` measures the figures.
@Suite("A server killed and restarted under a syncing device", .timeLimit(.minutes(10)))
struct ServerOutageTests {
    /// `ferry serve` on `database`, on `port` (0: any), as a child process.
    static func serve(_ ferry: URL, database: String, port: Int) async throws -> (Process, URL) {
        let process = Process()
        process.executableURL = ferry
        process.arguments = ["serve", "--port", "\(port)", "--db", "sqlite:" + database, "--log-level", "critical"]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let line = try await ServeCommandTests.firstLine(of: output.fileHandleForReading, from: process)
        guard let text = line.split(separator: " ").first(where: { $0.hasPrefix("http://") }),
            let url = URL(string: String(text))
        else {
            process.terminate()
            throw URLError(.cannotConnectToHost)
        }
        return (process, url)
    }

    @Test func theStatusSaysUnreachableAndTheFirstChangeAfterTheRestartArrives() async throws {
        let ferry = try #require(FerryBinaryTests.ferryURL(), "the ferry executable is not built")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "ferry-outage-" + UUID().uuidString)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let database = directory.appendingPathComponent("server.sqlite").path
        var (process, url) = try await Self.serve(ferry, database: database, port: 0)
        let port = url.port ?? 0
        let device = SyncContext(
            store: MemoryStore(),
            remote: HTTPRemote(HTTPRemote.Configuration(serverURL: url, retry: .init(maximumAttempts: 1))))
        await device.startAutomaticSync(
            [SyncSubscription(table: "outage")],
            configuration: AutomaticSyncConfiguration(pushDelay: .milliseconds(1), pollInterval: .seconds(3_600)))
        try await eventually("caught up") { device.status.snapshot.isCaughtUp }
        for round in 0..<4 {
            let signal = round % 2 == 0 ? SIGKILL : SIGTERM
            let running = process
            kill(running.processIdentifier, signal)
            try await offThePool { running.waitUntilExit() }
            try await eventually("round \(round): the status says the server is unreachable") {
                if case .unreachable(_, let reason) = device.status.snapshot.reachability {
                    return reason.code == .network
                }
                return false
            }
            #expect(!device.status.snapshot.isCaughtUp)
            #expect(
                device.status.snapshot.summary.hasPrefix("server unreachable: "), "\(device.status.snapshot.summary)")
            (process, url) = try await Self.serve(ferry, database: database, port: port)
            let id = "after-\(round)"
            _ = try await HTTPRemote(HTTPRemote.Configuration(serverURL: url)).onlineTable("outage").insert([
                "id": .string(id)
            ])
            try await eventually("round \(round): the change after the restart reaches the device") {
                try await device.table("outage").item(id: id) != nil
            }
            try await eventually("round \(round): caught up again") { device.status.snapshot.isCaughtUp }
        }
        await device.stopAutomaticSync()
        let last = process
        last.terminate()
        try await offThePool { last.waitUntilExit() }
    }
}
