import Configuration
import FerryServer
import Foundation
import Synchronization
import SyncCore
import SystemPackage

/// One setting of `ferry serve`, with the three names it goes by: its key in a configuration file
/// (`maxConnections`), its environment variable (`FERRY_MAX_CONNECTIONS`) and its flag
/// (`--max-connections`).
struct ServeSetting: Sendable, Hashable {
    /// The key in a configuration file, camel case.
    let key: String
    /// The command-line flag.
    let flag: String
    /// The type of its value.
    let kind: Kind
    /// Whether its value is never printed (the auth secret, a database URL with its password).
    let isSecret: Bool

    /// The types of values a setting has.
    enum Kind: Sendable, Hashable {
        case string, int, double, bool
    }

    init(_ key: String, _ kind: Kind, flag: String? = nil, isSecret: Bool = false) {
        self.key = key
        self.kind = kind
        self.flag = flag ?? "--" + Self.kebabCase(key)
        self.isSecret = isSecret
    }

    /// `FERRY_` and the key in upper snake case: swift-configuration's rule for environment
    /// variables (`maxBodySize` → `FERRY_MAX_BODY_SIZE`, `publicURL` → `FERRY_PUBLIC_URL`).
    var environmentVariable: String {
        "FERRY_" + Self.kebabCase(key).replacingOccurrences(of: "-", with: "_").uppercased()
    }

    /// `maxBodySize` → `max-body-size`; `publicURL` → `public-url`.
    static func kebabCase(_ key: String) -> String {
        var result = ""
        var previous: Character?
        for character in key {
            if character.isUppercase, let previous, previous.isLowercase { result += "-" }
            result.append(Character(character.lowercased()))
            previous = character
        }
        return result
    }
}

/// Where each of `ferry serve`'s settings comes from, with one precedence: the command line, then
/// the environment (`FERRY_…`), then a JSON configuration file (`--config FILE` or `$FERRY_CONFIG`),
/// then the default.
///
/// Built on swift-configuration's providers (an in-memory provider for the parsed flags, its
/// environment provider under the `FERRY_` prefix, its JSON file provider), so the key rules are
/// that library's. What it adds: a value that does not convert is an error naming where it came
/// from (swift-configuration's readers fall back to the default, silently), a key the file does
/// not know is an error with the nearest known key, and a file's value of another JSON type than
/// its setting's is an error (swift-configuration converts or drops it).
struct ServeSettings: Sendable {
    /// The settings a configuration file may hold.
    static let all: [ServeSetting] = [
        .init("host", .string), .init("port", .int), .init("databaseURL", .string, flag: "--db", isSecret: true),
        .init("tables", .string), .init("authSecret", .string, isSecret: true), .init("authAllowNoExpiry", .bool),
        .init("publicURL", .string), .init("trustProxy", .bool), .init("compress", .bool),
        .init("corsOrigins", .string),
        .init("maxBodySize", .int),
        .init("idleTimeout", .double), .init("requestTimeout", .double), .init("writeTimeout", .double),
        .init("maxConnections", .int),
        .init("maxBatchRequests", .int), .init("maxFeeds", .int),
        .init("maxFeedsPerUser", .int), .init("maxAnonymousFeeds", .int), .init("maxDynamicTables", .int),
        .init("protocolOnly", .bool),
        .init("shutdownTimeout", .double), .init("attachments", .bool), .init("attachmentMaxFileSize", .int),
        .init("attachmentMaxItemSize", .int), .init("attachmentMaxUserSize", .int),
        .init("attachmentsDirectory", .string),
        .init("logLevel", .string), .init("logFormat", .string), .init("metrics", .string),
        .init("metricsPort", .int), .init("metricsHost", .string), .init("otlpEndpoint", .string),
    ]

    /// The environment variable naming a configuration file when `--config` does not.
    static let configFileVariable = "FERRY_CONFIG"

