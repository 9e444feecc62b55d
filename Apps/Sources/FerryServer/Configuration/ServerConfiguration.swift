public import Logging
public import SyncCore

/// Everything the reference server needs to start, except its storage.
///
/// ```swift
/// var configuration = ServerConfiguration()
/// configuration.port = 0                       // any free port
/// configuration.tables = [TableSettings(name: "todo", softDelete: true)]
/// configuration.authSecret = "a long random secret"
/// let server = try await ReferenceServer.start(configuration)
/// ```
public struct ServerConfiguration: Sendable {
    /// The address to listen on (default `127.0.0.1`).
    public var host: String
    /// The port to listen on; `0` picks a free one (see ``ReferenceServer/port``).
    public var port: Int
    /// The declared tables.
    public var tables: [TableSettings]
    /// Whether a write to an undeclared table creates it with ``dynamicTableDefaults`` (as the
    /// legacy Node backend did); when `false`, undeclared tables answer 404.
    public var allowsDynamicTables: Bool
    /// The settings of tables created by a write (their name is replaced by the table's).
    public var dynamicTableDefaults: TableSettings
    /// The HS256 secret that signs clients' tokens; `nil` accepts no tokens (and no table may then
    /// require auth or be per-user).
    public var authSecret: String?
    /// The `iss` a token must carry, when set.
    public var authIssuer: String?
    /// The `aud` a token must carry, when set.
    public var authAudience: String?
    /// Whether tokens without an `exp` claim are accepted (default `false`: a token must expire).
    public var allowsTokensWithoutExpiry: Bool
    /// The URL clients reach this server at (`https://api.example.com`), used in `Location` and 2.0
    /// `Link` headers. When `nil`, those are built from the request's `Host` header, which must then
    /// be a valid host and port (400 otherwise).
    public var publicURL: String?
    /// Request limits.
    public var limits: RequestLimits
    /// Connection limits and timeouts.
    public var connections: ConnectionLimits
    /// Where the server logs requests (info) and failures.
    public var logger: Logger

    public init(
        host: String = "127.0.0.1", port: Int = 8080, tables: [TableSettings] = [], allowsDynamicTables: Bool = true,
        dynamicTableDefaults: TableSettings = TableSettings(name: "*"), authSecret: String? = nil,
        authIssuer: String? = nil, authAudience: String? = nil, allowsTokensWithoutExpiry: Bool = false,
        publicURL: String? = nil, limits: RequestLimits = RequestLimits(),
        connections: ConnectionLimits = ConnectionLimits(), logger: Logger = Logger(label: "ferry.server")
    ) {
        self.host = host
        self.port = port
        self.tables = tables
        self.allowsDynamicTables = allowsDynamicTables
        self.dynamicTableDefaults = dynamicTableDefaults
        self.authSecret = authSecret
        self.authIssuer = authIssuer
        self.authAudience = authAudience
        self.allowsTokensWithoutExpiry = allowsTokensWithoutExpiry
        self.publicURL = publicURL
        self.limits = limits
        self.connections = connections
        self.logger = logger
    }

    /// Checks the configuration as a whole; ``ReferenceServer/start(_:storage:)`` calls it.
    ///
    /// - Throws: ``ConfigurationError`` naming the first problem.
    public func validate() throws(ConfigurationError) {
        guard (0...65_535).contains(port) else { throw ConfigurationError("port \(port) is not in 0...65535") }
        var names: Set<String> = []
        for table in tables {
            try table.validate()
            guard names.insert(table.name).inserted else {
                throw ConfigurationError("table '\(table.name)' is declared twice")
            }
            if (table.requiresAuth || table.perUser) && authSecret == nil {
                throw ConfigurationError(
                    "table '\(table.name)' requires authentication, but no auth secret is configured (--auth-secret)")
            }
        }
        var defaults = dynamicTableDefaults
        defaults.name = "dynamic"
        try defaults.validate()
        if allowsDynamicTables && (defaults.requiresAuth || defaults.perUser) && authSecret == nil {
            throw ConfigurationError("dynamic tables require authentication, but no auth secret is configured")
        }
        if let authSecret, authSecret.utf8.count < 16 {
            throw ConfigurationError("the auth secret must be at least 16 bytes long")
        }
        try limits.validate()
        try connections.validate()
        if let publicURL, PublicOrigin(publicURL: publicURL) == nil {
            throw ConfigurationError(
                "the public URL '\(publicURL)' must be http:// or https:// with a host, and no path, query or fragment")
        }
    }
}

/// A configuration the server cannot start with, described in one line.
public struct ConfigurationError: Error, Sendable, CustomStringConvertible {
    /// What is wrong, in one line.
    public var message: String

    public init(_ message: String) { self.message = message }

    public var description: String { "invalid server configuration: \(message)" }
}

/// Bounds on what one request may ask for; exceeding them gives a 4xx with a JSON body.
public struct RequestLimits: Sendable, Hashable {
    /// The largest request body, in bytes (413 above it).
    public var maximumBodySize: Int
    /// The longest query string, in bytes (414 above it).
    public var maximumQueryLength: Int
    /// The deepest nesting of a `$filter` (400 above it).
    public var maximumFilterDepth: Int

