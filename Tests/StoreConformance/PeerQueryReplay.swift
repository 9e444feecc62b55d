public import SyncCore

/// One case of `query-cases.json`: a query the peers' own tests sent, and what they asserted.
public struct PeerQueryCase: Sendable {
    public var name: String
    public var protocolVersion: ProtocolVersion
    public var kind: String
    public var dataset: String
    public var pageSize: Int
    public var maxTop: Int
    /// Rated-R movies are soft-deleted before the request.
    public var deletesRatedR: Bool
    /// The table's data view: a filter the server ANDs into every query (3.0 access control).
    public var dataView: String?
    /// `X-ZUMO-Options: include:deleted`, the v5 header form of `__includedeleted=true`.
    public var includeDeletedHeader: Bool
    public var query: String
    public var expectedStatus: Int
    /// `.some(nil)`: the count must be absent; `nil`: not asserted.
    public var expectedCount: Int??
    public var expectedItemCount: Int?
    /// `.some(nil)`: no next link; `nil`: not asserted.
    public var expectedNextLink: String??
    public var expectedFirstIDs: [String]?
    public var firstIDsOrdered: Bool
    public var expectedTotalItemsAfterPaging: Int?
    public var expectedPages: Int?
    /// Whether the independent replay reproduced the case (the others need auth, an unknown-table
    /// status or geo.distance).
    public var replayable: Bool

    /// All cases of `query-cases.json`.
    public static func loadAll() throws -> [PeerQueryCase] {
        guard let cases = try PeerData.load("query-cases.json").arrayValue else {
            throw PeerDataError(message: "query-cases.json is not an array")
        }
        return try cases.map { value in
            guard let object = value.objectValue, let name = object["name"]?.stringValue,
                let table = object["table"]?.objectValue
            else { throw PeerDataError(message: "a query case lacks a name or table") }
            func optionalInt(_ key: String) -> Int?? {
                guard let value = object[key] else { return nil }
                return .some(value.intValue.map { Int($0) })
            }
            return PeerQueryCase(
                name: name,
                protocolVersion: object["protocol"]?.stringValue == "2.0" ? .v2 : .v3,
                kind: object["kind"]?.stringValue ?? "query",
                dataset: table["dataset"]?.stringValue ?? "",
                pageSize: Int(table["pageSize"]?.intValue ?? 100),
                maxTop: Int(table["maxTop"]?.intValue ?? 128_000),
                deletesRatedR: object["setup"]?.stringValue?.contains("marked deleted=true") ?? false,
                dataView: table["dataView"]?.stringValue,
                includeDeletedHeader: object["headers"]?["X-ZUMO-Options"]?.stringValue?.contains("include:deleted")
                    ?? false,
                query: object["query"]?.stringValue ?? "",
                expectedStatus: Int(object["expectedStatus"]?.intValue ?? 200),
                expectedCount: optionalInt("expectedCount"),
                expectedItemCount: object["expectedItemCount"]?.intValue.map { Int($0) },
                expectedNextLink: object["expectedNextLink"].map { $0.stringValue },
                expectedFirstIDs: object["expectedFirstIds"]?.arrayValue?.compactMap(\.stringValue),
                firstIDsOrdered: object["firstIdsOrdered"]?.boolValue ?? true,
                expectedTotalItemsAfterPaging: object["expectedTotalItemsAfterPaging"]?.intValue.map { Int($0) },
                expectedPages: object["expectedPages"]?.intValue.map { Int($0) },
                replayable: object["researchReplay"]?.stringValue == "pass")
        }
    }
}

/// A peer dataset as a Ferry table: items plus the typed, closed schema the peer's model implies.
public struct PeerDataset: Sendable {
    public var definition: TableDefinition
    public var items: [JSONObject]

