public import ArgumentParser
import FerryConsole
import FerryServer
import Foundation

/// `ferry token --subject alice`: a development token for a server started with `--auth-secret`.
///
/// ```
/// export FERRY_AUTH_SECRET="a secret of at least 16 bytes"
/// ferry serve &
/// ferry push --token "$(ferry token --subject alice)" --server http://127.0.0.1:8080
/// ```
public struct TokenCommand: ParsableCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Print a signed token (HS256 JWT) for a server started with --auth-secret.",
        discussion: """
            For development and tests: the token is signed with the server's own secret, so whoever has \
            the secret can act as any subject. Production apps get their tokens from an identity provider.
            """)

    @Option(help: ArgumentHelp("Who the token is for: its 'sub', the owner of per-user rows.", valueName: "subject"))
    var subject: String

    @Option(
        help: ArgumentHelp(
            "The server's --auth-secret, at least 16 bytes (default: $FERRY_AUTH_SECRET).", valueName: "secret"))
    var secret: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("Seconds until the token expires.", valueName: "seconds"))
    var expiresIn: Int = 3600

    @Option(help: ArgumentHelp("The 'iss' claim, when the server checks one.", valueName: "issuer"))
    var issuer: String?

    @Option(help: ArgumentHelp("The 'aud' claim, when the server checks one.", valueName: "audience"))
    var audience: String?

    public init() {}

    public func validate() throws {
        guard let secret = secret ?? ProcessInfo.processInfo.environment["FERRY_AUTH_SECRET"], !secret.isEmpty else {
            throw ValidationError("give the server's secret with --secret or $FERRY_AUTH_SECRET")
        }
        guard secret.utf8.count >= 16 else {
            throw ValidationError("the secret must be at least 16 bytes long, as `ferry serve` requires")
        }
        guard (1...31_536_000).contains(expiresIn) else {
            throw ValidationError("--expires-in must be between 1 second and a year (31536000)")
        }
        guard !subject.isEmpty, !subject.utf8.contains(0), subject.utf8.count <= 1024 else {
            throw ValidationError("the subject must be 1 to 1024 bytes, without NUL")
        }
    }

    public func run() throws {
        let secret = secret ?? ProcessInfo.processInfo.environment["FERRY_AUTH_SECRET"] ?? ""
        let verifier = TokenVerifier(secret: secret, issuer: issuer, audience: audience)
        let token = verifier.sign(subject: subject, expiresAt: Date().addingTimeInterval(TimeInterval(expiresIn)))
        StandardStreams.write(token + "\n")
    }
}
