import HTTPTypes
import Hummingbird
import Tracing

/// The span of each request, when the server has a tracer (``ServerConfiguration/tracer``).
///
/// A `.server` span named by the method and the route template (`GET /tables/{table}`, `POST
/// /tables/$batch`; the method alone when no route matched), whose parent is the context the
/// request's headers carry (a W3C `traceparent`, read by the tracer's own propagation), with the
/// OpenTelemetry HTTP attributes `http.request.method`, `http.route`, `url.path` and
/// `http.response.status_code`, and `ferry.table` when the route names a table. A 5xx answer sets the
/// error status. The span is the current one while the request is handled, so the storage calls
/// and statements it makes are its children. It ends when the response's head is ready (a change
/// feed's events stream after it).
enum RequestSpans {
    static func serve(
        _ request: Request, route: TableRoute, tracer: any Tracer, _ respond: () async throws -> Response
    ) async throws -> Response {
        var parent = ServiceContext.topLevel
        tracer.extract(request.headers, into: &parent, using: HTTPFieldsExtractor())
        let method = request.method.rawValue.uppercased()
        let template = route.template
        let span = tracer.startSpan(
            template.map { "\(method) \($0)" } ?? method, context: parent, ofKind: .server)
        defer { span.end() }
        span.attributes["http.request.method"] = method
        span.attributes["url.path"] = request.uri.path
        if let template { span.attributes["http.route"] = template }
        if let table = route.tableName { span.attributes["ferry.table"] = table }
        do {
            let response = try await ServiceContext.$current.withValue(span.context) { try await respond() }
            let status = response.status.code
            span.attributes["http.response.status_code"] = status
            if status >= 500 { span.setStatus(SpanStatus(code: .error)) }
            return response
        } catch {
            span.recordError(error)
            span.setStatus(SpanStatus(code: .error))
            throw error
        }
    }
}

/// Reads trace context fields (`traceparent`, `tracestate`) from request headers.
struct HTTPFieldsExtractor: Extractor {
    func extract(key: String, from carrier: HTTPFields) -> String? {
        HTTPField.Name(key).flatMap { carrier[$0] }
    }
}

extension TableRoute {
    /// The route as a template, for span names and `http.route`: `/tables/{table}`,
    /// `/tables/{table}/{id}`, `/tables/$batch` …; `nil` when no route matched.
    var template: String? {
        switch self {
        case .health: "/health"
        case .liveness: "/health/live"
        case .tableList: "/tables"
        case .batch: "/tables/" + TableService.batchSegment
        case .capabilities: "/tables/" + TableService.capabilitiesSegment
        case .changes: "/tables/" + TableService.changesSegment
        case .table: "/tables/{table}"
        case .item: "/tables/{table}/{id}"
        case .metrics: "/metrics"
        case .attachments: "/tables/{table}/{id}/" + TableService.attachmentsSegment
        case .attachment: "/tables/{table}/{id}/" + TableService.attachmentsSegment + "/{name}"
        case .attachmentRows: "/tables/" + TableService.attachmentsSegment + "/{table}"
        case .upload: "/tables/" + TableService.uploadsSegment + "/{upload}"
        case .unknown, .invalidPath: nil
        }
    }

    /// The table the route names, if any.
    var tableName: String? {
        switch self {
        case .table(let name), .item(let name, _), .attachments(let name, _), .attachment(let name, _, _),
            .attachmentRows(let name):
            name
        default: nil
        }
    }
}
