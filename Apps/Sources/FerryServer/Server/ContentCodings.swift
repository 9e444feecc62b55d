import Foundation
import HTTPTypes

/// RFC 9110 §8.4.1: the server decodes no content coding, so a body in one (any `Content-Encoding`
/// but `identity`) is a 415 that says what it takes (`Accept-Encoding: identity`, §12.5.3). Read as
/// it was, a gzipped body was "invalid JSON", and `br` on plain JSON was stored as if the header
/// were not there.
enum ContentCodings {
    /// The refusal for `headers`, or `nil` when they name no coding but `identity` and `chunked`:
    /// a 501 for a transfer coding but `chunked` (RFC 9112 § 6.1; NIO's parser takes the body as
    /// chunked when `chunked` is last, and `Transfer-Encoding: gzip, chunked` was stored compressed
    /// as if it were JSON), a 415 for a content coding.
    static func refusal(_ headers: HTTPFields) -> ProtocolError? {
        if let coding = codings(headers, .transferEncoding).first(where: { !$0.isEmpty && $0.lowercased() != "chunked" }
        ) {
            return ProtocolError(
                501, "unsupportedTransferEncoding",
                "the Transfer-Encoding '\(coding.prefix(40))' is not supported; send the body chunked or with a "
                    + "Content-Length")
        }
        guard
            let coding = codings(headers, .contentEncoding).first(where: {
                !$0.isEmpty && $0.lowercased() != "identity"
            })
        else { return nil }
        var refusal = ProtocolError(
            415, "unsupportedContentEncoding",
            "the body's Content-Encoding '\(coding.prefix(40))' is not supported; send the body as it is (identity)")
        refusal.headers = [("Accept-Encoding", "identity")]
        return refusal
    }

    /// The codings a list field names, on all its lines, white space around them removed.
    private static func codings(_ headers: HTTPFields, _ name: HTTPField.Name) -> [String] {
        headers[values: name].flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }
    }
}
