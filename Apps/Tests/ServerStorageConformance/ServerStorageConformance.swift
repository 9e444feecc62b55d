public import ServerStorageCore
public import StoreConformance
import SyncCore
import Testing
import Synchronization

/// A clock a test moves by hand, in milliseconds since 1970.
///
/// ```swift
/// let clock = ManualClock(1_700_000_000_000)
/// let storage = try SQLiteServerStorage(location: .memory, configuration: .init(now: clock.now))
/// clock.advance(by: 5)
/// ```
public final class ManualClock: Sendable {
    private let value: Mutex<Int64>

    public init(_ milliseconds: Int64 = 1_700_000_000_000) {
        value = Mutex(milliseconds)
    }

    /// The current time; pass it as a storage's clock.
    @Sendable public func now() -> Int64 { value.withLock { $0 } }

    /// Sets the time (it may go backwards, as wall clocks do).
    public func set(_ milliseconds: Int64) { value.withLock { $0 = milliseconds } }

    /// Moves the time forward (or back, with a negative step).
    public func advance(by milliseconds: Int64) { value.withLock { $0 += milliseconds } }
}

/// A storage under test, fresh and empty for one check, running on ``clock``.
public struct ServerStorageFixture: ConformanceFixture {
    public var storage: any ServerStorage
    /// The clock the storage stamps from.
    public var clock: ManualClock
    /// Opens the same database again after ``storage`` was closed; `nil` for storages that keep
    /// nothing (in memory).
    public var reopen: (@Sendable () async throws -> any ServerStorage)?
    /// Opens another storage on the same database while ``storage`` stays open (a second server
    /// instance, or a second process on the same file); `nil` for storages no one else can open.
    public var openAnother: (@Sendable () async throws -> any ServerStorage)?

    public init(
        storage: any ServerStorage, clock: ManualClock, reopen: (@Sendable () async throws -> any ServerStorage)? = nil,
        openAnother: (@Sendable () async throws -> any ServerStorage)? = nil
    ) {
        self.storage = storage
        self.clock = clock
        self.reopen = reopen
        self.openAnother = openAnother
    }

    public func unmet(_ requirement: ConformanceRequirement) -> String? {
        switch requirement {
        case .reopening: reopen == nil ? "the storage keeps nothing (in memory), so there is nothing to reopen" : nil
        case .sharedDatabase:
            openAnother == nil ? "the database is private to one storage (in memory), so no other can share it" : nil
        default: "the fixture does not know \(requirement)"
        }
    }

    public func close() async {
        try? await storage.close()
    }
}

extension ConformanceRequirement {
    /// The fixture can open the same database again (``ServerStorageFixture/reopen``).
    public static let reopening = ConformanceRequirement("reopening the same database")
    /// The fixture can open a second storage on the same database (``ServerStorageFixture/openAnother``).
    public static let sharedDatabase = ConformanceRequirement("a second storage on the same database")
}

/// One check of the shared server-storage suite: ``ConformanceCheck`` run against a
/// ``ServerStorageFixture``.
///
/// A backend's test target runs every check in a few lines; the checks a fixture cannot run
/// (reopening a storage kept in memory) are reported as skipped with the reason:
///
/// ```swift
/// @Test(arguments: ServerStorageConformanceSuite.checks)
/// func memory(_ check: ServerStorageCheck) async throws {
///     try await check.run { clock in
///         ServerStorageFixture(
///             storage: try SQLiteServerStorage(location: .memory, configuration: .init(now: clock.now)),
///             clock: clock)
///     }
/// }
/// ```
public typealias ServerStorageCheck = ConformanceCheck<ServerStorageFixture>

extension ConformanceCheck where Fixture == ServerStorageFixture {
    /// Runs the check on a fresh fixture built around a new ``ManualClock``, then closes the storage.
    public func run(_ makeFixture: @Sendable (ManualClock) async throws -> ServerStorageFixture) async throws {
        try await run { try await makeFixture(ManualClock()) }
    }
}

