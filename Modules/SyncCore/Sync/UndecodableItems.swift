import Logging
import Synchronization

/// A stored item that does not decode as the model a ``TypedSyncTable`` reads it as: a field
/// missing or of another type (written by another client, or by an older version of the app),
/// a date that is not a date, an id that would not be written back as it is stored.
///
/// With ``DecodingPolicy/skipAndReport`` (the default) a typed read skips such an item and the
/// context reports it (``SyncContext/undecodableItems`` and
/// ``SyncContext/undecodableItemReports(bufferingNewest:)``); with ``DecodingPolicy/strict`` the read
/// throws a ``SyncError`` with code ``SyncError/Code/invalidItem`` whose ``SyncError/underlying`` is
/// this report.
///
/// ```swift
/// for await report in context.undecodableItemReports() {
///     print(report)   // table 'todo': item '0193…' does not fit Todo: 'due': missing
/// }
/// ```
public struct UndecodableItem: Error, Sendable, Hashable, CustomStringConvertible {
    /// The item's table.
    public var table: String
    /// The item's id.
    public var itemID: String
    /// The model type it does not fit, as Swift names it (`Todo`).
    public var model: String
    /// Where in the item: the coding path of the field, `due` or `note.lines[1]` (empty when the
    /// item as a whole is at fault).
    public var field: String
    /// Why, in words.
    public var reason: String

    /// A report; see the properties.
    public init(table: String, itemID: String, model: String, field: String, reason: String) {
        self.table = table
        self.itemID = itemID
        self.model = model
        self.field = field
        self.reason = reason
    }

    /// The report for `error`, thrown when `object` was decoded.
    init(_ error: any Error, object: JSONObject, table: String, model: String) {
        let path: [any CodingKey]
        let reason: String
        switch error {
        case DecodingError.keyNotFound(let key, let context):
            (path, reason) = (context.codingPath + [key], "missing")
        case DecodingError.valueNotFound(_, let context), DecodingError.typeMismatch(_, let context),
            DecodingError.dataCorrupted(let context):
            (path, reason) = (context.codingPath, context.debugDescription)
        default:
            (path, reason) = ([], String(describing: error))
        }
        self.init(table: table, itemID: object.id ?? "?", model: model, field: codingPathText(path), reason: reason)
    }

    public var description: String {
        "table '\(table)': item '\(itemID)' does not fit \(model): \(field.isEmpty ? "" : "'\(field)': ")\(reason)"
    }
}

/// A coding path as people write it: `note.lines[1]`.
func codingPathText(_ path: [any CodingKey]) -> String {
    let text = path.map { $0.intValue.map { "[\($0)]" } ?? "." + $0.stringValue }.joined()
    return text.hasPrefix(".") ? String(text.dropFirst()) : text
}

/// How a ``TypedSyncTable`` treats a stored item that does not decode as its model.
///
/// ```swift
/// let todos = context.table(Todo.self)                     // skips and reports such items
/// let strict = context.table(Todo.self, decoding: .strict) // throws, as a model type check would
/// ```
public enum DecodingPolicy: Sendable, Hashable {
    /// `query` and `observe` leave the item out and the context reports it (an observation keeps
    /// running); `item(id:)` of that item throws.
    case skipAndReport
    /// Every read that meets the item throws ``SyncError/Code/invalidItem``, and an observation
    /// ends with that error.
    case strict
}

extension SyncContext {
    /// The stored items that did not decode as their model the last time a typed table of this
    /// context read them, sorted by table and id; `count` is how many.
    ///
    /// An item stays here until a typed read of the same model decodes it (a fix pulled from the
    /// server, an update through the untyped table) or finds it gone, for as long as the context
    /// lives.
    ///
    /// ```swift
    /// if !context.undecodableItems.isEmpty { showDataProblemBanner() }
    /// ```
    public nonisolated var undecodableItems: [UndecodableItem] { undecodable.current }

    /// A new stream of reports of items that do not decode as their model, each when it is first
    /// seen (and again when its reason changes; a row seen again unchanged is not reported again).
    /// Each report is also logged, at debug level like ``SyncEvent``s, to the context's logger.
    ///
    /// ```swift
    /// Task { for await report in context.undecodableItemReports() { log(report) } }
    /// ```
    public nonisolated func undecodableItemReports(bufferingNewest limit: Int = 1024) -> AsyncStream<UndecodableItem> {
        undecodable.stream(bufferingNewest: limit)
    }
}

/// The context's reports of undecodable items, and their subscribers.
final class UndecodableItemLog: Sendable {
    private struct Key: Hashable {
        var table: String
        var model: String
        var itemID: ItemID.Key

        init(table: String, model: String, itemID: String) {
            (self.table, self.model, self.itemID) = (table, model, ItemID.Key(itemID))
        }
    }

    private let reports = Mutex<[Key: UndecodableItem]>([:])
    private let broadcast = Broadcast<UndecodableItem>()
    private let logger: Logger

    init(logger: Logger) { self.logger = logger }

    var isEmpty: Bool { reports.withLock { $0.isEmpty } }

    var current: [UndecodableItem] {
        reports.withLock { Array($0.values) }.sorted { ($0.table, $0.itemID) < ($1.table, $1.itemID) }
    }

    /// Records `report`; tells the subscribers and the logger when it is new or changed.
    func report(_ report: UndecodableItem) {
        let key = Key(table: report.table, model: report.model, itemID: report.itemID)
        guard reports.withLock({ $0.updateValue(report, forKey: key) != report }) else { return }
        logger.debug(
            "\(report)",
            metadata: ["table": "\(report.table)", "itemID": "\(report.itemID)", "field": "\(report.field)"])
        broadcast.yield(report)
    }

    /// The ids of the items of `table` reported for `model`.
    func ids(table: String, model: String) -> [String] {
        reports.withLock { reports in
            reports.keys.filter { $0.table == table && $0.model == model }.map(\.itemID.id)
        }
    }

    /// Forgets the reports of the items with `ids` of `table` for `model`: they decoded, or are gone.
    func clear(table: String, model: String, ids: some Sequence<String>) {
        reports.withLock { reports in
            guard !reports.isEmpty else { return }
            for id in ids { reports[Key(table: table, model: model, itemID: id)] = nil }
        }
    }

    func stream(bufferingNewest limit: Int) -> AsyncStream<UndecodableItem> {
        broadcast.stream(bufferingNewest: limit)
    }
}
