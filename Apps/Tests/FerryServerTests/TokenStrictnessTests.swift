import Crypto
import Foundation
import Testing

@testable import FerryServer

/// Tokens a second outside probe got accepted, each needing the secret but bending the rules.
@Suite("Tokens: critical extensions and numbers that never expire")
struct TokenStrictnessTests {
    static let secret = "0123456789abcdef0123"

    /// A token of `header` and `payload` (JSON texts) signed with the secret.
    static func token(header: String, payload: String) -> String {
        let head = TokenVerifier.base64URLEncoded(Array(header.utf8))
        let body = TokenVerifier.base64URLEncoded(Array(payload.utf8))
        let key = SymmetricKey(data: Data(secret.utf8))
        let mac = HMAC<SHA256>.authenticationCode(for: Data((head + "." + body).utf8), using: key)
        return head + "." + body + "." + TokenVerifier.base64URLEncoded(Array(mac))
    }

    @Test func aHeaderWithCriticalExtensionsIsRefused() throws {
        let verifier = TokenVerifier(secret: Self.secret)
        let later = Int(Date().timeIntervalSince1970) + 3600
        let plain = Self.token(header: #"{"alg":"HS256","typ":"JWT"}"#, payload: #"{"sub":"a","exp":\#(later)}"#)
        #expect(try verifier.verify(plain).subject == "a")
        let critical = Self.token(
            header: #"{"alg":"HS256","typ":"JWT","crit":["x"],"x":1}"#, payload: #"{"sub":"a","exp":\#(later)}"#)
        #expect(throws: TokenVerifier.Failure.self) { try verifier.verify(critical) }
    }

    @Test func anExpiryNoNumberCanHoldIsRefused() {
        let verifier = TokenVerifier(secret: Self.secret)
        for exp in ["1e400", "-1e400"] {
            let token = Self.token(header: #"{"alg":"HS256","typ":"JWT"}"#, payload: #"{"sub":"a","exp":\#(exp)}"#)
            #expect(throws: TokenVerifier.Failure.self, "exp \(exp)") { try verifier.verify(token) }
        }
    }
}
