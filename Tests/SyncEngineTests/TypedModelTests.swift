import Foundation
import SyncCore
import SyncTesting
import Synchronization
import Testing

/// A model as Swift developers write it: Foundation types, a non-optional UUID id.
struct Chore: SyncModel, Equatable {
    static let tableName = "chore"

    enum Priority: String, Codable, Sendable { case low, high }
    struct Checklist: Codable, Sendable, Equatable {
        var steps: [String]
        var doneAt: [Date]
    }

    var id: UUID = .unassigned
    var title: String
    var due: Date?
    var link: URL?
    var attachment: Data?
    var price: Decimal?
    var priority: Priority = .low
    var checklist: Checklist?
    var owner: UUID?
    var tags: [String] = []
}

/// 2023-11-14T22:13:20.123Z, as `new Date(1700000000123).toISOString()` writes it in JavaScript.
private let instant = Date(Timestamp(millisecondsSince1970: 1_700_000_000_123))
private let owner = UUID(uuidString: "0193f4a2-7c1e-7a3b-8c2d-5e6f7a8b9c0d")!

@Suite("Typed models")
struct TypedModelTests {
    @Test(arguments: StoreKind.allCases)
    func foundationValuesRoundTripInTheWireForms(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        let chores = device.context.table(Chore.self)
        let original = Chore(
            title: "Taxes", due: Date(timeIntervalSince1970: 1_700_000_000.123456),
            link: URL(string: "https://example.org/forms?year=2023"), attachment: Data([0, 1, 2, 255]),
            price: Decimal(string: "19.99"), priority: .high,
            checklist: Chore.Checklist(steps: ["gather", "file"], doneAt: [instant]), owner: owner, tags: ["home"])
        let saved = try await chores.insert(original)
        var expected = original
        expected.id = saved.id
        expected.due = instant  // truncated to the millisecond
        #expect(saved == expected)
        #expect(try await chores.item(id: saved.id) == expected)
        #expect(try await chores.query() == [expected])

        let stored = try #require(try await device.table("chore").item(id: saved.id.uuidString.lowercased()))
        #expect(stored["due"] == "2023-11-14T22:13:20.123Z")
        #expect(stored["link"] == "https://example.org/forms?year=2023")
        #expect(stored["attachment"] == "AAEC/w==")
        #expect(stored["price"] == 19.99)
        #expect(stored["priority"] == "high")
        #expect(stored["checklist"] == ["steps": ["gather", "file"], "doneAt": ["2023-11-14T22:13:20.123Z"]])
        #expect(stored["owner"] == "0193f4a2-7c1e-7a3b-8c2d-5e6f7a8b9c0d")

        // nil is written as null, so that an update clears the field on every server.
        var cleared = expected
        (cleared.due, cleared.price, cleared.checklist) = (nil, nil, nil)
        #expect(try await chores.update(cleared) == cleared)
        let updated = try #require(try await device.table("chore").item(id: saved.id.uuidString.lowercased()))
        #expect(updated["due"] == .null)
        #expect(updated["price"] == .null)

        // The server gets the strings every other client reads.
        try await chores.update(expected)
        try await device.context.push()
        let row = try #require(device.server.row("chore", id: saved.id.uuidString.lowercased()))
        #expect(row["due"] == "2023-11-14T22:13:20.123Z")
        #expect(row["owner"] == "0193f4a2-7c1e-7a3b-8c2d-5e6f7a8b9c0d")
    }

