import CLMDB
import SyncCore

/// Planning: which keys a query reads, and whether it reads them in the query's order.
extension QueryRunner {
    /// Where a query reads its candidates.
    enum Source: Sendable, Equatable, CustomStringConvertible {
        /// Point reads of these ids (sorted by UTF-8 bytes, no duplicates).
        case ids([String])
        /// A range of item keys.
        case idRange(IDRange)
        /// The `updatedAt` index: the whole table, or the date-times in a millisecond range.
        case updatedAt(ClosedRange<Int64>?)
        /// Every item key of the table.
        case all

        var description: String {
            switch self {
            case .ids(let ids): "ids(\(ids.count))"
            case .idRange: "idRange"
            case .updatedAt(let range): range == nil ? "updatedAtIndex" : "updatedAtRange"
            case .all: "all"
            }
        }
    }

    /// The order a query wants, when the store can produce it by reading keys in order.
    enum Order: Sendable, Equatable {
        case id(descending: Bool)
        case updatedAt(descending: Bool, idDescending: Bool)
        /// Anything else: the evaluator sorts.
        case general
    }

    struct Plan: Sendable, Equatable, CustomStringConvertible {
        var source: Source
        var order: Order
        /// Whether the source is read in the query's order (so reading stops after the page).
        var streamed: Bool

        var description: String { "\(source)\(streamed ? ", streamed" : ", sorted by the evaluator")" }
    }

    var plansID: Bool {
        switch schema.fields["id"] {
        case nil, .string?: true
        default: false
        }
    }

    var plansUpdatedAt: Bool {
        switch schema.fields["updatedAt"] {
        case nil, .dateTimeOffset?: true
        default: false
        }
    }

    func plan(_ query: TableQuery) throws -> Plan {
        var constraint = query.filter.map { self.constraint($0) } ?? Constraint()
        if constraint.updatedAtFromText, constraint.updatedAt != nil, try holds(.string) {
            constraint.updatedAt = nil
        }
        let order = self.order(query.orderBy)
        if constraint.isNothing { return Plan(source: .ids([]), order: order, streamed: true) }
        if case .set(let ids) = constraint.ids {
            let sorted = ids.map(\.id).sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
            if case .id = order { return Plan(source: .ids(sorted), order: order, streamed: true) }
            return Plan(source: .ids(sorted), order: order, streamed: false)
        }
        if case .updatedAt = order, try constraint.updatedAt != nil || !holdsIrregularUpdatedAt() {
            return Plan(source: .updatedAt(constraint.updatedAt), order: order, streamed: true)
        }
        if case .range(let range) = constraint.ids {
            if case .id = order { return Plan(source: .idRange(range), order: order, streamed: true) }
            return Plan(source: .idRange(range), order: order, streamed: false)
        }
        if let range = constraint.updatedAt {
            return Plan(source: .updatedAt(range), order: order, streamed: false)
        }
        if case .id = order { return Plan(source: .all, order: order, streamed: true) }
        return Plan(source: .all, order: order, streamed: false)
    }

    func order(_ keys: [SortKey]) -> Order {
        var keys = keys
        // `id` is unique: keys after it never decide anything.
        if plansID, let index = keys.firstIndex(where: { $0.expression == .field("id") }) {
            keys = Array(keys[...index])
        }
        switch keys.count {
        case 0:
            return plansID ? .id(descending: false) : .general
        case 1 where keys[0].expression == .field("id") && plansID:
            return .id(descending: keys[0].descending)
        case 1 where keys[0].expression == .field("updatedAt") && plansUpdatedAt && plansID:
            return .updatedAt(descending: keys[0].descending, idDescending: false)
        case 2
        where keys[0].expression == .field("updatedAt") && keys[1].expression == .field("id") && plansUpdatedAt
            && plansID:
            return .updatedAt(descending: keys[0].descending, idDescending: keys[1].descending)
        default:
            return .general
        }
    }

    /// Whether some item's `updatedAt` is present and not null but not a date-time: such values
    /// sort by value within their kind, which the index does not keep.
    func holdsIrregularUpdatedAt() throws -> Bool {
        try holds(.bool, through: .number) || holds(.string, through: .other)
    }

    /// Whether some item's `updatedAt` is of a kind from `first` through `last`.
    func holds(_ first: ItemSummary.Kind, through last: ItemSummary.Kind? = nil) throws -> Bool {
        let tablePrefix = ItemKeys.tablePrefix(entry.key)
        return try txn.withCursor(txn.dbs.updated) { cursor in
            let start = ItemKeys.updatedPrefix(table: entry.key, kind: first)
            guard let (key, _) = try cursor.get(MDB_SET_RANGE, key: start), key.hasPrefix(tablePrefix) else {
                return false
            }
            return key[4] <= (last ?? first).rawValue
        }
    }
}
