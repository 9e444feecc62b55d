import FerryServer
import Foundation
import ServerStorageCore
import StoreConformance
import ServerTestSupport
import SyncCore
import Testing

// The tables each peer case runs on: the movie model's rules per dataset, and a server seeded with the
// case's data.
extension PeerCrudHTTPTests {
    /// The movie model's validation rules (title 2…60 characters, year 1920…2030, duration 60…360,
    /// all required; ratings per dataset).
    static func movieFields(toolkit: Bool) -> [String: FieldRule] {
        var fields: [String: FieldRule] = [
            "title": FieldRule(type: .string, required: true, minimumLength: 2, maximumLength: 60),
            "year": FieldRule(type: .integer, required: true, minimum: 1920, maximum: 2030),
            "duration": FieldRule(type: .integer, required: true, minimum: 60, maximum: 360),
            "bestPictureWinner": FieldRule(type: .bool),
            "releaseDate": FieldRule(type: toolkit ? .date : .dateTimeOffset),
        ]
        fields["rating"] =
            toolkit
            ? FieldRule(type: .enumeration(["Unrated", "G", "PG", "PG13", "NC17", "R"]))
            : FieldRule(type: .string, allowedValues: [.null, "G", "PG", "PG-13", "R", "NC-17"])
        return fields
    }

    struct Setup {
        var tables: [TableSettings] = []
        var seeds: [(table: String, dataset: String)] = []
        var dynamicDefaults = TableSettings(name: "*")
    }

    static func setup(for peerCase: JSONObject, name: String) -> (Setup, tablePath: String) {
        var setup = Setup()
        let table = peerCase["table"]?.objectValue
        let path = table?["path"]?.stringValue ?? ""
        let dataset = table?["dataset"]?.stringValue ?? ""
        let setupText = (peerCase["setup"]?.arrayValue ?? []).compactMap(\.stringValue).joined(separator: "; ")
        func movies(_ tableName: String, toolkit: Bool) -> TableSettings {
            var settings = TableSettings(
                name: tableName, softDelete: table?["softDelete"]?.boolValue ?? false,
                pageSize: Int(table?["pageSize"]?.intValue ?? 100), maxTop: 512_000,
                fields: movieFields(toolkit: toolkit), additionalFields: false)
            if let view = table?["dataView"]?.stringValue { settings.dataView = view }
            if let status = table?["unauthorizedStatus"]?.intValue {
                settings.requiresAuth = true
                settings.unauthorizedStatus = Int(status)
            }
            if setupText.contains("dataView = (id == {id})") { settings.dataView = "id eq '\(movieID)'" }
            if setupText.contains("dataView excludes {id}") { settings.dataView = "id ne '\(movieID)'" }
            if setupText.contains("IsAuthorized returns false") { settings.requiresAuth = true }
            return settings
        }
        if name.hasPrefix("net2.") {
            let net2 = TableSettings(
                name: "net2", fields: ["stringValue": FieldRule(type: .string), "intValue": FieldRule(type: .integer)],
                additionalFields: false)
            let moviesTable = TableSettings(name: "net2movies")
            setup.tables = [net2, moviesTable]
            return (setup, "tables/net2")
        }
        switch dataset {
        case "movies-toolkit", "movies-azure":
            let tableName = path.split(separator: "/").last.map(String.init) ?? "movies"
            setup.tables = [movies(tableName, toolkit: dataset == "movies-toolkit")]
            setup.seeds = [(tableName, dataset)]
            return (setup, "tables/\(tableName)")
        case "datetime-azure":
            setup.tables = [
                TableSettings(
                    name: "datetime",
                    fields: ["dateOnly": FieldRule(type: .date), "timeOnly": FieldRule(type: .timeOfDay)])
            ]
            setup.seeds = [("datetime", dataset)]
            return (setup, "tables/datetime")
        case "kitchensink (empty unless seeded)":
            setup.tables = [TableSettings(name: "kitchensink")]
            return (setup, "tables/kitchensink")
        default:
            // The Node cases: tables named in the steps, configured as the case says.
            var settings = TableSettings(
                name: "*", softDelete: table?["softDelete"]?.boolValue ?? false,
                pageSize: Int(table?["pageSize"]?.intValue ?? 50), maxTop: Int(table?["maxTop"]?.intValue ?? 1000),
                perUser: table?["perUser"]?.boolValue ?? false)
            let notes = peerCase["notes"]?.stringValue ?? ""
            if notes.contains("maxTop=0") { settings.maxTop = 0 }
            if notes.contains("read disabled") { settings.disabledOperations = [.query, .read] }
            if settings.perUser { settings.requiresAuth = false }
            setup.dynamicDefaults = settings
            if !name.contains("unregistered table") {
                var names: Set<String> = []
                for step in peerCase["request"]?["steps"]?.arrayValue ?? [] {
                    if let stepPath = step["path"]?.stringValue {
                        let parts = stepPath.split(separator: "/")
                        if parts.count >= 2 { names.insert(String(parts[1])) }
                    }
                }
                setup.tables = names.sorted().map { name in
                    var declared = settings
                    declared.name = name
                    return declared
                }
            }
            return (setup, "tables/{name}")
        }
    }