    @Test(arguments: StoreKind.allCases)
    func itemsOtherClientsWroteDecode(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let device = try Device(kind: kind, server: server)
        let chores = device.context.table(Chore.self)
        let first = "0193f4a2-0000-7000-8000-000000000001"
        let second = "0193f4a2-0000-7000-8000-000000000002"
        // Another client's forms: an offset, six fraction digits, an uppercase UUID, a price as a
        // string, fields left out, a field the model does not know.
        server.seed(
            "chore",
            [
                [
                    "id": .string(first), "title": "Offset", "due": "2023-11-14T22:13:20.123+01:00",
                    "owner": "0193F4A2-7C1E-7A3B-8C2D-5E6F7A8B9C0D", "price": "19.99", "priority": "low",
                    "tags": [], "color": "red",
                ],
                [
                    "id": .string(second), "title": "Micro", "due": "2023-11-14T22:13:20.123456Z", "price": 5,
                    "priority": "high", "tags": ["x"],
                ],
            ])
        try await chores.pull()
        let pulled = try await chores.query(TableQuery().orderBy("id"))
        #expect(pulled.map(\.title) == ["Offset", "Micro"])
        #expect(pulled.first?.due == Date(Timestamp(millisecondsSince1970: 1_700_000_000_123 - 3_600_000)))
        #expect(pulled.first?.owner == owner)
        #expect(pulled.first?.price == Decimal(string: "19.99"))
        #expect(pulled.last?.due == instant)
        #expect(pulled.last?.price == 5)
        #expect(pulled.last?.link == nil)

        // An item inserted untyped, as a JavaScript client would send it.
        try await device.table("chore").insert([
            "id": "0193f4a2-0000-7000-8000-000000000003", "title": "Local", "due": "2023-11-14T22:13:20.123+01:00",
            "priority": "low", "tags": [],
        ])
        let local = try await chores.item(id: "0193f4a2-0000-7000-8000-000000000003")
        #expect(local?.due == Date(Timestamp(millisecondsSince1970: 1_699_996_400_123)))
        #expect(device.context.undecodableItems.isEmpty)
    }

    /// A typed update wrote the model over the whole item: a field another version of the app
    /// added was deleted here and on the server, and a price another client stored as a string
    /// went back as a number, which the server refuses for a field it holds as text, so the update
    /// could never be pushed. Now only what the model changed is written.
    @Test(arguments: StoreKind.allCases)
    func anUpdateWritesOnlyWhatTheModelChanged(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let device = try Device(kind: kind, server: server)
        let chores = device.context.table(Chore.self)
        let id = "0193f4a2-0000-7000-8000-000000000009"
        server.seed(
            "chore",
            [
                [
                    "id": .string(id), "title": "Offset", "due": "2023-11-14T22:13:20.123+01:00",
                    "owner": "0193F4A2-7C1E-7A3B-8C2D-5E6F7A8B9C0D", "price": "19.99", "priority": "low",
                    "tags": [], "color": ["r": 255],
                ]
            ])
        try await chores.pull()
        var chore = try #require(try await chores.item(id: id))
        chore.title = "Taxes"
        chore.link = URL(string: "https://example.org")
        let saved = try await chores.update(chore)
        #expect(saved == chore)
        let stored = try #require(try await device.table("chore").item(id: id))
        #expect(stored["title"] == "Taxes")
        #expect(stored["link"] == "https://example.org")
        #expect(stored["color"] == ["r": 255], "a field the model does not have stays")
        #expect(stored["price"] == "19.99", "an unchanged field keeps its stored form")
        #expect(stored["due"] == "2023-11-14T22:13:20.123+01:00")
        #expect(stored["owner"] == "0193F4A2-7C1E-7A3B-8C2D-5E6F7A8B9C0D")
        try await device.context.push()
        let row = try #require(server.row("chore", id: id))
        #expect(row["title"] == "Taxes")
        #expect(row["color"] == ["r": 255])
        #expect(row["price"] == "19.99")

        // What the model changes is written as it encodes it; what it clears is null.
        chore.price = 25
        chore.due = nil
        try await chores.update(chore)
        let changed = try #require(try await device.table("chore").item(id: id))
        #expect(changed["price"] == 25)
        #expect(changed["due"] == .null)
        #expect(changed["color"] == ["r": 255])
        #expect(try await chores.item(id: id) == chore)

        // A date typed tables once wrote as seconds since 2001 is rewritten as ISO 8601, changed or not.
        let legacy = "0193f4a2-0000-7000-8000-000000000010"
        try await device.table("chore").insert([
            "id": .string(legacy), "title": "Old", "due": 721_692_800.123, "priority": "low", "tags": [],
        ])
        var old = try #require(try await chores.item(id: legacy))
        old.title = "Old, edited"
        try await chores.update(old)
        #expect(try await device.table("chore").item(id: legacy)?["due"] == "2023-11-14T22:13:20.123Z")
    }

    struct Note: SyncModel, Equatable {
        static let tableName = "note"
        var id: String = .unassigned
        var text: String
    }

    struct Draft: SyncModel, Equatable {
        static let tableName = "draft"
        var id: UUID?
        var text: String
    }

