import ArgumentParser
import Configuration
import FerryServer
import Foundation
import Logging
import Testing

@testable import FerryCommands

/// `ferry serve` reads each setting from the command line, then the environment (`FERRY_…`), then
/// a JSON configuration file (`--config` or `$FERRY_CONFIG`), then its default (issue 31).
@Suite("ferry serve settings")
struct ServeSettingsTests {
    /// A temporary directory with a configuration file and a tables file.
    struct Files {
        let directory: URL
        var tables: String { directory.appendingPathComponent("tables.json").path }

        init() throws {
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-settings-\(UUID())")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            try Data(#"{"tables": {"todo": {"softDelete": true}}}"#.utf8).write(to: URL(fileURLWithPath: tables))
        }

        /// Writes `json` as a configuration file and returns its path.
        func config(_ json: String) throws -> String {
            let path = directory.appendingPathComponent("ferry-\(UUID()).json").path
            try Data(json.utf8).write(to: URL(fileURLWithPath: path))
            return path
        }

        func remove() { try? FileManager.default.removeItem(at: directory) }
    }

    static func settings(_ arguments: [String], environment: [String: String] = [:]) async throws -> ServeSettings {
        let command = try #require(try FerryCommand.parseAsRoot(["serve"] + arguments) as? ServeCommand)
        return try await ServeSettings(
            flags: command.givenValues, environment: environment, configFile: command.config)
    }

    static func configuration(_ arguments: [String], environment: [String: String] = [:]) async throws
        -> ServerConfiguration
    {
        try await ServeCommand.configuration(from: settings(arguments, environment: environment)).0
    }

