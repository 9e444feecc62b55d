import FerryServer
import Foundation
import ServerTestSupport
import StoreMemory
import SyncCore
import Testing
import Transport

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Issue 31: Debian's nginx in front of the server with its default proxy settings: HTTP/1.0 to
/// the upstream, responses buffered (a temporary file for large ones), the `Host` the upstream's.
/// Devices push (in batches) and pull large pages through it, the change feed reaches them through
/// it (the server's `X-Accel-Buffering: no` turns the buffering off for the feed), and links name
/// the proxy once the server trusts its `X-Forwarded-Host`/`-Proto`. Skipped, with the reason,
/// where nginx is missing (`.ci/run` installs it).
@Suite("Behind nginx with its default proxy settings", .timeLimit(.minutes(5)))
struct ProxyTests {
    /// nginx on a free loopback port, passing everything to `upstream` with nothing but
    /// `proxy_pass` and the two headers that name the public origin (and `settings`, directives
    /// of the location, when given).
    static func startProxy(in scratch: Scratch, upstream: Int, settings: String = "") async throws -> (Process, URL) {
        let folder = scratch.url.appendingPathComponent("nginx")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let (process, port) = try await TLSProxy.launchNginx(in: folder) { port in
            """
            server {
                listen 127.0.0.1:\(port);
                location / {
                    proxy_pass http://127.0.0.1:\(upstream);
                    proxy_set_header X-Forwarded-Host $http_host;
                    proxy_set_header X-Forwarded-Proto $scheme;
                    \(settings)
                }
            }
            """
        }
        return (process, URL(string: "http://127.0.0.1:\(port)")!)
    }

    @Test(.disabled(if: TLSTests.nginx == nil, "nginx is not installed (apt-get install nginx)"))
    func devicesSyncLargePagesBatchesAndTheFeedThroughIt() async throws {
        let scratch = try await Scratch()
        defer { scratch.remove() }
        let server = try await TestServer.start(in: scratch, trustsForwardedHeaders: true)
        defer { Task { try? await server.stop() } }
        let (nginx, url) = try await Self.startProxy(in: scratch, upstream: server.server.port)
        defer {
            kill(nginx.processIdentifier, SIGKILL)
            nginx.waitUntilExit()
        }
        // The client's default retries: a keep-alive connection nginx closes as it is reused, or a
        // connection refused on a loaded machine, is sent again (reads, and batches whose every
        // write is keyed), as in the field.
        let configuration = HTTPRemote.Configuration(serverURL: url)
        let a = SyncContext(store: MemoryStore(), remote: HTTPRemote(configuration))
        let b = SyncContext(store: MemoryStore(), remote: HTTPRemote(configuration))

        // The feed, through the proxy, before the writes it must tell of.
        let heard = try await FeedListener(configuration, table: "todo")

        // 600 items of 8 KB: pushed in batches, pulled in pages of about 800 KB.
        let padding = String(repeating: "p", count: 8_000)
        try await a.write { writes in
            for index in 0..<600 {
                try writes.insert(
                    ["id": .string("i\(index)"), "n": .int(Int64(index)), "text": .string(padding)], into: "todo")
            }
        }
        let pushed = try await a.push()
        #expect(pushed.pushed == 600 && pushed.failed.isEmpty, "\(pushed)")
        let pulled = try await b.pull("todo")
        #expect(pulled.items.upserted == 600, "\(pulled)")
        let last = try await b.table("todo").item(id: "i599")
        #expect(last?["text"]?.stringValue == padding)

        #expect(try await heard.heard(), "the feed through the proxy told of the inserts")

        // Links name the proxy (X-Forwarded-Host), not the upstream's address nginx sends as Host.
        var request = URLRequest(url: url.appendingPathComponent("tables/todo"))
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data(#"{"id":"linked"}"#.utf8)
        let (_, response) = try await URLSession.shared.data(for: request)
        let http = try #require(response as? HTTPURLResponse)
        #expect(http.statusCode == 201)
        let location = http.value(forHTTPHeaderField: "Location") ?? ""
        #expect(location == url.absoluteString + "/tables/todo/linked", "\(location)")
    }
}