/// The suite every ``ServerStorage`` backend must pass: CRUD, compare-and-set, commit-ordered stamps
/// under concurrent writers, dynamic tables and field kinds, owners, and queries that give exactly
/// what ``QueryEvaluator`` gives (a fixed list and a seeded random sweep).
public enum ServerStorageConformanceSuite: Sendable {
    /// Every check.
    public static var checks: [ServerStorageCheck] {
        crud + stamps + concurrency + fields + owners + queries + pages + changes + outcomes + transactions + sets
            + lifecycle
    }

    /// Reports the checks `fixture` cannot run by cancelling the current test with their names and
    /// reasons; returns when it can run every check. The fixture is closed afterwards.
    ///
    /// ```swift
    /// try await ServerStorageConformanceSuite.reportSkipped(
    ///     by: ServerStorageFixture(storage: try SQLiteServerStorage(location: .memory), clock: ManualClock()))
    /// ```
    public static func reportSkipped(by fixture: ServerStorageFixture) async throws {
        let skipped = await ServerStorageCheck.skipped(checks, by: fixture)
        try ServerStorageCheck.report(skipped: skipped.map { "\"\($0.name)\" (\($0.reason))" })
    }
}

extension StorageError: CodedError {}

extension ServerStorageConformanceSuite {
    static let todo = StorageTable(name: "todo")

    static let sample: JSONObject = [
        "title": "Léon: The Professional 🎬", "count": 42, "ratio": 0.5, "whole": 3.0, "big": .int(Int64.max),
        "small": .int(Int64.min), "flag": true, "nothing": .null, "tags": ["a", 1, 2.5, false, .null],
        "nested": ["deep": ["deeper": [1, 2, 3]]], "quote": "she said \"hi\"\n\t\\ / '; DROP TABLE x; --",
        "empty": "",
    ]