    @Test func theCommandLineBeatsTheEnvironmentWhichBeatsTheFile() async throws {
        let files = try Files()
        defer { files.remove() }
        let file = try files.config(#"{"port": 1111, "maxConnections": 11, "trustProxy": true, "logLevel": "error"}"#)
        #expect(try await Self.configuration([]).port == 8080)
        #expect(try await !Self.configuration([]).compressesAnswers, "off by default")
        #expect(try await Self.configuration(["--config", file]).port == 1111)
        let environment = ["FERRY_PORT": "2222", "FERRY_LOG_LEVEL": "debug"]
        #expect(try await Self.configuration(["--config", file], environment: environment).port == 2222)
        let flagged = try await Self.configuration(
            ["--config", file, "--port", "3333", "--no-trust-proxy"], environment: environment)
        #expect(flagged.port == 3333)
        #expect(flagged.trustsForwardedHeaders == false)
        #expect(flagged.connections.maximumConnections == 11)
        #expect(flagged.logger.logLevel == .debug)
        let fromFile = try await Self.configuration(["--config", file])
        #expect(fromFile.trustsForwardedHeaders && fromFile.logger.logLevel == .error)
        // $FERRY_CONFIG names the file when --config does not; --config wins over it.
        #expect(try await Self.configuration([], environment: ["FERRY_CONFIG": file]).port == 1111)
        let other = try files.config(#"{"port": 4444}"#)
        #expect(try await Self.configuration(["--config", other], environment: ["FERRY_CONFIG": file]).port == 4444)
    }

    /// Each setting, from each source, reaches the server's configuration and is said to come
    /// from where it came from.
    @Test func everySettingComesFromEverySource() async throws {
        let files = try Files()
        defer { files.remove() }
        let samples: [String: (text: String, json: String)] = [
            "host": ("0.0.0.0", #""0.0.0.0""#), "port": ("9", "9"), "databaseURL": ("memory", #""memory""#),
            "tables": (files.tables, "\"\(files.tables)\""),
            "authSecret": ("0123456789abcdef-secret", #""0123456789abcdef-secret""#),
            "authAllowNoExpiry": ("true", "true"),
            "publicURL": ("https://sync.example.com", #""https://sync.example.com""#),
            "trustProxy": ("true", "true"), "compress": ("true", "true"),
            "corsOrigins": ("https://a.example,https://b.example:8443", #""https://a.example,https://b.example:8443""#),
            "maxBodySize": ("2048", "2048"), "idleTimeout": ("5.5", "5.5"),
            "requestTimeout": ("6", "6"), "writeTimeout": ("9.25", "9.25"), "maxConnections": ("7", "7"),
            "maxBatchRequests": ("8", "8"),
            "maxFeeds": ("5", "5"), "maxFeedsPerUser": ("3", "3"), "maxAnonymousFeeds": ("0", "0"),
            "maxDynamicTables": ("12", "12"),
            "protocolOnly": ("true", "true"), "shutdownTimeout": ("4", "4"), "metrics": ("on", #""on""#),
            "metricsPort": ("9464", "9464"),
            "metricsHost": ("127.0.0.2", #""127.0.0.2""#),
            "otlpEndpoint": ("http://127.0.0.1:4318", #""http://127.0.0.1:4318""#), "logLevel": ("debug", #""debug""#),
            "logFormat": ("json", #""json""#), "attachments": ("true", "true"),
            "attachmentMaxFileSize": ("1000", "1000"), "attachmentMaxItemSize": ("2000", "2000"),
            "attachmentMaxUserSize": ("3000", "3000"),
            "attachmentsDirectory": ("/tmp/ferry-blobs", #""/tmp/ferry-blobs""#),
        ]
        #expect(Set(samples.keys) == Set(ServeSettings.all.map(\.key)), "a setting without a sample")
        let environment = Dictionary(
            uniqueKeysWithValues: ServeSettings.all.map { ($0.environmentVariable, samples[$0.key]!.text) })
        let file = try files.config(
            "{" + ServeSettings.all.map { "\"\($0.key)\": \(samples[$0.key]!.json)" }.joined(separator: ", ") + "}")
        let flags = ServeSettings.all.flatMap { setting -> [String] in
            setting.kind == .bool ? [setting.flag] : [setting.flag, samples[setting.key]!.text]
        }
        for (arguments, environment, expectedSource) in [
            (flags, [:], { (setting: ServeSetting) in setting.flag }),
            ([], environment, { (setting: ServeSetting) in setting.environmentVariable }),
            (["--config", file], [:], { (setting: ServeSetting) in "\(setting.key) in \(file)" }),
        ] {
            let settings = try await Self.settings(arguments, environment: environment)
            let described = try settings.described()
            for setting in ServeSettings.all {
                let entry = described.first { $0.key == setting.key }
                #expect(entry?.source == expectedSource(setting), "\(setting.key): \(String(describing: entry))")
                #expect(
                    entry?.value == (setting.isSecret ? "<secret>" : samples[setting.key]!.text)
                        || setting.kind == .double, "\(setting.key): \(String(describing: entry))")
            }
            let (configuration, database) = try await ServeCommand.configuration(from: settings)
            #expect(configuration.host == "0.0.0.0" && configuration.port == 9)
            #expect(database == .memory)
            #expect(configuration.tables.map(\.name) == ["todo"])
            #expect(configuration.authSecret == "0123456789abcdef-secret" && configuration.allowsTokensWithoutExpiry)
            #expect(configuration.publicURL == "https://sync.example.com" && configuration.trustsForwardedHeaders)
            #expect(configuration.compressesAnswers)
            #expect(configuration.corsOrigins == ["https://a.example", "https://b.example:8443"])
            #expect(configuration.limits.maximumBodySize == 2048 && configuration.limits.maximumBatchRequests == 8)
            #expect(configuration.connections.idleTimeout == .milliseconds(5500))
            #expect(configuration.connections.requestTimeout == .seconds(6))
            #expect(configuration.connections.writeTimeout == .milliseconds(9250))
            #expect(configuration.connections.maximumConnections == 7)
            #expect(configuration.limits.maximumChangeFeeds == 5 && configuration.limits.maximumChangeFeedsPerUser == 3)
            #expect(configuration.limits.maximumAnonymousChangeFeeds == 0)
            #expect(configuration.limits.maximumDynamicTables == 12)
            #expect(configuration.shutdownGracePeriod == .seconds(4))
            #expect(configuration.metrics.endpoint == .separate(host: "127.0.0.2", port: 9464))
            #expect(!configuration.offersPushExtensions && configuration.logger.logLevel == .debug)
        }
    }

    /// A value that does not convert is never replaced by the default: it is an error that says
    /// where it came from (and, from the environment, what it was unless it is a secret).
    @Test func aBadValueNamesItsSource() async throws {
        let files = try Files()
        defer { files.remove() }
        let file = try files.config(#"{"port": "eighty", "trustProxy": "maybe", "idleTimeout": "soon"}"#)
        for (arguments, environment, message) in [
            ([], ["FERRY_PORT": "eighty"], "FERRY_PORT='eighty' is not a whole number"),
            ([], ["FERRY_TRUST_PROXY": "maybe"], "FERRY_TRUST_PROXY='maybe' is not true or false"),
            ([], ["FERRY_IDLE_TIMEOUT": "soon"], "FERRY_IDLE_TIMEOUT='soon' is not a number"),
            ([], ["FERRY_IDLE_TIMEOUT": "0"], "FERRY_IDLE_TIMEOUT must be between 0.01 and 86400 seconds"),
            ([], ["FERRY_MAX_CONNECTIONS": "0"], "FERRY_MAX_CONNECTIONS must be at least 1"),
            ([], ["FERRY_AUTH_SECRET": "short"], "FERRY_AUTH_SECRET must be at least 16 bytes long"),
            (["--config", file], [:], "port in \(file) is not a whole number"),
            (["--config", file, "--port", "0"], [:], "trustProxy in \(file) is not true or false"),
            (["--config", file, "--port", "0", "--trust-proxy"], [:], "idleTimeout in \(file) is not a number"),
            (["--max-connections", "0"], ["FERRY_MAX_CONNECTIONS": "5"], "--max-connections must be at least 1"),
            ([], ["FERRY_DATABASE_URL": "mysql://x"], "FERRY_DATABASE_URL: unknown database 'mysql://x'"),
            ([], ["FERRY_LOG_LEVEL": "loud"], "FERRY_LOG_LEVEL: unknown log level 'loud'"),
        ] {
            await #expect(throws: ConfigurationError.self, "\(arguments) \(environment)") {
                do {
                    _ = try await Self.configuration(arguments, environment: environment)
                } catch let error as ConfigurationError {
                    #expect(error.message.hasPrefix(message), "\(error.message)")
                    throw error
                }
            }
        }
    }

    @Test func aConfigurationFileMustHoldOnlySettings() async throws {
        let files = try Files()
        defer { files.remove() }
        for (json, message) in [
            (#"{"maxConections": 5}"#, "has an unknown setting 'maxConections' (did you mean 'maxConnections'?)"),
            (#"{"port": 1"#, "is not valid JSON: invalid JSON at byte 10: unterminated object"),
            ("[1, 2]", "is not a JSON object of settings"),
        ] {
            let file = try files.config(json)
            await #expect(throws: ConfigurationError.self, "\(json)") {
                do {
                    _ = try await Self.settings(["--config", file])
                } catch let error as ConfigurationError {
                    #expect(error.message.hasSuffix(message), "\(error.message)")
                    throw error
                }
            }
        }
        let missing = files.directory.appendingPathComponent("none.json").path
        await #expect(throws: ConfigurationError.self) { _ = try await Self.settings(["--config", missing]) }
    }

    /// The executable: one line and exit 64 for a bad value from any source; `--check` prints
    /// where each setting came from, secrets hidden, and opens nothing.
    @Test func theExecutableChecksItsSettings() async throws {
        let files = try Files()
        defer { files.remove() }
        let bad = try await FerryBinaryTests.run(
            ["serve", "--db", "memory"], environment: ["FERRY_PORT": "eighty"])
        #expect(
            bad.status == 64
                && bad.errors == "error: invalid server configuration: FERRY_PORT='eighty' is not a whole number\n",
            "\(bad)")
        let file = try files.config(#"{"port": 0, "authSecret": "0123456789abcdef-secret", "logLevel": "debug"}"#)
        let database = files.directory.appendingPathComponent("never.sqlite").path
        let check = try await FerryBinaryTests.run(
            ["serve", "--check", "--config", file, "--db", "sqlite:" + database],
            environment: ["FERRY_MAX_CONNECTIONS": "50"])
        #expect(check.status == 0, "\(check.errors)")
        let lines = check.output.split(separator: "\n").map(String.init)
        #expect(lines.contains("port = 0  (port in \(file))"), "\(check.output)")
        #expect(lines.contains("maxConnections = 50  (FERRY_MAX_CONNECTIONS)"), "\(check.output)")
        #expect(lines.contains("authSecret = <secret>  (authSecret in \(file))"), "\(check.output)")
        #expect(!check.output.contains("0123456789abcdef-secret"))
        #expect(lines.last?.hasPrefix("ferry serve: the settings are valid") == true, "\(check.output)")
        #expect(!FileManager.default.fileExists(atPath: database), "--check opened the database")
        // --check validates the tracing settings too, named by where they came from.
        let tracing = try await FerryBinaryTests.run(
            ["serve", "--check", "--db", "memory"], environment: ["FERRY_OTLP_ENDPOINT": "ftp://collector"])
        #expect(tracing.status == 64, "\(tracing)")
        #expect(
            tracing.errors.hasPrefix(
                "error: invalid server configuration: FERRY_OTLP_ENDPOINT 'ftp://collector' is not an http:// or https:// URL"
            ), "\(tracing.errors)")
        let grpc = try await FerryBinaryTests.run(
            ["serve", "--check", "--db", "memory", "--otlp-endpoint", "http://127.0.0.1:4317"],
            environment: ["OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"])
        #expect(
            grpc.status == 64 && grpc.errors.contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported"), "\(grpc)")
    }
}
