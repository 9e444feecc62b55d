import Foundation
import ServerTestSupport
import StoreMemory
import SyncCore
import Testing
import Transport

/// Typed models through `ferry serve`, in both protocol versions: every Foundation type comes back
/// as it was written, the server holds the forms other clients write, and what other clients write
/// reads back as the same values.
@Suite("Typed models through ferry serve", .timeLimit(.minutes(5)))
struct TypedModelServerTests {
    struct Reading: SyncModel, Equatable {
        static let tableName = "readings"
        var id: UUID = .unassigned
        var takenAt: Date
        var source: URL
        var payload: Data
        var amount: Decimal
        var kind: Kind
        var note: String?
        var tags: [String]

        enum Kind: String, Codable, Sendable, CaseIterable { case manual, sensor }
    }

    @Test(arguments: ProtocolVersion.both)
    func everyTypeRoundTripsAndReadsAsOtherClientsWriteIt(_ version: ProtocolVersion) async throws {
        let scratch = try await Scratch()
        defer { scratch.remove() }
        let server = try await TestServer.start(in: scratch)
        defer { Task { try? await server.stop() } }
        let a = SyncContext(store: MemoryStore(), remote: server.remote(version))
        let b = SyncContext(store: MemoryStore(), remote: server.remote(version))
        let taken = Date(timeIntervalSince1970: 1_700_000_000.123)
        let written = try await a.table(Reading.self).insert(
            Reading(
                takenAt: taken, source: URL(string: "https://example.org/s?q=1")!, payload: Data([0, 1, 2, 255]),
                amount: Decimal(string: "19.99")!, kind: .sensor, note: nil, tags: ["x", "y"]))
        #expect(try await a.push().pushed == 1)
        try await b.pull("readings")
        #expect(try await b.table(Reading.self).item(id: written.id) == written, "the same model on another device")

        // What another client reads from the server: the protocol's forms.
        let raw = try #require(try await server.items("readings", version)[written.id.uuidString.lowercased()])
        #expect(raw["takenAt"]?.stringValue == "2023-11-14T22:13:20.123Z")
        #expect(raw["source"]?.stringValue == "https://example.org/s?q=1")
        #expect(raw["payload"]?.stringValue == Data([0, 1, 2, 255]).base64EncodedString())
        #expect(raw["amount"]?.doubleValue == 19.99)
        #expect(raw["kind"]?.stringValue == "sensor")

        // What another client writes (an offset, no fraction) reads as the same instant.
        let other = UUID()
        _ = try await server.remote(version).onlineTable("readings").insert([
            "id": .string(other.uuidString.lowercased()), "takenAt": "2023-11-14T23:13:20+01:00",
            "source": "https://example.org/t", "payload": "AQI=", "amount": 5, "kind": "manual", "note": "from JS",
            "tags": .array([]),
        ])
        try await b.pull("readings")
        let fromOther = try #require(try await b.table(Reading.self).item(id: other))
        #expect(fromOther.takenAt == Date(timeIntervalSince1970: 1_700_000_000))
        #expect(fromOther.payload == Data([1, 2]) && fromOther.amount == 5 && fromOther.note == "from JS")

        // A typed query with a Date literal, as the server query of a pull.
        let c = SyncContext(store: MemoryStore(), remote: server.remote(version))
        try await c.table(Reading.self).pull(TypedQuery<Reading>(where: \.takenAt >= taken), queryID: "later")
        #expect(try await c.table(Reading.self).query().map(\.id) == [written.id], "only the later reading")
    }
}
