import FerryServer
import Foundation
import ServerTestSupport
import StoreMemory
import SyncCore
import Testing
import Transport

/// `https://` for real: nginx (Debian's) terminates TLS with a certificate that a test authority
/// signed, in front of `ferry serve`; the client trusts that authority only when told to
/// (`additionalTrustRoots`). Skipped, with the reason, where nginx or openssl is missing
/// (`.ci/run` installs nginx).
@Suite("TLS: a server behind nginx with a private authority", .timeLimit(.minutes(5)))
struct TLSTests {
    static let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"].first { FileManager.default.isExecutableFile(atPath: $0) }
    static let openssl = ["/usr/bin/openssl", "/usr/local/bin/openssl"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }
    static var missing: String? {
        if nginx == nil { return "nginx is not installed (apt-get install nginx)" }
        if openssl == nil { return "openssl is not installed" }
        return nil
    }

    @Test(.disabled(if: missing != nil, "\(missing ?? "")"))
    func anAuthorityTheClientWasGivenIsTrustedAndNoOtherIs() async throws {
        let scratch = try await Scratch()
        defer { scratch.remove() }
        let server = try await TestServer.start(in: scratch)
        defer { Task { try? await server.stop() } }
        let proxy = try await TLSProxy.start(in: scratch.url, upstream: server.server.port)
        defer { proxy.stop() }

        // Not trusted: the certificate's authority is nobody the system knows.
        let untrusted = HTTPRemote(
            HTTPRemote.Configuration(serverURL: proxy.url, retry: HTTPRemote.RetryPolicy(maximumAttempts: 1)))
        do {
            _ = try await untrusted.onlineTable("todo").query(TableQuery())
            Issue.record("a certificate of an unknown authority was accepted")
        } catch {
            #expect(error.code == .network, "\(error)")
            #expect(error.message.lowercased().contains("certificate"), "the message says why: \(error.message)")
        }
        // Trusted: two devices sync through it, and the change feed runs over it.
        let configuration = HTTPRemote.Configuration(
            serverURL: proxy.url, retry: HTTPRemote.RetryPolicy(maximumAttempts: 1),
            additionalTrustRoots: [proxy.authority])
        let a = SyncContext(store: MemoryStore(), remote: HTTPRemote(configuration))
        let b = SyncContext(store: MemoryStore(), remote: HTTPRemote(configuration))
        let heard = try await FeedListener(configuration, table: "todo")
        try await a.table("todo").insert(["id": "over-tls", "title": "sent through nginx"])
        #expect(try await a.push().pushed == 1)
        try await b.pull("todo")
        #expect(try await b.table("todo").item(id: "over-tls")?["title"] == "sent through nginx")
        #expect(try await heard.heard(), "the feed over TLS told of the insert")
    }
}

/// A change feed opened through a proxy before the writes it must tell of.
struct FeedListener {
    let task: Task<Bool, any Error>

    init(_ configuration: HTTPRemote.Configuration, table: String) async throws {
        let remote = HTTPRemote(configuration)
        #expect(await remote.offersChangeFeed())
        let feed = try await remote.changeFeed(tables: [table], after: nil)
        task = Task {
            for try await event in feed {
                if case .changed(let changed, _, _) = event, changed == table { return true }
            }
            return false
        }
    }

    /// Whether the feed told of a change of the table within 20 s.
    func heard() async throws -> Bool {
        let task = self.task
        let timeout = Task {
            try await Task.sleep(for: .seconds(20))
            task.cancel()
        }
        defer { timeout.cancel() }
        return try await task.value
    }
}

/// nginx on a free loopback port, terminating TLS with a certificate for 127.0.0.1 that a
/// throw-away authority signed, and passing everything to `upstream` (buffering off, for feeds).
struct TLSProxy {
    let process: Process
    let url: URL
    /// The authority's certificate (PEM).
    let authority: String

