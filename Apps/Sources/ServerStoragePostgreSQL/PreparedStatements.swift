import PostgresNIO
import ServerStorageCore
import Synchronization

/// The names of the statements the storage prepares once per connection: its hot reads (an item by
/// id), which PostgreSQL would otherwise parse and plan again at every call (half of its work for
/// such a read).
///
/// A statement's SQL gets a name the first time it is asked for; each connection prepares it the
/// first time it runs it there (postgres-nio keeps what a connection prepared, and a replacement
/// connection starts empty). postgres-nio 1.33.2 remembers a failed preparation on its connection
/// for ever, and PostgreSQL refuses a prepared plan whose result type changed under it (`0A000`,
/// "cached plan must not change result type", after an `ALTER TABLE`): a statement that fails is
/// retired, and its SQL is prepared again under a new name at its next use. At most ``capacity``
/// statements get a name; the others run unnamed.
final class StatementNames: Sendable {
    /// The most statements named (each is prepared on each connection that runs it).
    static let capacity = 512

    private struct State {
        var names: [String: String] = [:]
        var next = 0
        var retired = 0
    }

    private let state = Mutex(State())

    /// The name `sql` is prepared under, or `nil` when ``capacity`` statements have names.
    func name(for sql: String) -> String? {
        state.withLock { state in
            if let name = state.names[sql] { return name }
            guard state.names.count < Self.capacity else { return nil }
            defer { state.next += 1 }
            let name = "ferry_p\(state.next)"
            state.names[sql] = name
            return name
        }
    }

    /// Retires `name`: the next use of `sql` prepares it again, under a new name.
    func retire(_ name: String, of sql: String) {
        state.withLock { state in
            if state.names[sql] == name {
                state.names[sql] = nil
                state.retired += 1
            }
        }
    }

    /// How many statements have names now, and how many were retired.
    var counts: (named: Int, retired: Int) { state.withLock { ($0.names.count, $0.retired) } }
}

/// A statement prepared under a name of ``StatementNames``: postgres-nio's prepared statements have
/// a static name and SQL, read once when ``PostgresConnection/execute(_:logger:file:line:)`` starts,
/// so they are taken from the task-local ``current``, set around that call.
struct NamedStatement: PostgresPreparedStatement {
    struct Text: Sendable {
        var name = ""
        var sql = ""
    }

    @TaskLocal static var current = Text()

    static var name: String { current.name }
    static var sql: String { current.sql }

    typealias Row = PostgresRow

    let bindings: PostgresBindings

    func makeBindings() -> PostgresBindings { bindings }
    func decodeRow(_ row: PostgresRow) -> PostgresRow { row }
}

extension PostgreSQLSession {
    /// Runs one statement prepared once per connection (``StatementNames``) and collects its rows.
    /// A statement whose prepared plan went stale (`0A000`) is prepared again and run once more,
    /// outside a transaction (inside one, the failure has aborted it).
    func preparedRows(_ query: PostgresQuery) async throws -> [PostgresRow] {
        guard let names, let name = names.name(for: query.sql) else { return try await rows(query) }
        do {
            return try await run(query, named: name)
        } catch let error as PSQLError where error.code == .server {
            names.retire(name, of: query.sql)
            guard !inTransaction, error.serverInfo?[.sqlState] == "0A000", let renamed = names.name(for: query.sql)
            else { throw error }
            return try await run(query, named: renamed)
        }
    }

    private func run(_ query: PostgresQuery, named name: String) async throws -> [PostgresRow] {
        let connection = connection
        let logger = logger
        let text = NamedStatement.Text(name: name, sql: query.sql)
        let statement = NamedStatement(bindings: query.binds)
        let work: @Sendable () async throws -> [PostgresRow] = {
            try await NamedStatement.$current.withValue(text) {
                let sequence: AsyncThrowingMapSequence<PostgresRowSequence, PostgresRow> =
                    try await connection.execute(statement, logger: logger)
                var rows: [PostgresRow] = []
                for try await row in sequence { rows.append(row) }
                return rows
            }
        }
        guard let statements else {
            return try await watch.bounded(connection, limit: limit, work)
        }
        return try await statements.run(query.sql) {
            try await watch.bounded(connection, limit: limit, work)
        }
    }
}
