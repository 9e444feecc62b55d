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

    /// The server the options (or `$FERRY_SERVER`, `$FERRY_TOKEN`) name, or `nil` for none.
    func serverSettings() throws(ClientError) -> ServerSettings? {
        let environment = ProcessInfo.processInfo.environment
        guard let text = server ?? environment["FERRY_SERVER"], !text.isEmpty else { return nil }
        guard let url = URL(string: text), url.scheme == "http" || url.scheme == "https", url.host != nil else {
            throw ClientError(.usage, "'\(text)' is not a server URL", hint: "for example http://127.0.0.1:8080")
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
    @Option(help: "At most this many items.") var top: Int?
    @Option(help: "Skip this many items first.") var skip: Int?
    @Option(help: "Only these fields, comma-separated.") var select: String?
    @Flag(help: "Include items marked deleted.") var includeDeleted = false
    @Flag(name: [.customShort("x"), .long], help: "One block per item, a field per line (for wide items).")
    var expanded = false

    public init() {}
}

/// The options every client command shares: which store, which server, how to print.
///
/// ```
/// ferry status --store sqlite:phone.ferry
/// ferry push --store sqlite:phone.ferry --server http://127.0.0.1:8080 --protocol 2 --token "$TOKEN"
/// ```
public struct ClientOptions: ParsableArguments, Sendable {
    @Option(help: ArgumentHelp("The local store: sqlite:PATH, lmdb:PATH or memory.", valueName: "store"))
    var store: String = "sqlite:ferry-client.sqlite"

    @OptionGroup var connection: ServerOptions

    @Option(help: ArgumentHelp(Self.conflictsHelp, valueName: "policy"))
    var conflicts: String = "keep"

    /// The help of `--conflicts`, from the policies themselves (it once offered `fail`, refused).
    static let conflictsHelp =
        "What a push does with a conflict: keep (it stays in `conflicts`), server, client or merge."

    @OptionGroup var output: OutputOptions

    public init() {}

    var json: Bool { output.json }
    var outputFormat: OutputFormat { output.outputFormat }

    /// Whether store or server options were given (the REPL refuses them per command).
    var namesADevice: Bool {
        store != "sqlite:ferry-client.sqlite" || connection.server != nil || connection.token != nil
    }

    func serverSettings() throws(ClientError) -> ServerSettings? { try connection.serverSettings() }

    func policy() throws(ClientError) -> ConflictPolicy { try Self.policy(conflicts) }

    /// `keep`, `server`, `client` or `merge`.
    static func policy(_ text: String) throws(ClientError) -> ConflictPolicy {
        guard let policy = ConflictPolicy(rawValue: text) else {
            throw ClientError(
                .usage, "unknown conflict policy '\(text)'",
                hint: ConflictPolicy.allCases.map(\.rawValue).joined(separator: ", "))
        }
        return policy
    }

    /// The device the options name. With `readOnly`, a store that does not exist is an error naming
    /// its path, never created.
    func device(named name: String = "cli", readOnly: Bool = false) throws -> Device {
        let location = try StoreLocation(parsing: store)
        if readOnly { try location.requireExisting() }
        return try Device(name: name, store: location, server: try serverSettings(), policy: try policy())
    }
}

extension OutputFormat: ExpressibleByArgument {}
