import GRDB
import Logging
import QuerySQL
import QuerySQLite
public import ServerStorageCore
import SyncCore

extension SQLiteServerStorage {
    static func compiler(_ table: StorageTable, assumesRegularSortKeys: Bool = true) -> SQLCompiler {
        ServerSQLLayout.compiler(table, dialect: .sqlite, assumesRegularSortKeys: assumesRegularSortKeys)
    }

    /// A query's SQL: the rows it reads, and whether SQL also orders them.
    struct QueryPlanSQL: Sendable {
        var condition: SQLFragment
        var residual: QueryExpression?
        var order: SQLFragment?
    }

    public func query(_ table: StorageTable, _ query: StorageQuery) async throws -> StoragePage {
        try query.validate(for: table)
        guard let number = try await number(of: table.name) else {
            throw StorageError.noSuchTable(table.name)
        }
        let sqlName = ServerSQLLayout.tableName(number)
        let compiler = Self.compiler(table)
        let split = compiler.split(query.filter)
        var scope = [try ServerSQLLayout.ownerCondition(query.owner)].compactMap { $0 }
        if !query.includeDeleted { scope.append("deleted = 0") }
        let unfiltered = scope.isEmpty ? "1" : SQLFragment.joined(scope, separator: " AND ")
        let condition = split.sql.map { SQLFragment.joined([$0] + scope, separator: " AND ") } ?? unfiltered
        // With a residual filter, the order SQL gives need not rely on the filter's numeric fields.
        let order = try? compiler.order(query.orderBy, filter: split.residual == nil ? query.filter : nil)
        let logger = configuration.logger

        return try await read("querying '\(table.name)'") { db in
            var plan = QueryPlanSQL(condition: condition, residual: split.residual, order: order?.sql)
            if let precheck = order?.precheck,
                try Bool.fetchOne(
                    db, sql: "SELECT EXISTS (SELECT 1 FROM \(sqlName) WHERE \(precheck.sqliteText))",
                    arguments: precheck.statementArguments) ?? false
            {
                plan.order = (try? Self.compiler(table, assumesRegularSortKeys: false).order(query.orderBy))?.sql
            }
            if plan.residual == nil, plan.order != nil {
                do {
                    return try Self.run(db, sqlName, table, query, plan)
                } catch let error as DatabaseError
                    where error.resultCode == .SQLITE_ERROR || error.resultCode == .SQLITE_TOOBIG
                {
                    // SQLite refused the statement (too deep, too long): the evaluator answers.
                    plan = QueryPlanSQL(condition: unfiltered, residual: query.filter)
                }
            }
            logger?.debug(
                "query runs partly in the evaluator",
                metadata: [
                    "ferry.table": "\(table.name)",
                    "ferry.residual": "\(plan.residual.map { $0.odata(protocolVersion: .v3) } ?? "-")",
                ])
            return try Self.evaluate(db, sqlName, table, query, plan)
        }
    }

    /// Runs a query wholly in SQLite; one extra row tells whether more follow.
    static func run(
        _ db: Database, _ sqlName: String, _ table: StorageTable, _ query: StorageQuery, _ plan: QueryPlanSQL
    ) throws -> StoragePage {
        let skip = Int64(max(0, query.skip))
        let limit = query.limit.map { max(0, $0) }
        let fetchLimit = limit.flatMap { $0 == Int.max ? nil : Int64($0) + 1 }
        let order = plan.order ?? "id"
        let sql: SQLFragment =
            "SELECT \(SQLFragment(text: columns)) FROM \(SQLFragment(text: sqlName)) WHERE \(plan.condition) ORDER BY \(order) \(SQLDialect.sqlite.page(limit: fetchLimit, offset: skip))"
        var gatherer = PageGatherer(query: query, table: table, mode: .paged)
        try gather(db, sql, into: &gatherer)
        var page = gatherer.page()
        if query.includeTotalCount {
            page.totalCount = try Int.fetchOne(
                db, sql: "SELECT COUNT(*) FROM \(sqlName) WHERE \(plan.condition.sqliteText)",
                arguments: plan.condition.statementArguments)
        }
        return page
    }

    /// Runs the residual filter, and the order when SQL does not, in the evaluator over the rows
    /// the compiled condition selects.
    static func evaluate(
        _ db: Database, _ sqlName: String, _ table: StorageTable, _ query: StorageQuery, _ plan: QueryPlanSQL
    ) throws -> StoragePage {
        var sql: SQLFragment =
            "SELECT \(SQLFragment(text: columns)) FROM \(SQLFragment(text: sqlName)) WHERE \(plan.condition)"
        if let order = plan.order { sql = "\(sql) ORDER BY \(order)" }
        var gatherer = PageGatherer(
            query: query, table: table,
            mode: plan.order == nil ? .unordered(residual: plan.residual) : .ordered(residual: plan.residual))
        try gather(db, sql, into: &gatherer)
        return gatherer.page()
    }

    /// Offers the rows of `sql` to `gatherer` one by one, until it has what it needs: a page of
    /// large items, or a filter SQL could not run, never has every row in memory at once.
    static func gather(_ db: Database, _ sql: SQLFragment, into gatherer: inout PageGatherer) throws {
        let rows = try Row.fetchCursor(db, sql: sql.sqliteText, arguments: sql.statementArguments)
        while let row = try rows.next() {
            let text: String = row[1]
            guard try gatherer.offer(size: text.utf8.count, { try decode(row, text: text) }) else { break }
        }
    }
}