    struct Versioned: SyncModel {
        static let tableName = "versioned"
        var id: String = .unassigned
        var title: String
        var version: Int
    }

    struct ServerVersioned: SyncModel {
        static let tableName = "versioned"
        var id: String = .unassigned
        var title: String
        var version: String?
    }

    /// A field named like a system property that does not decode without it was written, then the
    /// insert threw: each retry stored another item. It is refused before the write now.
    @Test(arguments: StoreKind.allCases)
    func aModelThatCannotHoldTheServersSystemPropertiesIsRefusedBeforeItsWrite(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        for _ in 0..<2 {
            await expectSyncError(.invalidItem) {
                _ = try await device.context.table(Versioned.self).insert(Versioned(title: "Draft", version: 3))
            }
        }
        #expect(try await device.table("versioned").query().items.isEmpty)
        #expect(try await device.context.queuedOperationCount(table: "versioned") == 0)
        // Optional, as the server's: fine.
        let kept = try await device.context.table(ServerVersioned.self).insert(
            ServerVersioned(title: "Draft", version: "3"))
        #expect(kept.version == nil && kept.title == "Draft")
    }

    @Test(arguments: StoreKind.allCases)
    func nonOptionalIDsAreGeneratedOnInsert(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        let notes = device.context.table(Note.self)
        let note = try await notes.insert(Note(text: "generated"))
        #expect(!note.id.isEmpty)
        #expect(ItemID.isValid(note.id))
        #expect(try await notes.insert(Note(id: "mine", text: "kept")).id == "mine")

        let chores = device.context.table(Chore.self)
        let chore = try await chores.insert(Chore(title: "generated"))
        #expect(chore.id != .unassigned)
        #expect(chore.id.uuid.6 >> 4 == 7, "a UUIDv7")
        let stored = try await device.table("chore").query().items.map(\.id)
        #expect(stored == [chore.id.uuidString.lowercased()])
        #expect(try await chores.item(id: chore.id) == chore)
        let chosen = UUID()
        #expect(try await chores.insert(Chore(id: chosen, title: "chosen")).id == chosen)

        let drafts = device.context.table(Draft.self)
        let draft = try await drafts.insert(Draft(text: "optional"))
        let draftID = try #require(draft.id)
        #expect(try await drafts.item(id: draftID) == draft)
        try await drafts.delete(id: draftID)
        #expect(try await drafts.item(id: draftID) == nil)

        // The named form still works for the same model.
        #expect(try await device.context.table("note", of: Note.self).query().count == 2)
        try await device.context.push()
        #expect(device.server.rows("chore").count == 2)
    }

    /// Rows another device wrote that do not fit `Chore`, beside ones that do.
    static let misfits: [JSONObject] = [
        ["id": "0193f4a2-0000-7000-8000-00000000000a", "priority": "low", "tags": []],  // no title
        ["id": "0193f4a2-0000-7000-8000-00000000000b", "title": "Bad date", "due": "yesterday", "tags": []],
        ["id": "0193F4A2-0000-7000-8000-00000000000C", "title": "Uppercase id", "priority": "low", "tags": []],
    ]