    static var crud: [ServerStorageCheck] {
        [
            .init("an inserted item reads back exactly, with stamps from the table's sequence") {
                fixture async throws in
                let storage = fixture.storage
                let stored = try await storage.insert(into: todo, id: "item-1", content: sample, owner: nil)
                #expect(stored.content == sample)
                #expect(stored.version > 0)
                #expect(stored.createdAt == stored.updatedAt)
                #expect(stored.updatedAt.millisecondsSince1970 == fixture.clock.now())
                #expect(!stored.deleted)
                let read = try await storage.item(in: todo, id: "item-1", owner: .all)
                #expect(read == stored)
                #expect(read?.content["whole"] == .double(3.0))
                #expect(read?.content["count"] == .int(42))
                #expect(read?.queryable["version"] == .string(stored.versionTag))
            },
            .init("reading a missing item or table gives nil; a write creates the table") { fixture async throws in
                let storage = fixture.storage
                #expect(try await storage.item(in: todo, id: "nope", owner: .all) == nil)
                #expect(try await storage.tableExists("todo") == false)
                await expectError(StorageError.self, .noSuchTable, "query of a missing table") {
                    try await storage.query(todo, StorageQuery())
                }
                _ = try await storage.insert(into: todo, id: "1", content: [:], owner: nil)
                #expect(try await storage.tableExists("todo"))
                #expect(try await storage.item(in: todo, id: "nope", owner: .all) == nil)
            },
            .init("prepare creates declared tables once; tableNames lists every table sorted") { fixture async throws in
                let storage = fixture.storage
                try await storage.prepare([StorageTable(name: "b"), StorageTable(name: "a")])
                try await storage.prepare([StorageTable(name: "a")])
                _ = try await storage.insert(into: StorageTable(name: "c"), id: "1", content: [:], owner: nil)
                #expect(try await storage.tableNames() == ["a", "b", "c"])
                #expect(try await storage.query(StorageTable(name: "a"), StorageQuery()).items.isEmpty)
            },
            .init("inserting an existing id conflicts and carries the stored row, deleted or not") {
                fixture async throws in
                let storage = fixture.storage
                let first = try await storage.insert(into: todo, id: "1", content: ["v": 1], owner: nil)
                let error = await expectError(StorageError.self, .conflict, "duplicate insert") {
                    try await storage.insert(into: todo, id: "1", content: ["v": 2], owner: nil)
                }
                #expect(error?.current == first)
                let gone = try await storage.replace(
                    in: todo, id: "1", expectedVersion: first.version, content: first.content, deleted: true,
                    owner: .all)
                let again = await expectError(StorageError.self, .conflict, "insert over a soft-deleted row") {
                    try await storage.insert(into: todo, id: "1", content: ["v": 3], owner: nil)
                }
                #expect(again?.current == gone)
                #expect(try await storage.item(in: todo, id: "1", owner: .all)?.content == ["v": 1])
            },
            .init("replace with the current version writes; a stale version or a missing row fails") {
                fixture async throws in
                let storage = fixture.storage
                let first = try await storage.insert(into: todo, id: "1", content: ["v": 1], owner: "alice")
                fixture.clock.advance(by: 10)
                let second = try await storage.replace(
                    in: todo, id: "1", expectedVersion: first.version, content: ["v": 2], deleted: false, owner: .all)
                #expect(second.content == ["v": 2])
                #expect(second.version > first.version)
                #expect(second.updatedAt > first.updatedAt)
                #expect(second.createdAt == first.createdAt)
                #expect(second.owner == "alice")
                let stale = await expectError(StorageError.self, .versionMismatch, "stale replace") {
                    try await storage.replace(
                        in: todo, id: "1", expectedVersion: first.version, content: ["v": 3], deleted: false,
                        owner: .all)
                }
                #expect(stale?.current == second)
                await expectError(StorageError.self, .notFound, "replace of a missing row") {
                    try await storage.replace(
                        in: todo, id: "2", expectedVersion: 1, content: [:], deleted: false, owner: .all)
                }
                await expectError(StorageError.self, .notFound, "replace in a missing table") {
                    try await storage.replace(
                        in: StorageTable(name: "none"), id: "1", expectedVersion: 1, content: [:], deleted: false,
                        owner: .all)
                }
                #expect(try await storage.item(in: todo, id: "1", owner: .all) == second)
            },
            .init("delete with the current version removes the row; a stale version or a missing row fails") {
                fixture async throws in
                let storage = fixture.storage
                let first = try await storage.insert(into: todo, id: "1", content: [:], owner: nil)
                let second = try await storage.replace(
                    in: todo, id: "1", expectedVersion: first.version, content: ["x": 1], deleted: false, owner: .all)
                let stale = await expectError(StorageError.self, .versionMismatch, "stale delete") {
                    try await storage.delete(from: todo, id: "1", expectedVersion: first.version, owner: .all)
                }
                #expect(stale?.current == second)
                try await storage.delete(from: todo, id: "1", expectedVersion: second.version, owner: .all)
                #expect(try await storage.item(in: todo, id: "1", owner: .all) == nil)
                await expectError(StorageError.self, .notFound, "delete of a missing row") {
                    try await storage.delete(from: todo, id: "1", expectedVersion: second.version, owner: .all)
                }
            },
            .init("invalid table names and ids are refused without writing") { fixture async throws in
                let storage = fixture.storage
                for name in ["", "a b", "__ferry", "x;DROP TABLE y", String(repeating: "t", count: 129)] {
                    await expectError(StorageError.self, .invalidTableName, "table name '\(name)'") {
                        try await storage.insert(into: StorageTable(name: name), id: "1", content: [:], owner: nil)
                    }
                }
                for id in ["", "a/b", "..", "a\u{0}b", String(repeating: "i", count: 256)] {
                    await expectError(StorageError.self, .invalidName, "id '\(id)'") {
                        try await storage.insert(into: todo, id: id, content: [:], owner: nil)
                    }
                }
                #expect(try await storage.tableNames().isEmpty)
            },
            .init("ids are case-sensitive and may hold quotes and unicode") { fixture async throws in
                let storage = fixture.storage
                for id in ["a", "A", "it's", "ü", "x y", "'; DROP TABLE ferry_tables; --"] {
                    _ = try await storage.insert(into: todo, id: id, content: ["id-copy": .string(id)], owner: nil)
                }
                for id in ["a", "A", "it's", "ü", "x y", "'; DROP TABLE ferry_tables; --"] {
                    #expect(try await storage.item(in: todo, id: id, owner: .all)?.content["id-copy"] == .string(id))
                }
                #expect(try await storage.query(todo, StorageQuery()).items.count == 6)
            },
        ]
    }

