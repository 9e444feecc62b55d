import Crypto
import FerryServer
import Foundation
import ServerStorageCore
import ServerTestSupport
import SyncCore
import StoreConformance
import Synchronization
import Testing
import Transport

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Attachments (issue 30) through what stands between devices and `ferry serve` (issue 31): nginx
/// with the settings docs/deploy.md gives, nginx with its defaults (one clear error), and a proxy
/// that resets connections in the middle of uploads and downloads.
@Suite("Attachments through proxies", .timeLimit(.minutes(5)))
struct AttachmentProxyTests {
    /// The bytes of one `PATCH` (`HTTPRemote.uploadChunkSize`).
    static let chunk = 4 << 20

    /// The nginx settings docs/deploy.md gives for attachments.
    static let nginxSettings = """
        proxy_request_buffering off;
        proxy_buffering off;
        """

    /// A server with attachments, an item `notes/a1` to attach to, and a client of `url` (the
    /// server's own when `nil`).
    static func start(in scratch: Scratch) async throws -> TestServer {
        let server = try await TestServer.start(in: scratch, attachments: AttachmentLimits())
        _ = try await TestServer.remote(server.url, .v3).onlineTable("notes").insert(["id": "a1", "text": "x"])
        return server
    }

    static func remote(_ url: URL, attempts: Int = 1) -> HTTPRemote {
        HTTPRemote(
            HTTPRemote.Configuration(
                serverURL: url, protocolVersion: .v3, timeout: .seconds(20),
                retry: HTTPRemote.RetryPolicy(maximumAttempts: attempts, initialDelay: .milliseconds(10))))
    }

    /// `count` bytes from `seed` (no pattern that a chunk boundary could hide).
    static func file(_ count: Int, seed: UInt64) throws -> (URL, Data, String) {
        var state = seed
        var bytes = [UInt8](repeating: 0, count: count)
        for index in bytes.indices {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            bytes[index] = UInt8(truncatingIfNeeded: state >> 33)
        }
        let data = Data(bytes)
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-attachment-\(UUID())")
        try data.write(to: url)
        return (url, data, SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined())
    }

