import HTTPTypes
import Testing

@testable import FerryServer

/// Issue 31: behind a trusted proxy, links name the origin its `X-Forwarded-Host`/`-Proto` or
/// `Forwarded` (RFC 7239) headers give; a header that does not name a valid host is ignored.
@Suite("The public origin from a proxy's headers")
struct ForwardedOriginTests {
    static func origin(_ headers: [(String, String)]) -> String? {
        var fields = HTTPFields()
        for (name, value) in headers { fields.append(HTTPField(name: HTTPField.Name(name)!, value: value)) }
        return TableResponder.forwardedOrigin(fields)?.text
    }

    @Test func xForwardedHostThenForwarded() {
        #expect(
            Self.origin([("Forwarded", "for=10.0.0.1;host=api.example.com;proto=https")]) == "https://api.example.com")
        #expect(
            Self.origin([("Forwarded", #"host="api.example.com:8443";proto=https, host=inner"#)])
                == "https://api.example.com:8443")
        #expect(
            Self.origin([("X-Forwarded-Host", "sync.example.org"), ("X-Forwarded-Proto", "https")])
                == "https://sync.example.org")
        #expect(Self.origin([("X-Forwarded-Host", "a.example, b.example")]) == "http://a.example")
        // Forwarded without a host: the X- headers are asked.
        #expect(Self.origin([("Forwarded", "for=10.0.0.1"), ("X-Forwarded-Host", "x.example")]) == "http://x.example")
        // Nothing valid: no origin (the Host header is used).
        #expect(Self.origin([("X-Forwarded-Host", "evil.example/path")]) == nil)
        #expect(Self.origin([("X-Forwarded-Host", "bad host")]) == nil)
        #expect(Self.origin([]) == nil)
    }

    /// The operator probe: nginx set `X-Forwarded-Host` and passed a client's own `Forwarded`
    /// through, which named the origin of `Location` (`https://evil.example/...`). The header the
    /// proxy sets wins.
    @Test func xForwardedHostWinsOverAForwardedAClientSent() {
        let headers = [
            ("Forwarded", "host=evil.example;proto=https"),
            ("X-Forwarded-Host", "sync.example.org"), ("X-Forwarded-Proto", "http"),
        ]
        #expect(Self.origin(headers) == "http://sync.example.org")
        #expect(Self.origin([("Forwarded", "host=evil.example"), ("X-Forwarded-Host", "bad host")]) == nil)
    }
}