    static var stamps: [ServerStorageCheck] {
        [
            .init("versions and updatedAt increase strictly per table even when the clock stalls or goes back") {
                fixture async throws in
                let storage = fixture.storage
                var last: StoredItem?
                for step in 0..<30 {
                    if step == 10 { fixture.clock.advance(by: -60_000) }  // the wall clock jumps back
                    let item: StoredItem
                    if step % 3 == 2, let previous = last {
                        item = try await storage.replace(
                            in: todo, id: previous.id, expectedVersion: previous.version,
                            content: ["step": .int(Int64(step))],
                            deleted: false, owner: .all)
                    } else {
                        item = try await storage.insert(into: todo, id: "i\(step)", content: [:], owner: nil)
                    }
                    if let last {
                        #expect(item.version > last.version)
                        #expect(item.updatedAt > last.updatedAt)
                    }
                    last = item
                }
                // The clock catches up: stamps follow it again once it is ahead.
                fixture.clock.advance(by: 120_000)
                let later = try await storage.insert(into: todo, id: "later", content: [:], owner: nil)
                #expect(later.updatedAt.millisecondsSince1970 == fixture.clock.now())
            },
            .init("a delete advances the sequence: later writes still stamp above it") { fixture async throws in
                let storage = fixture.storage
                let a = try await storage.insert(into: todo, id: "a", content: [:], owner: nil)
                try await storage.delete(from: todo, id: "a", expectedVersion: a.version, owner: .all)
                let b = try await storage.insert(into: todo, id: "b", content: [:], owner: nil)
                #expect(b.version >= a.version + 2)
                #expect(b.updatedAt.millisecondsSince1970 >= a.updatedAt.millisecondsSince1970 + 2)
            },
            .init("each table has its own sequence") { fixture async throws in
                let storage = fixture.storage
                let a = try await storage.insert(into: StorageTable(name: "a"), id: "1", content: [:], owner: nil)
                _ = try await storage.insert(into: StorageTable(name: "a"), id: "2", content: [:], owner: nil)
                let b = try await storage.insert(into: StorageTable(name: "b"), id: "1", content: [:], owner: nil)
                #expect(a.version == b.version)
            },
        ]
    }

    static var lifecycle: [ServerStorageCheck] {
        [
            .init("a closed storage refuses work") { fixture async throws in
                let storage = fixture.storage
                try await storage.close()
                await expectError(StorageError.self, .closed, "insert after close") {
                    try await storage.insert(into: todo, id: "1", content: [:], owner: nil)
                }
                await expectError(StorageError.self, .closed, "query after close") {
                    try await storage.query(todo, StorageQuery())
                }
            },
            .init("rows, field kinds and the write sequence survive closing and reopening", requires: [.reopening]) {
                fixture async throws in
                let storage = fixture.storage
                let first = try await storage.insert(into: todo, id: "1", content: ["n": 1], owner: "bob")
                try await storage.close()
                guard let reopen = fixture.reopen else { return }
                let again = try await reopen()
                #expect(try await again.item(in: todo, id: "1", owner: .all) == first)
                fixture.clock.advance(by: -1_000)
                let second = try await again.insert(into: todo, id: "2", content: ["n": 2], owner: nil)
                #expect(second.version > first.version)
                #expect(second.updatedAt > first.updatedAt)
                await expectError(StorageError.self, .fieldKind, "kind remembered across reopening") {
                    try await again.insert(into: todo, id: "3", content: ["n": "two"], owner: nil)
                }
                try await again.close()
            },
        ]
    }
}
