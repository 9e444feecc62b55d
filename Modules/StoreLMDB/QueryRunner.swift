import CLMDB
import SyncCore

/// Runs one query: picks the keys to read from the filter and order (the plan), then lets
/// ``QueryEvaluator`` decide on every item read.
///
/// The plan only ever narrows which items are read, never which match: every item read goes
/// through the evaluator's filter, so answers are the evaluator's by construction. What is planned:
///
/// - `id eq 'x'`, `id in ('x', 'y')`: point reads of those keys.
/// - `id gt/ge/lt/le 'x'`: a range of the item keys (ids sort by UTF-8 bytes in keys, as in the
///   evaluator).
/// - `updatedAt gt/ge/lt/le/eq <date-time, date or ISO 8601 text>`: a range of the `updatedAt`
///   index (only date-times can satisfy such a comparison).
/// - Conditions combine through `and` (intersection) and `or` (the hull of both sides), so the
///   pull query `updatedAt gt T or (updatedAt eq T and id gt 'x')` reads from `T` on.
/// - Order: no `$orderby` or `id` first streams the item keys in order; `updatedAt` (then
///   optionally `id`) streams the `updatedAt` index when the filter bounds `updatedAt` or the table
///   holds no `updatedAt` that is neither null nor a date-time. A streamed query stops reading once
///   it has `skip + top` items, unless it needs the total count. Any other order reads the planned
///   keys and sorts with the evaluator.
///
/// `id` is planned only while the table's schema leaves it a string, `updatedAt` only while the
/// schema leaves it a date-time.
struct QueryRunner {
    let reader: LMDBReader
    let table: String
    let entry: TableEntry

    var txn: Txn { reader.txn }
    var schema: TableSchema { entry.schema }

    // MARK: Plans

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
            let sorted = ids.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
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

    // MARK: Constraints implied by the filter

    /// A superset of the ids or `updatedAt` values a filter can select.
    struct Constraint {
        var ids: IDConstraint = .any
        /// Milliseconds an item's `updatedAt` date-time must lie in; `nil`: not constrained.
        var updatedAt: ClosedRange<Int64>?
        /// Whether the `updatedAt` range came from a text literal: an `updatedAt` that is text but
        /// not a date-time compares with it as text, so the range holds only while the table has
        /// no such `updatedAt`.
        var updatedAtFromText = false
        /// An empty `updatedAt` range: nothing matches.
        var updatedAtIsEmpty = false

        func and(_ other: Constraint) -> Constraint {
            var result = Constraint(ids: ids.and(other.ids))
            result.updatedAtIsEmpty = updatedAtIsEmpty || other.updatedAtIsEmpty
            switch (updatedAt, other.updatedAt) {
            case (let a?, let b?):
                let lower = max(a.lowerBound, b.lowerBound)
                let upper = min(a.upperBound, b.upperBound)
                // Both sides hold: where either is exact (date-times only), so is the result.
                result.updatedAtFromText = updatedAtFromText && other.updatedAtFromText
                if lower <= upper {
                    result.updatedAt = lower...upper
                } else if !result.updatedAtFromText {
                    result.updatedAtIsEmpty = true
                } else {
                    result.updatedAt = nil
                    result.updatedAtFromText = false
                }
            case (let a?, nil):
                result.updatedAt = a
                result.updatedAtFromText = updatedAtFromText
            case (nil, let b?):
                result.updatedAt = b
                result.updatedAtFromText = other.updatedAtFromText
            case (nil, nil): break
            }
            if result.updatedAtIsEmpty {
                result.updatedAt = nil
                result.ids = .set([])
            }
            return result
        }

        func or(_ other: Constraint) -> Constraint {
            if isNothing { return other }
            if other.isNothing { return self }
            var result = Constraint(ids: ids.or(other.ids))
            if let a = updatedAt, let b = other.updatedAt {
                result.updatedAt = min(a.lowerBound, b.lowerBound)...max(a.upperBound, b.upperBound)
                result.updatedAtFromText = updatedAtFromText || other.updatedAtFromText
            }
            return result
        }

