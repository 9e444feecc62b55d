import Foundation
public import SyncCore

/// A new directory under the system's temporary directory, for one test, removed by ``remove()``.
///
/// ```swift
/// let directory = try TemporaryDirectory()
/// defer { directory.remove() }
/// let store = try SQLiteStore(path: directory.path + "/store.ferry")
/// ```
public final class TemporaryDirectory: Sendable {
    /// The directory's absolute path.
    public let path: String

    /// Creates a new, empty directory.
    public init() throws {
        path = NSTemporaryDirectory() + "ferry-test-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    /// The names of the entries in the directory, sorted.
    public func contents() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: path).sorted()
    }

    /// Removes the directory and everything in it.
    public func remove() {
        try? FileManager.default.removeItem(atPath: path)
    }
}

/// Holds a transaction or reader handle past the end of its transaction, to prove that using it
/// then fails.
///
/// ```swift
/// let escaped = EscapedHandle()
/// try await store.write { tx in escaped.set(tx) }
/// #expect(throws: StoreError.self) { try escaped.handle?.upsert("t", [["id": "1"]]) }
/// ```
public final class EscapedHandle: @unchecked Sendable {
    // Only touched from one task at a time: the transaction's body, then the test after it.
    /// The transaction handle kept by `set(_:)`.
    public private(set) var handle: (any StoreTransaction)?
    /// The reader handle kept by `set(_:)`.
    public private(set) var reader: (any StoreReader)?

    /// An empty holder.
    public init() {}

    /// Keeps a transaction handle.
    public func set(_ handle: any StoreTransaction) { self.handle = handle }

    /// Keeps a reader handle.
    public func set(_ reader: any StoreReader) { self.reader = reader }
}

/// A deliberate failure inside a transaction or a test helper.
///
/// ```swift
/// await #expect(throws: Abort.self) { try await store.write { _ in throw Abort() } }
/// ```
public struct Abort: Error, Sendable {
    /// A deliberate failure.
    public init() {}
}

/// Queries the sync engine sends, for tests that check how a store runs them.
public enum SyncQueries: Sendable {
    /// The pull's keyset page: rows after `(updatedAt, id)` in `(updatedAt, id)` order, deleted
    /// rows included.
    public static func keysetPage(after updatedAt: Timestamp, id: String, top: Int) -> TableQuery {
        TableQuery(
            filter: .binary(
                .or, .binary(.greaterThan, .field("updatedAt"), .literal(.dateTimeOffset(updatedAt))),
                .binary(
                    .and, .binary(.equal, .field("updatedAt"), .literal(.dateTimeOffset(updatedAt))),
                    .binary(.greaterThan, .field("id"), .literal(.string(id))))),
            orderBy: [.field("updatedAt"), .field("id")], top: top, includeDeleted: true)
    }
}
