import GRDB
import ServerStorageCore
import Tracing

/// The spans of the statements one storage call runs on SQLite, children of the span current in
/// the calling task (``SQLiteServerStorage/Configuration/tracer``).
///
/// GRDB runs the statements on a connection's own thread, where the task's `ServiceContext` is not
/// visible: the context is taken in the task (``current(_:)``) and handed to the connection.
/// SQLite reports each statement once it ended, with the time it took (`sqlite3_trace_v2`'s
/// profile event, through GRDB's `Database.trace`), and the span is recorded then, from its start
/// to its end. The text is the statement's SQL with its `?` placeholders (GRDB's unexpanded SQL).
struct SQLiteStatementSpans: Sendable {
    let tracing: StatementTracing
    let context: ServiceContext

    /// The calling task's: `nil` when the storage has no tracer or the task no current span.
    static func current(_ tracer: (any Tracer)?) -> SQLiteStatementSpans? {
        guard let tracer, let context = ServiceContext.current else { return nil }
        return SQLiteStatementSpans(tracing: StatementTracing(tracer: tracer, system: "sqlite"), context: context)
    }

    /// Runs `body` on `db`, with a span for each statement SQLite runs meanwhile when `spans` is
    /// not `nil`.
    static func around<T>(_ spans: SQLiteStatementSpans?, _ db: Database, _ body: () throws -> T) rethrows -> T {
        guard let spans else { return try body() }
        db.trace(options: .profile) { event in
            guard case .profile(let statement, let duration) = event else { return }
            let end = DefaultTracerClock.now.nanosecondsSinceEpoch
            let took = UInt64(max(0, duration) * 1e9)
            spans.tracing.record(statement.sql, in: spans.context, start: end - min(end, took), end: end)
        }
        defer { db.trace(options: []) }
        return try body()
    }
}
