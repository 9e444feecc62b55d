import Foundation
import HTTPTypes
import Hummingbird

/// CORS, for browser apps whose pages come from another origin (``ServerConfiguration/corsOrigins``):
/// Hummingbird's `CORSMiddleware` answers preflights and adds the headers; this decides whether it
/// applies. A request from an origin that is not allowed goes on without CORS headers, so the
/// browser keeps the page from reading the answer (the request itself is served as any other: CORS
/// protects the page's reader, the server's own rules protect the data).
///
/// Hummingbird's middleware takes several origins only as a variadic list, so the allowed set is
/// checked here and the middleware echoes the request's origin.
struct CrossOriginResponder: HTTPResponder {
    typealias Context = FerryRequestContext

    let inner: TableResponder
    /// The allowed origins, lower-cased; empty for none.
    private let origins: Set<String>
    private let anyOrigin: Bool
    private let middleware: CORSMiddleware<Context>

    init(_ inner: TableResponder, origins: [String]) {
        self.inner = inner
        self.anyOrigin = origins == ["*"]
        self.origins = Set(origins.map { $0.lowercased() })
        middleware = CORSMiddleware(
            allowOrigin: anyOrigin ? .all : .originBased, allowHeaders: Self.requestHeaders,
            allowMethods: [.get, .head, .post, .put, .patch, .delete, .options], exposedHeaders: Self.responseHeaders,
            maxAge: .seconds(600))
    }

    /// What Ferry's and the protocol's clients send: versions, tokens, preconditions, keys, the
    /// feed's position, trace context, and the upload headers of attachments.
    static let requestHeaders: [HTTPField.Name] =
        [
            .accept, .authorization, .contentType, .origin, .ifMatch, .ifNoneMatch, .ifModifiedSince,
            .ifUnmodifiedSince, .range,
        ]
        + [
            "ZUMO-API-VERSION", "X-ZUMO-AUTH", "X-ZUMO-INSTALLATION-ID", "X-ZUMO-VERSION", "X-ZUMO-FEATURES",
            "X-ZUMO-OPTIONS", "Idempotency-Key", "Prefer", "Last-Event-ID", "traceparent", "tracestate",
            "Upload-Offset", "Upload-Length", "Upload-Complete", "Upload-Draft-Interop-Version", "Repr-Digest",
        ].compactMap { HTTPField.Name($0) }

    /// What a page's script may read of an answer beyond the basic headers.
    static let responseHeaders = [
        "ETag", "Location", "Link", "Retry-After", "x-zumo-server-version", IdempotencyLedger.replayedHeader,
        "Upload-Offset", "Upload-Complete", "Upload-Limit", "Content-Range", "Accept-Ranges", "Repr-Digest",
    ]

    func respond(to request: Request, context: Context) async throws -> Response {
        guard let origin = request.headers[.origin], anyOrigin || origins.contains(origin.lowercased()) else {
            var response = try await inner.respond(to: request, context: context)
            // The answer depends on Origin whenever a list decides (a shared cache must not hand
            // this one, without CORS headers, to an allowed page); `*` answers every origin alike.
            if !origins.isEmpty && !anyOrigin { Self.varyByOrigin(&response.headers) }
            return response
        }
        var response = try await middleware.handle(request, context: context) { request, context in
            try await inner.respond(to: request, context: context)
        }
        // The middleware names the readable headers on preflights only; a browser reads them from
        // the answer itself (Fetch standard, "CORS-exposed header-name list").
        if request.method != .options, let exposed = HTTPField.Name("Access-Control-Expose-Headers") {
            response.headers[exposed] = Self.responseHeaders.joined(separator: ", ")
        }
        return response
    }

    /// Adds `Origin` to the answer's `Vary` (keeping what it names already).
    static func varyByOrigin(_ headers: inout HTTPFields) {
        let named = headers[values: .vary].flatMap { $0.split(separator: ",") }
            .map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        guard !named.contains("origin"), !named.contains("*") else { return }
        headers.append(HTTPField(name: .vary, value: "Origin"))
    }
}