    public init(maximumBodySize: Int = 1 << 20, maximumQueryLength: Int = 16_384, maximumFilterDepth: Int = 100) {
        self.maximumBodySize = maximumBodySize
        self.maximumQueryLength = maximumQueryLength
        self.maximumFilterDepth = maximumFilterDepth
    }

    func validate() throws(ConfigurationError) {
        guard maximumBodySize >= 1024 else { throw ConfigurationError("maximumBodySize must be at least 1024 bytes") }
        guard maximumQueryLength >= 256 else { throw ConfigurationError("maximumQueryLength must be at least 256") }
        guard maximumFilterDepth >= 4 else { throw ConfigurationError("maximumFilterDepth must be at least 4") }
    }
}

/// The operations of the table protocol, as a table can disable them (405).
public enum TableOperation: String, Sendable, Hashable, CaseIterable {
    case query, read, insert, update, delete, undelete
}

/// How one table behaves.
///
/// ```swift
/// let notes = TableSettings(name: "notes", softDelete: true, pageSize: 50, perUser: true)
/// ```
public struct TableSettings: Sendable, Hashable {
    /// The table's name in `/tables/{name}`.
    public var name: String
    /// Whether DELETE marks items `deleted` instead of removing them.
    public var softDelete: Bool
    /// The most items one response holds.
    public var pageSize: Int
    /// The largest `$top` a query may ask for (400 above it); `0` for no limit.
    public var maxTop: Int
    /// Whether every request needs a valid token.
    public var requiresAuth: Bool
    /// Whether each token subject sees only its own items; the subject is stored in ``userIDField``.
    public var perUser: Bool
    /// The field that holds the owner of a per-user table's items.
    public var userIDField: String
    /// The status of a request a table refuses for lack of authentication (4xx; default 401).
    public var unauthorizedStatus: Int
    /// A `$filter` (3.0 syntax) ANDed into every query; items outside it answer 404.
    public var dataView: String?
    /// Operations that answer 405.
    public var disabledOperations: Set<TableOperation>
    /// The declared fields: their types and the rules writes must satisfy.
    public var fields: [String: FieldRule]
    /// Whether items may hold fields that are not declared (each keeps the JSON kind it was first
    /// written with). When `false`, writes and queries naming undeclared fields answer 400.
    public var additionalFields: Bool

    public init(
        name: String, softDelete: Bool = false, pageSize: Int = 100, maxTop: Int = 1000, requiresAuth: Bool = false,
        perUser: Bool = false, userIDField: String = "userId", unauthorizedStatus: Int = 401, dataView: String? = nil,
        disabledOperations: Set<TableOperation> = [], fields: [String: FieldRule] = [:], additionalFields: Bool = true
    ) {
        self.name = name
        self.softDelete = softDelete
        self.pageSize = pageSize
        self.maxTop = maxTop
        self.requiresAuth = requiresAuth
        self.perUser = perUser
        self.userIDField = userIDField
        self.unauthorizedStatus = unauthorizedStatus
        self.dataView = dataView
        self.disabledOperations = disabledOperations
        self.fields = fields
        self.additionalFields = additionalFields
    }

    /// The schema queries are typed and checked with.
    public var schema: TableSchema {
        var declared = fields.mapValues(\.type)
        if perUser && declared[userIDField] == nil && !additionalFields { declared[userIDField] = .string }
        return TableSchema(fields: declared, allowsUndeclaredFields: additionalFields)
    }

    /// The parsed ``dataView``.
    var dataViewFilter: QueryExpression? {
        dataView.flatMap { try? QueryExpression(odataFilter: $0, dialect: .v3) }
    }

    func validate() throws(ConfigurationError) {
        do {
            try StoreValidation.validateTableName(name)
        } catch {
            throw ConfigurationError(error.message)
        }
        guard (1...100_000).contains(pageSize) else {
            throw ConfigurationError("table '\(name)': pageSize must be in 1...100000")
        }
        guard maxTop >= 0 else { throw ConfigurationError("table '\(name)': maxTop must be 0 (no limit) or more") }
        guard (400...499).contains(unauthorizedStatus) else {
            throw ConfigurationError("table '\(name)': unauthorizedStatus must be a 4xx status")
        }
        guard !userIDField.isEmpty, !SystemProperty.isSystemProperty(userIDField) else {
            throw ConfigurationError("table '\(name)': userIdField must name an ordinary field")
        }
        for field in fields.keys where SystemProperty.isSystemProperty(field) || field.isEmpty {
            throw ConfigurationError("table '\(name)': '\(field)' is a system property and cannot be declared")
        }
        if let dataView {
            do {
                let filter = try QueryExpression(odataFilter: dataView, dialect: .v3)
                try QueryEvaluator(schema: schema).validate(TableQuery(filter: filter))
            } catch {
                throw ConfigurationError("table '\(name)': dataView is not a valid filter: \(error)")
            }
        }
        for (field, rule) in fields { try rule.validate(field: field, table: name) }
    }
}
