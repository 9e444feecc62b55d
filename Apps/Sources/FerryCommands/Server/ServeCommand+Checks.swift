import Foundation
import FerryServer

/// Checks of `ferry serve`'s settings that the server library cannot make, or would make naming its
/// own properties: each bad value is one line naming where it came from, and exit status 64, in
/// `--check` as when serving.
extension ServeCommand {
    /// The listening address: a host that cannot be an address or a host name (empty, spaces,
    /// punctuation), and a metrics listener on the server's own port and address.
    static func checkAddresses(_ configuration: ServerConfiguration, settings: ServeSettings)
        throws(ConfigurationError)
    {
        if !isPlausibleHost(configuration.host) {
            throw ConfigurationError(
                "\(settings.origin(of: "host")) '\(configuration.host)' is not an address or a host name")
        }
        guard case .separate(let metricsHost, let metricsPort) = configuration.metrics.endpoint else { return }
        if !isPlausibleHost(metricsHost) {
            throw ConfigurationError(
                "\(settings.origin(of: "metricsHost")) '\(metricsHost)' is not an address or a host name")
        }
        let wildcards: Set<String> = ["0.0.0.0", "::", "[::]"]
        let sameAddress =
            metricsHost == configuration.host || wildcards.contains(metricsHost)
            || wildcards.contains(configuration.host)
        if metricsPort != 0, metricsPort == configuration.port, sameAddress {
            throw ConfigurationError(
                "\(settings.origin(of: "port")) and \(settings.origin(of: "metricsPort")) are both \(metricsPort): the metrics listener needs a port of its own"
            )
        }
    }

    /// Letters, digits and `.-_:%[]` (names, IPv4, IPv6 with a zone): what a name the resolver
    /// could know, or an address, is made of. Whether it resolves is known only when listening.
    static func isPlausibleHost(_ host: String) -> Bool {
        !host.isEmpty && host.utf8.count <= 255
            && host.utf8.allSatisfy { byte in
                (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                    || ".-_:%[]".utf8.contains(byte)
            }
    }

    /// The attachment limits, in the settings' names: each at least 1 byte, a file no larger than
    /// an item's share, an item's no larger than a user's. Checked whenever given, attachments on
    /// or off.
    static func attachmentLimits(from settings: ServeSettings) throws(ConfigurationError) -> AttachmentLimits {
        let defaults = AttachmentLimits()
        var values: [Int64] = []
        for (key, fallback) in [
            ("attachmentMaxFileSize", defaults.maximumFileSize), ("attachmentMaxItemSize", defaults.maximumItemSize),
            ("attachmentMaxUserSize", defaults.maximumUserSize),
        ] {
            let value = try settings.int(key).map(Int64.init) ?? fallback
            guard value >= 1 else { throw ConfigurationError("\(settings.origin(of: key)) must be at least 1 byte") }
            values.append(value)
        }
        for (smaller, larger, index) in [
            ("attachmentMaxFileSize", "attachmentMaxItemSize", 0),
            ("attachmentMaxItemSize", "attachmentMaxUserSize", 1),
        ] where values[index] > values[index + 1] {
            throw ConfigurationError(
                "\(settings.origin(of: smaller)) (\(values[index])) is more than \(settings.origin(of: larger)) (\(values[index + 1]))"
            )
        }
        return AttachmentLimits(maximumFileSize: values[0], maximumItemSize: values[1], maximumUserSize: values[2])
    }
}

extension ServeCommand {
    /// A failure to listen names the flags (`check --host`, `try --port`); the line names where
    /// the value came from instead (`check FERRY_HOST`).
    static func inSettingNames(_ error: ServerStartError, settings: ServeSettings) -> String {
        var message = error.message
        for key in ["host", "port", "metricsHost", "metricsPort"] {
            let setting = ServeSettings.setting(key)
            for verb in ["check ", "try "] {
                message = message.replacingOccurrences(
                    of: verb + setting.flag + ")", with: verb + settings.origin(of: key) + ")")
            }
        }
        return message
    }
}
