import Logging
import PostgresNIO
import QuerySQL
public import ServerStorageCore
import SyncCore

extension PostgreSQLServerStorage {
    static func compiler(_ table: StorageTable, assumesRegularSortKeys: Bool = true) -> SQLCompiler {
        ServerSQLLayout.compiler(table, dialect: .postgreSQL, assumesRegularSortKeys: assumesRegularSortKeys)
    }

    public func query(_ table: StorageTable, _ query: StorageQuery) async throws -> StoragePage {
        try query.validate(for: table)
        guard let number = try await tableNumber(table.name, creating: false) else {
            throw StorageError.noSuchTable(table.name)
        }
        let sqlName = SQLFragment(text: Self.sqlName(number))
        let compiler = Self.compiler(table)
        let split = compiler.split(query.filter)
        var scope = [try ServerSQLLayout.ownerCondition(query.owner)].compactMap { $0 }
        if !query.includeDeleted { scope.append("NOT deleted") }
        let unfiltered: SQLFragment = scope.isEmpty ? "TRUE" : SQLFragment.joined(scope, separator: " AND ")
        let condition = split.sql.map { SQLFragment.joined([$0] + scope, separator: " AND ") } ?? unfiltered
        let order = split.residual == nil ? (try? compiler.order(query.orderBy, filter: query.filter))?.sql : nil
        // With a residual filter, SQL still orders the rows when it can without any assumption
        // (no precheck), so that only the page's rows are kept.
        let residualOrder = (try? compiler.order(query.orderBy)).flatMap { $0.precheck == nil ? $0.sql : nil }
        let action = "querying '\(table.name)'"

        if let compiledOrder = order {
            do {
                return try await withConnection(action) { connection in
                    try await Self.run(connection, sqlName, table, query, condition, compiledOrder)
                }
            } catch let error as StorageError where error.code == .io || error.code == .fieldKind {
                // PostgreSQL refused or could not evaluate the statement (too deep, a value it
                // cannot convert): the evaluator answers, over every row of the scope.
                configuration.logger?.debug(
                    "query falls back to the evaluator", metadata: ["ferry.error": "\(error.message)"])
                return try await withConnection(action) { connection in
                    try await Self.evaluate(connection, sqlName, table, query, unfiltered, query.filter, nil)
                }
            }
        }
        configuration.logger?.debug(
            "query runs partly in the evaluator",
            metadata: [
                "ferry.table": "\(table.name)",
                "ferry.residual": "\(split.residual.map { $0.odata(protocolVersion: .v3) } ?? "-")",
            ])
        return try await withConnection(action) { connection in
            try await Self.evaluate(connection, sqlName, table, query, condition, split.residual, residualOrder)
        }
    }

    /// Runs a query wholly in PostgreSQL; one extra row tells whether more follow.
    static func run(
        _ connection: PostgreSQLSession, _ sqlName: SQLFragment, _ table: StorageTable, _ query: StorageQuery,
        _ condition: SQLFragment, _ order: SQLFragment
    ) async throws -> StoragePage {
        let skip = Int64(max(0, query.skip))
        let limit = query.limit.map { max(0, $0) }
        let fetchLimit = limit.flatMap { $0 == Int.max ? nil : Int64($0) + 1 }
        let select: SQLFragment =
            "SELECT \(SQLFragment(text: columns)) FROM \(sqlName) WHERE \(condition) ORDER BY \(order) \(SQLDialect.postgreSQL.page(limit: fetchLimit, offset: skip))"
        var page = try await gather(
            connection, select, into: PageGatherer(query: query, table: table, mode: .paged))
        if query.includeTotalCount {
            let count: SQLFragment = "SELECT count(*) FROM \(sqlName) WHERE \(condition)"
            page.totalCount = try await connection.rows(count).first.map { Int(try $0.decode(Int64.self)) }
        }
        return page
    }

    /// Runs the residual filter, and the order when SQL does not, in the evaluator over the rows
    /// `condition` selects.
    static func evaluate(
        _ connection: PostgreSQLSession, _ sqlName: SQLFragment, _ table: StorageTable, _ query: StorageQuery,
        _ condition: SQLFragment, _ residual: QueryExpression?, _ order: SQLFragment?
    ) async throws -> StoragePage {
        var select: SQLFragment = "SELECT \(SQLFragment(text: columns)) FROM \(sqlName) WHERE \(condition)"
        if let order { select = "\(select) ORDER BY \(order)" }
        let mode: PageGatherer.Mode = order == nil ? .unordered(residual: residual) : .ordered(residual: residual)
        return try await gather(connection, select, into: PageGatherer(query: query, table: table, mode: mode))
    }

    /// Offers the rows of `select` to `gatherer` as they arrive, until it has what it needs: a page
    /// of large items, or a filter SQL could not run, never has every row in memory at once.
    static func gather(
        _ connection: PostgreSQLSession, _ select: SQLFragment, into gatherer: PageGatherer
    ) async throws -> StoragePage {
        try await connection.reduceRows(select, into: gatherer) { gatherer, row in
            let (id, text, created, updated, version, deleted, owner) = try row.decode(
                (String, String, Int64, Int64, Int64, Bool, String?).self)
            return try gatherer.offer(size: text.utf8.count) {
                try item(id, text, created, updated, version, deleted, owner)
            }
        }.page()
    }
}
