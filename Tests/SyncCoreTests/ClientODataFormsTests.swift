import StoreConformance
import Testing

@testable import SyncCore

/// The exact query strings that existing clients emit (`client-odata-forms.json`) and the peers' query cases
/// (`query-cases.json`), replayed through the parser and the encoder.
@Suite("Peer OData data")
struct ClientODataFormsTests: ODataTestSupport {
    /// A fixed GUID for the `{comparison:D}` placeholder that the data kept from a C# interpolated string.
    static let placeholderGUID = "3f2504e0-4f89-11d3-9a0c-0305e82c3301"

    /// Client strings that are not valid queries; every other string must parse and round-trip.
    ///
    /// azure-query-js forwards raw `where("…")` text verbatim, and its test asserts exactly that forwarding:
    /// `'?` is an unterminated string literal, and a lone string literal can never be a Boolean filter.
    static let invalidClientStrings: [String: QueryError.Code] = [
        "$filter=('?)": .syntax,
        "$filter=('john')": .typeMismatch,
    ]

    static func protocolVersion(_ protocolName: String?) -> ProtocolVersion {
        protocolName == "2.0" ? .v2 : .v3
    }

    @Test(
        "every client form parses and re-encodes to the same query",
        .enabled(if: PeerData.isAvailable, PeerData.missingNotice)
    )
    func clientForms() throws {
        let forms = try #require(try PeerData.load("client-odata-forms.json").arrayValue)
        #expect(forms.count == 252)
        var roundTripped = 0
        var rejectedAsExpected = 0
        for form in forms {
            let raw = try #require(form["query"]?.stringValue)
            let protocolVersion = Self.protocolVersion(form["protocol"]?.stringValue)
            let text = raw.replacing("{comparison:D}", with: Self.placeholderGUID)
            if let code = Self.invalidClientStrings[raw] {
                expectQueryError(code) { _ = try TableQuery(odata: text, protocolVersion: protocolVersion) }
                rejectedAsExpected += 1
                continue
            }
            do {
                let parsed = try TableQuery(odata: text, protocolVersion: protocolVersion)
                let encoded = parsed.odataQueryString(protocolVersion: protocolVersion)
                let reparsed = try TableQuery(odata: encoded, protocolVersion: protocolVersion)
                #expect(reparsed == parsed, "\(protocolVersion.rawValue) \(raw) → \(encoded)")
                if reparsed == parsed { roundTripped += 1 }
            } catch {
                Issue.record("\(protocolVersion.rawValue) \(raw): \(error)")
            }
        }
        #expect(roundTripped == 250)
        #expect(rejectedAsExpected == 2)
    }

    @Test("client forms parse to the expected trees")
    func selectedClientForms() throws {
        let v3 = try TableQuery(
            odata:
                "$filter=((rating eq 'G') and (updatedAt gt cast(2024-08-23T20:22:54.291Z,Edm.DateTimeOffset)))&$orderby=updatedAt&$count=true&__includedeleted=true",
            protocolVersion: .v3
        )
        #expect(
            v3
                == TableQuery(
                    filter: binary(
                        .and,
                        binary(.equal, field("rating"), string("G")),
                        binary(.greaterThan, field("updatedAt"), instant("2024-08-23T20:22:54.291Z"))
                    ),
                    orderBy: [.field("updatedAt")],
                    includeTotalCount: true,
                    includeDeleted: true
                )
        )
        let encoded = try TableQuery(
            odata: "$filter=stringProperty%20in%20%28%27A%27%2C%27B%27%29", protocolVersion: .v3)
        #expect(encoded.filter == .isIn(field("stringProperty"), [string("A"), string("B")]))
        let v2 = try TableQuery(odata: "$filter=(author eq 'escapes%20%22s')", protocolVersion: .v2)
        #expect(v2.filter == binary(.equal, field("author"), string("escapes \"s")))
        let hash = try TableQuery(
            odata: "$filter=(title eq 'How%20to%20dial%20this%20%23%20%26%20such%20stuff%3F')",
            protocolVersion: .v2
        )
        #expect(hash.filter == binary(.equal, field("title"), string("How to dial this # & such stuff?")))
    }

    @Test(
        "every peer query and paging case parses",
        .enabled(if: PeerData.isAvailable, PeerData.missingNotice)
    )
    func peerQueryCases() throws {
        let cases = try #require(try PeerData.load("query-cases.json").arrayValue)
        #expect(cases.count == 774)
        var parsed = 0
        for entry in cases {
            guard let kind = entry["kind"]?.stringValue, kind == "query" || kind == "paging" else { continue }
            let query = try #require(entry["query"]?.stringValue)
            let protocolVersion = Self.protocolVersion(entry["protocol"]?.stringValue)
            if query.contains("geo.distance") {
                // Recognised, but Ferry does not evaluate geospatial functions.
                expectQueryError(.unsupported, option: "$filter") {
                    _ = try TableQuery(odata: query, protocolVersion: protocolVersion)
                }
                continue
            }
            do {
                let value = try TableQuery(odata: query, protocolVersion: protocolVersion)
                #expect(
                    try TableQuery(
                        odata: value.odataQueryString(protocolVersion: protocolVersion),
                        protocolVersion: protocolVersion) == value)
                parsed += 1
            } catch {
                Issue.record("\(entry["name"]?.stringValue ?? "?"): \(query): \(error)")
            }
        }
        #expect(parsed == 735)
    }

    /// 400s that need a table schema (unknown fields) or the server's maximum `$top`: not the parser's job.
    static let serverSideErrors: Set<String> = [
        "$filter=missing eq 20", "$orderby=missing asc", "$select=foo", "$top=1000000",
    ]

    @Test(
        "every peer 400 about query syntax fails to parse",
        .enabled(if: PeerData.isAvailable, PeerData.missingNotice)
    )
    func peerErrorCases() throws {
        let cases = try #require(try PeerData.load("query-cases.json").arrayValue)
        var rejected = 0
        for entry in cases {
            guard entry["kind"]?.stringValue == "error", entry["expectedStatus"]?.intValue == 400 else { continue }
            let query = try #require(entry["query"]?.stringValue)
            guard !Self.serverSideErrors.contains(query) else {
                #expect(throws: Never.self) { try TableQuery(odata: query, protocolVersion: .v3) }
                continue
            }
            let protocolVersion = Self.protocolVersion(entry["protocol"]?.stringValue)
            if queryError({ _ = try TableQuery(odata: query, protocolVersion: protocolVersion) }) != nil {
                rejected += 1
            } else {
                Issue.record("\(query) parsed, but the peers answer 400")
            }
        }
        #expect(rejected == 21)
    }
}
