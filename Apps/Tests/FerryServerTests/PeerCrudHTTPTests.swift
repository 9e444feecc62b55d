import FerryServer
import Foundation
import ServerStorageCore
import StoreConformance
import ServerTestSupport
import SyncCore
import Testing

/// Replays the peers' 237 CRUD cases (`crud-cases.json`) against the reference server over real
/// loopback HTTP. Each case runs on a fresh server whose tables are configured from the case's
/// table description; the peers' prose bodies and expectations are turned into requests and
/// checks by the interpreter below.
@Suite("Peer CRUD cases over HTTP", .timeLimit(.minutes(10)))
struct PeerCrudHTTPTests {
    /// Cases where Ferry deliberately answers differently; each is explained in
    /// docs/server-peer-differences.md.
    static let deliberateDifferences: [String: String] = [
        "az.ZumoVersion_MissingOrInvalid_BadRequest[tables/movies/id-001 header=None]":
            "no ZUMO-API-VERSION means 3.0.0 (CommunityToolkit clients omit it)",
        "node.version: missing ZUMO-API-VERSION -> 400": "no ZUMO-API-VERSION means 3.0.0",
        "az.AuthenticatedCreateTests[tables/movies_rated,user=success]":
            "no pre-commit hooks (the peer's test uppercases titles)",
        "az.AuthenticatedCreateTests[tables/movies_legal,user=success]":
            "no pre-commit hooks (the peer's test uppercases titles)",
        "net2.Delete_EntityIsDeleted_ReturnsNoContent": "2.0 DELETE answers 200 with the item, as the Node server did",
        "node.link: Link header when results == pageSize": "no Link when no rows follow (the server knows)",
    ]

    static let movieID = "id-000"
    static let blackPanther: JSONObject = [
        "bestPictureWinner": true, "duration": 134, "rating": "PG-13", "releaseDate": "2018-02-16T00:00:00.000Z",
        "title": "Black Panther", "year": 2018,
    ]

    @Test(
        "peer CRUD cases over HTTP", .enabled(if: PeerData.isAvailable, PeerData.missingNotice),
        arguments: ServerBackend.allCases)
    func replay(_ backend: ServerBackend) async throws {
        if backend == .postgreSQL, !TestPostgreSQL.isAvailable {
            try Test.cancel("SKIPPED: \(TestPostgreSQL.skipReason)")
        }
        guard let cases = try PeerData.load("crud-cases.json").arrayValue else {
            throw ReplayError(description: "crud-cases.json is not an array")
        }
        var failures: [(name: String, reason: String)] = []
        for value in cases {
            guard let peerCase = value.objectValue, let name = peerCase["name"]?.stringValue else { continue }
            let dataSetup = (peerCase["setup"]?.arrayValue ?? []).compactMap(\.stringValue)
            let (setup, tablePath) = Self.setup(for: peerCase, name: name)
            let server = try await Self.start(setup, dataSetup: dataSetup, backend: backend)
            var runner = Runner(
                server: server, name: name, protocolVersion: peerCase["protocol"]?.stringValue ?? "3.0",
                tablePath: tablePath)
            let reason: String?
            do {
                if peerCase["request"]?["steps"] != nil {
                    reason = try await runner.runSteps(peerCase)
                } else {
                    reason = try await runner.runSingle(peerCase)
                }
            } catch {
                reason = "error: \(error)"
            }
            try await server.stop()
            if let reason { failures.append((name, reason)) }
        }
        let unexpected = failures.filter { Self.deliberateDifferences[$0.name] == nil }
        print(
            "peer CRUD cases over HTTP on \(backend): \(cases.count - failures.count) passed, \(failures.count) failed")
        for failure in failures {
            let note = Self.deliberateDifferences[failure.name].map { " [deliberate: \($0)]" } ?? ""
            print("  FAIL \(failure.name): \(failure.reason)\(note)")
        }
        #expect(cases.count == 237)
        #expect(unexpected.isEmpty, "\(unexpected.count) cases failed that are not documented differences")
        let failed = Set(failures.map(\.name))
        for name in Self.deliberateDifferences.keys {
            #expect(failed.contains(name), "'\(name)' is listed as a difference but now passes")
        }
    }
}
