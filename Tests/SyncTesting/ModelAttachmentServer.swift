public import Foundation
public import SyncCore
import Synchronization

/// An in-memory model of the server's attachment routes, for engine tests: SyncCore's
/// `RemoteAttachments` over a ``ModelServer``'s items, with scripted failures.
///
/// - An upload or download of an attachment whose item the model server does not hold (live) fails
///   like the server's 404, so a test sees an upload that went before its item's insert.
/// - Uploads stream the file in `chunkSize` pieces and report progress; a scripted failure cuts an
///   upload halfway (nothing stored: an incomplete upload is never complete) and a download halfway
///   (half of the bytes written to its file).
/// - Rows get a strictly increasing `updatedAt` (one clock per model) and answer table queries on
///   `QueryEvaluator`, tombstones included with `includeDeleted`.
///
/// ```swift
/// let server = ModelServer()
/// let attachments = ModelAttachmentServer(items: server)
/// attachments.failNext(.upload)
/// ```
public final class ModelAttachmentServer: RemoteAttachments {
    /// A failure the next request of a kind meets.
    public enum Kind: String, Sendable, Hashable { case upload, download, delete, rows }

    /// What the model stores for one attachment.
    public struct Stored: Sendable, Hashable {
        public var id: String
        public var sha256: String
        public var bytes: Data
        public var contentType: String?
        public var updatedAt: Timestamp
        public var deleted: Bool
    }

