package import Tracing

/// Spans of the server's storage work, on a tracer the caller gives (swift-distributed-tracing):
/// nothing here reads the process-wide `InstrumentationSystem`.
///
/// Two kinds, each a child of the task's current span (`ServiceContext.current`):
/// - a storage call (``TracedServerStorage``): `storage.query`, `storage.insert` … with the table;
/// - a database statement (``StatementTracing``), made by the backends.
package enum StorageSpans {
    /// Runs `body` in a new span named `name` whose parent is the current span (or a new trace's
    /// root when there is none). Inside `body` the span is the current one, so the statements it
    /// runs become its children. An error thrown is recorded on the span (see ``record(_:on:)``).
    package static func run<T>(
        _ tracer: any Tracer, _ name: String, kind: SpanKind = .internal, _ body: (any Span) async throws -> T
    ) async throws -> T {
        let span = tracer.startSpan(name, context: ServiceContext.current ?? .topLevel, ofKind: kind)
        defer { span.end() }
        do {
            return try await ServiceContext.$current.withValue(span.context) { try await body(span) }
        } catch {
            record(error, on: span)
            throw error
        }
    }

    /// Records a failure on `span`. A storage error that answers the caller's request (a conflict,
    /// a version mismatch, a row or table that is not there, a query or value the schema refuses)
    /// is the operation's outcome, not a fault: it is the `ferry.storage.outcome` attribute, and
    /// the span's status stays unset. Anything else (busy, unavailable, full, corrupt, closed, input
    /// or output) also sets the error status, with the error as an event.
    package static func record(_ error: any Error, on span: any Span) {
        if let failure = error as? StorageError {
            span.attributes["ferry.storage.outcome"] = failure.code.description
            if outcomes.contains(failure.code) { return }
        }
        span.recordError(error)
        span.setStatus(SpanStatus(code: .error))
    }

    /// The storage errors that are answers, not faults.
    static let outcomes: Set<StorageError.Code> = [
        .notFound, .conflict, .versionMismatch, .noSuchTable, .invalidQuery, .fieldKind, .invalidName,
        .invalidTableName,
    ]
}

/// The spans of a backend's database statements: one `.client` span per statement, a child of the
/// task's current span, named by the statement's operation (`SELECT`, `INSERT`, `BEGIN` …), with
/// the OpenTelemetry database attributes `db.system.name` (and the older `db.system`),
/// `db.operation.name` and `db.query.text`: the statement's text with its placeholders (`?`, `$1`),
/// never the values bound to them, cut after ``maximumTextLength`` characters.
///
/// A statement that runs outside any span (a migration at start-up) makes no span: traces start
/// with the work that asked for the statements.
///
/// ```swift
/// let statements = StatementTracing(tracer: tracer, system: "postgresql")
/// let rows = try await statements.run(query.sql) { try await connection.query(query).collect() }
/// ```
package struct StatementTracing: Sendable {
    package let tracer: any Tracer
    /// The database, as OpenTelemetry names it: `sqlite`, `postgresql`.
    package let system: String

    /// The longest `db.query.text` kept, in characters.
    package static let maximumTextLength = 2048

    package init(tracer: any Tracer, system: String) {
        self.tracer = tracer
        self.system = system
    }

    /// Runs the statement `sql` (through `body`) in a span of its own, when the task has a current
    /// span; otherwise just runs it.
    package func run<T>(_ sql: String, _ body: () async throws -> T) async throws -> T {
        guard let context = ServiceContext.current else { return try await body() }
        let span = tracer.startSpan(Self.operation(of: sql), context: context, ofKind: .client)
        describe(span, sql)
        defer { span.end() }
        do {
            return try await body()
        } catch {
            StorageSpans.record(error, on: span)
            throw error
        }
    }

    /// Records a statement that already ran, from `start` to `end` (nanoseconds since 1970), as a
    /// child of the span of `context`: for a database that reports each statement once it ended
    /// (SQLite's profile hook).
    package func record(_ sql: String, in context: ServiceContext, start: UInt64, end: UInt64) {
        let span = tracer.startSpan(
            Self.operation(of: sql), context: context, ofKind: .client,
            at: DefaultTracerClock.Timestamp(nanosecondsSinceEpoch: start))
        describe(span, sql)
        span.end(at: DefaultTracerClock.Timestamp(nanosecondsSinceEpoch: max(start, end)))
    }

    private func describe(_ span: any Span, _ sql: String) {
        span.attributes["db.system.name"] = system
        span.attributes["db.system"] = system
        span.attributes["db.operation.name"] = Self.operation(of: sql)
        span.attributes["db.query.text"] =
            sql.count > Self.maximumTextLength ? String(sql.prefix(Self.maximumTextLength)) + "…" : sql
    }

    /// The statement's first keyword in capitals (`SELECT`, `WITH`, `SAVEPOINT` …), or `SQL`.
    package static func operation(of sql: String) -> String {
        let keyword = sql.drop { !$0.isLetter }.prefix { $0.isLetter }
        return keyword.isEmpty ? "SQL" : keyword.uppercased()
    }
}