    static func start(_ setup: Setup, dataSetup: [String], backend: ServerBackend) async throws -> LiveServer {
        // The peers have registered tables only: a table the case does not declare does not exist.
        try await LiveServer.start(
            tables: setup.tables, allowsDynamicTables: false, dynamicDefaults: setup.dynamicDefaults, backend: backend
        ) { storage in
            for (tableName, dataset) in setup.seeds {
                let settings = setup.tables.first { $0.name == tableName }!
                let table = StorageTable(name: tableName, schema: settings.schema)
                for item in try PeerDataset.load(dataset).items {
                    guard let id = item.id else { continue }
                    var content = item
                    for property in SystemProperty.allCases { content[property.rawValue] = nil }
                    let stored = try await storage.insert(into: table, id: id, content: content, owner: nil)
                    if dataSetup.contains(where: { $0.hasPrefix("mark {id} deleted=true") }), id == movieID {
                        _ = try await storage.replace(
                            in: table, id: id, expectedVersion: stored.version, content: content, deleted: true,
                            owner: .all)
                    }
                }
            }
            if let net2 = setup.tables.first(where: { $0.name == "net2" }) {
                _ = try await storage.insert(
                    into: StorageTable(name: "net2", schema: net2.schema), id: movieID,
                    content: ["stringValue": "Apple", "intValue": 1], owner: nil)
                for index in 0..<11 {
                    _ = try await storage.insert(
                        into: StorageTable(name: "net2movies"), id: "m\(index)",
                        content: [
                            "Name": .string("Movie \(String(10 - index))"), "Category": "Drama",
                            "ReleaseDate": "2000-01-01T00:00:00.000Z", "Rating": "PG",
                        ], owner: nil)
                }
            }
            if setup.tables.contains(where: { $0.name == "kitchensink" }) {
                _ = try await storage.insert(
                    into: StorageTable(name: "kitchensink"), id: "ks-serialization", content: kitchenSink, owner: nil)
            }
        }
    }

    static let kitchenSink: JSONObject = [
        "booleanValue": true, "byteValue": 42, "byteArrayValue": "AQIDBA==", "charValue": "a",
        "dateOnlyValue": "2023-12-15", "dateTimeValue": "2023-12-20T10:26:30.231Z",
        "dateTimeOffsetValue": "2023-12-20T10:21:05.421Z", "decimalValue": 42.42, "doubleValue": 42.42,
        "enumValue": "Completed", "floatValue": 42.42, "guidValue": "29386779-34b1-464a-bb5b-4053c2ee61b3",
        "intValue": 42, "longValue": 42, "nullableDouble": .null, "nullableEnumValue": .null,
        "pointValue": ["type": "Point", "coordinates": [-122.333056, 47.609722]], "stringValue": "state=none",
        "timeOnlyValue": "09:52:35.321",
    ]
}
