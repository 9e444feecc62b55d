public import Foundation
import Synchronization
public import SyncCore

/// A client store under test, fresh and empty for one check.
///
/// A store that keeps nothing is wrapped as it is; a persistent store is opened through its
/// ``PersistentStoreHooks`` at a path in a new temporary directory, so that the lifecycle checks
/// (reopening, refusing what is not a store, read-only locations...) can run on it too.
///
/// ```swift
/// try await check.run { StoreFixture(store: MemoryStore()) }
/// try await check.run { try StoreFixture(opening: .sqlite) }
/// ```
public final class StoreFixture: ConformanceFixture {
    /// The store, empty.
    public let store: any LocalStore
    /// How to open the store at a path, for stores that keep their data; `nil` otherwise.
    public let hooks: PersistentStoreHooks?
    /// Where ``store`` lives, when ``hooks`` is set: `store.ferry` in ``directory``.
    public let path: String?
    /// The temporary directory holding ``path``, removed when the fixture closes.
    public let directory: TemporaryDirectory?
    private let opened = Mutex<[any LocalStore]>([])

    /// A store that cannot be opened at a path (kept in memory): the lifecycle checks skip.
    public init(store: any LocalStore) {
        self.store = store
        hooks = nil
        path = nil
        directory = nil
    }

    /// A new store opened through `hooks` at `store.ferry` in a new temporary directory.
    public init(opening hooks: PersistentStoreHooks) throws {
        let directory = try TemporaryDirectory()
        let path = directory.path + "/store.ferry"
        self.store = try hooks.open(path)
        self.hooks = hooks
        self.path = path
        self.directory = directory
    }

    /// Opens the store at ``path`` again (after ``store`` was closed); the fixture closes it too.
    public func reopen() throws -> any LocalStore {
        guard let path else { throw ConformanceFailure(description: "this fixture cannot reopen its store") }
        return try open(at: path)
    }

    /// Opens a store at `path` through ``hooks``; the fixture closes it too.
    public func open(at path: String) throws -> any LocalStore {
        guard let hooks else { throw ConformanceFailure(description: "this fixture cannot open a store at a path") }
        let store = try hooks.open(path)
        opened.withLock { $0.append(store) }
        return store
    }

    public func unmet(_ requirement: ConformanceRequirement) -> String? {
        if let capability = StoreConformanceSuite.capabilityRequirements.first(where: { $0.requirement == requirement })
        {
            return store.capabilities.contains(capability.capability)
                ? nil : "the store does not declare \(requirement)"
        }
        switch requirement {
        case .openingAtAPath:
            return hooks == nil ? "the fixture cannot open the store at a path (it keeps nothing)" : nil
        case .peerData:
            return PeerData.isAvailable ? nil : "\(PeerData.missingNotice)"
        default:
            return "the fixture does not know \(requirement)"
        }
    }

    public func close() async {
        try? await store.close()
        for store in opened.withLock({ $0 }) { try? await store.close() }
        directory?.remove()
    }
}

/// How the lifecycle checks open a persistent store at a path and make, for this store, the
/// files it must refuse: the store-specific set-up of store-independent checks.
///
/// ```swift
/// extension PersistentStoreHooks {
///     static let sqlite = PersistentStoreHooks(
///         open: { try SQLiteStore(path: $0) }, notAStoreReason: "not a SQLite database",
///         placeNotAStore: { bytes, path in try bytes.write(to: URL(fileURLWithPath: path)) },
///         writeForeignDatabase: { path in try makeOtherAppsDatabase(at: path) },
///         markAsWrittenByNewerFerry: { store in try await markNewer(store) })
/// }
/// ```
public struct PersistentStoreHooks: Sendable {
    /// Opens (creating when absent) the store at a path.
    public var open: @Sendable (_ path: String) throws -> any LocalStore
    /// The files that hold the data of the store at a path: what "left untouched" compares.
    public var dataFiles: @Sendable (_ path: String) -> [String]
    /// The phrase the store's error uses for bytes that are not one of its databases.
    public var notAStoreReason: String
    /// Puts `bytes` where the store at `path` keeps its data, as if something else wrote there.
    public var placeNotAStore: @Sendable (_ bytes: Data, _ path: String) throws -> Void
    /// Writes, at a path, a database of the store's engine that another application made.
    public var writeForeignDatabase: @Sendable (_ path: String) async throws -> Void
    /// Marks the open store as written by a newer version of Ferry, whose format this one cannot read.
    public var markAsWrittenByNewerFerry: @Sendable (_ store: any LocalStore) async throws -> Void

    /// Hooks for one persistent store type; `dataFiles` defaults to the path itself.
    public init(
        open: @escaping @Sendable (_ path: String) throws -> any LocalStore,
        dataFiles: @escaping @Sendable (_ path: String) -> [String] = { [$0] },
        notAStoreReason: String,
        placeNotAStore: @escaping @Sendable (_ bytes: Data, _ path: String) throws -> Void,
        writeForeignDatabase: @escaping @Sendable (_ path: String) async throws -> Void,
        markAsWrittenByNewerFerry: @escaping @Sendable (_ store: any LocalStore) async throws -> Void
    ) {
        self.open = open
        self.dataFiles = dataFiles
        self.notAStoreReason = notAStoreReason
        self.placeNotAStore = placeNotAStore
        self.writeForeignDatabase = writeForeignDatabase
        self.markAsWrittenByNewerFerry = markAsWrittenByNewerFerry
    }

    /// The bytes of every data file of the store at `path`, to prove an open left them untouched.
    func snapshot(_ path: String) throws -> [Data] {
        try dataFiles(path).map { try Data(contentsOf: URL(fileURLWithPath: $0)) }
    }
}

extension ConformanceRequirement {
    /// The store declares `StoreCapabilities.persistent`.
    public static let persistent = ConformanceRequirement("the .persistent capability")
    /// The store declares `StoreCapabilities.concurrentReaders`.
    public static let concurrentReaders = ConformanceRequirement("the .concurrentReaders capability")
    /// The store declares `StoreCapabilities.declaredIndexes`.
    public static let declaredIndexes = ConformanceRequirement("the .declaredIndexes capability")
    /// The fixture opens the store at a path (``StoreFixture/init(opening:)``).
    public static let openingAtAPath = ConformanceRequirement("opening the store at a path")
    /// The peer conformance data is present (``PeerData``).
    public static let peerData = ConformanceRequirement("the peer data")
}

extension StoreConformanceSuite {
    /// Which requirement stands for which declared capability.
    static let capabilityRequirements: [(requirement: ConformanceRequirement, capability: StoreCapabilities)] = [
        (.persistent, .persistent), (.concurrentReaders, .concurrentReaders), (.declaredIndexes, .declaredIndexes),
    ]
}