    /// Builds one of the datasets of `datasets.json`. With `deletesRatedR`, rated-R movies are
    /// soft-deleted.
    public static func load(_ name: String, deletesRatedR: Bool = false) throws -> PeerDataset {
        let updatedAt = JSONValue.string("2024-01-01T00:00:00.000Z")
        func system(_ item: inout JSONObject, index: Int) {
            item["updatedAt"] = updatedAt
            item["version"] = .string("v\(index)")
            item["deleted"] = false
        }
        switch name {
        case "movies-toolkit", "movies-azure":
            guard let movies = try PeerData.load("movies.json").arrayValue else {
                throw PeerDataError(message: "movies.json is not an array")
            }
            let toolkit = name == "movies-toolkit"
            var items: [JSONObject] = []
            for (index, movie) in movies.enumerated() {
                guard let source = movie.objectValue else { continue }
                var item: JSONObject = [:]
                for key in ["id", "title", "year", "duration", "bestPictureWinner"] { item[key] = source[key] ?? .null }
                let release = source["releaseDate"]?.stringValue ?? ""
                item["releaseDate"] = .string(toolkit ? release : release + "T00:00:00.000Z")
                item["rating"] = toolkit ? (source["ratingEnum"] ?? .null) : (source["rating"] ?? .null)
                system(&item, index: index)
                if deletesRatedR, source["rating"]?.stringValue == "R" { item["deleted"] = true }
                items.append(item)
            }
            let fields: [String: FieldType] = [
                "title": .string, "year": .integer, "duration": .integer, "bestPictureWinner": .bool,
                "releaseDate": toolkit ? .date : .dateTimeOffset,
                "rating": toolkit ? .enumeration(["Unrated", "G", "PG", "PG13", "NC17", "R"]) : .string,
            ]
            return PeerDataset(
                definition: TableDefinition(
                    name: "movies", schema: TableSchema(fields: fields, allowsUndeclaredFields: false)),
                items: items)
        case "datetime-azure", "kitchensink-dates":
            let azure = name == "datetime-azure"
            let dateField = azure ? "dateOnly" : "dateOnlyValue"
            let timeField = azure ? "timeOnly" : "timeOnlyValue"
            let start = CalendarDate(year: 2022, month: 1, day: 1)!.daysSince1970
            var items: [JSONObject] = []
            for index in 0..<365 {
                let date = CalendarDate(daysSince1970: start + index)
                let time = TimeOfDay(hour: date.month, minute: date.day)!
                var item: JSONObject = [
                    "id": .string((azure ? "dtm-" : "id-") + String(index).leftPadded(3)),
                    dateField: .string(date.iso8601), timeField: .string(time.iso8601),
                ]
                system(&item, index: index)
                items.append(item)
            }
            return PeerDataset(
                definition: TableDefinition(
                    name: "datetimes",
                    schema: TableSchema(
                        fields: [dateField: .date, timeField: .timeOfDay], allowsUndeclaredFields: false)),
                items: items)
        case "countries":
            guard let countries = try PeerData.load("countries-min.json").arrayValue else {
                throw PeerDataError(message: "countries-min.json is not an array")
            }
            var items: [JSONObject] = []
            for (index, country) in countries.enumerated() {
                guard let source = country.objectValue else { continue }
                var item: JSONObject = ["id": source["id"] ?? .null, "stringValue": source["stringValue"] ?? .null]
                system(&item, index: index)
                items.append(item)
            }
            return PeerDataset(
                definition: TableDefinition(
                    name: "countries",
                    schema: TableSchema(fields: ["stringValue": .string], allowsUndeclaredFields: false)),
                items: items)
        default:
            throw PeerDataError(message: "unknown dataset '\(name)'")
        }
    }
}

/// Replays the peers' query cases the way their servers answer them (page size, maximum `$top`,
/// total count, 3.0 next links), with the actual querying done by `execute`: the evaluator or a store.
public enum PeerQueryReplay: Sendable {
    /// The result of a replay.
    public struct Outcome: Sendable {
        public var passed: Int
        public var failures: [(name: String, reason: String)]
        public var summary: String { "peer query replay: \(passed) passed, \(failures.count) failed" }
    }

    /// Runs `cases`. `execute(case, query)` answers one page; a `QueryError` or a `StoreError`
    /// with code `invalidQuery` counts as a 400.
    public static func run(
        _ cases: [PeerQueryCase],
        execute: (PeerQueryCase, TableQuery) async throws -> QueryResult
    ) async -> Outcome {
        var outcome = Outcome(passed: 0, failures: [])
        for peerCase in cases {
            do {
                if let reason = try await check(peerCase, execute: execute) {
                    outcome.failures.append((peerCase.name, reason))
                } else {
                    outcome.passed += 1
                }
            } catch {
                outcome.failures.append((peerCase.name, "unexpected error: \(error)"))
            }
        }
        return outcome
    }

    /// One page as a server answers it: status, items, count and next link.
    struct Page {
        var status: Int
        var result = QueryResult(items: [])
        var count: Int?
        var nextLink: String?
    }

