import Crypto
public import Foundation
public import SyncCore
import ServerStorageCore

/// Verifies the HS256 JSON Web Tokens clients send in `X-ZUMO-AUTH` or `Authorization: Bearer`.
///
/// A token is accepted when its header names `HS256`, its signature is the HMAC-SHA256 of
/// `header.payload` under the configured secret (compared in constant time), it has an `exp` in the
/// future (a token without `exp` is refused unless ``requiresExpiry`` is `false`), its `nbf` (if
/// present) is not in the future, its `iss`/`aud` match when configured, and it has a string `sub`
/// that per-user tables can store exactly (`OwnerScope.validateSubject(_:)`: non-empty, at most
/// 1,024 UTF-8 bytes, no U+0000).
///
/// ```swift
/// let verifier = TokenVerifier(secret: "a long random secret")
/// let token = verifier.sign(subject: "alice", expiresAt: Date().addingTimeInterval(3600))
/// try verifier.verify(token).subject   // "alice"
/// ```
public struct TokenVerifier: Sendable {
    let secret: [UInt8]
    var key: SymmetricKey { SymmetricKey(data: secret) }
    /// The `iss` a token must carry, when set.
    public var issuer: String?
    /// The `aud` a token must carry (a string, or one of an array), when set.
    public var audience: String?
    /// Whether a token must carry `exp` (default `true`; `ferry serve --auth-allow-no-expiry` turns it off).
    public var requiresExpiry: Bool

    public init(secret: String, issuer: String? = nil, audience: String? = nil, requiresExpiry: Bool = true) {
        self.secret = Array(secret.utf8)
        self.issuer = issuer
        self.audience = audience
        self.requiresExpiry = requiresExpiry
    }

    /// The verified identity of a request.
    public struct Identity: Sendable, Hashable {
        /// The token's `sub`.
        public var subject: String
        /// When the token expires, when it says.
        public var expiresAt: Date?
    }

    /// Why a token was refused.
    public struct Failure: Error, Sendable, Hashable, CustomStringConvertible {
        /// Why, in a few words.
        public var reason: String
        public var description: String { "invalid token: \(reason)" }
    }

    /// Checks `token` and returns who it identifies.
    public func verify(_ token: String, now: Date = Date()) throws(Failure) -> Identity {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw Failure(reason: "a JWT has three dot-separated parts") }
        guard let headerBytes = Self.base64URLDecoded(parts[0]),
            case .object(let header)? = try? JSONValue(parsingUTF8: headerBytes)
        else { throw Failure(reason: "the header is not base64url-encoded JSON") }
        guard header["alg"] == "HS256" else { throw Failure(reason: "only HS256 tokens are accepted") }
        // RFC 7515 §4.1.11: extensions the token says must be understood, which this verifier does not.
        guard header["crit"] == nil else { throw Failure(reason: "the header names critical extensions ('crit')") }
        guard let signature = Self.base64URLDecoded(parts[2]) else {
            throw Failure(reason: "the signature is not base64url-encoded")
        }
        let signed = Data((parts[0] + "." + parts[1]).utf8)
        guard HMAC<SHA256>.isValidAuthenticationCode(signature, authenticating: signed, using: key) else {
            throw Failure(reason: "the signature does not match")
        }
        guard let payloadBytes = Self.base64URLDecoded(parts[1]),
            case .object(let claims)? = try? JSONValue(parsingUTF8: payloadBytes)
        else { throw Failure(reason: "the payload is not base64url-encoded JSON") }
        let seconds = now.timeIntervalSince1970
        var expiresAt: Date?
        if let exp = claims["exp"] {
            guard let value = exp.doubleValue, value.isFinite else { throw Failure(reason: "'exp' is not a number") }
            guard seconds < value else { throw Failure(reason: "the token has expired") }
            expiresAt = Date(timeIntervalSince1970: value)
        } else if requiresExpiry {
            throw Failure(reason: "the token has no expiry ('exp')")
        }
        if let nbf = claims["nbf"] {
            guard let value = nbf.doubleValue, value.isFinite else { throw Failure(reason: "'nbf' is not a number") }
            guard seconds >= value else { throw Failure(reason: "the token is not valid yet") }
        }
        if let issuer, claims["iss"] != .string(issuer) { throw Failure(reason: "the issuer is not accepted") }
        if let audience {
            let accepted: Bool
            switch claims["aud"] {
            case .string(let value)?: accepted = value == audience
            case .array(let values)?: accepted = values.contains(.string(audience))
            default: accepted = false
            }
            guard accepted else { throw Failure(reason: "the audience is not accepted") }
        }
        guard case .string(let subject)? = claims["sub"], !subject.isEmpty else {
            throw Failure(reason: "the token has no subject ('sub')")
        }
        do {
            try OwnerScope.validateSubject(subject)
        } catch {
            throw Failure(reason: error.message)
        }
        return Identity(subject: subject, expiresAt: expiresAt)
    }

    /// Makes a token for `subject` signed with this verifier's secret (for tests, tools and demos),
    /// expiring in an hour unless told otherwise (`nil`: no `exp`, which a verifier refuses by default).
    public func sign(
        subject: String, expiresAt: Date? = Date().addingTimeInterval(3600), claims extra: JSONObject = [:]
    ) -> String {
        var claims = extra
        claims["sub"] = .string(subject)
        if let expiresAt { claims["exp"] = .int(Int64(expiresAt.timeIntervalSince1970)) }
        if let issuer, claims["iss"] == nil { claims["iss"] = .string(issuer) }
        if let audience, claims["aud"] == nil { claims["aud"] = .string(audience) }
        let header = Self.base64URLEncoded(Array(JSONValue.object(["alg": "HS256", "typ": "JWT"]).serialized().utf8))
        let payload = Self.base64URLEncoded(Array(JSONValue.object(claims).serialized().utf8))
        let mac = HMAC<SHA256>.authenticationCode(for: Data((header + "." + payload).utf8), using: key)
        return header + "." + payload + "." + Self.base64URLEncoded(Array(mac))
    }

    static func base64URLEncoded(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(
            of: "/", with: "_"
        )
        .replacingOccurrences(of: "=", with: "")
    }

    static func base64URLDecoded(_ text: Substring) -> Data? {
        guard
            text.utf8.allSatisfy({ byte in
                (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                    || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
            })
        else { return nil }
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.utf8.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64)
    }
}