    static func scratchFile() -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("ferry-download-\(UUID())")
    }

    @Test(.disabled(if: TLSTests.nginx == nil, "nginx is not installed (apt-get install nginx)"))
    func aFiveMegabyteFileGoesUpAndDownThroughNginxWithFerrysSettings() async throws {
        try await Self.withNginx(settings: Self.nginxSettings, seed: 1) { try await Self.upAndDown($0) }
    }

    /// A server behind nginx, a 5 MB file to send and a place to download it to.
    struct NginxFixture {
        /// nginx's URL, and the server's behind it.
        var url, serverURL: URL
        var source: URL
        var bytes: Data
        var sha256: String
        var target: URL
    }

    /// Runs `body` with a server behind nginx (`settings` in its server block); all of it gone after.
    static func withNginx(
        documented: Bool = true, settings: String = "", seed: UInt64, _ body: (NginxFixture) async throws -> Void
    ) async throws {
        let scratch = try await Scratch()
        defer { scratch.remove() }
        let server = try await Self.start(in: scratch)
        defer { Task { try? await server.stop() } }
        let (nginx, url) = try await ProxyTests.startProxy(
            in: scratch, upstream: server.server.port, documented: documented, settings: settings)
        defer {
            kill(nginx.processIdentifier, SIGKILL)
            nginx.waitUntilExit()
        }
        let (source, bytes, sha256) = try Self.file(5 << 20, seed: seed)
        let target = Self.scratchFile()
        defer {
            try? FileManager.default.removeItem(at: source)
            try? FileManager.default.removeItem(at: target)
        }
        try await body(
            NginxFixture(url: url, serverURL: server.url, source: source, bytes: bytes, sha256: sha256, target: target))
    }

    static func upAndDown(_ fixture: NginxFixture) async throws {
        let (url, source, bytes, sha256, target) = (
            fixture.url, fixture.source, fixture.bytes, fixture.sha256, fixture.target
        )
        let remote = Self.remote(url)
        let sent = Mutex<[Int64]>([])
        try await remote.uploadAttachment(
            table: "notes", itemID: "a1", name: "scan.bin", file: source, contentType: nil, sha256: sha256,
            progress: { done, _ in sent.withLock { $0.append(done) } })
        #expect(sent.withLock { $0.count } >= 2, "a 5 MB file goes in two PATCHes of up to 4 MiB")
        try await remote.downloadAttachment(table: "notes", itemID: "a1", name: "scan.bin", to: target) { _, _ in }
        #expect(try Data(contentsOf: target) == bytes)
        let rows = try await remote.attachmentRows(table: "notes", query: TableQuery())
        #expect(rows.items.map { $0["sha256"] } == [.string(sha256)])
        #expect(rows.items.first?["size"] == .int(Int64(bytes.count)))
    }

    /// nginx's default `client_max_body_size` (1 MiB) refuses the first 4 MiB `PATCH` with 413:
    /// the client reports that, in one line that names the setting, and does not retry. Downloads
    /// pass with the defaults (nginx buffers them through a temporary file).
    @Test(.disabled(if: TLSTests.nginx == nil, "nginx is not installed (apt-get install nginx)"))
    func nginxWithItsDefaultsRefusesAnUploadWithOneClearError() async throws {
        try await Self.withNginx(documented: false, seed: 2) { fixture in
            try await Self.refusedThenDownloaded(fixture)
        }
    }

    static func refusedThenDownloaded(_ fixture: NginxFixture) async throws {
        let (url, source, bytes, sha256, target) = (
            fixture.url, fixture.source, fixture.bytes, fixture.sha256, fixture.target
        )
        do {
            try await Self.remote(url, attempts: 3).uploadAttachment(
                table: "notes", itemID: "a1", name: "scan.bin", file: source, contentType: nil, sha256: sha256
            ) { _, _ in }
            Issue.record("nginx's 1 MiB limit let a 4 MiB PATCH through")
        } catch let error as RemoteError {
            #expect(error.status == 413 && error.code == .badRequest, "\(error)")
            #expect(error.message.contains("client_max_body_size"), "the message names the setting: \(error.message)")
            #expect(!error.message.contains("\n") && !error.message.contains("<html"), "\(error.message)")
        }
        // The same file straight to the server, then down through nginx's defaults.
        try await Self.remote(fixture.serverURL).uploadAttachment(
            table: "notes", itemID: "a1", name: "scan.bin", file: source, contentType: nil, sha256: sha256
        ) { _, _ in }
        try await Self.remote(url).downloadAttachment(table: "notes", itemID: "a1", name: "scan.bin", to: target) {
            _, _ in
        }
        #expect(try Data(contentsOf: target) == bytes)
    }

    /// A proxy resets the connection at random byte offsets, three times in the upload and three
    /// times in the download of a 10 MiB file: both complete byte-identical, the upload resumes
    /// where the server is (the bytes through the proxy stay under the file plus a chunk per
    /// attempt), and the server never lists the attachment, nor holds its content, before all of it
    /// is there.
    @Test(arguments: [UInt64(1), 2, 3])
    func transfersCutAtRandomOffsetsCompleteWithoutResendingWhatTheServerHas(_ seed: UInt64) async throws {
        let scratch = try await Scratch()
        defer { scratch.remove() }
        let server = try await Self.start(in: scratch)
        defer { Task { try? await server.stop() } }
        let proxy = try ResettingProxy(target: server.server.port)
        defer { proxy.stop() }
        let size = 10 << 20
        let cuts = 3
        let (source, bytes, sha256) = try Self.file(size, seed: seed)
        let target = Self.scratchFile()
        defer {
            try? FileManager.default.removeItem(at: source)
            try? FileManager.default.removeItem(at: target)
        }
        var random = SeededRandom(seed: seed)
        func offsets() -> [Int] { (0..<cuts).map { _ in Int.random(in: 65_536..<(size - 65_536), using: &random) } }
        let remote = Self.remote(URL(string: "http://127.0.0.1:\(proxy.port)")!, attempts: 2 * cuts + 2)

        // What the server shows while the upload goes on, straight from it (not through the proxy).
        let blobs = try #require(server.server.storage.blobStorage())
        // Stopped by a flag, not by cancelling the task: cancelling `URLSession.data(from:)` while
        // its answer completes deadlocks swift-corelibs-foundation (the cancellation handler waits
        // on the session's queue, which waits on the task's status lock): a CI run hung there.
        let stopped = Mutex(false)
        let watcher = Task {
            var seen: [(listed: JSONValue?, stored: Int64?)] = []
            while !stopped.withLock({ $0 }) {
                let (listing, _) = try await URLSession.shared.data(
                    from: server.url.appendingPathComponent("tables/notes/a1/$attachments"))
                let stored = try await blobs.blob(sha256: sha256)?.size
                let listed = try JSONValue(parsingUTF8: [UInt8](listing)).arrayValue?.first { $0["name"] == "big.bin" }
                seen.append((listed, stored))
                try? await Task.sleep(for: .milliseconds(20))
            }
            return seen
        }

        let plannedUp = offsets()
        let before = proxy.counts
        proxy.arm(upstream: plannedUp)
        try await remote.uploadAttachment(
            table: "notes", itemID: "a1", name: "big.bin", file: source, contentType: nil, sha256: sha256
        ) { _, _ in }
        let afterUpload = proxy.counts
        stopped.withLock { $0 = true }
        let seen = try await watcher.value
        #expect(proxy.armed == 0 && afterUpload.cuts - before.cuts == cuts, "seed \(seed): cuts at \(plannedUp)")
        let upstream = afterUpload.upstream - before.upstream
        #expect(upstream >= size)
        #expect(upstream < size + (cuts + 1) * Self.chunk, "seed \(seed): \(upstream) bytes sent for \(size)")
        for (listed, stored) in seen {
            if let listed { #expect(listed["size"] == .int(Int64(size)) && listed["sha256"] == .string(sha256)) }
            if let stored { #expect(stored == Int64(size), "seed \(seed): content stored before it was whole") }
        }
        #expect(try await blobs.blob(sha256: sha256)?.size == Int64(size))
        #expect(!seen.isEmpty, "the server was watched during the upload")
        let rows = try await Self.remote(server.url).attachmentRows(table: "notes", query: TableQuery())
        #expect(rows.items.map { $0["sha256"] } == [.string(sha256)])

        let plannedDown = offsets()
        proxy.arm(downstream: plannedDown)
        try await remote.downloadAttachment(table: "notes", itemID: "a1", name: "big.bin", to: target) { _, _ in }
        let afterDownload = proxy.counts
        #expect(
            proxy.armed == 0 && afterDownload.cuts - afterUpload.cuts == cuts, "seed \(seed): cuts at \(plannedDown)")
        let downstream = afterDownload.downstream - afterUpload.downstream
        #expect(downstream < size + (cuts + 1) * Self.chunk, "seed \(seed): \(downstream) bytes received for \(size)")
        #expect(try Data(contentsOf: target) == bytes, "seed \(seed): cuts at \(plannedDown)")
    }
}

