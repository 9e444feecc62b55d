import FerryServer
import Foundation
import SyncCore
import Testing

@Suite("Authentication and per-user tables", .timeLimit(.minutes(10)))
struct AuthTests {
    static let tables = [
        TableSettings(name: "private", requiresAuth: true),
        TableSettings(name: "notes", softDelete: true, perUser: true),
        TableSettings(name: "open"),
    ]

    static func bearer(_ token: String) -> [(String, String)] { [("Authorization", "Bearer " + token)] }

    @Test func tokensAreVerified() throws {
        let verifier = TokenVerifier(secret: LiveServer.secret, issuer: "ferry", audience: "apps")
        let good = verifier.sign(subject: "alice", expiresAt: Date().addingTimeInterval(60))
        #expect(try verifier.verify(good).subject == "alice")
        let other = TokenVerifier(secret: "another-secret-0123456789", issuer: "ferry", audience: "apps")
        let parts = good.split(separator: ".")
        let unsignedHeader = Data("{\"alg\":\"none\"}".utf8).base64EncodedString().replacingOccurrences(
            of: "=", with: "")
        let refused: [(String, String)] = [
            (other.sign(subject: "alice"), "the signature does not match"),
            (verifier.sign(subject: "alice", expiresAt: Date().addingTimeInterval(-1)), "the token has expired"),
            (
                verifier.sign(subject: "alice", claims: ["nbf": .int(Int64(Date().timeIntervalSince1970) + 600)]),
                "not valid yet"
            ),
            (verifier.sign(subject: "alice", claims: ["iss": "someone"]), "issuer"),
            (verifier.sign(subject: "alice", claims: ["aud": ["x", "y"]]), "audience"),
            (verifier.sign(subject: ""), "no subject"),
            ("\(unsignedHeader).\(parts[1]).", "only HS256"),
            ("abc", "three dot-separated parts"),
            ("a.b.c", "header"),
            ("\(parts[0]).\(parts[1]).AAAA", "signature does not match"),
            ("\(parts[0]).e30.\(parts[2])", "signature does not match"),
        ]
        for (token, reason) in refused {
            #expect(throws: TokenVerifier.Failure.self, "\(reason)") { try verifier.verify(token) }
            do {
                _ = try verifier.verify(token)
            } catch {
                #expect(error.reason.contains(reason), "\(error.reason) does not mention \(reason)")
            }
        }
        #expect(try verifier.verify(verifier.sign(subject: "bob", claims: ["aud": ["x", "apps"]])).subject == "bob")
    }

    @Test func tablesThatRequireAuthAnswer401WithoutAValidToken() async throws {
        let server = try await LiveServer.start(tables: Self.tables)
        #expect(try await server.send("GET", "/tables/private").status == 401)
        #expect(try await server.send("POST", "/tables/private", json: ["id": "1"]).status == 401)
        let expired = LiveServer.token("alice", expired: true)
        let refused = try await server.send("GET", "/tables/private", headers: Self.bearer(expired))
        #expect(refused.status == 401)
        #expect(refused.json?["error"]?.stringValue?.contains("expired") == true)
        let forged = LiveServer.token("alice", secret: "another-secret-0123456789")
        #expect(try await server.send("GET", "/tables/private", headers: [("X-ZUMO-AUTH", forged)]).status == 401)
        let token = LiveServer.token("alice")
        #expect(try await server.send("GET", "/tables/private", headers: Self.bearer(token)).status == 200)
        #expect(try await server.send("GET", "/tables/private", headers: [("X-ZUMO-AUTH", token)]).status == 200)
        // A bad token is refused even where none is needed; no token is fine there.
        #expect(try await server.send("GET", "/tables/open", headers: Self.bearer(forged)).status == 401)
        #expect(try await server.send("POST", "/tables/open", json: ["id": "1"]).status == 201)
        try await server.stop()
    }

