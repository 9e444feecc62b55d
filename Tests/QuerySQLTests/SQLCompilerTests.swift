import QuerySQL
import SyncCore
import Testing

/// The compiler's output as text: what each dialect writes for representative queries, and what it
/// leaves to the evaluator. (Agreement with the evaluator on real rows is tested where SQL runs:
/// the SQLite store's and the server storage's tests.)
@Suite("SQLCompiler")
struct SQLCompilerTests {
    /// The server storage's layout: system fields in columns, the item's own fields in `item`.
    static let serverLayout = SQLTableLayout(
        updatedAt: .init(name: "updated_at"), createdAt: .init(name: "created_at"), deletedColumn: "deleted",
        unreadableFields: ["version"], itemHoldsSystemFields: false)
    /// The client store's layout: the whole item in `item`, `updatedAt` also in a column.
    static let clientLayout = SQLTableLayout(
        updatedAt: .init(name: "updatedAt", irregularColumn: "updatedAtIrregular"), itemHoldsSystemFields: true)

    static func compiler(
        _ dialect: SQLDialect, layout: SQLTableLayout = serverLayout, schema: TableSchema = .schemaless
    ) -> SQLCompiler {
        SQLCompiler(schema: schema, layout: layout, dialect: dialect)
    }

    static func filter(_ odata: String) throws -> QueryExpression {
        try #require(try TableQuery(odata: "$filter=" + odata, protocolVersion: .v3).filter)
    }

    /// The SQL and arguments of a filter that compiles whole.
    static func compiled(_ odata: String, _ compiler: SQLCompiler) throws -> (String, [SQLValue]) {
        let split = compiler.split(try filter(odata))
        #expect(split.residual == nil, "\(odata) should compile")
        let sql = try #require(split.sql)
        return (sql.sql(for: compiler.dialect), sql.arguments)
    }

    // MARK: - Fragments

