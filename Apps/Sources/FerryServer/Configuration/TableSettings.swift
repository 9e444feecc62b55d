public import SyncCore

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
        dataView.flatMap { try? QueryExpression(odataFilter: $0, protocolVersion: .v3) }
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
                let filter = try QueryExpression(odataFilter: dataView, protocolVersion: .v3)
                try QueryEvaluator(schema: schema).validate(TableQuery(filter: filter))
            } catch {
                throw ConfigurationError("table '\(name)': dataView is not a valid filter: \(error)")
            }
        }
        for (field, rule) in fields { try rule.validate(field: field, table: name) }
    }
}
