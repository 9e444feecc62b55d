import SyncCore
import SyncTesting
import Testing

/// Ids that are the same text in two Unicode forms ("café" typed on a keyboard, NFC, and from a
/// macOS file name, NFD) are two items, as on the server and in the stores' own keys: Swift's
/// `String` equality (canonical equivalence) merged them, so a pull skipped the second one and its
/// delta token moved past it, and the memory store refused the second insert.
@Suite("Ids in two Unicode forms")
struct UnicodeIDTests {
    static let composed = "caf\u{E9}"
    static let decomposed = "cafe\u{301}"

    @Test(arguments: StoreKind.allCases)
    func areTwoItemsThroughInsertPushPullAndDelete(_ kind: StoreKind) async throws {
        #expect(Self.composed == Self.decomposed, "Swift calls them equal: the reason for this test")
        let server = ModelServer()
        let phone = try Device("phone", kind: kind, server: server)
        _ = try await phone.table("tags").insert(["id": .string(Self.composed), "label": "typed"])
        _ = try await phone.table("tags").insert(["id": .string(Self.decomposed), "label": "from a file name"])
        #expect(try await phone.operations("tags").count == 2)
        let pushed = try await phone.context.push()
        #expect(pushed.pushed == 2)
        #expect(server.rows("tags").count == 2)

        let tablet = try Device("tablet", kind: kind, server: server)
        let counts = try await tablet.table("tags").pull(queryID: "all").items
        #expect(counts.upserted == 2 && counts.skipped == 0, "\(counts)")
        #expect(try await tablet.table("tags").item(id: Self.composed)?["label"] == "typed")
        #expect(try await tablet.table("tags").item(id: Self.decomposed)?["label"] == "from a file name")
        let both = try await tablet.table("tags").query(
            TableQuery(filter: .field("id").isIn([Self.composed, Self.decomposed])))
        #expect(both.items.count == 2)
        #expect(
            try await tablet.table("tags").query(TableQuery(filter: .field("id").eq(Self.decomposed))).items
                .map(\.id) == [Self.decomposed])

        // A change of one on the server reaches that one only; a local edit of the other is its own.
        server.touch("tags", ids: [Self.decomposed], set: ["label": "renamed"])
        _ = try await tablet.table("tags").update(["id": .string(Self.composed), "label": "edited here"])
        let again = try await tablet.table("tags").pull(queryID: "all", options: PullOptions(pushesFirst: false)).items
        #expect(again.upserted == 1 && again.skipped == 0, "\(again)")
        #expect(try await tablet.table("tags").item(id: Self.decomposed)?["label"] == "renamed")
        #expect(try await tablet.table("tags").item(id: Self.composed)?["label"] == "edited here")

        // Deleting one leaves the other, here and on the server.
        try await tablet.table("tags").delete(id: Self.decomposed)
        _ = try await tablet.context.push()
        #expect(try await tablet.table("tags").item(id: Self.composed)?["label"] == "edited here")
        #expect(server.row("tags", id: Self.composed)?["label"] == "edited here")
        #expect(server.rows("tags").map(\.id) == [Self.composed])
    }
}
