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

/// Issue 31: Debian's nginx in front of the server with the configuration of docs/deploy.md and
/// otherwise its default proxy settings: HTTP/1.0 to
/// the upstream, responses buffered (a temporary file for large ones), the `Host` the upstream's.
/// Devices push (in batches) and pull large pages through it, the change feed reaches them through
/// it (the server's `X-Accel-Buffering: no` turns the buffering off for the feed), and links name
/// the proxy once the server trusts its `X-Forwarded-Host`/`-Proto` (and never an origin a client
/// names itself). Skipped, with the reason,
/// where nginx is missing (`.ci/run` installs it).
@Suite("Behind nginx with its default proxy settings", .timeLimit(.minutes(5)))
struct ProxyTests {
    /// The `location` block of docs/deploy.md, word for word but for the upstream's port.
    static func documentedLocation(upstream: Int) -> String {
        """
        location / {
            proxy_pass http://127.0.0.1:\(upstream);
            proxy_set_header X-Forwarded-Host $http_host;   # with ferry serve --trust-proxy
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_set_header Forwarded "";                  # never pass on a client's own
            proxy_set_header X-Forwarded-Prefix "";         # nor its own path prefix
            client_max_body_size 16m;                       # batches: up to 16 MiB (the default, 1m, refuses them)
            proxy_read_timeout 1h;                          # change feeds stay open (the server sends a
                                                            # heartbeat every 15 s; the default 60 s holds too)
        }
        """
    }

    /// nginx on a free loopback port with the documented `location` (or, with `documented:
    /// false`, nothing but `proxy_pass` and nginx's defaults), `settings` added to the location,
    /// and an access log (`access.log` in the scratch's `nginx` folder) of each request's line.
    static func startProxy(
        in scratch: Scratch, upstream: Int, documented: Bool = true, settings: String = "",
        logFormat: String = "$request $status"
    ) async throws -> (Process, URL) {
        let folder = scratch.url.appendingPathComponent("nginx")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        var location =
            documented
            ? documentedLocation(upstream: upstream)
            : "location / {\n    proxy_pass http://127.0.0.1:\(upstream);\n}"
        location = location.replacingOccurrences(of: "\n}", with: "\n    \(settings)\n}")
        let (process, port) = try await TLSProxy.launchNginx(in: folder) { port in
            """
            log_format requests '\(logFormat)';
            server {
                listen 127.0.0.1:\(port);
                access_log \(folder.appendingPathComponent("access.log").path) requests;
                \(location)
            }
            """
        }
        return (process, URL(string: "http://127.0.0.1:\(port)")!)
    }

    /// The compression lines of docs/deploy.md, word for word.
    static let documentedCompression = """
        gzip on;                        # pages and batch answers travel compressed (about a tenth)
        gzip_types application/json;    # only JSON: events of the feed must not wait for a block
        gzip_min_length 1024;           # a small answer is not worth it
        gzip_proxied any;               # also for devices behind a proxy of their own (Via)
        gzip_vary on;
        """

    /// The request lines nginx logged so far (`POST /tables/todo HTTP/1.1 201`).
    static func accessLog(in scratch: Scratch) -> [String] {
        let path = scratch.url.appendingPathComponent("nginx/access.log").path
        let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").map(String.init)
    }

    /// Runs `body` with a server that trusts forwarded headers behind nginx (the documented
    /// location plus `settings`), given the scratch folder and the client configuration of nginx's URL.
    static func throughNginx(
        settings: String = "", logFormat: String = "$request $status",
        _ body: (Scratch, HTTPRemote.Configuration) async throws -> Void
    ) async throws {
        let scratch = try await Scratch()
        defer { scratch.remove() }
        let server = try await TestServer.start(in: scratch, trustsForwardedHeaders: true)
        defer { Task { try? await server.stop() } }
        let (nginx, url) = try await startProxy(
            in: scratch, upstream: server.server.port, settings: settings, logFormat: logFormat)
        defer {
            kill(nginx.processIdentifier, SIGKILL)
            nginx.waitUntilExit()
        }
        try await body(scratch, HTTPRemote.Configuration(serverURL: url))
    }