    private let reader: ConfigReader
    private let failures: FailedReads
    private let flags: Set<String>
    private let environment: [String: String]
    /// The configuration file read, if any.
    let file: String?
    /// The settings the file has, as it has them.
    private let fileValues: [String: JSONValue]

    /// Reads the configuration file, if one is named, and prepares the sources.
    ///
    /// - Parameters:
    ///   - flags: The values given on the command line, by key.
    ///   - environment: The process environment.
    ///   - configFile: `--config`, if given (else `$FERRY_CONFIG`, if set).
    /// - Throws: ``ConfigurationError`` when the file cannot be read, is not a JSON object, or has a
    ///   key that is not a setting.
    init(flags: [String: ConfigValue], environment: [String: String], configFile: String?)
        async throws(ConfigurationError)
    {
        self.flags = Set(flags.keys)
        self.environment = environment
        let file = configFile ?? environment[Self.configFileVariable].flatMap { $0.isEmpty ? nil : $0 }
        self.file = file
        let secrets = Set(Self.all.filter(\.isSecret).map(\.environmentVariable))
        var providers: [any ConfigProvider] = [
            InMemoryProvider(
                name: "command line",
                values: Dictionary(uniqueKeysWithValues: flags.map { (AbsoluteConfigKey([$0.key]), $0.value) })),
            EnvironmentVariablesProvider(
                environmentVariables: environment, secretsSpecifier: .specific(secrets)
            ).prefixKeys(with: "ferry"),
        ]
        fileValues = try file.map { file throws(ConfigurationError) in try Self.values(ofFile: file) } ?? [:]
        if let file {
            do {
                providers.append(
                    try await FileProvider<JSONSnapshot>(
                        parsingOptions: .init(secretsSpecifier: .specific(Set(Self.all.filter(\.isSecret).map(\.key)))),
                        filePath: FilePath(file)))
            } catch {
                throw ConfigurationError("cannot read the configuration file \(file): \(error)")
            }
        }
        failures = FailedReads()
        reader = ConfigReader(providers: providers, accessReporter: failures)
    }

    /// Where the value of `setting` came from, as a person would look for it: the flag, the
    /// environment variable, or the key in the file.
    func origin(of key: String) -> String {
        source(of: key) ?? Self.setting(key).flag
    }

    /// Where the value of `key` came from, or `nil` when no source has it (the default applies).
    func source(of key: String) -> String? {
        let setting = Self.setting(key)
        if flags.contains(setting.key) { return setting.flag }
        if environment[setting.environmentVariable] != nil { return setting.environmentVariable }
        if let file, fileValues[setting.key] != nil { return "\(setting.key) in \(file)" }
        return nil
    }

    /// Each setting that a source gives, as text, with where it came from (`--check`); secrets are
    /// shown as `<secret>`.
    func described() throws(ConfigurationError) -> [(key: String, value: String, source: String)] {
        var described: [(key: String, value: String, source: String)] = []
        for setting in Self.all {
            guard let value = try value(of: setting), let source = source(of: setting.key) else { continue }
            described.append((setting.key, setting.isSecret ? "<secret>" : value, source))
        }
        return described
    }

    private func value(of setting: ServeSetting) throws(ConfigurationError) -> String? {
        switch setting.kind {
        case .string: try string(setting.key)
        case .int: try int(setting.key).map(String.init)
        case .double: try double(setting.key).map { String($0) }
        case .bool: try bool(setting.key).map(String.init)
        }
    }

    func string(_ key: String) throws(ConfigurationError) -> String? {
        try checked(key, kind: "a string") { reader.string(forKey: ConfigKey([key])) }
    }

    func int(_ key: String) throws(ConfigurationError) -> Int? {
        try checked(key, kind: "a whole number") { reader.int(forKey: ConfigKey([key])) }
    }

    func double(_ key: String) throws(ConfigurationError) -> Double? {
        try checked(key, kind: "a number") { reader.double(forKey: ConfigKey([key])) }
    }

