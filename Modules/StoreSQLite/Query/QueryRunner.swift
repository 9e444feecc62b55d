import GRDB
import QuerySQL
import QuerySQLite
import SyncCore

struct QueryRunner {
    let reader: SQLiteReader
    let table: String
    let entry: TableEntry

    /// How a query ran, for tests and diagnostics.
    enum Strategy: Equatable {
        /// Filter, order, paging and count in SQLite.
        case sql
        /// Part of the filter, or the order, in the evaluator over the rows SQLite selected.
        case evaluator
    }

    /// The plan for a query: SQL conditions, and the ORDER BY when it compiled.
    struct Plan {
        var conditions: [SQLFragment]
        var residual: QueryExpression?
        var order: [SQLFragment]?

        var strategy: Strategy { residual == nil && order != nil ? .sql : .evaluator }

        var whereClause: SQLFragment {
            conditions.isEmpty ? "" : "WHERE \(SQLFragment.joined(conditions, separator: " AND "))"
        }
    }

    func plan(_ query: TableQuery) throws -> Plan {
        let compiler = ItemTable.compiler(entry.schema)
        let split = compiler.split(query.filter)
        var plan = Plan(conditions: [], residual: split.residual, order: nil)
        if !query.includeDeleted { plan.conditions.append("deleted = 0") }
        let touchesItems = query.filter != nil || !query.orderBy.isEmpty
        if touchesItems, try exists("hasNUL IS NOT NULL") {
            // json_extract would cut those strings short: SQL only narrows the rows, the evaluator
            // decides (rows holding NUL always go to it).
            if let sql = split.sql { plan.conditions.append("(\(sql) OR hasNUL IS NOT NULL)") }
            plan.residual = query.filter
            return plan
        }
        if let sql = split.sql { plan.conditions.append(sql) }
        guard split.residual == nil, var order = try? compiler.order(query.orderBy, filter: query.filter) else {
            return plan
        }
        if let precheck = order.precheck {
            if try exists(precheck) {
                guard
                    let general = try? ItemTable.compiler(entry.schema, assumesRegularSortKeys: false).order(
                        query.orderBy, filter: query.filter)
                else { return plan }
                order = general
            }
        }
        plan.order = order.terms
        return plan
    }

    /// Whether some row satisfies `condition`.
    private func exists(_ condition: SQLFragment) throws -> Bool {
        let sql: SQLFragment = "SELECT EXISTS (SELECT 1 FROM \(SQLFragment(text: entry.sqlName)) WHERE \(condition))"
        return try Bool.fetchOne(reader.db, sql: sql.sqliteText, arguments: sql.statementArguments) ?? false
    }

    func run(_ query: TableQuery) throws -> QueryResult {
        let plan = try plan(query)
        do {
            return try run(query, plan)
        } catch let error as DatabaseError where error.resultCode == .SQLITE_ERROR || error.resultCode == .SQLITE_TOOBIG
        {
            // SQLite refused the statement (an expression deeper than its limit, too many
            // parameters): the evaluator answers alone.
            let plain = Plan(
                conditions: query.includeDeleted ? [] : ["deleted = 0"], residual: query.filter, order: nil)
            return try run(query, plain)
        }
    }

    private func run(_ query: TableQuery, _ plan: Plan) throws -> QueryResult {
        let from = SQLFragment(text: "FROM \(entry.sqlName) ")
        guard let order = plan.order else {
            // The evaluator finishes: rows SQLite selected, in id order, then filter, order, page.
            let sql: SQLFragment = "SELECT item \(from)\(plan.whereClause) ORDER BY id"
            var rest = query
            rest.filter = plan.residual
            return try reader.evaluate(rest, schema: entry.schema, over: try items(sql))
        }
        var total: Int?
        if query.includeTotalCount {
            let sql: SQLFragment = "SELECT COUNT(*) \(from)\(plan.whereClause)"
            total = try Int.fetchOne(reader.db, sql: sql.sqliteText, arguments: sql.statementArguments) ?? 0
        }
        guard query.top != 0 else { return QueryResult(items: [], totalCount: total) }
        let orderBy = SQLFragment.joined(order, separator: ", ")
        let paging = SQLDialect.sqlite.page(limit: query.top.map(Int64.init), offset: Int64(query.skip ?? 0))
        let sql: SQLFragment = "SELECT item \(from)\(plan.whereClause) ORDER BY \(orderBy) \(paging)"
        var page = try items(sql)
        if let select = query.select {
            let evaluator = QueryEvaluator(schema: entry.schema)
            page = page.map { evaluator.project($0, select) }
        }
        return QueryResult(items: page, totalCount: total)
    }

    private func items(_ sql: SQLFragment) throws -> [JSONObject] {
        var result: [JSONObject] = []
        let cursor = try String.fetchCursor(reader.db, sql: sql.sqliteText, arguments: sql.statementArguments)
        while let text = try cursor.next() {
            result.append(try reader.decodeObject(text, what: "an item of table '\(table)'"))
        }
        return result
    }
}
