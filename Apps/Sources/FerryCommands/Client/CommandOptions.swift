public import ArgumentParser
public import FerryClient
import FerryConsole
import Foundation
import SyncCore

/// Which server, with which protocol and token: shared by the client commands and `ferry remote`.
public struct ServerOptions: ParsableArguments, Sendable {
    @Option(help: ArgumentHelp("The server's URL (default: $FERRY_SERVER).", valueName: "url"))
    var server: String?

    @Option(
        name: .customLong("protocol"), help: "The table protocol: 3 (Datasync 3.0.0) or 2 (Azure Mobile Apps 2.0.0).")
    var protocolVersion: Int = 3

    @Option(help: ArgumentHelp("A bearer token for the server (default: $FERRY_TOKEN).", valueName: "token"))
    var token: String?

    @Option(
        help: ArgumentHelp(
            "A PEM file of an authority to trust besides the system's, for an https server with a private certificate (default: $FERRY_CA_FILE).",
            valueName: "file"))
    var caFile: String?

    public init() {}

    /// Whether `--server`, `--token` or `--ca-file` was given.
    var namesAServer: Bool { server != nil || token != nil || caFile != nil }

    /// The server the options (or `$FERRY_SERVER`, `$FERRY_TOKEN`) name, or `nil` for none.
    func serverSettings() throws(ClientError) -> ServerSettings? {
        let environment = ProcessInfo.processInfo.environment
        guard let text = server ?? environment["FERRY_SERVER"], !text.isEmpty else { return nil }
        // Schemes are case-insensitive (RFC 3986 § 3.1): `HTTP://…` was refused.
        guard var components = URLComponents(string: text),
            let scheme = components.scheme?.lowercased(), scheme == "http" || scheme == "https",
            components.host != nil
        else {
            throw ClientError(.usage, "'\(text)' is not a server URL", hint: "for example http://127.0.0.1:8080")
        }
        // Paths are added to the URL: a query or fragment would end up before them
        // (`…:8080?x=1/tables/todo`).
        guard components.query == nil, components.fragment == nil else {
            throw ClientError(
                .usage, "'\(text)' has a query or a fragment; a server URL is where the tables are",
                hint: "for example http://127.0.0.1:8080 or https://example.org/sync")
        }
        components.scheme = scheme
        guard let url = components.url else {
            throw ClientError(.usage, "'\(text)' is not a server URL", hint: "for example http://127.0.0.1:8080")
        }
        if let port = url.port, !(1...65_535).contains(port) {
            throw ClientError(
                .usage, "the port of '\(text)' is not 1 to 65535", hint: "for example http://127.0.0.1:8080")
        }
        let version: ProtocolVersion
        switch protocolVersion {
        case 2: version = .v2
        case 3: version = .v3
        default: throw ClientError(.usage, "--protocol must be 2 or 3, not \(protocolVersion)")
        }
        var trustRoots: [String] = []
        if let file = caFile ?? environment["FERRY_CA_FILE"], !file.isEmpty {
            guard FileManager.default.isReadableFile(atPath: file) else {
                throw ClientError(.usage, "cannot read the authority's certificate '\(file)' (--ca-file)")
            }
            trustRoots.append(file)
        }
        return ServerSettings(
            url: url, protocolVersion: version, token: token ?? environment["FERRY_TOKEN"], trustRoots: trustRoots)
    }
}

/// How a command prints: `--json`, or `--format table|json|csv|jsonl`.
public struct OutputOptions: ParsableArguments, Sendable {
    @Flag(help: "Print results as JSON, for scripts (the same as --format json).")
    var json = false

    @Option(
        help: ArgumentHelp(
            "table, json, csv or jsonl (one item per line); csv and jsonl shape lists of items.", valueName: "format"))
    var format: OutputFormat = .table

    public init() {}

    var outputFormat: OutputFormat { json ? .json : format }
}