        /// Whether the constraint admits no item.
        var isNothing: Bool {
            if updatedAtIsEmpty { return true }
            if case .set(let ids) = ids, ids.isEmpty { return true }
            return false
        }
    }

    func constraint(_ expression: QueryExpression) -> Constraint {
        switch expression {
        case .binary(.and, let lhs, let rhs):
            return constraint(lhs).and(constraint(rhs))
        case .binary(.or, let lhs, let rhs):
            return constraint(lhs).or(constraint(rhs))
        case .binary(let op, .field(let field), .literal(let literal)) where op.isComparison:
            return comparison(op, field, literal)
        case .binary(let op, .literal(let literal), .field(let field)) where op.isComparison:
            return comparison(op.mirrored, field, literal)
        case .isIn(.field("id"), let list) where plansID:
            var ids: Set<String> = []
            for element in list {
                guard case .literal(.string(let id)) = element else { return Constraint() }
                ids.insert(id)
            }
            return Constraint(ids: .set(ids))
        default:
            return Constraint()
        }
    }

    private func comparison(_ op: BinaryOperator, _ field: String, _ literal: QueryLiteral) -> Constraint {
        if field == "id", plansID, case .string(let id) = literal {
            let bytes = Array(id.utf8)
            switch op {
            case .equal: return Constraint(ids: .set([id]))
            case .greaterThan: return Constraint(ids: .range(IDRange(lower: (bytes, false))))
            case .greaterThanOrEqual: return Constraint(ids: .range(IDRange(lower: (bytes, true))))
            case .lessThan: return Constraint(ids: .range(IDRange(upper: (bytes, false))))
            case .lessThanOrEqual: return Constraint(ids: .range(IDRange(upper: (bytes, true))))
            default: return Constraint()
            }
        }
        if field == "updatedAt", plansUpdatedAt, let instant = Self.milliseconds(literal) {
            var range: ClosedRange<Int64>?
            switch op {
            case .equal: range = instant...instant
            case .greaterThan: range = instant == .max ? nil : (instant + 1)...Int64.max
            case .greaterThanOrEqual: range = instant...Int64.max
            case .lessThan: range = instant == .min ? nil : Int64.min...(instant - 1)
            case .lessThanOrEqual: range = Int64.min...instant
            default: return Constraint()
            }
            var constraint = Constraint()
            if case .string = literal { constraint.updatedAtFromText = true }
            guard let range else {
                // Nothing is above the greatest instant or below the least (as date-times).
                if !constraint.updatedAtFromText { constraint.updatedAtIsEmpty = true }
                return constraint
            }
            constraint.updatedAt = range
            return constraint
        }
        return Constraint()
    }

    /// The instant a literal compares as against a date-time `updatedAt`, as the evaluator reads it.
    static func milliseconds(_ literal: QueryLiteral) -> Int64? {
        switch literal {
        case .dateTimeOffset(let instant): return instant.millisecondsSince1970
        case .date(let date): return date.midnightUTC.millisecondsSince1970
        case .string(let text):
            if let instant = Timestamp(iso8601: text) { return instant.millisecondsSince1970 }
            return CalendarDate(iso8601: text)?.midnightUTC.millisecondsSince1970
        default: return nil
        }
    }

    // MARK: Running

    func run(_ query: TableQuery) throws -> QueryResult {
        let plan = try plan(query)
        let evaluator = QueryEvaluator(schema: schema)
        if query.top == 0, !query.includeTotalCount { return QueryResult(items: []) }
        if !plan.streamed {
            var matching: [JSONObject] = []
            try forEachCandidate(plan) { summary, id, json in
                if !query.includeDeleted, summary.deleted { return true }
                let item = try decode(json, id)
                if let filter = query.filter, !evaluator.matches(filter, item) { return true }
                matching.append(item)
                return true
            }
            var rest = query
            rest.filter = nil
            rest.includeDeleted = true
            return try LMDBReader.evaluate(rest, schema: schema, over: matching)
        }
        let skip = max(0, query.skip ?? 0)
        let end = query.top.map { skip.addingReportingOverflow(max(0, $0)) }.map {
            $0.overflow ? Int.max : $0.partialValue
        }
        var total = 0
        var page: [JSONObject] = []
        try forEachCandidate(plan) { summary, id, json in
            if !query.includeDeleted, summary.deleted { return true }
            var item: JSONObject?
            if let filter = query.filter {
                let decoded = try decode(json, id)
                if !evaluator.matches(filter, decoded) { return true }
                item = decoded
            }
            let position = total
            total += 1
            if position >= skip, end.map({ position < $0 }) ?? true {
                page.append(try item ?? decode(json, id))
            }
            if !query.includeTotalCount, let end, total >= end { return false }
            return true
        }
        if let select = query.select { page = page.map { evaluator.project($0, select) } }
        return QueryResult(items: page, totalCount: query.includeTotalCount ? total : nil)
    }