    @Test(arguments: StoreKind.allCases)
    func rowsThatDoNotFitAreSkippedAndReported(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        let context = device.context
        let chores = context.table(Chore.self)
        let good = try await chores.insert(Chore(title: "Good"))
        let reports = context.undecodableItemReports()
        device.server.seed("chore", Self.misfits)
        try await chores.pull()

        let observed = Observed(chores.observe(TableQuery().orderBy("title")))
        try await observed.wait { $0 == [good] }
        #expect(try await chores.query() == [good])
        let expected = [
            ("0193F4A2-0000-7000-8000-00000000000C", "id"), ("0193f4a2-0000-7000-8000-00000000000a", "title"),
            ("0193f4a2-0000-7000-8000-00000000000b", "due"),
        ]
        #expect(context.undecodableItems.map { [$0.itemID, $0.field] } == expected.map { [$0, $1] })
        #expect(context.undecodableItems.allSatisfy { $0.table == "chore" && $0.model == "Chore" })
        var iterator = reports.makeAsyncIterator()
        var seen: [UndecodableItem] = []
        for _ in 0..<3 { seen.append(try #require(await iterator.next())) }
        #expect(Set(seen) == Set(context.undecodableItems))
        #expect(seen.first { $0.field == "due" }?.description.contains("'yesterday' is not an ISO 8601 date") == true)
        // Each is reported once, though the queries ran several times: the next report is a new row's.
        try await device.table("chore").insert([
            "id": "0193f4a2-0000-7000-8000-00000000000d", "title": "Tags", "priority": "low", "tags": 1,
        ])
        #expect(try await chores.query() == [good])
        #expect(await iterator.next()?.field == "tags")

        // item(id:) of a row that does not fit throws, with the report.
        let error = await expectSyncError(.invalidItem) {
            _ = try await chores.item(id: "0193f4a2-0000-7000-8000-00000000000a")
        }
        #expect((error?.underlying as? UndecodableItem)?.field == "title")

        // The observation keeps running: a new row and a repaired one show, and the repaired one
        // is no longer reported.
        let more = try await chores.insert(Chore(title: "More"))
        try await device.table("chore").update([
            "id": "0193f4a2-0000-7000-8000-00000000000a", "title": "Repaired", "priority": "low", "tags": [],
        ])
        try await observed.wait { $0.map(\.title) == ["Good", "More", "Repaired"] }
        #expect(try await chores.item(id: more.id) == more)
        #expect(context.undecodableItems.map(\.field) == ["id", "due", "tags"])
        observed.stop()
    }

    /// A reported row that is deleted (here, or by a pull) or purged leaves the list at the next
    /// query or observed result (it stayed until an `item(id:)` of it).
    @Test(arguments: StoreKind.allCases)
    func reportsOfRowsThatAreGoneLeaveTheList(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        let context = device.context
        let chores = context.table(Chore.self)
        let good = try await chores.insert(Chore(title: "Good"))
        device.server.seed("chore", Self.misfits)
        try await chores.pull(queryID: "all")
        #expect(try await chores.query() == [good])
        #expect(context.undecodableItems.count == 3)

        // Deleted here, then by a pull: a query that does not read them forgets them.
        try await device.table("chore").delete(id: Self.misfits[0].id!)
        device.server.softDelete("chore", ids: [Self.misfits[1].id!])
        try await chores.pull(queryID: "all", options: PullOptions(pushesFirst: false))
        #expect(try await chores.query(TableQuery().filter(.field("title").eq("Good"))) == [good])
        #expect(context.undecodableItems.map(\.itemID) == [Self.misfits[2].id!])

        // Purged: an observation's next result forgets it.
        let observed = Observed(chores.observe())
        try await observed.wait { $0 == [good] }
        try await device.table("chore").purge(TableQuery().filter(.field("title").eq("Uppercase id")), force: true)
        try await device.table("chore").insert([
            "id": "0193f4a2-0000-7000-8000-00000000000e", "title": "Later", "priority": "low", "tags": [],
        ])
        try await observed.wait { $0.count == 2 }
        #expect(context.undecodableItems.isEmpty)
        observed.stop()
    }

    /// A change to a row that does not decode leaves the models as they were: no result repeats.
    @Test(arguments: StoreKind.allCases)
    func anObservationDoesNotRepeatAResultForARowItSkips(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        let chores = device.context.table(Chore.self)
        let good = try await chores.insert(Chore(title: "Good"))
        let observed = Observed(chores.observe(TableQuery().orderBy("title")))
        try await observed.wait { $0 == [good] }
        try await device.table("chore").insert(Self.misfits[0])
        try await Task.sleep(for: .milliseconds(300))
        let more = try await chores.insert(Chore(title: "More"))
        try await observed.wait { $0 == [good, more] }
        observed.stop()
        let values = observed.values
        #expect(zip(values, values.dropFirst()).allSatisfy { $0 != $1 }, "\(values.map { $0.map(\.title) })")
    }

    /// A push changes the stored items' version and times, which `Chore` has no field for: the
    /// models are the same, and the observation does not repeat them (it yielded them again).
    @Test(arguments: StoreKind.allCases)
    func aPushDoesNotRepeatTheModelsOfAnObservation(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        let chores = device.context.table(Chore.self)
        let good = try await chores.insert(Chore(title: "Good"))
        let observed = Observed(chores.observe(TableQuery().orderBy("title")))
        try await observed.wait { $0 == [good] }
        #expect(try await device.context.push().pushed == 1)
        #expect(try await device.table("chore").item(id: good.id.uuidString.lowercased())?["version"] != nil)
        try await Task.sleep(for: .milliseconds(300))
        let more = try await chores.insert(Chore(title: "More"))
        try await observed.wait { $0 == [good, more] }
        observed.stop()
        #expect(observed.values == [[good], [good, more]], "\(observed.values.map { $0.map(\.title) })")
    }

    /// UUID ids are taken as they are (stored in lower case, they were not found by `uuidString`).
    @Test func uuidIDsAreTakenAsTheyAre() async throws {
        let device = try Device(kind: .memory, server: ModelServer())
        let chores = device.context.table(Chore.self)
        let chore = try await chores.insert(Chore(title: "Bins"))
        #expect(try await chores.item(id: chore.id.uuidString) == nil, "stored in lower case")
        #expect(try await chores.item(id: chore.id) == chore)
        try await chores.delete(id: chore.id)
        #expect(try await chores.item(id: chore.id) == nil)
    }

    /// A model never inserted has the id every such model shares: an update or a delete of it is
    /// refused (an update wrote the zero UUID, and a push could then remove it).
    @Test func aModelNeverInsertedCannotBeUpdatedOrDeleted() async throws {
        let device = try Device(kind: .memory, server: ModelServer())
        let chores = device.context.table(Chore.self)
        for action in ["update", "delete"] {
            let error = await expectSyncError(.invalidItem) {
                if action == "update" {
                    _ = try await chores.update(Chore(title: "Never inserted"))
                } else {
                    try await chores.delete(Chore(title: "Never inserted"))
                }
            }
            #expect(error?.message.contains("cannot \(action) a Chore whose id is unassigned") == true)
        }
        #expect(try await device.table("chore").query().items.isEmpty)
        #expect(try await device.operations().isEmpty)
    }

    @Test(arguments: StoreKind.allCases)
    func theStrictPolicyThrows(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        let strict = device.context.table(Chore.self, decoding: .strict)
        #expect(strict.decodingPolicy == .strict)
        _ = try await strict.insert(Chore(title: "Good"))
        try await device.table("chore").insert(Self.misfits[0])
        let error = await expectSyncError(.invalidItem) { _ = try await strict.query() }
        #expect((error?.underlying as? UndecodableItem)?.field == "title")
        do {
            for try await _ in strict.observe() { Issue.record("a strict observation yielded a result") }
            Issue.record("a strict observation ended without an error")
        } catch let error as SyncError {
            #expect(error.code == .invalidItem)
        }
        #expect(device.context.undecodableItems.count == 1)
    }

    @Test func modelsThatTheWireCannotCarryAreRefusedWithTheField() async throws {
        let device = try Device(kind: .memory, server: ModelServer())
        let chores = device.context.table(Chore.self)
        let tooPrecise = Chore(title: "Price", price: Decimal(string: "0.12345678901234567"))
        let error = await expectSyncError(.invalidItem) { try await chores.insert(tooPrecise) }
        #expect(error?.message.contains("'price'") == true)
        // Each in words (the date's said "<description unavailable>", NaN "has more digits"; a date of
        // NaN seconds stopped the process as its error was described).
        let cases: [(Chore, String)] = [
            (
                Chore(title: "Far", due: Date(timeIntervalSince1970: 1e15)),
                "seconds from 1970 lies outside the years 0000-9999"
            ),
            (Chore(title: "NaN date", due: Date(timeIntervalSince1970: .nan)), "is not a date the wire carries"),
            (Chore(title: "NaN price", price: .nan), "NaN is not a number JSON carries"),
        ]
        for (chore, words) in cases {
            let refused = await expectSyncError(.invalidItem) { try await chores.insert(chore) }
            #expect(refused?.message.contains(words) == true, "\(refused?.message ?? "")")
            #expect(refused?.message.contains("table 'chore': a Chore does not encode") == true)
        }
        #expect(try await chores.query().isEmpty)
        let events = device.context.table(Event.self)
        let unassigned = await expectSyncError(.invalidItem) { try await events.update(Event(title: "x")) }
        #expect(unassigned?.message.contains("cannot update an Event whose id is unassigned") == true)
    }

    struct Event: SyncModel {
        static let tableName = "event"
        var id: String = .unassigned
        var title: String
    }
}