/// The query options of `query` and `remote query`.
public struct QueryOptions: ParsableArguments, Sendable {
    @Option(help: "An OData $filter (3.0 syntax).") var filter: String?
    @Option(help: "An OData $orderby, for example \"year desc,title\".") var orderby: String?
    @Option(parsing: .unconditional, help: "At most this many items.") var top: Int?
    @Option(parsing: .unconditional, help: "Skip this many items first.") var skip: Int?
    @Option(help: "Only these fields, comma-separated.") var select: String?
    @Flag(help: "Include items marked deleted.") var includeDeleted = false
    @Flag(name: [.customShort("x"), .long], help: "One block per item, a field per line (for wide items).")
    var expanded = false

    public init() {}
}

/// What a device command needs to open its device: the store, the server (when the command talks
/// to one), the conflict policy, and how to print. Local commands take ``LocalOptions``, `status`
/// ``StatusOptions``, and the commands that sync ``ClientOptions``: each lists only the options it
/// uses.
public protocol DeviceOptions: ParsableArguments, Sendable {
    /// The store and the output format.
    var local: LocalOptions { get }
    /// The server, when the command talks to one.
    func serverSettings() throws(ClientError) -> ServerSettings?
    /// What a push does with a conflict.
    func policy() throws(ClientError) -> ConflictPolicy
    /// Whether server options were given (the REPL refuses them per command).
    var namesAServer: Bool { get }
}

extension DeviceOptions {
    var json: Bool { local.output.json }
    var outputFormat: OutputFormat { local.output.outputFormat }
    public func serverSettings() throws(ClientError) -> ServerSettings? { nil }
    public func policy() throws(ClientError) -> ConflictPolicy { .keep }
    public var namesAServer: Bool { false }

    /// Whether store or server options were given (the REPL refuses them per command).
    var namesADevice: Bool { local.store != LocalOptions.defaultStore || namesAServer }

    /// The CLI's device on the store at `location` (the options' `--store`, parsed), with the
    /// options' server and policy.
    func device(at location: StoreLocation) throws -> Device {
        try Device(name: "cli", store: location, server: try serverSettings(), policy: try policy())
    }
}

/// The options of a command that only uses the local store: which store, how to print.
///
/// ```
/// ferry query todo --store sqlite:phone.ferry --json
/// ```
public struct LocalOptions: DeviceOptions {
    static let defaultStore = "sqlite:ferry-client.sqlite"

    @Option(help: ArgumentHelp("The local store: sqlite:PATH, lmdb:PATH or memory.", valueName: "store"))
    var store: String = Self.defaultStore

    @OptionGroup var output: OutputOptions

    public init() {}

    public var local: LocalOptions { self }
}

/// The options of `status`: the store, and the server it asks whether it answers.
public struct StatusOptions: DeviceOptions {
    @OptionGroup public var local: LocalOptions
    @OptionGroup var connection: ServerOptions

    public init() {}

    public func serverSettings() throws(ClientError) -> ServerSettings? { try connection.serverSettings() }
    public var namesAServer: Bool { connection.namesAServer }
}

/// The options of the commands that sync (`push`, `pull`, `watch`): the store, the server, the
/// conflict policy, how to print.
///
/// ```
/// ferry push --store sqlite:phone.ferry --server http://127.0.0.1:8080 --protocol 2 --token "$TOKEN"
/// ```
public struct ClientOptions: DeviceOptions {
    @OptionGroup public var local: LocalOptions

    @OptionGroup var connection: ServerOptions

    @Option(help: ArgumentHelp(Self.conflictsHelp, valueName: "policy"))
    var conflicts: String = "keep"

    /// The help of `--conflicts`, from the policies themselves (it once offered `fail`, refused).
    static let conflictsHelp =
        "What a push does with a conflict: keep (it stays in `conflicts`), server, client or merge."

    public init() {}

    public func serverSettings() throws(ClientError) -> ServerSettings? { try connection.serverSettings() }
    public var namesAServer: Bool { connection.namesAServer }

    public func policy() throws(ClientError) -> ConflictPolicy { try Self.policy(conflicts) }

    /// `keep`, `server`, `client` or `merge`.
    static func policy(_ text: String) throws(ClientError) -> ConflictPolicy {
        guard let policy = ConflictPolicy(rawValue: text) else {
            throw ClientError(
                .usage, "unknown conflict policy '\(text)'",
                hint: ConflictPolicy.allCases.map(\.rawValue).joined(separator: ", "))
        }
        return policy
    }
}

extension OutputFormat: ExpressibleByArgument {}
