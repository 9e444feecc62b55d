import FerryServer
import Foundation
import ServerTestSupport
import SyncCore
import Testing

/// CORS for browser apps of other origins (`ServerConfiguration.corsOrigins`), with a browser's
/// own requests: a preflight, then the request with `Origin`.
@Suite("CORS", .timeLimit(.minutes(5)))
struct CrossOriginTests {
    static let app = "https://app.example"

    static func preflight(_ server: ReferenceServer, origin: String) async throws -> LoopbackHTTP.Response {
        try await HardeningTests.send(
            server, "OPTIONS", "/tables/todo",
            headers: [
                ("Origin", origin), ("Access-Control-Request-Method", "POST"),
                ("Access-Control-Request-Headers", "zumo-api-version, content-type, idempotency-key"),
            ])
    }

    @Test func anAllowedOriginIsAnsweredWithItsHeaders() async throws {
        let server = try await HardeningTests.start { $0.corsOrigins = [Self.app, "http://localhost:3000"] }
        let preflight = try await Self.preflight(server, origin: Self.app)
        #expect(preflight.status == 204)
        #expect(preflight.headers["access-control-allow-origin"] == Self.app, "\(preflight.headers)")
        let methods = preflight.headers["access-control-allow-methods"] ?? ""
        #expect(["POST", "PATCH", "DELETE", "PUT"].allSatisfy(methods.contains), "\(methods)")
        let headers = (preflight.headers["access-control-allow-headers"] ?? "").lowercased()
        #expect(
            ["zumo-api-version", "content-type", "idempotency-key", "x-zumo-auth", "if-match"].allSatisfy(
                headers.contains), "\(headers)")
        #expect(preflight.headers["access-control-max-age"] == "600")

        let created = try await HardeningTests.send(
            server, "POST", "/tables/todo", headers: [("Origin", Self.app)], json: #"{"id":"a"}"#)
        #expect(created.status == 201)
        #expect(created.headers["access-control-allow-origin"] == Self.app, "\(created.headers)")
        #expect(created.headers["vary"]?.contains("Origin") == true, "\(created.headers)")
        #expect(created.headers["access-control-expose-headers"]?.contains("Location") == true, "\(created.headers)")
        // An error's answer too: the page reads why.
        let missing = try await HardeningTests.send(
            server, "GET", "/tables/todo/nothing", headers: [("Origin", Self.app)])
        #expect(missing.status == 404)
        #expect(missing.headers["access-control-allow-origin"] == Self.app, "\(missing.headers)")
        // The other allowed origin, as a browser spells it (any case of the scheme and host).
        let local = try await HardeningTests.send(
            server, "GET", "/tables/todo", headers: [("Origin", "http://LOCALHOST:3000")])
        #expect(local.headers["access-control-allow-origin"] == "http://LOCALHOST:3000", "\(local.headers)")
        try await server.shutdown()
    }

    @Test func anotherOriginGetsNoCORSHeaders() async throws {
        let server = try await HardeningTests.start { $0.corsOrigins = [Self.app] }
        let preflight = try await Self.preflight(server, origin: "https://evil.example")
        #expect(preflight.headers["access-control-allow-origin"] == nil, "\(preflight.headers)")
        let read = try await HardeningTests.send(
            server, "GET", "/tables/todo", headers: [("Origin", "https://evil.example")])
        #expect(read.status == 200)
        #expect(read.headers["access-control-allow-origin"] == nil, "\(read.headers)")
        // Without Origin (not a browser's cross-origin request): nothing added.
        let plain = try await HardeningTests.send(server, "GET", "/tables/todo")
        #expect(plain.headers["access-control-allow-origin"] == nil, "\(plain.headers)")
        // Both answers depend on Origin: a shared cache must not give them to the allowed page.
        #expect(read.headers["vary"]?.contains("Origin") == true, "\(read.headers)")
        #expect(plain.headers["vary"]?.contains("Origin") == true, "\(plain.headers)")
        try await server.shutdown()
    }

    @Test func noOriginsNoCORSAndAnyOriginWithAStar() async throws {
        let off = try await HardeningTests.start()
        let refused = try await Self.preflight(off, origin: Self.app)
        #expect(refused.headers["access-control-allow-origin"] == nil, "\(refused.headers)")
        try await off.shutdown()

        let any = try await HardeningTests.start { $0.corsOrigins = ["*"] }
        let preflight = try await Self.preflight(any, origin: "https://anywhere.example")
        #expect(preflight.headers["access-control-allow-origin"] == "*", "\(preflight.headers)")
        let read = try await HardeningTests.send(any, "GET", "/tables/todo", headers: [("Origin", Self.app)])
        #expect(read.headers["access-control-allow-origin"] == "*", "\(read.headers)")
        // What a page's script may read: the answer's ETag and Location, not only the basic headers.
        #expect(read.headers["access-control-expose-headers"]?.contains("ETag") == true, "\(read.headers)")
        try await any.shutdown()
    }
}