    @Test func aRequestCarriesOneCredential() async throws {
        let server = try await LiveServer.start(tables: Self.tables)
        let (alice, bob) = (LiveServer.token("alice"), LiveServer.token("bob"))
        // Two different tokens: neither is picked behind the client's back.
        let both = try await server.send(
            "GET", "/tables/private", headers: Self.bearer(bob) + [("X-ZUMO-AUTH", alice)])
        #expect(both.status == 400)
        #expect(both.json?["error"]?.stringValue?.contains("different tokens") == true)
        // The same token twice is one credential; an empty X-ZUMO-AUTH is none.
        #expect(
            try await server.send("GET", "/tables/private", headers: Self.bearer(alice) + [("X-ZUMO-AUTH", alice)])
                .status == 200)
        #expect(
            try await server.send("GET", "/tables/private", headers: Self.bearer(alice) + [("X-ZUMO-AUTH", " ")])
                .status == 200)
        try await server.stop()
    }

    @Test func perUserTablesKeepEachSubjectsRowsInvisibleToOthers() async throws {
        let server = try await LiveServer.start(tables: Self.tables)
        let alice = Self.bearer(LiveServer.token("alice"))
        let bob = Self.bearer(LiveServer.token("bob"))
        let created = try await server.send(
            "POST", "/tables/notes", headers: alice, json: ["id": "a1", "text": "mine", "userId": "bob"])
        #expect(created.status == 201)
        #expect(created.json?["userId"] == "alice", "the owner is the token's subject, whatever the body says")
        #expect(
            try await server.send("POST", "/tables/notes", headers: bob, json: ["id": "b1", "text": "his"]).status
                == 201)

        #expect(try await server.send("GET", "/tables/notes/a1", headers: alice).status == 200)
        #expect(try await server.send("GET", "/tables/notes/a1", headers: bob).status == 404)
        #expect(try await server.send("GET", "/tables/notes/a1").status == 404)
        let bobsView = try await server.send("GET", "/tables/notes?$count=true", headers: bob)
        #expect(bobsView.json?["items"]?.arrayValue?.compactMap { $0["id"]?.stringValue } == ["b1"])
        #expect(bobsView.json?["count"] == 1)
        let filtered = try await server.send("GET", "/tables/notes?" + encodedQuery("$filter=id eq 'a1'"), headers: bob)
        #expect(filtered.json?["items"]?.arrayValue?.isEmpty == true)
        #expect(try await server.send("GET", "/tables/notes").json?["items"]?.arrayValue?.isEmpty == true)
        #expect(
            try await server.send("PATCH", "/tables/notes/a1", headers: bob, json: ["text": "stolen"]).status == 404)
        #expect(try await server.send("PUT", "/tables/notes/a1", headers: bob, json: ["text": "stolen"]).status == 404)
        #expect(try await server.send("DELETE", "/tables/notes/a1", headers: bob).status == 404)
        // An undelete is 2.0.0's (3.0.0 has no POST on an item: 405 whoever asks).
        let v2 = [("ZUMO-API-VERSION", "2.0.0")]
        #expect(try await server.send("POST", "/tables/notes/a1", headers: bob + v2).status == 404)
        // Taking another subject's id reveals nothing about the item.
        let taken = try await server.send("POST", "/tables/notes", headers: bob, json: ["id": "a1", "text": "x"])
        #expect(taken.status == 400)
        #expect(taken.json?["text"] == nil)
        #expect(try await server.send("POST", "/tables/notes", json: ["id": "anon"]).status == 401)

        let updated = try await server.send(
            "PATCH", "/tables/notes/a1", headers: alice, json: ["text": "edited", "userId": "bob"])
        #expect(updated.status == 200)
        #expect(updated.json?["userId"] == "alice")
        #expect(try await server.send("DELETE", "/tables/notes/a1", headers: alice).status == 204)
        #expect(
            try await server.send("GET", "/tables/notes/a1?__includedeleted=true", headers: alice).json?["deleted"]
                == true)
        try await server.stop()
    }
}
