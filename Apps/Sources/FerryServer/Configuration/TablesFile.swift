import Foundation
public import SyncCore

/// Reads the tables file that `ferry serve --tables FILE` takes.
///
/// ```json
/// {
///   "dynamicTables": true,
///   "defaults": { "pageSize": 50, "softDelete": true },
///   "tables": {
///     "todo":  { "softDelete": true, "pageSize": 100, "maxTop": 1000 },
///     "notes": { "requiresAuth": true, "perUser": true,
///                "fields": { "title": { "type": "string", "required": true, "maxLength": 200 },
///                            "done": "bool" } }
///   }
/// }
/// ```
///
/// Per table: `softDelete`, `pageSize`, `maxTop` (0: no limit), `requiresAuth`, `perUser`,
/// `userIdField`, `unauthorizedStatus`, `dataView` (an OData filter), `disabledOperations`
/// (`query read insert update delete undelete`), `additionalFields` and `fields`. A field is a type
/// name (`string integer double bool date dateTimeOffset timeOfDay guid json`) or an object with
/// `type` (plus `cases` for `enum`), `required`, `minimum`, `maximum`, `minLength`, `maxLength` and
/// `allowed` (a list of values). `defaults` holds the settings of tables created by a first write.
/// Unknown keys are errors, so that a misspelt setting is never silently ignored.
public enum TablesFile: Sendable {
    /// Reads the file at `path` into `configuration` (its tables, defaults and dynamic setting).
    public static func load(_ path: String, into configuration: inout ServerConfiguration) throws(ConfigurationError) {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            let files = FileManager.default
            var isDirectory: ObjCBool = false
            let reason =
                !files.fileExists(atPath: path, isDirectory: &isDirectory)
                ? "no such file" : isDirectory.boolValue ? "it is a directory" : "permission denied"
            throw ConfigurationError("cannot read the tables file '\(path)': \(reason)")
        }
        do {
            try apply(JSONValue(parsingUTF8: data), to: &configuration)
        } catch let error as ConfigurationError {
            throw ConfigurationError("\(path): \(error.message)")
        } catch {
            throw ConfigurationError("\(path): \(error)")
        }
    }

    /// Applies a parsed tables file to `configuration`.
    public static func apply(_ document: JSONValue, to configuration: inout ServerConfiguration)
        throws(ConfigurationError)
    {
        guard case .object(let root) = document else {
            throw ConfigurationError("the tables file must be a JSON object")
        }
        try checkKeys(root, allowed: ["dynamicTables", "defaults", "tables"], context: "the tables file")
        if let dynamic = root["dynamicTables"] {
            guard case .bool(let flag) = dynamic else {
                throw ConfigurationError("'dynamicTables' must be true or false")
            }
            configuration.allowsDynamicTables = flag
        }
        if let defaults = root["defaults"] {
            guard case .object(let object) = defaults else { throw ConfigurationError("'defaults' must be an object") }
            configuration.dynamicTableDefaults = try settings(
                named: "*", object, base: configuration.dynamicTableDefaults)
        }
        var tables: [TableSettings] = []
        switch root["tables"] {
        case nil: break
        case .object(let entries)?:
            for name in entries.keys.sorted() {
                guard case .object(let object) = entries[name]! else {
                    throw ConfigurationError("table '\(name)' must be described by an object")
                }
                tables.append(try settings(named: name, object, base: configuration.dynamicTableDefaults))
            }
        case .array(let entries)?:
            for entry in entries {
                guard case .object(var object) = entry, case .string(let name)? = object["name"] else {
                    throw ConfigurationError("each entry of 'tables' must be an object with a 'name'")
                }
                object["name"] = nil
                tables.append(try settings(named: name, object, base: configuration.dynamicTableDefaults))
            }
        default:
            throw ConfigurationError("'tables' must be an object (name: settings) or an array")
        }
        configuration.tables = tables
    }

    static let tableKeys: Set<String> = [
        "softDelete", "pageSize", "maxTop", "requiresAuth", "perUser", "userIdField", "unauthorizedStatus", "dataView",
        "disabledOperations", "fields", "additionalFields",
    ]

    static func settings(named name: String, _ object: JSONObject, base: TableSettings) throws(ConfigurationError)
        -> TableSettings
    {
        let context = name == "*" ? "'defaults'" : "table '\(name)'"
        try checkKeys(object, allowed: tableKeys, context: context)
        var table = base
        table.name = name
        if let value = object["softDelete"] { table.softDelete = try bool(value, "softDelete", context) }
        if let value = object["pageSize"] { table.pageSize = try int(value, "pageSize", context) }
        if let value = object["maxTop"] { table.maxTop = try int(value, "maxTop", context) }
        if let value = object["requiresAuth"] { table.requiresAuth = try bool(value, "requiresAuth", context) }
        if let value = object["perUser"] { table.perUser = try bool(value, "perUser", context) }
        if let value = object["userIdField"] { table.userIDField = try string(value, "userIdField", context) }
        if let value = object["unauthorizedStatus"] {
            table.unauthorizedStatus = try int(value, "unauthorizedStatus", context)
        }
        if let value = object["dataView"] { table.dataView = try string(value, "dataView", context) }
        if let value = object["additionalFields"] {
            table.additionalFields = try bool(value, "additionalFields", context)
        }
        if let value = object["disabledOperations"] {
            guard case .array(let names) = value else {
                throw ConfigurationError("\(context): 'disabledOperations' must be an array of operation names")
            }
            table.disabledOperations = []
            for entry in names {
                guard case .string(let text) = entry, let operation = TableOperation(rawValue: text) else {
                    throw ConfigurationError(
                        "\(context): unknown operation \(entry.serialized()) (use \(TableOperation.allCases.map(\.rawValue).joined(separator: ", ")))"
                    )
                }
                table.disabledOperations.insert(operation)
            }
        }
        if let value = object["fields"] {
            guard case .object(let fields) = value else {
                throw ConfigurationError("\(context): 'fields' must be an object")
            }
            table.fields = [:]
            for (field, spec) in fields { table.fields[field] = try rule(spec, field: field, context: context) }
        }
        return table
    }

    static func rule(_ spec: JSONValue, field: String, context: String) throws(ConfigurationError) -> FieldRule {
        let where_ = "\(context), field '\(field)'"
        if case .string(let typeName) = spec { return FieldRule(type: try type(typeName, cases: nil, where_)) }
        guard case .object(let object) = spec else {
            throw ConfigurationError("\(where_): a field is a type name or an object with a 'type'")
        }
        try checkKeys(
            object, allowed: ["type", "cases", "required", "minimum", "maximum", "minLength", "maxLength", "allowed"],
            context: where_)
        guard case .string(let typeName)? = object["type"] else {
            throw ConfigurationError("\(where_): 'type' is missing")
        }
        var cases: [String]?
        if let value = object["cases"] {
            guard case .array(let list) = value else {
                throw ConfigurationError("\(where_): 'cases' must be an array of strings")
            }
            cases = []
            for entry in list {
                guard case .string(let text) = entry else {
                    throw ConfigurationError("\(where_): 'cases' must be an array of strings")
                }
                cases?.append(text)
            }
        }
        var rule = FieldRule(type: try type(typeName, cases: cases, where_))
        if let value = object["required"] { rule.required = try bool(value, "required", where_) }
        if let value = object["minimum"] { rule.minimum = try number(value, "minimum", where_) }
        if let value = object["maximum"] { rule.maximum = try number(value, "maximum", where_) }
        if let value = object["minLength"] { rule.minimumLength = try int(value, "minLength", where_) }
        if let value = object["maxLength"] { rule.maximumLength = try int(value, "maxLength", where_) }
        if let value = object["allowed"] {
            guard case .array(let list) = value else {
                throw ConfigurationError("\(where_): 'allowed' must be an array")
            }
            rule.allowedValues = list
        }
        return rule
    }

    static func type(_ name: String, cases: [String]?, _ context: String) throws(ConfigurationError) -> FieldType {
        switch name.lowercased() {
        case "string": return .string
        case "integer", "int": return .integer
        case "double", "number": return .double
        case "bool", "boolean": return .bool
        case "date": return .date
        case "datetimeoffset", "datetime": return .dateTimeOffset
        case "timeofday", "time": return .timeOfDay
        case "guid", "uuid": return .guid
        case "json": return .json
        case "enum", "enumeration":
            guard let cases, !cases.isEmpty else { throw ConfigurationError("\(context): an enum needs 'cases'") }
            return .enumeration(cases)
        default:
            throw ConfigurationError(
                "\(context): unknown type '\(name)' (use string, integer, double, bool, date, dateTimeOffset, timeOfDay, guid, json or enum)"
            )
        }
    }

    static func checkKeys(_ object: JSONObject, allowed: Set<String>, context: String) throws(ConfigurationError) {
        for key in object.keys.sorted() where !allowed.contains(key) {
            throw ConfigurationError(
                "\(context): unknown setting '\(key)' (known: \(allowed.sorted().joined(separator: ", ")))")
        }
    }

    static func bool(_ value: JSONValue, _ key: String, _ context: String) throws(ConfigurationError) -> Bool {
        guard case .bool(let flag) = value else {
            throw ConfigurationError("\(context): '\(key)' must be true or false")
        }
        return flag
    }

    static func int(_ value: JSONValue, _ key: String, _ context: String) throws(ConfigurationError) -> Int {
        guard case .int(let number) = value, let result = Int(exactly: number) else {
            throw ConfigurationError("\(context): '\(key)' must be an integer")
        }
        return result
    }

    static func number(_ value: JSONValue, _ key: String, _ context: String) throws(ConfigurationError) -> Double {
        guard let number = value.doubleValue else { throw ConfigurationError("\(context): '\(key)' must be a number") }
        return number
    }

    static func string(_ value: JSONValue, _ key: String, _ context: String) throws(ConfigurationError) -> String {
        guard case .string(let text) = value else { throw ConfigurationError("\(context): '\(key)' must be a string") }
        return text
    }
}