    /// The error of a scripted failure.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public var description: String
    }

    private struct State {
        var stored: [String: Stored] = [:]
        var failures: [Kind: Int] = [:]
        var log: [String] = []
        var clock = Timestamp(millisecondsSince1970: 1_800_000_000_000)
        var nextID = 0
    }

    private let items: ModelServer
    private let state = Mutex(State())
    /// The bytes an upload reads at a time.
    public let chunkSize: Int

    public init(items: ModelServer, chunkSize: Int = 64 << 10) {
        self.items = items
        self.chunkSize = chunkSize
    }

    private static func key(_ table: String, _ itemID: String, _ name: String) -> String {
        "\(table)\u{1}\(itemID)\u{1}\(name)"
    }

    /// The next `count` requests of `kind` fail (an upload after half of its bytes).
    public func failNext(_ kind: Kind, count: Int = 1) {
        state.withLock { $0.failures[kind, default: 0] += count }
    }

    /// The requests so far, as `"upload todo/1/a.txt"` lines.
    public var log: [String] { state.withLock { $0.log } }

    /// The stored attachment, or `nil` (tombstones too).
    public func stored(_ table: String, _ itemID: String, _ name: String) -> Stored? {
        state.withLock { $0.stored[Self.key(table, itemID, name)] }
    }

    /// Stores an attachment as another device's upload would.
    public func seed(
        _ table: String, _ itemID: String, _ name: String, bytes: Data, sha256: String, contentType: String? = nil
    ) {
        state.withLock { state in
            Self.put(&state, table, itemID, name, bytes: bytes, sha256: sha256, contentType: contentType)
        }
    }

    private static func put(
        _ state: inout State, _ table: String, _ itemID: String, _ name: String, bytes: Data, sha256: String,
        contentType: String?
    ) {
        let key = key(table, itemID, name)
        state.clock = Timestamp(millisecondsSince1970: state.clock.millisecondsSince1970 + 1)
        let id =
            state.stored[key]?.id
            ?? {
                state.nextID += 1
                return String(format: "a%06d", state.nextID)
            }()
        state.stored[key] = Stored(
            id: id, sha256: sha256, bytes: bytes, contentType: contentType, updatedAt: state.clock, deleted: false)
    }

    private func begin(_ kind: Kind, _ line: String) -> Bool {
        state.withLock { state in
            state.log.append("\(kind.rawValue) \(line)")
            guard let left = state.failures[kind], left > 0 else { return false }
            state.failures[kind] = left - 1
            return true
        }
    }

    private func requireItem(_ table: String, _ itemID: String) throws {
        guard let row = items.row(table, id: itemID) else {
            throw Failure(description: "404: no item '\(itemID)' in '\(table)'")
        }
        if row["deleted"]?.boolValue == true {
            // As Ferry's server answers for an item soft-deleted there (another device deleted it).
            throw RemoteError(.notFound, status: 410, "the item '\(itemID)' of '\(table)' is deleted")
        }
    }

    public func uploadAttachment(
        table: String, itemID: String, name: String, file: URL, contentType: String?, sha256: String,
        progress: @escaping @Sendable (Int64, Int64) -> Void
    ) async throws {
        let failing = begin(.upload, "\(table)/\(itemID)/\(name)")
        try requireItem(table, itemID)
        let handle = try FileHandle(forReadingFrom: file)
        defer { try? handle.close() }
        let total = Int64(try handle.seekToEnd())
        try handle.seek(toOffset: 0)
        var bytes = Data()
        while let chunk = try handle.read(upToCount: chunkSize), !chunk.isEmpty {
            bytes.append(chunk)
            progress(Int64(bytes.count), total)
            if failing, Int64(bytes.count) * 2 >= total {
                throw Failure(description: "connection reset after \(bytes.count) bytes")
            }
        }
        if failing { throw Failure(description: "connection reset") }
        state.withLock { state in
            Self.put(&state, table, itemID, name, bytes: bytes, sha256: sha256, contentType: contentType)
        }
    }

    public func downloadAttachment(
        table: String, itemID: String, name: String, to file: URL,
        progress: @escaping @Sendable (Int64, Int64) -> Void
    ) async throws {
        let failing = begin(.download, "\(table)/\(itemID)/\(name)")
        try requireItem(table, itemID)
        guard let stored = stored(table, itemID, name), !stored.deleted else {
            throw Failure(description: "404: no attachment '\(name)'")
        }
        if failing {
            // Cut halfway: half of the bytes reached the file.
            try stored.bytes.prefix(stored.bytes.count / 2).write(to: file)
            throw Failure(description: "connection reset after \(stored.bytes.count / 2) bytes")
        }
        try stored.bytes.write(to: file)
        progress(Int64(stored.bytes.count), Int64(stored.bytes.count))
    }

    public func deleteAttachment(table: String, itemID: String, name: String, sha256: String?) async throws {
        if begin(.delete, "\(table)/\(itemID)/\(name)") { throw Failure(description: "connection reset") }
        if items.row(table, id: itemID)?["deleted"]?.boolValue == true {
            throw RemoteError(.notFound, status: 410, "the item '\(itemID)' of '\(table)' is deleted")
        }
        let replaced = state.withLock { state -> Bool in
            let key = Self.key(table, itemID, name)
            guard var stored = state.stored[key], !stored.deleted else { return false }
            if let sha256, stored.sha256 != sha256 { return true }
            state.clock = Timestamp(millisecondsSince1970: state.clock.millisecondsSince1970 + 1)
            stored.deleted = true
            stored.updatedAt = state.clock
            state.stored[key] = stored
            return false
        }
        if replaced {
            throw RemoteError(.conflict, status: 412, "attachment '\(name)' is not the one If-Match names")
        }
    }

    public func attachmentRows(table: String, query: TableQuery) async throws -> RemotePage {
        if begin(.rows, table) { throw Failure(description: "connection reset") }
        let rows: [JSONObject] = state.withLock { state in
            state.stored.compactMap { key, stored in
                let parts = key.split(separator: "\u{1}", omittingEmptySubsequences: false).map(String.init)
                guard parts[0] == table else { return nil }
                var row: JSONObject = [
                    "id": .string(stored.id), "item": .string(parts[1]), "name": .string(parts[2]),
                    "sha256": .string(stored.sha256), "size": .int(Int64(stored.bytes.count)),
                    "updatedAt": .string(stored.updatedAt.iso8601), "deleted": .bool(stored.deleted),
                ]
                if let contentType = stored.contentType { row["contentType"] = .string(contentType) }
                return row
            }
        }
        var all = query
        all.top = nil
        let matching = try QueryEvaluator().evaluate(all, over: rows).items
        let top = query.top ?? matching.count
        return RemotePage(
            items: Array(matching.prefix(top)), nextPage: matching.count > top ? query : nil)
    }
}