    static func page(
        _ peerCase: PeerQueryCase, queryString: String,
        execute: (PeerQueryCase, TableQuery) async throws -> QueryResult
    ) async throws -> Page {
        let query: TableQuery
        do {
            query = try TableQuery(odata: queryString, protocolVersion: peerCase.protocolVersion)
        } catch {
            return Page(status: 400)
        }
        if let top = query.top, top > peerCase.maxTop { return Page(status: 400) }
        var effective = query
        effective.top = min(query.top ?? peerCase.pageSize, peerCase.pageSize)
        effective.includeTotalCount = true
        if peerCase.includeDeletedHeader { effective.includeDeleted = true }
        if let dataView = peerCase.dataView {
            let view = try QueryExpression(odataFilter: dataView, protocolVersion: .v3)
            effective.filter = effective.filter.map { .binary(.and, view, $0) } ?? view
        }
        let result: QueryResult
        do {
            result = try await execute(peerCase, effective)
        } catch let error as QueryError {
            _ = error
            return Page(status: 400)
        } catch let error as StoreError where error.code == .invalidQuery {
            return Page(status: 400)
        }
        let total = result.totalCount ?? 0
        let skip = (query.skip ?? 0) + result.items.count
        var nextLink: String?
        if let top = query.top {
            let remaining = top - result.items.count
            if skip < total && remaining > 0 {
                nextLink = ODataParameters(parsing: queryString).nextPage(skip: skip, top: remaining)
            }
        } else if skip < total {
            nextLink = ODataParameters(parsing: queryString).nextPage(skip: skip, top: nil)
        }
        return Page(
            status: 200, result: result, count: query.includeTotalCount ? total : nil,
            nextLink: peerCase.protocolVersion == .v3 ? nextLink : nil)
    }

    /// `nil` when the case passes, else the reason it fails.
    static func check(
        _ peerCase: PeerQueryCase,
        execute: (PeerQueryCase, TableQuery) async throws -> QueryResult
    ) async throws -> String? {
        if peerCase.kind == "paging" {
            var queryString = peerCase.query
            var pages = 0
            var ids = Set<String>()
            var total = 0
            while true {
                let page = try await page(peerCase, queryString: queryString, execute: execute)
                guard page.status == 200 else { return "page \(pages + 1): status \(page.status)" }
                pages += 1
                total += page.result.items.count
                for item in page.result.items {
                    guard let id = item.id, ids.insert(id).inserted else { return "duplicate id on page \(pages)" }
                }
                guard let next = page.nextLink else { break }
                if pages > 1000 { return "more than 1000 pages" }
                queryString = next
            }
            if let expected = peerCase.expectedPages, expected != pages {
                return "pages \(pages), expected \(expected)"
            }
            if let expected = peerCase.expectedTotalItemsAfterPaging, expected != total {
                return "items \(total), expected \(expected)"
            }
            return nil
        }
        let page = try await page(peerCase, queryString: peerCase.query, execute: execute)
        if page.status != peerCase.expectedStatus {
            return "status \(page.status), expected \(peerCase.expectedStatus)"
        }
        if page.status != 200 { return nil }
        if case .some(let expected) = peerCase.expectedCount, expected != page.count {
            return "count \(page.count.map(String.init) ?? "null"), expected \(expected.map(String.init) ?? "null")"
        }
        if let expected = peerCase.expectedItemCount, expected != page.result.items.count {
            return "item count \(page.result.items.count), expected \(expected)"
        }
        if let expected = peerCase.expectedFirstIDs {
            let actual = page.result.items.prefix(expected.count).compactMap(\.id)
            let matches = peerCase.firstIDsOrdered ? actual == expected : Set(actual) == Set(expected)
            if !matches { return "first ids \(actual), expected \(expected)" }
        }
        if peerCase.protocolVersion == .v3, case .some(let expected) = peerCase.expectedNextLink {
            if !sameParameters(page.nextLink, expected) {
                return "nextLink \(page.nextLink ?? "null"), expected \(expected ?? "null")"
            }
        }
        return nil
    }

    /// Compares two query strings as multisets of decoded parameters.
    public static func sameParameters(_ lhs: String?, _ rhs: String?) -> Bool {
        guard let lhs, let rhs else { return lhs == nil && rhs == nil }
        func normalized(_ text: String) -> [String] {
            ODataParameters(parsing: text).items.map { "\($0.name)=\($0.value)" }.sorted()
        }
        return normalized(lhs) == normalized(rhs)
    }
}

extension String {
    func leftPadded(_ width: Int) -> String {
        String(repeating: "0", count: max(0, width - count)) + self
    }
}
