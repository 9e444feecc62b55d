import FerryServer
import ServerStorageCore

/// The metrics settings: `metrics` (`--metrics on|off`), `metricsPort` and `metricsHost`.
extension ServeCommand {
    /// What the metrics settings ask for: each bad value one line naming where it came from.
    static func metricsSettings(from settings: ServeSettings) throws(ConfigurationError) -> MetricsSettings {
        let on: Bool
        let metrics = try settings.string("metrics") ?? "on"
        switch metrics.lowercased() {
        case "on", "true": on = true
        case "off", "false": on = false
        default: throw ConfigurationError("\(settings.origin(of: "metrics")): unknown value '\(metrics)' (on or off)")
        }
        let port = try settings.int("metricsPort")
        let host = try settings.string("metricsHost")
        guard on else {
            if port != nil { throw ConfigurationError("\(settings.origin(of: "metricsPort")) needs metrics on") }
            if host != nil { throw ConfigurationError("\(settings.origin(of: "metricsHost")) needs metrics on") }
            return .off
        }
        guard let port else {
            if host != nil {
                throw ConfigurationError("\(settings.origin(of: "metricsHost")) needs a metrics port (--metrics-port)")
            }
            return MetricsSettings()
        }
        return MetricsSettings(endpoint: .separate(host: host ?? "127.0.0.1", port: port))
    }

    /// `1 declared table`, `3 declared tables`.
    static func declaredTables(_ count: Int) -> String {
        "\(count) declared table\(count == 1 ? "" : "s")"
    }

    /// Where attachment content goes, for the start-up line: `attachments in <location>, ` or nothing.
    static func attachmentsNote(_ configuration: ServerConfiguration) -> String {
        guard configuration.attachments != nil, let blobs = configuration.blobStorage else { return "" }
        return "attachments in \(blobs.location), "
    }

    /// Where the metrics are, for the line that says where the server listens.
    static func metricsNote(_ server: ReferenceServer, _ settings: MetricsSettings) -> String {
        guard server.metricsRegistry != nil else { return "metrics off" }
        guard let port = server.metricsPort, case .separate(let host, _) = settings.endpoint else {
            return "metrics at \(server.url)/metrics"
        }
        return "metrics at http://\(host.contains(":") ? "[\(host)]" : host):\(port)/metrics"
    }
}
