import ArgumentParser
import Configuration
import BlobStorageFiles
import FerryServer
import FerryConsole
import Foundation
import Logging
import ServerStorageCore

// How `ferry serve` turns its settings into the server's configuration.
extension ServeCommand {
    /// The server's configuration from the settings, each read from the first source that has it.
    static func configuration(from settings: ServeSettings) async throws(ConfigurationError) -> (
        ServerConfiguration, ServerDatabase
    ) {
        let levelName = try settings.string("logLevel") ?? "info"
        guard let level = Logger.Level(rawValue: levelName.lowercased()) else {
            throw ConfigurationError(
                "\(settings.origin(of: "logLevel")): unknown log level '\(levelName)' (trace, debug, info, notice, warning, error or critical)"
            )
        }
        let format = try settings.string("logFormat")?.lowercased() ?? "text"
        guard ["text", "json"].contains(format) else {
            throw ConfigurationError(
                "\(settings.origin(of: "logFormat")): unknown log format '\(format)' (text or json)")
        }
        var logger =
            format == "json"
            ? Logger(label: "ferry.server") { JSONLogHandler(label: $0) } : Logger(label: "ferry.server")
        logger.logLevel = level
        var configuration = ServerConfiguration(
            host: try settings.string("host") ?? "127.0.0.1", port: try settings.int("port") ?? 8080, logger: logger)
        // Tables created by a first write soft-delete, so that incremental pulls see deletions
        // (a tables file's "defaults" may say otherwise).
        configuration.dynamicTableDefaults.softDelete = true
        do throws(ConfigurationError) {
            if let tables = try settings.string("tables") { try TablesFile.load(tables, into: &configuration) }
            configuration.authSecret = try settings.string("authSecret")
            configuration.allowsTokensWithoutExpiry = try settings.bool("authAllowNoExpiry") ?? false
            configuration.publicURL = try settings.string("publicURL")
            configuration.trustsForwardedHeaders = try settings.bool("trustProxy") ?? false
            configuration.compressesAnswers = try settings.bool("compress") ?? false
            // An empty value is no origin; an empty entry among others is a mistake the check names.
            let origins = try settings.string("corsOrigins") ?? ""
            configuration.corsOrigins =
                origins.trimmingCharacters(in: .whitespaces).isEmpty
                ? []
                : origins.split(separator: ",", omittingEmptySubsequences: false).map {
                    $0.trimmingCharacters(in: .whitespaces)
                }
            let bodySize = try settings.int("maxBodySize") ?? RequestLimits().maximumBodySize
            configuration.limits.maximumBodySize = bodySize
            configuration.limits.maximumBatchBodySize = max(configuration.limits.maximumBatchBodySize, bodySize)
            configuration.limits.maximumBodyBytesAtOnce = max(
                configuration.limits.maximumBodyBytesAtOnce, 2 * configuration.limits.maximumBatchBodySize)
            configuration.limits.maximumBatchRequests =
                try settings.int("maxBatchRequests") ?? RequestLimits().maximumBatchRequests
            configuration.limits.maximumChangeFeeds =
                try settings.int("maxFeeds") ?? RequestLimits().maximumChangeFeeds
            configuration.limits.maximumChangeFeedsPerUser =
                try settings.int("maxFeedsPerUser") ?? RequestLimits().maximumChangeFeedsPerUser
            configuration.limits.maximumAnonymousChangeFeeds =
                try settings.int("maxAnonymousFeeds") ?? RequestLimits().maximumAnonymousChangeFeeds
            configuration.limits.maximumDynamicTables =
                try settings.int("maxDynamicTables") ?? RequestLimits().maximumDynamicTables
            configuration.offersPushExtensions = !(try settings.bool("protocolOnly") ?? false)
            configuration.metrics = try metricsSettings(from: settings)
            let directory = try settings.string("attachmentsDirectory")
            if directory != nil, try settings.bool("attachments") == false {
                throw ConfigurationError(
                    "\(settings.origin(of: "attachmentsDirectory")) is set but \(settings.origin(of: "attachments")) is off"
                )
            }
            let attachmentLimits = try attachmentLimits(from: settings)
            if try settings.bool("attachments") ?? (directory != nil) { configuration.attachments = attachmentLimits }
            var timeouts: [Duration] = []
            let fallbacks = [
                ("idleTimeout", 30.0), ("requestTimeout", 60.0), ("shutdownTimeout", 10.0), ("writeTimeout", 60.0),
            ]
            for (key, fallback) in fallbacks {
                let seconds = try settings.double(key) ?? fallback
                guard seconds.isFinite && seconds >= 0.01 && seconds <= 86_400 else {
                    throw ConfigurationError(
                        "\(settings.origin(of: key)) must be between 0.01 and 86400 seconds")
                }
                timeouts.append(.milliseconds(Int64(seconds * 1000)))
            }
            configuration.shutdownGracePeriod = timeouts[2]
            configuration.connections = ConnectionLimits(
                idleTimeout: timeouts[0], requestTimeout: timeouts[1], writeTimeout: timeouts[3],
                maximumConnections: try settings.int("maxConnections") ?? ConnectionLimits().maximumConnections)
            try checkAddresses(configuration, settings: settings)
            try configuration.validate()
        } catch {
            throw inSettingNames(error, settings: settings)
        }
        return (configuration, try ServerDatabase(settings: settings))
    }

    /// The library names its settings (`maximumConnections must be at least 1`); the message names
    /// where the value came from: the flag the user typed (`--max-connections must be at least 1`),
    /// the environment variable or the key in the configuration file.
    static func inSettingNames(_ error: ConfigurationError, settings: ServeSettings) -> ConfigurationError {
        let keys = [
            "maximumConnections": "maxConnections", "maximumBatchRequests": "maxBatchRequests",
            "maximumChangeFeeds": "maxFeeds", "maximumChangeFeedsPerUser": "maxFeedsPerUser",
            "maximumAnonymousChangeFeeds": "maxAnonymousFeeds", "maximumDynamicTables": "maxDynamicTables",
            "maximumBodySize": "maxBodySize", "the auth secret": "authSecret", "the public URL": "publicURL",
            "the CORS origin": "corsOrigins",
            "port": "port", "the metrics port": "metricsPort", "the metrics host": "metricsHost",
            "the OTLP endpoint": "otlpEndpoint",
        ]
        var message = error.message
        for (name, key) in keys where message.hasPrefix(name + " ") {
            let setting = ServeSettings.setting(key)
            var origin = settings.origin(of: key)
            if key == "authSecret" && origin == setting.flag { origin += " (or $\(setting.environmentVariable))" }
            message = origin + message.dropFirst(name.count)
        }
        return ConfigurationError(message)
    }
}
