import Foundation

// The header values of the upload routes (draft-ietf-httpbis-resumable-upload, RFC 9530), read as
// the structured fields they are (RFC 8941).
extension TableService {
    /// `sha-256=:BASE64:` of `Repr-Digest`, as lower-case hex.
    static func declaredSHA256(_ header: String?) throws -> String {
        for member in (header ?? "").split(separator: ",") {
            let parts = member.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard parts.count == 2, parts[0].lowercased() == "sha-256", parts[1].hasPrefix(":"),
                parts[1].hasSuffix(":"), parts[1].count >= 2
            else { continue }
            guard let bytes = Data(base64Encoded: String(parts[1].dropFirst().dropLast())), bytes.count == 32 else {
                break
            }
            return bytes.map { String(format: "%02x", $0) }.joined()
        }
        throw ProtocolError.badRequest("Repr-Digest must give the file's sha-256 (RFC 9530)", code: "invalidDigest")
    }

    /// `Upload-Complete: ?0` or `?1` (a structured boolean).
    static func uploadComplete(_ header: String?, default value: Bool) throws -> Bool {
        switch header?.trimmingCharacters(in: .whitespaces) {
        case nil: return value
        case "?1": return true
        case "?0": return false
        default: throw ProtocolError.badRequest("Upload-Complete is ?0 or ?1", code: "invalidUploadComplete")
        }
    }

    /// A count of bytes in `Upload-Length` or `Upload-Offset`: a structured integer (RFC 8941
    /// §3.3.1: at most 15 digits), not negative; `nil` for anything else. `Int64("+5")` is 5, and a
    /// sign, spaces inside or 16 digits are no structured integer.
    static func structuredCount(_ header: String?) -> Int64? {
        guard let text = header?.trimmingCharacters(in: .whitespaces), (1...15).contains(text.utf8.count),
            text.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) })
        else { return nil }
        return Int64(text)
    }
}
