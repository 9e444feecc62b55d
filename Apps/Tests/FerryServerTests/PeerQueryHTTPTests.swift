import FerryServer
import Foundation
import ServerStorageCore
import StoreConformance
import ServerTestSupport
import SyncCore
import Testing

/// Replays the peers' 774 query cases (`query-cases.json`) against the reference server over real
/// loopback HTTP, with the datasets and table settings of `datasets.json`.
@Suite("Peer query cases over HTTP", .timeLimit(.minutes(10)))
struct PeerQueryHTTPTests {
    /// Cases where Ferry deliberately answers differently; each is explained in
    /// docs/server-peer-differences.md.
    static let deliberateDifferences: [String: String] = [
        "ct.service.KitchenSinkQueryTest_019": "geo.distance is not supported (400 with a clear message)"
    ]

    /// One server table per distinct peer table of the cases.
    struct PeerTable: Hashable {
        var name: String
        var dataset: String
        var pageSize: Int
        var maxTop: Int
        var softDelete: Bool
        var deletesRatedR: Bool
        var dataView: String?
        var unauthorizedStatus: Int?
    }

    struct Case {
        var peer: PeerQueryCase
        var table: PeerTable?
        var path: String
        var headers: [(String, String)]
        var responseShape: String?
    }

    static func loadCases() throws -> [Case] {
        let peers = try PeerQueryCase.loadAll()
        guard let raw = try PeerData.load("query-cases.json").arrayValue, raw.count == peers.count else {
            throw ReplayError(description: "query-cases.json changed shape")
        }
        return zip(peers, raw).map { peer, value in
            let object = value.objectValue ?? [:]
            let tableObject = object["table"]?.objectValue ?? [:]
            let peerPath = object["peerPath"]?.stringValue ?? ""
            var table: PeerTable?
            if let dataset = tableObject["dataset"]?.stringValue {
                var status: Int?
                if let authorization = tableObject["authorization"]?.stringValue {
                    status = Int(authorization.split(separator: " ").last ?? "") ?? 401
                }
                let base = peerPath.split(separator: "/").last.map(String.init) ?? "t"
                var name = (peer.name.hasPrefix("ct.") ? "ct_" : "az_") + base + "_" + dataset
                if peer.deletesRatedR { name += "_rdeleted" }
                name = String(name.map { $0.isLetter || $0.isNumber || $0 == "_" ? $0 : "_" })
                table = PeerTable(
                    name: name, dataset: dataset, pageSize: peer.pageSize, maxTop: peer.maxTop,
                    softDelete: tableObject["softDelete"]?.boolValue ?? false, deletesRatedR: peer.deletesRatedR,
                    dataView: peer.dataView, unauthorizedStatus: status)
            }
            var headers: [(String, String)] = []
            for (name, header) in object["headers"]?.objectValue ?? [:] {
                guard let text = header.stringValue else { continue }
                if name == "X-Auth" {
                    // The peer's test principal that fails authorization: a token signed with another secret.
                    headers.append(("X-ZUMO-AUTH", LiveServer.token("failed", secret: "another-secret-0123456789")))
                } else {
                    headers.append((name, text))
                }
            }
            if object["auth"]?["user"]?.stringValue == "success" {
                headers.append(("Authorization", "Bearer " + LiveServer.token("success")))
            }
            let path = table.map { "/tables/\($0.name)" } ?? "/" + peerPath
            return Case(
                peer: peer, table: table, path: path, headers: headers,
                responseShape: object["responseShape"]?.stringValue)
        }
    }

    static func settings(_ table: PeerTable) throws -> TableSettings {
        let dataset = try PeerDataset.load(table.dataset)
        return TableSettings(
            name: table.name, softDelete: table.softDelete, pageSize: table.pageSize, maxTop: table.maxTop,
            requiresAuth: table.unauthorizedStatus != nil, unauthorizedStatus: table.unauthorizedStatus ?? 401,
            dataView: table.dataView,
            fields: dataset.definition.schema.fields.mapValues { FieldRule(type: $0) },
            additionalFields: dataset.definition.schema.allowsUndeclaredFields)
    }

    /// Fills `table` with its dataset through the storage protocol.
    static func seed(_ storage: any ServerStorage, _ table: PeerTable) async throws {
        let dataset = try PeerDataset.load(table.dataset, deletesRatedR: table.deletesRatedR)
        let settings = try settings(table)
        let target = StorageTable(name: table.name, schema: settings.schema)
        for item in dataset.items {
            guard let id = item.id else { continue }
            var content = item
            for property in SystemProperty.allCases { content[property.rawValue] = nil }
            let stored = try await storage.insert(into: target, id: id, content: content, owner: nil)
            if item.isDeleted {
                _ = try await storage.replace(
                    in: target, id: id, expectedVersion: stored.version, content: content, deleted: true, owner: .all)
            }
        }
    }

