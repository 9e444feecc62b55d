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
        let action = "querying '\(table.name)'"

        if let compiledOrder = order {
            do {
                return try await withConnection(action) { connection in
                    try await Self.run(connection, sqlName, query, condition, compiledOrder)
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
            try await Self.evaluate(connection, sqlName, table, query, condition, split.residual, nil)
        }
    }

    /// Runs a query wholly in PostgreSQL; one extra row tells whether more follow.
    static func run(
        _ connection: PostgreSQLSession, _ sqlName: SQLFragment, _ query: StorageQuery, _ condition: SQLFragment,
        _ order: SQLFragment
    ) async throws -> StoragePage {
        let skip = Int64(max(0, query.skip))
        let limit = query.limit.map { max(0, $0) }
        let fetchLimit = limit.flatMap { $0 == Int.max ? nil : Int64($0) + 1 }
        let select: SQLFragment =
            "SELECT \(SQLFragment(text: columns)) FROM \(sqlName) WHERE \(condition) ORDER BY \(order) \(SQLDialect.postgreSQL.page(limit: fetchLimit, offset: skip))"
        var items = try await connection.rows(select).map(decode)
        var hasMore = false
        if let limit, items.count > limit {
            items.removeLast(items.count - limit)
            hasMore = true
        }
        var total: Int?
        if query.includeTotalCount {
            let count: SQLFragment = "SELECT count(*) FROM \(sqlName) WHERE \(condition)"
            total = try await connection.rows(count).first.map { Int(try $0.decode(Int64.self)) }
        }
        return StoragePage(items: items, totalCount: total, hasMore: hasMore, plan: .database)
    }

    /// Runs the residual filter, and the order when SQL does not, in the evaluator over the rows
    /// `condition` selects.
    static func evaluate(
        _ connection: PostgreSQLSession, _ sqlName: SQLFragment, _ table: StorageTable, _ query: StorageQuery,
        _ condition: SQLFragment, _ residual: QueryExpression?, _ order: SQLFragment?
    ) async throws -> StoragePage {
        var select: SQLFragment = "SELECT \(SQLFragment(text: columns)) FROM \(sqlName) WHERE \(condition)"
        if let order { select = "\(select) ORDER BY \(order)" }
        let rows = try await connection.rows(select).map(decode)
        return query.evaluatedPage(of: rows, table: table, residual: residual, sorted: order != nil)
    }
}