    @Test func placeholdersAreRenderedPerDialect() {
        let fragment: SQLFragment = "SELECT item FROM t WHERE id = \(bind: "a") AND n > \(bind: 2) \(bind: 1.5)"
        #expect(fragment.sql(for: .sqlite) == "SELECT item FROM t WHERE id = ? AND n > ? ?")
        #expect(
            fragment.sql(for: .postgreSQL)
                == "SELECT item FROM t WHERE id = $1::text AND n > $2::bigint $3::double precision")
        #expect(fragment.arguments == [.text("a"), .integer(2), .real(1.5)])
    }

    @Test func aQuestionMarkInAQuotedNameIsNotAPlaceholder() {
        let fragment: SQLFragment = "\(SQLFragment.quoted("a?b")) = \(bind: "x")"
        #expect(fragment.sql(for: .postgreSQL) == "'a?b' = $1::text")
        #expect(fragment.sql(for: .sqlite) == "'a?b' = ?")
    }

    @Test func pagesArePerDialect() {
        #expect(SQLDialect.sqlite.page(limit: nil, offset: 5).sql(for: .sqlite) == "LIMIT ? OFFSET ?")
        #expect(SQLDialect.sqlite.page(limit: nil, offset: 5).arguments == [.integer(-1), .integer(5)])
        let postgres = SQLDialect.postgreSQL.page(limit: 10, offset: 20)
        #expect(postgres.sql(for: .postgreSQL) == "LIMIT $1::bigint OFFSET $2::bigint")
        #expect(postgres.arguments == [.integer(10), .integer(20)])
        #expect(
            SQLDialect.postgreSQL.page(limit: nil, offset: 0).sql(for: .postgreSQL) == "LIMIT ALL OFFSET $1::bigint")
    }

    // MARK: - PostgreSQL

    @Test func postgreSQLReadsJSONFieldsByKind() throws {
        let compiler = Self.compiler(.postgreSQL)
        let (text, arguments) = try Self.compiled("title eq 'Milk'", compiler)
        #expect(text == "((item->>'title') COLLATE \"C\" = $1::text AND jsonb_typeof(item->'title') = 'string')")
        #expect(arguments == [.text("Milk")])
        let (flag, _) = try Self.compiled("done eq true", compiler)
        #expect(
            flag == "((CASE WHEN jsonb_typeof(item->'done') = 'boolean' THEN (item->'done')::boolean END) = TRUE)")
    }

    @Test func postgreSQLComparesNumbersOnlyWhereTheyCompareExactly() throws {
        let compiler = Self.compiler(.postgreSQL)
        let (text, arguments) = try Self.compiled("n gt 3", compiler)
        #expect(text == "((CASE WHEN jsonb_typeof(item->'n') = 'number' THEN (item->'n')::numeric END) > $1::bigint)")
        #expect(arguments == [.integer(3)])
        // An integer beyond 2^53 against a field that may hold a double: the evaluator converts.
        let big = compiler.split(try Self.filter("n gt 9007199254740993"))
        #expect(big.sql == nil && big.residual != nil)
    }

    @Test func postgreSQLComparesNullsAndKindsAsTheEvaluator() throws {
        let compiler = Self.compiler(.postgreSQL)
        let (isNull, _) = try Self.compiled("note eq null", compiler)
        #expect(isNull == "(COALESCE(jsonb_typeof(item->'note'), 'null') = 'null')")
        let (notEqual, _) = try Self.compiled("title ne 'Milk'", compiler)
        #expect(
            notEqual
                == "((((item->>'title') COLLATE \"C\" = $1::text AND jsonb_typeof(item->'title') = 'string')) IS NOT TRUE)"
        )
    }

    @Test func postgreSQLUsesTheSystemColumnsOfTheLayout() throws {
        let compiler = Self.compiler(.postgreSQL)
        let (text, arguments) = try Self.compiled(
            "(updatedAt gt 2024-01-01T00:00:00Z) or (updatedAt eq 2024-01-01T00:00:00Z and id gt 'a')", compiler)
        #expect(text == "((updated_at > $1::bigint) OR ((updated_at = $2::bigint) AND (id COLLATE \"C\" > $3::text)))")
        #expect(arguments == [.integer(1_704_067_200_000), .integer(1_704_067_200_000), .text("a")])
        let (deleted, _) = try Self.compiled("deleted eq false", compiler)
        #expect(deleted == "(deleted = FALSE)")
        let version = compiler.split(try Self.filter("version eq 'AAAAAAAAAAE='"))
        #expect(version.sql == nil && version.residual != nil)
    }

    @Test func postgreSQLConnectivesAndMembershipCompile() throws {
        let compiler = Self.compiler(.postgreSQL)
        let (text, arguments) = try Self.compiled("not (id in ('a', 'b')) and startswith(id, 'x')", compiler)
        #expect(
            text
                == "((((id COLLATE \"C\" = $1::text) OR (id COLLATE \"C\" = $2::text))) IS NOT TRUE) AND ((strpos(id, $3::text) = 1))"
        )
        #expect(arguments == [.text("a"), .text("b"), .text("x")])
    }

    @Test func postgreSQLLeavesWhatItsBuiltInsCannotMatchToTheEvaluator() throws {
        let compiler = Self.compiler(.postgreSQL)
        for odata in [
            "tolower(title) eq 'milk'", "length(title) eq 4", "n add 1 gt 2", "cast(n, Edm.String) eq '1'",
            "year(createdAt) eq 2024", "title eq cast('0f8fad5b-d9cb-469f-a165-70867728950e', Edm.Guid)",
            "n mod 2 eq 0",
        ] {
            let split = compiler.split(try Self.filter(odata))
            #expect(split.sql == nil && split.residual != nil, "\(odata)")
        }
        // The compiled conjuncts still run in SQL.
        let split = compiler.split(try Self.filter("id eq 'a' and tolower(title) eq 'milk'"))
        #expect(split.sql?.sql(for: .postgreSQL) == "(id COLLATE \"C\" = $1::text)")
        #expect(split.residual != nil)
    }

    @Test func postgreSQLSortsOnSystemColumnsAndLeavesItemFieldsToTheEvaluator() throws {
        let compiler = Self.compiler(.postgreSQL)
        let order = try compiler.order([.field("updatedAt", descending: true)])
        #expect(order.sql.sql(for: .postgreSQL) == "updated_at DESC, id COLLATE \"C\"")
        #expect(order.precheck == nil)
        #expect(throws: NotCompilable.self) { try compiler.order([.field("title")]) }
    }

    // MARK: - SQLite

    @Test func sqliteUsesTheClientLayoutsIndexedColumns() throws {
        let compiler = Self.compiler(.sqlite, layout: Self.clientLayout)
        let (text, _) = try Self.compiled("updatedAt gt 2024-01-01T00:00:00Z and id gt 'a'", compiler)
        #expect(text == "(updatedAt > ?) AND (id > ?)")
        let order = try compiler.order([.field("updatedAt")])
        #expect(order.sql.sql(for: .sqlite) == "updatedAt, id")
        #expect(order.precheck?.sql(for: .sqlite) == "updatedAtIrregular IS NOT NULL")
        #expect(compiler.indexedExpression("n") == "json_extract(item, '$.\"n\"')")
        #expect(compiler.indexedExpression("updatedAt") == "updatedAt")
    }

    @Test func sqliteUsesTheServerLayoutsColumns() throws {
        let compiler = Self.compiler(.sqlite)
        let (text, _) = try Self.compiled("createdAt lt 2024-01-01 and deleted eq false", compiler)
        #expect(text == "(created_at < ?) AND (deleted = ?)")
        #expect(try compiler.order([.field("createdAt")]).sql.sql(for: .sqlite) == "created_at, id")
        // A system field the layout has no column for is not in the item either.
        #expect(throws: NotCompilable.self) { try compiler.order([.field("version")]) }
    }

    @Test func sqliteCompilesFunctionsThroughTheFerryFunctions() throws {
        let compiler = Self.compiler(.sqlite)
        let (text, arguments) = try Self.compiled("tolower(title) eq 'milk'", compiler)
        #expect(
            text
                == "(ferry_fn('tolower', (CASE WHEN json_type(item, '$.\"title\"') = 'text' THEN json_extract(item, '$.\"title\"') END)) = ?)"
        )
        #expect(arguments == [.text("milk")])
    }

    /// `cast(x, Edm.DateTimeOffset)` (a typed sort by a `Date`) compiles to the instant of text that
    /// reads as one, so that SQLite sorts it without the evaluator; a column of instants is itself.
    @Test func sqliteCompilesACastToAnInstant() throws {
        let compiler = Self.compiler(.sqlite)
        let order = try compiler.order([SortKey(.cast(.field("due"), .dateTimeOffset), descending: true)])
        #expect(
            order.sql.sql(for: .sqlite)
                == "(CASE WHEN json_type(item, '$.\"due\"') = 'text' THEN ferry_instant(json_extract(item, '$.\"due\"')) END) DESC, id"
        )
        #expect(
            try compiler.order([SortKey(.cast(.field("createdAt"), .dateTimeOffset))]).sql.sql(for: .sqlite)
                == "(CASE WHEN (created_at IS NOT NULL) THEN created_at END), id")
        let (text, _) = try Self.compiled("cast(due, Edm.DateTimeOffset) lt 2024-01-01T00:00:00Z", compiler)
        #expect(text.contains("ferry_instant("), "\(text)")
        // PostgreSQL has no ferry functions: the evaluator sorts.
        #expect(throws: NotCompilable.self) {
            try Self.compiler(.postgreSQL).order([SortKey(.cast(.field("due"), .dateTimeOffset))])
        }
    }

    @Test func limitsLeaveLargeFiltersToTheEvaluator() throws {
        let limited = SQLCompiler(
            schema: .schemaless, layout: Self.serverLayout, dialect: .sqlite,
            limits: .init(maximumDepth: 48, maximumOperands: 3, maximumArguments: 5_000))
        let filter = try Self.filter("id in ('a', 'b', 'c', 'd')")
        #expect(limited.split(filter).sql == nil)
        #expect(Self.compiler(.sqlite).split(filter).residual == nil)
    }
}