    @Test(
        "peer query cases over HTTP", .enabled(if: PeerData.isAvailable, PeerData.missingNotice),
        arguments: ServerBackend.allCases)
    func replay(_ backend: ServerBackend) async throws {
        let cases = try Self.loadCases()
        let tables = Array(Set(cases.compactMap(\.table))).sorted { $0.name < $1.name }
        // The peers have registered tables only: a table the cases do not declare does not exist.
        let server = try await LiveServer.start(
            tables: try tables.map(Self.settings), allowsDynamicTables: false, backend: backend
        ) { storage in
            for table in tables { try await Self.seed(storage, table) }
        }
        var failures: [(name: String, reason: String)] = []
        for peerCase in cases {
            if let reason = try await Self.check(peerCase, on: server) { failures.append((peerCase.peer.name, reason)) }
        }
        try await server.stop()

        let unexpected = failures.filter { Self.deliberateDifferences[$0.name] == nil }
        let passed = cases.count - failures.count
        print("peer query cases over HTTP on \(backend): \(passed) passed, \(failures.count) failed")
        for failure in failures {
            let note = Self.deliberateDifferences[failure.name].map { " [deliberate: \($0)]" } ?? ""
            print("  FAIL \(failure.name): \(failure.reason)\(note)")
        }
        #expect(unexpected.isEmpty, "\(unexpected.count) cases failed that are not documented differences")
        #expect(cases.count == 774)
        let failedNames = Set(failures.map(\.name))
        for name in Self.deliberateDifferences.keys {
            #expect(failedNames.contains(name), "'\(name)' is listed as a difference but now passes")
        }
    }

    /// `nil` when the case passes, else why not.
    static func check(_ peerCase: Case, on server: LiveServer) async throws -> String? {
        let peer = peerCase.peer
        if peer.kind == "paging" {
            var target = peerCase.path + "?" + encodedQuery(peer.query)
            var pages = 0
            var ids: Set<String> = []
            var total = 0
            while true {
                let reply = try await server.send("GET", target, headers: peerCase.headers)
                guard reply.status == 200 else { return "page \(pages + 1): status \(reply.status)" }
                let page = try Page(reply, peer.protocolVersion)
                pages += 1
                total += page.items.count
                for item in page.items {
                    guard let id = item.id, ids.insert(id).inserted else { return "duplicate id on page \(pages)" }
                }
                guard let next = page.nextLink else { break }
                if pages > 100 { return "more than 100 pages" }
                let query = next.contains("?") ? String(next[next.index(after: next.firstIndex(of: "?")!)...]) : next
                target = peerCase.path + "?" + query
            }
            if let expected = peer.expectedPages, expected != pages { return "pages \(pages), expected \(expected)" }
            if let expected = peer.expectedTotalItemsAfterPaging, expected != total {
                return "items \(total), expected \(expected)"
            }
            return nil
        }
        let query = peer.query.isEmpty ? "" : "?" + encodedQuery(peer.query)
        let reply = try await server.send("GET", peerCase.path + query, headers: peerCase.headers)
        guard reply.status == peer.expectedStatus else {
            return "status \(reply.status), expected \(peer.expectedStatus): \(reply.text.prefix(200))"
        }
        guard reply.status == 200 else {
            return reply.json?["error"]?.stringValue?.isEmpty == false ? nil : "no JSON error message"
        }
        let page = try Page(reply, peer.protocolVersion)
        if let shape = peerCase.responseShape {
            let isArray = shape == "bare JSON array"
            let isResults = shape.hasPrefix("{\"results\"")
            if isArray != (page.shape == .array) || isResults != (page.shape == .results) {
                return "response shape \(page.shape), expected \(shape)"
            }
        }
        if case .some(let expected) = peer.expectedCount, expected != page.count {
            return "count \(page.count.map(String.init) ?? "null"), expected \(expected.map(String.init) ?? "null")"
        }
        if let expected = peer.expectedItemCount, expected != page.items.count {
            return "item count \(page.items.count), expected \(expected)"
        }
        if let expected = peer.expectedFirstIDs {
            let actual = page.items.prefix(expected.count).compactMap(\.id)
            let matches = peer.firstIDsOrdered ? actual == expected : Set(actual) == Set(expected)
            if !matches { return "first ids \(actual), expected \(expected)" }
        }
        if peer.protocolVersion == .v3, case .some(let expected) = peer.expectedNextLink {
            let actual = page.nextLink.map { link in
                link.contains("?") ? String(link[link.index(after: link.firstIndex(of: "?")!)...]) : link
            }
            if !PeerQueryReplay.sameParameters(actual, expected) {
                return "nextLink \(page.nextLink ?? "null"), expected \(expected ?? "null")"
            }
        }
        return nil
    }

    /// A decoded page of either protocol version.
    struct Page {
        enum Shape { case array, results, items }
        var shape: Shape
        var items: [JSONObject]
        var count: Int?
        var nextLink: String?

        init(_ reply: LiveServer.Reply, _ protocolVersion: ProtocolVersion) throws {
            switch reply.json {
            case .array(let values)?:
                shape = .array
                items = values.compactMap(\.objectValue)
            case .object(let object)? where object["results"] != nil:
                shape = .results
                items = object["results"]?.arrayValue?.compactMap(\.objectValue) ?? []
                count = object["count"]?.intValue.map { Int($0) }
            case .object(let object)?:
                shape = .items
                items = object["items"]?.arrayValue?.compactMap(\.objectValue) ?? []
                count = object["count"]?.intValue.map { Int($0) }
                nextLink = object["nextLink"]?.stringValue
            default:
                throw ReplayError(description: "the response is not a page: \(reply.text.prefix(200))")
            }
        }
    }
}

/// The peer data or a reply is not what the replay expects.
struct ReplayError: Error, CustomStringConvertible {
    var description: String
}
