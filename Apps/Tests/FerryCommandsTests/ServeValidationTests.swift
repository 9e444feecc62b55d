import FerryServer
import Foundation
import Testing

@testable import FerryCommands

/// The operator probe's bad settings: each is one line naming the setting where it came from, exit
/// status 64, and refused by `ferry serve --check` too (which said "valid" for several of them).
@Suite("ferry serve refuses bad settings")
struct ServeValidationTests {
    /// The line a configuration is refused with, or `nil` when it is accepted.
    static func refusal(_ arguments: [String], environment: [String: String] = [:]) async throws -> String? {
        do {
            _ = try await ServeSettingsTests.configuration(arguments, environment: environment)
            return nil
        } catch let error as ConfigurationError {
            return error.message
        }
    }

    @Test func badValuesNameTheirSetting() async throws {
        let postgres = "postgres://ferry:secret@127.0.0.1:5432/ferry_test"
        for (arguments, environment, message) in [
            (
                [], ["FERRY_DATABASE_URL": postgres + "?schema=Bad-Schema"],
                "FERRY_DATABASE_URL: the PostgreSQL URL's schema 'Bad-Schema' is not 1 to 48 characters"
            ),
            (["--db", postgres + "?sslmode=bogus"], [:], "--db: unknown sslmode 'bogus'"),
            (["--attachment-max-file-size", "-5"], [:], "--attachment-max-file-size must be at least 1 byte"),
            (
                ["--attachments", "--attachment-max-item-size", "10", "--attachment-max-file-size", "20"], [:],
                "--attachment-max-file-size (20) is more than --attachment-max-item-size (10)"
            ),
            (["--host", "not a host!"], [:], "--host 'not a host!' is not an address or a host name"),
            ([], ["FERRY_HOST": "bad host"], "FERRY_HOST 'bad host' is not an address or a host name"),
            ([], ["FERRY_HOST": ""], "FERRY_HOST '' is not an address or a host name"),
            (["--cors-origins", "app.example"], [:], "--cors-origins 'app.example' must be http:// or https://"),
            (["--cors-origins", "https://a.example/app"], [:], "--cors-origins 'https://a.example/app' must be"),
            ([], ["FERRY_CORS_ORIGINS": "*, https://a.example"], "FERRY_CORS_ORIGINS '*' must be"),
            (["--cors-origins", "https://a.example,"], [:], "--cors-origins '' must be http:// or https://"),
            (["--cors-origins", ","], [:], "--cors-origins '' must be"),
            (
                ["--cors-origins", "https://a.example:443"], [:],
                "--cors-origins 'https://a.example:443' names its scheme's default port, which browsers leave out of"
                    + " Origin: write 'https://a.example'"
            ),
            (
                ["--cors-origins", "http://b.example:80"], [:],
                "--cors-origins 'http://b.example:80' names its scheme's"
            ),
            (
                ["--cors-origins", "https://a.example\nhttps://b"], [:],
                "--cors-origins 'https://a.example\\nhttps://b' must"
            ),
            (
                ["--port", "9100", "--metrics-port", "9100"], [:],
                "--port and --metrics-port are both 9100: the metrics listener needs a port of its own"
            ),
            (
                ["--metrics-port", "9100", "--metrics-host", "0.0.0.0"], ["FERRY_PORT": "9100"],
                "FERRY_PORT and --metrics-port are both 9100"
            ),
        ] {
            let refused = try await Self.refusal(arguments, environment: environment)
            #expect(refused?.hasPrefix(message) == true, "\(arguments) \(environment): \(refused ?? "accepted")")
        }
        // Not refused: the same port number on two different addresses, and port 0 twice.
        #expect(
            try await Self.refusal(["--port", "9100", "--metrics-port", "9100", "--metrics-host", "127.0.0.2"]) == nil)
        #expect(try await Self.refusal(["--port", "0", "--metrics-port", "0"]) == nil)
    }

    /// swift-configuration converted a value of another JSON type (`true` became the port 1, `1`
    /// became true) or dropped it (an object, `null`) without a word.
    @Test func aFileValueOfAnotherTypeIsRefused() async throws {
        let files = try ServeSettingsTests.Files()
        defer { files.remove() }
        for (json, message) in [
            (#"{"port": true}"#, "port in FILE is not a whole number but a boolean"),
            (#"{"trustProxy": 1}"#, "trustProxy in FILE is not true or false but a number"),
            (#"{"authSecret": {"x": 1}}"#, "authSecret in FILE is not a string but an object"),
            (#"{"tables": {"todo": {}}}"#, "tables in FILE is not a string but an object"),
            (#"{"host": null}"#, "host in FILE is not a string but null"),
            (#"{"idleTimeout": "30"}"#, "idleTimeout in FILE is not a number but a string"),
        ] {
            let file = try files.config(json)
            let refused = try await Self.refusal(["--config", file])
            let expected = message.replacingOccurrences(of: "FILE", with: file)
            #expect(refused == expected, "\(json): \(refused ?? "accepted")")
        }
        // A whole number is a number of seconds.
        let file = try files.config(#"{"idleTimeout": 30, "requestTimeout": 2.5}"#)
        #expect(try await Self.refusal(["--config", file]) == nil)
    }

    /// `OTEL_EXPORTER_OTLP_ENDPOINT=notaurl` was taken (and traces sent to `notaurl/v1/traces`),
    /// where the same value in `FERRY_OTLP_ENDPOINT` was refused.
    @Test func anOpenTelemetryEndpointMustBeAURL() throws {
        for name in ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] {
            #expect {
                try ServeTracing.validate(endpoint: nil, environment: [name: "notaurl"])
            } throws: { error in
                (error as? ConfigurationError)?.message.hasPrefix("\(name) 'notaurl' is not an http:// or https:// URL")
                    == true
            }
        }
        try ServeTracing.validate(endpoint: nil, environment: ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"])
    }

    /// The executable: `--check` refuses what serving refuses, with exit status 64 and one line.
    @Test func checkRefusesWhatServingRefuses() async throws {
        for (arguments, environment, message) in [
            (
                ["serve", "--check"],
                ["FERRY_DATABASE_URL": "postgres://ferry:x@127.0.0.1:5432/ferry_test?schema=Bad-Schema"],
                "FERRY_DATABASE_URL: the PostgreSQL URL's schema 'Bad-Schema'"
            ),
            (
                ["serve", "--check", "--db", "memory", "--attachments", "--attachment-max-file-size", "-5"], [:],
                "--attachment-max-file-size must be at least 1 byte"
            ),
            (
                ["serve", "--check", "--db", "memory"], ["OTEL_EXPORTER_OTLP_ENDPOINT": "notaurl"],
                "OTEL_EXPORTER_OTLP_ENDPOINT 'notaurl' is not an http:// or https:// URL"
            ),
            (
                ["serve", "--check", "--db", "memory", "--port", "18233", "--metrics-port", "18233"], [:],
                "--port and --metrics-port are both 18233"
            ),
        ] {
            let result = try await FerryBinaryTests.run(arguments, environment: environment)
            #expect(result.status == 64, "\(arguments): \(result)")
            #expect(result.errors.hasPrefix("error: invalid server configuration: " + message), "\(result.errors)")
            #expect(result.errors.split(separator: "\n").count == 1, "\(result.errors)")
        }
        // A host that is well formed but unknown is found when listening: the line names where it came from.
        let unknown = try await FerryBinaryTests.run(
            ["serve", "--db", "memory", "--port", "0"], environment: ["FERRY_HOST": "nosuchhost.invalid"])
        #expect(unknown.status == 64, "\(unknown)")
        #expect(unknown.errors.hasSuffix("(check FERRY_HOST)\n"), "\(unknown.errors)")
    }
}
