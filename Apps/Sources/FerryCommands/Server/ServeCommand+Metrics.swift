import ArgumentParser
import FerryServer

/// `--metrics`, `--metrics-port` and `--metrics-host`.
extension ServeCommand {
    /// What `--metrics`, `--metrics-port` and `--metrics-host` ask for: each bad value one line
    /// naming its flag.
    func metricsSettings() throws -> MetricsSettings {
        let on: Bool
        switch metrics.lowercased() {
        case "on": on = true
        case "off": on = false
        default: throw ValidationError("unknown --metrics value '\(metrics)' (on or off)")
        }
        guard on else {
            if metricsPort != nil { throw ValidationError("--metrics-port needs --metrics on") }
            if metricsHost != nil { throw ValidationError("--metrics-host needs --metrics on") }
            return .off
        }
        guard let metricsPort else {
            if metricsHost != nil { throw ValidationError("--metrics-host needs --metrics-port") }
            return MetricsSettings()
        }
        return MetricsSettings(endpoint: .separate(host: metricsHost ?? "127.0.0.1", port: metricsPort))
    }

    /// Where the metrics are, for the line that says where the server listens.
    func metricsNote(_ server: ReferenceServer) -> String {
        guard server.metricsRegistry != nil else { return "metrics off" }
        guard let port = server.metricsPort else { return "metrics at \(server.url)/metrics" }
        let host = metricsHost ?? "127.0.0.1"
        return "metrics at http://\(host.contains(":") ? "[\(host)]" : host):\(port)/metrics"
    }
}
