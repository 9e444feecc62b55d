import ServerTestSupport
import ArgumentParser
import FerryClient
import FerryServer
import Foundation
import SyncCore
import Testing
import Transport

#if canImport(Glibc)
    import Glibc
    private let closeDescriptor = Glibc.close
    private let streamSocket = Int32(SOCK_STREAM.rawValue)
#else
    import Darwin
    private let closeDescriptor = Darwin.close
    private let streamSocket = SOCK_STREAM
#endif

@testable import FerryCommands

@Suite("ferry watch, auto and status: live sync from the command line", .timeLimit(.minutes(10)))
struct LiveCommandTests {
    /// `ferry watch` prints the table again when another client writes to it.
    @Test func watchShowsWhatAnotherDeviceWrites() async throws {
        let server = try await startServer()
        defer { Task { try? await server.shutdown() } }
        let url = URL(string: server.url)!
        let watcher = try Device(name: "watcher", store: .memory, server: ServerSettings(url: url))
        let transcript = Transcript()
        let watch = try #require(
            try FerryCommand.parseAsRoot(["watch", "todo", "--seconds", "20"]) as? WatchCommand)
        let watching = Task { try await watch.execute(on: watcher, output: transcript.output) }
        // The first view (empty), then a write by another client shows up.
        try await eventually("the first view") { transcript.value.contains("todo on \(url.absoluteString): 0 rows") }
        let other = HTTPRemote(HTTPRemote.Configuration(serverURL: url))
        _ = try await other.onlineTable("todo").insert(["id": "from-b", "title": "Written elsewhere"])
        try await eventually("the other client's row") { transcript.value.contains("Written elsewhere") }
        #expect(transcript.value.contains("1 row"))
        watching.cancel()
        _ = await watching.result
        try await watcher.close()
    }

    @Test func theReplTurnsAutomaticSyncOnAndOff() async throws {
        let server = try await startServer()
        defer { Task { try? await server.shutdown() } }
        let transcript = Transcript()
        let session = try ReplSession(
            server: ServerSettings(url: URL(string: server.url)!), policy: .keep, stores: "memory",
            output: transcript.output)
        try await session.use("phone", store: nil)
        try await session.execute("auto on todo")
        try await session.execute(#"insert todo '{"id":"a","title":"Milk"}'"#)
        // Pushed by itself: nobody typed push.
        let remote = HTTPRemote(HTTPRemote.Configuration(serverURL: URL(string: server.url)!))
        try await eventually("the insert reaches the server") {
            (try? await remote.onlineTable("todo").item(id: "a")) != nil
        }
        try await eventually("the device knows it") {
            let status = try await session.currentDevice().status()
            return status.operations.isEmpty && status.lastSyncedAt != nil
        }
        try await session.execute("auto")
        #expect(transcript.value.contains("phone syncs todo by itself"), "\(transcript.value)")
        try await session.execute("auto off")
        try await session.execute("auto")
        #expect(transcript.value.contains("phone syncs only when asked"), "\(transcript.value)")
        try await session.execute("status")
        #expect(transcript.value.contains("everything synced (last sync"), "\(transcript.value)")
    }

    @Test func statusSaysPlainlyWhenEverythingIsSynced() {
        var status = DeviceStatus(
            device: "phone", store: "memory", online: true, queued: [:], operations: [], errors: [], deltaTokens: [:])
        let now = Timestamp(millisecondsSince1970: 1_800_000_000_000)
        status.server = "http://127.0.0.1:8080"
        status.reachability = .reachable(since: now)
        status.lastSyncedAt = Timestamp(millisecondsSince1970: now.millisecondsSince1970 - 2_400)
        #expect(Rendering.status(status, format: .table, now: now).contains("everything synced (last sync 2 s ago)"))
        status.lastSyncedAt = Timestamp(millisecondsSince1970: now.millisecondsSince1970 - 7_200_000)
        #expect(Rendering.status(status, format: .table, now: now).contains("(last sync 2 h ago)"))
        status.lastSyncedAt = nil
        #expect(Rendering.status(status, format: .table, now: now).contains("never synced"))
        // A pull that stopped before its end (Ctrl-C in the REPL) is not "everything synced".
        status.lastSyncedAt = now
        status.unfinishedPulls = ["bulk"]
        let cut = Rendering.status(status, format: .table, now: now)
        #expect(!cut.contains("everything synced"), "\(cut)")
        #expect(cut.contains("the last pull of 'bulk' stopped before its end (pull again to finish it)"), "\(cut)")
        #expect(Rendering.status(status, format: .json, now: now).contains(#""unfinishedPulls":["bulk"]"#))
        // Without a server, nothing was asked: not "everything synced".
        status.unfinishedPulls = []
        status.server = nil
        status.reachability = nil
        let unasked = Rendering.status(status, format: .table, now: now)
        #expect(
            unasked.contains("nothing waiting to be pushed (no server given to ask; last sync 0 s ago)"), "\(unasked)")
    }

    /// `status` asks the server: an unreachable one is said so, and nothing is "everything synced".
    @Test func statusSaysWhenTheServerCannotBeReached() async throws {
        // A port bound but not listening refuses connections, and no other test's server can take
        // it meanwhile (a stopped server's port could be reused by one that answers 401).
        let refusing = try RefusingPort()
        defer { refusing.close() }
        let url = URL(string: "http://127.0.0.1:\(refusing.port)")!
        let device = try Device(name: "phone", store: .memory, server: ServerSettings(url: url))
        let status = try await device.status()
        guard case .unreachable(_, let reason)? = status.reachability else {
            Issue.record("the server was not found unreachable: \(String(describing: status.reachability))")
            return
        }
        #expect(reason.code == .network)
        let text = Rendering.status(status, format: .table)
        #expect(text.contains("server \(url.absoluteString): unreachable: "), "\(text)")
        #expect(!text.contains("everything synced"), "\(text)")
        #expect(!text.contains("online; 0 queued operations, 0 errors: everything"), "\(text)")
        let json = try JSONValue(parsing: Rendering.status(status, format: .json)).objectValue ?? [:]
        #expect(json["reachable"] == false)
        // Operations read in words, not the engine's state names.
        var queued = status
        queued.operations = [
            QueuedOperation(
                id: 1, table: "todo", itemID: "a", kind: .insert, state: .inFlight, item: [:],
                createdAt: Timestamp(millisecondsSince1970: 1_800_000_000_000))
        ]
        #expect(Rendering.status(queued, format: .table).contains("sent, no answer yet"))
        try await device.close()
    }

    /// A piped `watch` of an unreachable server says so in its view; automatic sync's warnings
    /// (each reconnection) do not repeat it on standard error.
    @Test func aPipedWatchSaysTheServerIsUnreachableOnceInItsView() async throws {
        let refusing = try RefusingPort()
        defer { refusing.close() }
        let directory = try SecondPassCommandTests.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let watch = try await FerryBinaryTests.run([
            "watch", "todo", "--seconds", "3", "--server", "http://127.0.0.1:\(refusing.port)",
            "--store", "sqlite:" + directory.appendingPathComponent("device.sqlite").path,
        ])
        #expect(watch.status == 0, "\(watch.errors)")
        #expect(watch.output.contains("0 rows; server unreachable: "), "\(watch.output)")
        #expect(!watch.errors.contains("warning"), "\(watch.errors)")
    }

    /// `watch` shows the server going away without waiting for the rows to change.
    @Test func watchShowsTheServerGoingAway() async throws {
        let server = try await startServer()
        let url = URL(string: server.url)!
        let watcher = try Device(name: "watcher", store: .memory, server: ServerSettings(url: url))
        let transcript = Transcript()
        let watch = try #require(try FerryCommand.parseAsRoot(["watch", "todo", "--seconds", "30"]) as? WatchCommand)
        let watching = Task { try await watch.execute(on: watcher, output: transcript.output) }
        try await eventually("caught up") { transcript.value.contains("0 rows; everything synced") }
        try await server.shutdown()
        try await eventually("the view says the server is gone") {
            transcript.value.contains("0 rows; server unreachable: ")
        }
        watching.cancel()
        _ = await watching.result
        try await watcher.close()
    }
}

/// A loopback port bound to a socket that never listens: connections to it are refused for as long
/// as it is held.
struct RefusingPort {
    let descriptor: Int32
    let port: Int

    init() throws {
        let descriptor = socket(AF_INET, streamSocket, 0)
        self.descriptor = descriptor
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                bind(descriptor, address, length) == 0 && getsockname(descriptor, address, &length) == 0
            }
        }
        guard descriptor >= 0, bound else { throw CocoaError(.fileWriteUnknown) }
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    func close() { _ = closeDescriptor(descriptor) }
}