    @Test(.disabled(if: TLSTests.nginx == nil, "nginx is not installed (apt-get install nginx)"))
    func devicesSyncLargePagesBatchesAndTheFeedThroughIt() async throws {
        try await Self.throughNginx { scratch, configuration in
            let url = configuration.serverURL
            // The client's default retries: a keep-alive connection nginx closes as it is reused, or a
            // connection refused on a loaded machine, is sent again (reads, and batches whose every
            // write is keyed), as in the field.
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

            // Through batches: nginx let them through (its default 1m refused them with 413, and the
            // client fell back to one request per write).
            let log = Self.accessLog(in: scratch)
            let batches = log.filter { $0.hasPrefix("POST /tables/$batch ") }
            #expect(batches.contains { $0.hasSuffix(" 200") }, "\(log.suffix(5))")
            #expect(!log.contains { $0.hasSuffix(" 413") }, "\(log.filter { $0.hasSuffix(" 413") }.prefix(3))")
            #expect(log.filter { $0.hasPrefix("POST /tables/todo ") }.isEmpty, "\(log.suffix(5))")

            // Links name the proxy (X-Forwarded-Host), not the upstream's address nginx sends as Host,
            // nor the origin a client names in its own Forwarded or X-Forwarded-Host.
            for (header, value) in [
                ("", ""), ("Forwarded", "host=evil.example;proto=https"), ("X-Forwarded-Host", "evil.example"),
                ("X-Forwarded-Prefix", "/evil"),
            ] {
                var request = URLRequest(url: url.appendingPathComponent("tables/todo"))
                request.httpMethod = "POST"
                request.setValue("application/json", forHTTPHeaderField: "Content-Type")
                if !header.isEmpty { request.setValue(value, forHTTPHeaderField: header) }
                request.httpBody = Data(#"{"id":"linked\#(header)"}"#.utf8)
                let (_, response) = try await URLSession.shared.data(for: request)
                let http = try #require(response as? HTTPURLResponse)
                #expect(http.statusCode == 201)
                let location = http.value(forHTTPHeaderField: "Location") ?? ""
                #expect(location == url.absoluteString + "/tables/todo/linked\(header)", "\(header): \(location)")
            }
        }
    }

    /// With the compression lines of docs/deploy.md, pages travel compressed: Ferry's client asks
    /// for them (`Accept-Encoding`) and inflates them, and the change feed, which the lines leave
    /// out, still tells of a write as it happens.
    @Test(.disabled(if: TLSTests.nginx == nil, "nginx is not installed (apt-get install nginx)"))
    func pagesTravelCompressedWithTheDocumentedLines() async throws {
        try await Self.throughNginx(
            settings: Self.documentedCompression, logFormat: "$request $status $body_bytes_sent $gzip_ratio"
        ) { scratch, configuration in
            let a = SyncContext(store: MemoryStore(), remote: HTTPRemote(configuration))
            let b = SyncContext(store: MemoryStore(), remote: HTTPRemote(configuration))
            let heard = try await FeedListener(configuration, table: "todo")
            try await a.write { writes in
                for index in 0..<1_000 {
                    try writes.insert(
                        ["id": .string("c\(index)"), "title": .string("buy milk number \(index)"), "done": false],
                        into: "todo")
                }
            }
            #expect(try await a.push().pushed == 1_000)
            let pulled = try await b.pull("todo", options: PullOptions(pageSize: 1_000))
            #expect(pulled.items.upserted == 1_000, "\(pulled)")
            #expect(try await b.table("todo").item(id: "c999")?["title"] == "buy milk number 999")
            #expect(try await heard.heard(), "the feed through the proxy told of the inserts")

            // nginx's `$gzip_ratio` is `-` for an answer it did not compress (an empty last page is
            // too small to be worth it).
            let log = Self.accessLog(in: scratch)
            func fields(_ line: String) -> (bytes: Int, ratio: Double?) {
                let words = line.split(separator: " ")
                return (Int(words[words.count - 2]) ?? 0, Double(words[words.count - 1]))
            }
            let pages = log.filter { $0.hasPrefix("GET /tables/todo?") && $0.contains(" 200 ") }.map(fields)
            #expect(pages.contains { $0.ratio != nil }, "\(log.suffix(5))")
            for page in pages {
                #expect(page.ratio.map { $0 > 3 } ?? (page.bytes < 100), "a page as nginx sent it: \(page)")
            }
            let batches = log.filter { $0.hasPrefix("POST /tables/$batch ") }.map(fields)
            #expect(!batches.isEmpty && batches.allSatisfy { ($0.ratio ?? 0) > 3 }, "\(batches)")
        }
    }
}