    static func start(in directory: URL, upstream: Int) async throws -> TLSProxy {
        let folder = directory.appendingPathComponent("tls")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        @Sendable func path(_ name: String) -> String { folder.appendingPathComponent(name).path }
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        // openssl blocks: off the pool.
        try await offThePool {
            try run(
                TLSTests.openssl!,
                ["req", "-x509"] + ec + [
                    "-keyout", path("ca.key"), "-out", path("ca.pem"), "-days", "2", "-subj",
                    "/CN=Ferry test authority",
                    "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
                ])
            try run(
                TLSTests.openssl!,
                ["req"] + ec + ["-keyout", path("server.key"), "-out", path("server.csr"), "-subj", "/CN=127.0.0.1"])
            try "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n".write(
                toFile: path("server.ext"), atomically: true, encoding: .utf8)
            try run(
                TLSTests.openssl!,
                [
                    "x509", "-req", "-in", path("server.csr"), "-CA", path("ca.pem"), "-CAkey", path("ca.key"),
                    "-CAcreateserial", "-out", path("server.pem"), "-days", "2", "-extfile", path("server.ext"),
                ])
        }
        let (process, port) = try await Self.launchNginx(in: folder) { port in
            """
            server {
                listen 127.0.0.1:\(port) ssl;
                ssl_certificate \(path("server.pem"));
                ssl_certificate_key \(path("server.key"));
                location / {
                    proxy_pass http://127.0.0.1:\(upstream);
                    proxy_http_version 1.1;
                    proxy_set_header Connection "";
                    proxy_buffering off;
                    proxy_read_timeout 1h;
                }
            }
            """
        }
        return TLSProxy(process: process, url: URL(string: "https://127.0.0.1:\(port)")!, authority: path("ca.pem"))
    }

    /// Starts Debian's nginx in `folder` (its configuration, temporary files and error log) with
    /// the `server` block for a free loopback port; returns once it accepts connections.
    static func launchNginx(in folder: URL, server: (Int) -> String) async throws -> (Process, Int) {
        @Sendable func path(_ name: String) -> String { folder.appendingPathComponent(name).path }
        for attempt in 1... {
            let port = try await freePort(in: Scratch())
            let configuration = """
                daemon off;
                master_process off;
                pid \(path("nginx.pid"));
                error_log \(path("error.log")) warn;
                events { worker_connections 256; }
                http {
                    access_log off;
                    client_body_temp_path \(path("body"));
                    proxy_temp_path \(path("proxy"));
                    fastcgi_temp_path \(path("fastcgi"));
                    uwsgi_temp_path \(path("uwsgi"));
                    scgi_temp_path \(path("scgi"));
                    \(server(port))
                }
                """
            try configuration.write(toFile: path("nginx.conf"), atomically: true, encoding: .utf8)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: TLSTests.nginx!)
            process.arguments = ["-p", folder.path, "-c", path("nginx.conf"), "-e", path("error.log")]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            // Ready once it accepts connections; a port taken meanwhile makes it exit: try another.
            for _ in 0..<100 where process.isRunning {
                if accepts(port) { return (process, port) }
                try await Task.sleep(for: .milliseconds(50))
            }
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            let log = (try? String(contentsOfFile: path("error.log"), encoding: .utf8)) ?? ""
            guard attempt < 5 else { throw TLSProxyError("nginx did not start: \(log.suffix(500))") }
        }
        fatalError("unreachable")
    }

    func stop() {
        // SIGKILL: without a master process, nginx waits for open feeds before it exits on SIGTERM.
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    static func run(_ tool: String, _ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        let errors = Pipe()
        process.standardOutput = FileHandle.nullDevice
        process.standardError = errors
        try process.run()
        let said = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw TLSProxyError("\(tool) \(arguments.first ?? ""): \(String(decoding: said, as: UTF8.self))")
        }
    }

    /// Whether something accepts TCP connections on 127.0.0.1:`port`.
    static func accepts(_ port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }
}

struct TLSProxyError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