    func bool(_ key: String) throws(ConfigurationError) -> Bool? {
        try checked(key, kind: "true or false") { reader.bool(forKey: ConfigKey([key])) }
    }

    /// The setting named `key`.
    static func setting(_ key: String) -> ServeSetting {
        guard let setting = all.first(where: { $0.key == key }) else {
            preconditionFailure("'\(key)' is not a setting of ferry serve")
        }
        return setting
    }

    private func checked<Value>(_ key: String, kind: String, read: () -> Value?) throws(ConfigurationError) -> Value? {
        let setting = Self.setting(key)
        if let file, let inFile = fileValues[key], source(of: key) == "\(key) in \(file)" {
            try Self.checkType(of: inFile, for: setting, in: file)
        }
        let value = read()
        guard failures.takeFailure() else { return value }
        let origin = origin(of: key)
        if !setting.isSecret, let raw = environment[setting.environmentVariable], origin == setting.environmentVariable
        {
            throw ConfigurationError("\(origin)='\(raw)' is not \(kind)")
        }
        throw ConfigurationError("\(origin) is not \(kind)")
    }

    /// A configuration file must be a JSON object whose keys are all settings: a misspelt key would
    /// otherwise be ignored, silently.
    private static func values(ofFile file: String) throws(ConfigurationError) -> [String: JSONValue] {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: file))
        } catch {
            let reason =
                FileManager.default.fileExists(atPath: file)
                ? "it cannot be read (\((error as NSError).localizedDescription))" : "there is no such file"
            throw ConfigurationError("cannot read the configuration file \(file): \(reason)")
        }
        let document: JSONValue
        do {
            document = try JSONValue(parsingUTF8: data)
        } catch {
            // The parser's message names the place: `byte 41: expected ',' or '}'`.
            throw ConfigurationError("the configuration file \(file) is not valid JSON: \(error)")
        }
        guard case .object(let object) = document else {
            throw ConfigurationError("the configuration file \(file) is not a JSON object of settings")
        }
        let keys = all.map(\.key)
        for key in object.keys.sorted() where !keys.contains(key) {
            let near = Suggestion.nearest(to: key, among: keys).map { " (did you mean '\($0)'?)" } ?? ""
            throw ConfigurationError("the configuration file \(file) has an unknown setting '\(key)'\(near)")
        }
        return object
    }

    /// A value of a file is of its setting's JSON type: swift-configuration would convert `true`
    /// to the port 1 and `1` to true, and drop an object or `null` without a word.
    private static func checkType(of value: JSONValue, for setting: ServeSetting, in file: String)
        throws(ConfigurationError)
    {
        let (fits, expected): (Bool, String) =
            switch (setting.kind, value) {
            case (.string, .string), (.int, .int), (.double, .int), (.double, .double), (.bool, .bool): (true, "")
            case (.string, _): (false, "a string")
            case (.int, _): (false, "a whole number")
            case (.double, _): (false, "a number")
            case (.bool, _): (false, "true or false")
            }
        guard !fits else { return }
        let found =
            switch value {
            case .null: "null"
            case .bool: "a boolean"
            case .int, .double: "a number"
            case .string: "a string"
            case .array: "an array"
            case .object: "an object"
            }
        throw ConfigurationError("\(setting.key) in \(file) is not \(expected) but \(found)")
    }
}

/// Notes whether the last read found a value that does not convert to the type asked for.
private final class FailedReads: AccessReporter, Sendable {
    private let failed = Mutex(false)

    func report(_ event: AccessEvent) {
        let failedToConvert =
            event.conversionError != nil
            || event.providerResults.contains {
                if case .failure = $0.result { return true }
                return false
            }
        if failedToConvert { failed.withLock { $0 = true } }
    }

    /// Whether a read failed since the last call; clears the note.
    func takeFailure() -> Bool {
        failed.withLock { failed in
            defer { failed = false }
            return failed
        }
    }
}
