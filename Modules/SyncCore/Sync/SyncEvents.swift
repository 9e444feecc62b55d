import Logging

/// Progress of the sync work of a ``SyncContext``, delivered by ``SyncContext/events(bufferingNewest:)``.
public enum SyncEvent: Sendable, Hashable {
    /// A push began with this many queued operations.
    case pushStarted(operations: Int)
    /// The server accepted an operation (or a conflict about it was resolved).
    case operationPushed(table: String, itemID: String, kind: OperationKind)
    /// An operation failed and its error was recorded.
    case operationFailed(OperationErrorRecord)
    /// A push ended (also when it stopped early: then `stoppedBy` says why).
    case pushFinished(PushResult, stoppedBy: String?)
    /// A pull of a table began.
    case pullStarted(table: String, queryID: String?)
    /// The server counted the items this pull will bring (only with
    /// ``PullOptions/countsTotal``, and only from servers that count): the total for a progress
    /// bar. Items written meanwhile may make the pull bring a few more.
    case pullCounted(table: String, queryID: String?, total: Int)
    /// A page was applied to the store.
    case pagePulled(table: String, queryID: String?, counts: PullCounts)
    /// A pull ended (also when it stopped early: then `stoppedBy` says why).
    case pullFinished(table: String, queryID: String?, result: PullResult, stoppedBy: String?)
    /// A purge removed items.
    case purged(table: String, items: Int, forced: Bool)
    /// Bytes of an attachment moved (an upload in a push, a download in a pull or an open):
    /// `bytes` of `total` so far.
    case attachmentProgress(AttachmentTransfer, bytes: Int64, total: Int64)
    /// An attachment's upload, download or delete finished.
    case attachmentTransferred(AttachmentTransfer)
    /// An attachment's upload, download or delete failed; it stays queued (or remote) for the next try.
    case attachmentFailed(AttachmentTransfer, message: String)
}

/// What a pull did to the store, counted in items: for one page (``SyncEvent/pagePulled(table:queryID:counts:)``)
/// or for a whole pull (``PullResult/items``). The page itself is a ``RemotePage``.
public struct PullCounts: Sendable, Hashable {
    /// Items the server sent.
    public var received: Int = 0
    /// Items written to the store.
    public var upserted: Int = 0
    /// Items removed because the server marked them deleted.
    public var deleted: Int = 0
    /// Items left alone because they have queued local operations, because the store already
    /// holds a newer copy, or because the page repeats their id further on (its last copy counts).
    public var skipped: Int = 0
    /// Items ignored because they have no valid string id, or a `version` that is not a string or
    /// a `deleted` that is not a Boolean.
    public var invalid: Int = 0

    public init() {}
}

/// Fans events out to every subscriber, and logs them.
final class EventHub: Sendable {
    private let broadcast = Broadcast<SyncEvent>()
    /// Every event also goes to the logger the app gave the context (swift-log).
    let logger: Logger

    init(logger: Logger) {
        self.logger = logger
    }

    func stream(bufferingNewest limit: Int) -> AsyncStream<SyncEvent> {
        broadcast.stream(bufferingNewest: limit)
    }

    func emit(_ event: SyncEvent) {
        log(event)
        broadcast.yield(event)
    }

    private func log(_ event: SyncEvent) {
        switch event {
        case .pushStarted(let operations):
            logger.debug("push started", metadata: ["operations": "\(operations)"])
        case .operationPushed(let table, let itemID, let kind):
            logger.trace("pushed \(kind) of '\(itemID)'", metadata: ["table": "\(table)"])
        case .operationFailed(let error):
            logger.debug(
                "\(error.kind) of '\(error.itemID)' failed: \(error.message)",
                metadata: ["table": "\(error.table)", "status": "\(error.statusCode.map(String.init) ?? "-")"])
        case .pushFinished(let result, let stoppedBy):
            if let stoppedBy {
                logger.debug("push stopped: \(stoppedBy)", metadata: ["result": "\(result)"])
            } else {
                logger.debug("push finished", metadata: ["result": "\(result)"])
            }
        case .pullStarted(let table, let queryID):
            logger.debug("pull started", metadata: ["table": "\(table)", "queryID": "\(queryID ?? "-")"])
        case .pullCounted(let table, _, let total):
            logger.debug("pull counted", metadata: ["table": "\(table)", "total": "\(total)"])
        case .pagePulled(let table, _, let counts):
            logger.trace("page pulled", metadata: ["table": "\(table)", "received": "\(counts.received)"])
        case .pullFinished(let table, _, let result, let stoppedBy):
            if let stoppedBy {
                logger.debug("pull of '\(table)' stopped: \(stoppedBy)", metadata: ["result": "\(result)"])
            } else {
                logger.debug("pull of '\(table)' finished", metadata: ["result": "\(result)"])
            }
        case .purged(let table, let items, let forced):
            logger.debug("purged \(items) items", metadata: ["table": "\(table)", "forced": "\(forced)"])
        case .attachmentProgress(let transfer, let bytes, let total):
            logger.trace("\(transfer): \(bytes) of \(total) bytes")
        case .attachmentTransferred(let transfer):
            logger.debug("\(transfer) done")
        case .attachmentFailed(let transfer, let message):
            logger.debug("\(transfer) failed: \(message)")
        }
    }
}

/// One file's transfer, in attachment events.
public struct AttachmentTransfer: Sendable, Hashable, CustomStringConvertible {
    /// What moves.
    public enum Direction: String, Sendable, Hashable {
        case upload, download, delete
    }

    public var direction: Direction
    public var table: String
    public var itemID: String
    public var name: String

    public init(_ direction: Direction, table: String, itemID: String, name: String) {
        self.direction = direction
        self.table = table
        self.itemID = itemID
        self.name = name
    }

    public var description: String { "\(direction.rawValue) of \(subject)" }

    /// `attachment 'scan.pdf' of 'notes/a1'`: which file, as messages name it.
    var subject: String { "attachment '\(name)' of '\(table)/\(itemID)'" }
}
