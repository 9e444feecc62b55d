import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Colours for a terminal, or none: only when the output is a terminal, `NO_COLOR` is not set
/// (https://no-color.org) and `TERM` is not `dumb`.
///
/// ```swift
/// let style = Style.for(descriptor: 2)
/// StandardStreams.writeError(style.error("error:") + " the server is offline\n")
/// ```
public struct Style: Sendable, Hashable {
    /// Whether escape sequences are written at all.
    public var isEnabled: Bool

    public init(isEnabled: Bool) { self.isEnabled = isEnabled }

    /// The style for output on `descriptor` in this environment.
    public static func `for`(descriptor: Int32, environment: [String: String]? = nil) -> Style {
        let environment = environment ?? ProcessInfo.processInfo.environment
        let noColor = environment["NO_COLOR"].map { !$0.isEmpty } ?? false
        let dumb = environment["TERM"] == "dumb"
        return Style(isEnabled: isatty(descriptor) == 1 && !noColor && !dumb)
    }

    /// Red: errors.
    public func error(_ text: String) -> String { paint(text, "31") }
    /// Yellow: conflicts and warnings (an offline device).
    public func warning(_ text: String) -> String { paint(text, "33") }
    /// Bold: headers.
    public func strong(_ text: String) -> String { paint(text, "1") }
    /// Dim: asides.
    public func dim(_ text: String) -> String { paint(text, "2") }

    private func paint(_ text: String, _ code: String) -> String {
        isEnabled ? "\u{1B}[\(code)m\(text)\u{1B}[0m" : text
    }
}