extension AttachmentProxyTests {
    /// A cut, then another in the `HEAD` that asks the server where it is: the client asks again
    /// (one more attempt) and the upload completes.
    @Test func aCutQuestionIsAskedAgain() async throws {
        let scratch = try await Scratch()
        defer { scratch.remove() }
        let server = try await Self.start(in: scratch)
        defer { Task { try? await server.stop() } }
        let proxy = try ResettingProxy(target: server.server.port)
        defer { proxy.stop() }
        let (source, bytes, sha256) = try Self.file(6 << 20, seed: 4)
        let target = Self.scratchFile()
        defer {
            try? FileManager.default.removeItem(at: source)
            try? FileManager.default.removeItem(at: target)
        }
        // The 50th byte after the first cut is in the next request, the HEAD.
        proxy.arm(upstream: [2 << 20, (2 << 20) + 50])
        try await Self.remote(URL(string: "http://127.0.0.1:\(proxy.port)")!, attempts: 3).uploadAttachment(
            table: "notes", itemID: "a1", name: "big.bin", file: source, contentType: nil, sha256: sha256
        ) { _, _ in }
        #expect(proxy.armed == 0 && proxy.counts.cuts == 2)
        try await Self.remote(server.url).downloadAttachment(
            table: "notes", itemID: "a1", name: "big.bin", to: target
        ) { _, _ in }
        #expect(try Data(contentsOf: target) == bytes)
    }
}
