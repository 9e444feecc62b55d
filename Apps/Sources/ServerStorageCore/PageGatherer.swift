public import SyncCore

/// Gathers one page of a query from rows offered one at a time, as a storage reads them from its
/// database, so that a storage never holds more rows than the page needs.
///
/// What the database did decides the ``Mode``: with the whole query in SQL, only the byte budget
/// (``StorageQuery/maximumBytes``) is applied here; with part of the filter left over, the rows
/// arrive in order and the residual filter, skip and limit run here; without an order SQL can
/// give, the rows that could still be on the page are kept and sorted (at most
/// `skip + limit + 1` of them after each trim).
///
/// ```swift
/// var gatherer = PageGatherer(query: query, table: table, mode: .ordered(residual: split.residual))
/// for text in rowsReadInOrder {
///     guard try gatherer.offer(size: text.utf8.count, { try decode(text) }) else { break }
/// }
/// let page = gatherer.page()
/// ```
public struct PageGatherer: Sendable {
    /// What the database already did with the rows it hands over.
    public enum Mode: Sendable {
        /// Filter, order, skip and limit ran in SQL, which reads one row beyond the limit; the
        /// storage adds the total count itself.
        case paged
        /// SQL ordered the rows; `residual` (if any), skip and limit run here, and the count.
        case ordered(residual: QueryExpression?)
        /// SQL did not order the rows: `residual`, the order, skip, limit and count run here.
        case unordered(residual: QueryExpression?)
    }

    private let query: StorageQuery
    private let mode: Mode
    private let evaluator: QueryEvaluator
    /// The page so far (`paged`, `ordered`), or the rows that may still be on it (`unordered`),
    /// each with its size.
    private var rows: [(item: StoredItem, size: Int)] = []
    private var bytes = 0
    /// Rows that passed the filter so far (`ordered`, `unordered`).
    private var matched = 0
    /// The page took its last row; later rows are only counted.
    private var closed = false
    private var hasMore = false

    /// A gatherer for `query` on `table`.
    public init(query: StorageQuery, table: StorageTable, mode: Mode) {
        self.query = query
        self.mode = mode
        self.evaluator = QueryEvaluator(schema: table.schema)
    }

    private var skip: Int { max(0, query.skip) }

    /// Offers the next row.
    ///
    /// - Parameters:
    ///   - size: The byte length of the row's stored item text, for the byte budget.
    ///   - decode: Makes the row's item; called only when the row is needed.
    /// - Returns: Whether the storage should go on reading rows.
    public mutating func offer(size: Int, _ decode: () throws -> StoredItem) rethrows -> Bool {
        switch mode {
        case .paged:
            guard take(size) else { return false }
            rows.append((try decode(), size))
            return true
        case .ordered(let residual):
            let item = try decode()
            if let residual, !evaluator.matches(residual, item.queryable) { return true }
            matched += 1
            if matched <= skip || closed { return true }
            if take(size) {
                rows.append((item, size))
                return true
            }
            closed = true
            return query.includeTotalCount
        case .unordered(let residual):
            let item = try decode()
            if let residual, !evaluator.matches(residual, item.queryable) { return true }
            matched += 1
            rows.append((item, size))
            // Only the first skip + limit + 1 in order can matter; trim now and then.
            if let limit = query.limit, case (let sum, false) = skip.addingReportingOverflow(max(0, limit)),
                sum < Int.max / 2 - 64, rows.count >= 2 * (sum + 1) + 64
            {
                sortRows()
                rows.removeLast(rows.count - (sum + 1))
            }
            return true
        }
    }

    /// Whether the page takes one more row of `size` bytes; when not, it is full and more follow.
    private mutating func take(_ size: Int) -> Bool {
        let full =
            rows.count >= (query.limit.map { max(0, $0) } ?? Int.max)
            || (query.maximumBytes.map { !rows.isEmpty && bytes + size > $0 } ?? false)
        if full {
            hasMore = true
            return false
        }
        bytes += size
        return true
    }

    /// The page of the rows offered.
    public func page() -> StoragePage {
        let total = query.includeTotalCount ? matched : nil
        switch mode {
        case .paged:
            return StoragePage(items: rows.map(\.item), hasMore: hasMore, plan: .database)
        case .ordered:
            return StoragePage(items: rows.map(\.item), totalCount: total, hasMore: hasMore, plan: .evaluator)
        case .unordered:
            var sorted = self
            sorted.sortRows()
            var page = PageGatherer(query: query, mode: .paged, evaluator: evaluator)
            for row in sorted.rows.dropFirst(skip) {
                guard page.take(row.size) else { break }
                page.rows.append(row)
            }
            return StoragePage(
                items: page.rows.map(\.item), totalCount: total,
                hasMore: page.hasMore || matched > skip + page.rows.count, plan: .evaluator)
        }
    }

    private init(query: StorageQuery, mode: Mode, evaluator: QueryEvaluator) {
        self.query = query
        self.mode = mode
        self.evaluator = evaluator
    }

    /// Sorts ``rows`` by the query's order (then `id`).
    private mutating func sortRows() {
        var byID: [String: (item: StoredItem, size: Int)] = [:]
        for row in rows { byID[row.item.id] = row }
        var queryables = rows.map(\.item.queryable)
        evaluator.sort(&queryables, by: query.orderBy)
        rows = queryables.compactMap { $0.id.flatMap { byID[$0] } }
    }
}
