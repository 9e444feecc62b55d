import HTTPTypes

/// RFC 9112 §3.2: an HTTP/1.1 request without `Host`, or with more than one `Host` field, or one
/// that is not a valid host and port, is a 400, whatever its route and whatever builds the server's links. A proxy in front may
/// have read the other field (routed by it, checked it), so the connection closes after the answer
/// (``ConnectionGuard`` counts the fields as they arrive).
enum HostFields {
    /// `Host`, which HTTPTypes names only as the request's authority.
    static let name = HTTPField.Name("Host")!

    /// The field ``ConnectionGuard`` adds to an HTTP/1.1 request that came without `Host` (HTTPTypes
    /// no longer says which version a request was; one sent by a client is taken off first).
    static let missingMarker = "x-ferry-missing-host"

    /// The 400 for a request with `authority` (its first `Host`) and `headers`, or `nil`.
    static func refusal(authority: String?, headers: HTTPFields) -> ProtocolError? {
        if let marker = HTTPField.Name(missingMarker), headers[marker] != nil {
            return ProtocolError(
                400, "invalidHost", "the request has no Host header; HTTP/1.1 requires one (RFC 9112 §3.2)")
        }
        // HTTPTypes makes the first `Host` the request's authority and keeps the others as fields.
        let more = headers[values: name].count
        if more > 0 {
            return ProtocolError(
                400, "invalidHost",
                "the request has \(more + 1) Host header fields; HTTP/1.1 allows one (RFC 9112 §3.2)")
        }
        if let authority, !PublicOrigin.isValidHostAndPort(authority) {
            return ProtocolError(400, "invalidHost", "the Host header is not a valid host and port")
        }
        return nil
    }
}
