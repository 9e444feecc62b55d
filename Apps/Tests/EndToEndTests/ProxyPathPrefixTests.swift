import FerryServer
import Foundation
import ServerStorageCore
import ServerTestSupport
import StoreMemory
import SyncCore
import Testing
import Transport

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Debian's nginx serving Ferry under a path (`/sync/`), with docs/deploy.md's "Under a path"
/// block: devices of both protocol versions push in batches, pull page by page and hear the change
/// feed; a 2.0 query goes past a page (following the `Link` header the server writes); an
/// attachment goes up (following the upload's `Location`) and down; every request through `/sync/`.
/// Without the prefix in the server's links, the `Link` and the upload's `Location` named paths
/// nginx does not serve.
@Suite("Behind nginx under a path", .timeLimit(.minutes(5)))
struct ProxyPathPrefixTests {
    /// The block of docs/deploy.md, word for word but for the upstream's port and the
    /// attachments' buffering lines (`AttachmentProxyTests.nginxSettings`).
    static func documentedLocation(upstream: Int) -> String {
        """
        location /sync/ {
            proxy_pass http://127.0.0.1:\(upstream)/;              # the trailing / takes /sync off
            proxy_set_header X-Forwarded-Host $http_host;   # with ferry serve --trust-proxy
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_set_header X-Forwarded-Prefix /sync;      # the path the links start with
            proxy_set_header Forwarded "";
            client_max_body_size 16m;
            proxy_read_timeout 1h;
            \(AttachmentProxyTests.nginxSettings)
        }
        """
    }

    @Test(.disabled(if: TLSTests.nginx == nil, "nginx is not installed (apt-get install nginx)"))
    func devicesSyncAndMoveFilesUnderThePath() async throws {
        let scratch = try await Scratch()
        defer { scratch.remove() }
        let server = try await TestServer.start(
            in: scratch, trustsForwardedHeaders: true, attachments: AttachmentLimits())
        defer { Task { try? await server.stop() } }
        let folder = scratch.url.appendingPathComponent("nginx")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let log = folder.appendingPathComponent("access.log")
        let (nginx, port) = try await TLSProxy.launchNginx(in: folder) { port in
            """
            log_format requests '$request $status';
            server {
                listen 127.0.0.1:\(port);
                access_log \(log.path) requests;
                \(Self.documentedLocation(upstream: server.server.port))
            }
            """
        }
        defer {
            kill(nginx.processIdentifier, SIGKILL)
            nginx.waitUntilExit()
        }
        let url = URL(string: "http://127.0.0.1:\(port)/sync")!

        for version in [ProtocolVersion.v3, .v2] {
            let configuration = HTTPRemote.Configuration(serverURL: url, protocolVersion: version)
            let table = version == .v3 ? "todo" : "todo2"
            let a = SyncContext(store: MemoryStore(), remote: HTTPRemote(configuration))
            let b = SyncContext(store: MemoryStore(), remote: HTTPRemote(configuration))
            let heard = try await FeedListener(configuration, table: table)
            try await a.write { writes in
                for index in 0..<250 {
                    try writes.insert(["id": .string("i\(index)"), "n": .int(Int64(index))], into: table)
                }
            }
            let pushed = try await a.push()
            #expect(pushed.pushed == 250 && pushed.failed.isEmpty, "\(version): \(pushed)")
            // Pages of 100, each asked for by the pull itself (keyset).
            let pulled = try await b.pull(table, options: PullOptions(pageSize: 100))
            #expect(pulled.items.upserted == 250, "\(version): \(pulled)")
            #expect(try await b.table(table).item(id: "i249")?["n"] == 249)
            #expect(try await heard.heard(), "\(version): the feed under the path told of the inserts")
        }

        // A 2.0 query past the server's page size (100), as the legacy clients read it: they follow
        // the Link header's URL as it stands (Ferry's client takes only its query).
        var next: URL? = url.appendingPathComponent("tables/todo2")
        var read = 0
        while let page = next, read <= 250 {
            var request = URLRequest(url: page)
            request.setValue("2.0.0", forHTTPHeaderField: "ZUMO-API-VERSION")
            let (body, response) = try await URLSession.shared.data(for: request)
            let http = try #require(response as? HTTPURLResponse)
            #expect(http.statusCode == 200, "\(page)")
            guard http.statusCode == 200 else { break }
            read += try #require(try JSONValue(parsingUTF8: Array(body)).arrayValue).count
            // `URL; rel=next` (the server's form, as the Node server's).
            next = http.value(forHTTPHeaderField: "Link").flatMap { $0.split(separator: ";").first }.flatMap {
                URL(string: $0.trimmingCharacters(in: CharacterSet(charactersIn: "<> ")))
            }
            if let next { #expect(next.path.hasPrefix("/sync/tables/todo2"), "\(next)") }
        }
        #expect(read == 250)

        // An attachment up (following the upload's Location) and down.
        let remote = AttachmentProxyTests.remote(url)
        _ = try await remote.onlineTable("notes").insert(["id": "a1", "text": "x"])
        let (source, bytes, sha256) = try AttachmentProxyTests.file(5 << 20, seed: 9)
        let target = AttachmentProxyTests.scratchFile()
        defer {
            try? FileManager.default.removeItem(at: source)
            try? FileManager.default.removeItem(at: target)
        }
        try await remote.uploadAttachment(
            table: "notes", itemID: "a1", name: "scan.bin", file: source, contentType: nil, sha256: sha256
        ) { _, _ in }
        try await remote.downloadAttachment(table: "notes", itemID: "a1", name: "scan.bin", to: target) { _, _ in }
        #expect(try Data(contentsOf: target) == bytes)

        // Every request went through /sync/: nothing reached nginx outside it (a 404 there).
        let lines = ((try? String(contentsOf: log, encoding: .utf8)) ?? "").split(separator: "\n")
        #expect(lines.contains { $0.hasPrefix("PATCH /sync/tables/$uploads/") }, "\(lines.suffix(5))")
        #expect(lines.contains { $0.hasPrefix("GET /sync/tables/todo2?") && $0.contains("skip") })
        let outside = lines.filter { !$0.contains(" /sync/") }
        #expect(outside.isEmpty, "requests outside the path: \(outside.prefix(5))")
        #expect(!lines.contains { $0.hasSuffix(" 404") }, "\(lines.filter { $0.hasSuffix(" 404") }.prefix(5))")
    }
}