    private func decode(_ json: UnsafeRawBufferPointer, _ id: String) throws(StoreError) -> JSONObject {
        try reader.decodeObject(json, what: "item '\(id)' of table '\(table)'")
    }

    /// Calls `body` with each candidate item (summary, id, JSON) of the plan, in the plan's order
    /// when it is streamed; `body` returns `false` to stop.
    func forEachCandidate(
        _ plan: Plan, _ body: (ItemSummary, String, UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        var descending = false
        var idDescending = false
        switch plan.order {
        case .id(let down):
            descending = down
            idDescending = down
        case .updatedAt(let down, let idDown):
            descending = down
            idDescending = idDown
        case .general: break
        }
        switch plan.source {
        case .ids(let ids):
            for id in descending ? Array(ids.reversed()) : ids {
                guard ItemID.isValid(id) else { continue }
                let key = ItemKeys.item(table: entry.key, id: id)
                guard let value = try txn.get(txn.dbs.items, key) else { continue }
                let items = try key.withUnsafeBytes { keyBytes throws(StoreError) in
                    try reader.storedItems(value, key: keyBytes, table: table)
                }
                if let item = items.first(where: { $0.id == id }), !(try body(item.summary, item.id, item.json)) {
                    return
                }
            }
        case .all:
            try scanItems(IDRange(), descending: descending, body)
        case .idRange(let range):
            try scanItems(range, descending: descending, body)
        case .updatedAt(let range):
            try scanUpdatedAt(range, descending: descending, idDescending: idDescending, body)
        }
    }

    /// Reads item keys in order (buckets in id order), from the range's start (or end).
    private func scanItems(
        _ range: IDRange, descending: Bool, _ body: (ItemSummary, String, UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        let tablePrefix = ItemKeys.tablePrefix(entry.key)
        let lower = range.lower.map { Array($0.bytes.prefix(Layout.maximumKeyTextBytes)) }
        let upper = range.upper.map { Array($0.bytes.prefix(Layout.maximumKeyTextBytes)) }
        try txn.withCursor(txn.dbs.items) { cursor in
            var next: Cursor.Entry?
            if !descending {
                next = try cursor.get(MDB_SET_RANGE, key: tablePrefix + (lower ?? []))
            } else {
                let start = upper.map { tablePrefix + $0 } ?? ItemKeys.tablePrefix(entry.key + 1)
                next = try cursor.get(MDB_SET_RANGE, key: start)
                if let (key, _) = next {
                    // Past the end of the range: step back into it.
                    let text = UnsafeRawBufferPointer(rebasing: key[4...])
                    if !key.hasPrefix(tablePrefix) || (upper.map { text.compare($0) > 0 } ?? true) {
                        next = try cursor.get(MDB_PREV)
                    }
                } else {
                    next = try cursor.get(MDB_LAST)
                }
            }
            while let (key, value) = next, key.hasPrefix(tablePrefix) {
                let text = UnsafeRawBufferPointer(rebasing: key[4...])
                if !descending, let upper, text.compare(upper) > 0 { break }
                if descending, let lower, text.compare(lower) < 0 { break }
                let items = try reader.storedItems(value, key: key, table: table)
                for item in descending ? items.reversed() : items {
                    if !(try body(item.summary, item.id, item.json)) { return }
                }
                next = try cursor.get(descending ? MDB_PREV : MDB_NEXT)
            }
        }
    }

    /// Reads the `updatedAt` index in order: groups of equal `updatedAt`, each in id order.
    private func scanUpdatedAt(
        _ range: ClosedRange<Int64>?, descending: Bool, idDescending: Bool,
        _ body: (ItemSummary, String, UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        let tablePrefix = ItemKeys.tablePrefix(entry.key)
        let lowHeader = range.map {
            ItemKeys.updatedPrefix(table: entry.key, kind: .timestamp, milliseconds: $0.lowerBound)
        }
        let highHeader = range.map {
            ItemKeys.updatedPrefix(table: entry.key, kind: .timestamp, milliseconds: $0.upperBound)
        }
        func within(_ key: UnsafeRawBufferPointer) -> Bool {
            guard key.hasPrefix(tablePrefix), key.count > ItemKeys.updatedHeaderSize else { return false }
            guard let lowHeader, let highHeader else { return true }
            let header = UnsafeRawBufferPointer(rebasing: key[..<ItemKeys.updatedHeaderSize])
            return header.compare(lowHeader) >= 0 && header.compare(highHeader) <= 0
        }
        // Collect one group (keys with the same header) at a time, then read its items.
        var groupHeader: [UInt8] = []
        var group: [[UInt8]] = []
        func flush() throws -> Bool {
            defer { group.removeAll(keepingCapacity: true) }
            guard !group.isEmpty, let kind = ItemSummary.Kind(rawValue: groupHeader[4]) else { return true }
            let milliseconds = Layout.int64(ordered: Layout.uint64(groupHeader[5..<13]) ?? 0)
            let wanted = ItemSummary(deleted: false, kind: kind, milliseconds: milliseconds)
            // Keys of a group come in the scan's direction; the ids within it follow `idDescending`.
            let texts = descending == idDescending ? group : group.reversed()
            for text in texts {
                let key = tablePrefix + text
                guard let value = try txn.get(txn.dbs.items, key) else {
                    throw LMDBErrors.corruptValue("the updatedAt index of table '\(table)'", reader.place)
                }
                let items = try key.withUnsafeBytes { keyBytes throws(StoreError) in
                    try reader.storedItems(value, key: keyBytes, table: table)
                }
                for item in idDescending ? items.reversed() : items where item.summary.sharesIndexKey(with: wanted) {
                    if !(try body(item.summary, item.id, item.json)) { return false }
                }
            }
            return true
        }
        // The index keys of the group are collected first: reading items moves no index cursor.
        var keys: [[UInt8]] = []
        try txn.withCursor(txn.dbs.updated) { cursor in
            var next: Cursor.Entry?
            if !descending {
                next = try cursor.get(MDB_SET_RANGE, key: lowHeader ?? tablePrefix)
            } else {
                // The first key after the range, then one step back.
                var after = ItemKeys.tablePrefix(entry.key + 1)
                if let range {
                    after =
                        range.upperBound == .max
                        ? ItemKeys.updatedPrefix(table: entry.key, kind: .string)
                        : ItemKeys.updatedPrefix(table: entry.key, kind: .timestamp, milliseconds: range.upperBound + 1)
                }
                next = try cursor.get(MDB_SET_RANGE, key: after)
                next = next == nil ? try cursor.get(MDB_LAST) : try cursor.get(MDB_PREV)
            }
            while let (key, _) = next, within(key) {
                keys.append(Array(key))
                next = try cursor.get(descending ? MDB_PREV : MDB_NEXT)
            }
        }
        for key in keys {
            let header = Array(key[..<ItemKeys.updatedHeaderSize])
            if header != groupHeader {
                if !(try flush()) { return }
                groupHeader = header
            }
            group.append(Array(key[ItemKeys.updatedHeaderSize...]))
        }
        _ = try flush()
    }
}

/// A range of ids, by UTF-8 bytes.
struct IDRange: Sendable, Equatable {
    var lower: (bytes: [UInt8], inclusive: Bool)?
    var upper: (bytes: [UInt8], inclusive: Bool)?

    init(lower: (bytes: [UInt8], inclusive: Bool)? = nil, upper: (bytes: [UInt8], inclusive: Bool)? = nil) {
        self.lower = lower
        self.upper = upper
    }

    static func == (lhs: IDRange, rhs: IDRange) -> Bool {
        lhs.lower?.bytes == rhs.lower?.bytes && lhs.lower?.inclusive == rhs.lower?.inclusive
            && lhs.upper?.bytes == rhs.upper?.bytes && lhs.upper?.inclusive == rhs.upper?.inclusive
    }

    func contains(_ id: String) -> Bool {
        let bytes = Array(id.utf8)
        if let lower {
            if bytes.lexicographicallyPrecedes(lower.bytes) { return false }
            if !lower.inclusive, bytes == lower.bytes { return false }
        }
        if let upper {
            if upper.bytes.lexicographicallyPrecedes(bytes) { return false }
            if !upper.inclusive, bytes == upper.bytes { return false }
        }
        return true
    }

    /// The tighter of two lower bounds.
    static func maxLower(_ a: (bytes: [UInt8], inclusive: Bool)?, _ b: (bytes: [UInt8], inclusive: Bool)?) -> (
        bytes: [UInt8], inclusive: Bool
    )? {
        guard let a else { return b }
        guard let b else { return a }
        if a.bytes == b.bytes { return (a.bytes, a.inclusive && b.inclusive) }
        return a.bytes.lexicographicallyPrecedes(b.bytes) ? b : a
    }

    static func minUpper(_ a: (bytes: [UInt8], inclusive: Bool)?, _ b: (bytes: [UInt8], inclusive: Bool)?) -> (
        bytes: [UInt8], inclusive: Bool
    )? {
        guard let a else { return b }
        guard let b else { return a }
        if a.bytes == b.bytes { return (a.bytes, a.inclusive && b.inclusive) }
        return a.bytes.lexicographicallyPrecedes(b.bytes) ? a : b
    }
}

/// What a filter says about ids.
enum IDConstraint: Equatable {
    case any
    case set(Set<String>)
    case range(IDRange)

    func and(_ other: IDConstraint) -> IDConstraint {
        switch (self, other) {
        case (.any, _): return other
        case (_, .any): return self
        case (.set(let a), .set(let b)): return .set(a.intersection(b))
        case (.set(let ids), .range(let range)), (.range(let range), .set(let ids)):
            return .set(ids.filter { range.contains($0) })
        case (.range(let a), .range(let b)):
            return .range(
                IDRange(lower: IDRange.maxLower(a.lower, b.lower), upper: IDRange.minUpper(a.upper, b.upper)))
        }
    }

    func or(_ other: IDConstraint) -> IDConstraint {
        switch (self, other) {
        case (.any, _), (_, .any): return .any
        case (.set(let a), .set(let b)): return .set(a.union(b))
        case (.set(let ids), .range(let range)), (.range(let range), .set(let ids)):
            if ids.isEmpty { return .range(range) }
            let sorted = ids.map { Array($0.utf8) }.sorted { $0.lexicographicallyPrecedes($1) }
            return .range(range).or(.range(IDRange(lower: (sorted.first!, true), upper: (sorted.last!, true))))
        case (.range(let a), .range(let b)):
            // The hull: the looser bound on each side (none when either side has none).
            var lower: (bytes: [UInt8], inclusive: Bool)?
            if let x = a.lower, let y = b.lower {
                if x.bytes == y.bytes {
                    lower = (x.bytes, x.inclusive || y.inclusive)
                } else {
                    lower = x.bytes.lexicographicallyPrecedes(y.bytes) ? x : y
                }
            }
            var upper: (bytes: [UInt8], inclusive: Bool)?
            if let x = a.upper, let y = b.upper {
                if x.bytes == y.bytes {
                    upper = (x.bytes, x.inclusive || y.inclusive)
                } else {
                    upper = x.bytes.lexicographicallyPrecedes(y.bytes) ? y : x
                }
            }
            return .range(IDRange(lower: lower, upper: upper))
        }
    }
}

extension BinaryOperator {
    /// The operator with its operands swapped: `a < b` is `b > a`.
    var mirrored: BinaryOperator {
        switch self {
        case .greaterThan: .lessThan
        case .greaterThanOrEqual: .lessThanOrEqual
        case .lessThan: .greaterThan
        case .lessThanOrEqual: .greaterThanOrEqual
        default: self
        }
    }
}
