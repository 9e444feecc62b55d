import Foundation
import SyncCore
import Testing

/// A model of every kind of value a typed table writes (Tests/SyncEngineTests/TypedModelTests.swift
/// has the engine's side: ids, reports, strict reads).
struct WireModel: SyncModel, Equatable {
    static let tableName = "wire"

    enum Size: Int, Codable, Sendable { case small = 1, large = 3 }
    struct Part: Codable, Sendable, Equatable {
        var name: String
        var made: Date
        var size: Size?
    }

    var id: UUID = .unassigned
    var title: String
    var when: Date
    var before1970: Date
    var maybeWhen: Date?
    var owner: UUID
    var link: URL
    var blob: Data
    var emptyBlob: Data
    var price: Decimal
    var wholePrice: Decimal
    var negativePrice: Decimal
    var size: Size
    var parts: [Part]
    var byName: [String: UUID]
    var dates: [Date?]
    var nothing: String?
    var count: Int
    var ratio: Double
}

/// A model with a date that other clients write with offsets of their own.
struct Meeting: SyncModel, Equatable {
    static let tableName = "meeting"
    var id: String = .unassigned
    var at: Date?
}

/// Answers every call as offline: the checks only write and read locally.
private struct OfflineTable: RemoteTable {
    func insert(_ item: JSONObject) async throws(RemoteError) -> JSONObject { throw Self.offline }
    func update(_ item: JSONObject, ifVersion version: String?) async throws(RemoteError) -> JSONObject {
        throw Self.offline
    }
    func delete(id: String, ifVersion version: String?) async throws(RemoteError) { throw Self.offline }
    func item(id: String) async throws(RemoteError) -> JSONObject? { throw Self.offline }
    func query(_ query: TableQuery) async throws(RemoteError) -> RemotePage { throw Self.offline }
    static let offline = RemoteError(.network, "offline")
}

extension StoreConformanceSuite {
    static var typedModels: [StoreConformanceCheck] {
        [
            .init("typed models with Foundation values read back exactly, in the wire's forms") {
                fixture async throws in
                let context = SyncContext(store: fixture.store) { _ in OfflineTable() }
                let models = context.table(WireModel.self)
                let millisecond = Date(Timestamp(millisecondsSince1970: 1_700_000_000_123))
                let model = WireModel(
                    title: "Léon 🎬", when: millisecond,
                    before1970: Date(Timestamp(millisecondsSince1970: -1_234_567_890_123)), maybeWhen: nil,
                    owner: UUID(uuidString: "0193F4A2-7C1E-7A3B-8C2D-5E6F7A8B9C0D")!,
                    link: URL(string: "https://example.org/a%20b?q=1&r=%C3%A9#frag")!,
                    blob: Data((0...255).map(UInt8.init)),
                    emptyBlob: Data(), price: Decimal(string: "19.99")!, wholePrice: 20,
                    negativePrice: Decimal(string: "-1234567.89")!, size: .large,
                    parts: [WireModel.Part(name: "a", made: millisecond, size: nil)],
                    byName: ["me": UUID(uuidString: "0193f4a2-0000-7000-8000-000000000001")!],
                    dates: [millisecond, nil], nothing: nil, count: 7, ratio: 0.1)
                let inserted = try await models.insert(model)
                var expected = model
                expected.id = inserted.id
                #expect(inserted == expected)
                #expect(try await models.item(id: inserted.id) == expected)
                #expect(try await models.query() == [expected])

                let stored = try #require(try await fixture.store.item("wire", id: inserted.id.uuidString.lowercased()))
                #expect(stored["when"] == "2023-11-14T22:13:20.123Z")
                #expect(stored["before1970"] == "1930-11-18T00:28:29.877Z")
                #expect(stored["maybeWhen"] == .null)
                #expect(stored["owner"] == "0193f4a2-7c1e-7a3b-8c2d-5e6f7a8b9c0d")
                #expect(stored["price"] == .double(19.99))
                #expect(stored["wholePrice"] == .int(20))
                #expect(stored["size"] == .int(3))
                #expect(stored["parts"] == [["name": "a", "made": "2023-11-14T22:13:20.123Z", "size": .null]])
                #expect(stored["emptyBlob"] == "")
            },
            .init("a typed sort by a date orders instants, whatever offset another client wrote") {
                fixture async throws in
                // As pulled from other clients: 07:00Z, 08:00Z, 07:30Z, none. Their text sorts c, b, a.
                try await fixture.store.upsert(
                    "meeting",
                    [
                        ["id": "a", "at": "2026-03-01T09:00:00+02:00"], ["id": "b", "at": "2026-03-01T08:00:00Z"],
                        ["id": "c", "at": "2026-03-01T07:30:00.000Z"], ["id": "e", "at": .null],
                    ])
                let context = SyncContext(store: fixture.store) { _ in OfflineTable() }
                let meetings = context.table(Meeting.self)
                let ascending = try await meetings.query(TypedQuery<Meeting>().orderBy(\.at))
                #expect(ascending.map(\.id) == ["e", "a", "c", "b"])
                let descending = try await meetings.query(TypedQuery<Meeting>().orderBy(\.at, descending: true))
                #expect(descending.map(\.id) == ["b", "c", "a", "e"])
                let later = try await meetings.query(
                    where: \.at > Date(Timestamp(millisecondsSince1970: 1_772_348_400_000)), orderBy: \.at)
                #expect(later.map(\.id) == ["c", "b"])  // after 07:00Z
                // The same sort through the untyped query, paged.
                let page = try await fixture.store.query(
                    "meeting", TableQuery().orderBy(.cast(.field("at"), .dateTimeOffset)).skip(1).top(2))
                #expect(page.items.map { $0["id"] } == ["a", "c"])
            },
        ]
    }
}
