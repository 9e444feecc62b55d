import NIOHTTP1

/// The answer to a request NIO's parser could not read. Hummingbird answers it 400 with an empty
/// body and closes; ``ConnectionGuard`` gives that answer the one-line JSON error every other
/// refusal has (a client or an operator reading it learns what was wrong), and a method the
/// parser does not know is 405, as other methods the server does not serve are.
enum MalformedRequest {
    /// The status and the JSON body for `error`.
    static func answer(_ error: HTTPParserError) -> (status: HTTPResponseStatus, body: [UInt8]) {
        let (status, code, message) = describe(error)
        let response = TableService.errorResponse(ProtocolError(Int(status.code), code, message))
        return (status, response.body ?? [])
    }

    static func describe(_ error: HTTPParserError) -> (HTTPResponseStatus, String, String) {
        switch error {
        case .invalidMethod:
            return (.methodNotAllowed, "methodNotAllowed", "the request's method is not one this server serves")
        case .headerOverflow:
            return (.badRequest, "badRequest", "the request's header fields are too large")
        case .invalidContentLength, .unexpectedContentLength:
            return (
                .badRequest, "badRequest",
                "the request's Content-Length is not valid (or comes with Transfer-Encoding, or twice)"
            )
        case .invalidChunkSize:
            return (.badRequest, "badRequest", "the request's chunked body is malformed")
        case .invalidVersion:
            return (.badRequest, "badRequest", "the request's HTTP version is not 1.0 or 1.1")
        case .invalidURL, .invalidPath, .invalidQueryString, .invalidFragment, .invalidHost, .invalidPort:
            return (.badRequest, "badRequest", "the request's target is not a valid URL")
        case .invalidHeaderToken, .invalidCharactersUsed, .lfExpected, .invalidConstant:
            return (.badRequest, "badRequest", "the request's line or header fields are malformed")
        case .strictModeAssertion:
            return (.badRequest, "badRequest", "the request's line endings or chunks are malformed")
        default:
            // NIO's names (`unknown`, `paused`) say nothing to a client; the log keeps them.
            return (
                .badRequest, "badRequest",
                "the request is not valid HTTP/1.1 (its framing, Content-Length and Transfer-Encoding, "
                    + "could not be read)"
            )
        }
    }
}
