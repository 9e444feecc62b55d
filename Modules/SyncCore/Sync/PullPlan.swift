/// Where an incremental pull stands (the protocol's "delta token"): the last item applied, in
/// (updatedAt, id) order. It is stored as text in the store's delta-token table.
struct DeltaToken: Sendable, Hashable {
    var updatedAt: Timestamp
    var id: String
    /// The filter (OData 3.0 text) the delta token belongs to.
    var filter: String

    init(updatedAt: Timestamp, id: String, filter: String) {
        self.updatedAt = updatedAt
        self.id = id
        self.filter = filter
    }

    /// Reads a stored delta token; `nil` when it is not one of ours.
    init?(stored: String) {
        guard case .object(let object)? = try? JSONValue(parsing: stored),
            let time = object["updatedAt"]?.stringValue.flatMap({ Timestamp(iso8601: $0) }),
            let id = object["id"]?.stringValue
        else { return nil }
        self.init(updatedAt: time, id: id, filter: object["filter"]?.stringValue ?? "")
    }

    /// The stored form: `{"filter":"…","id":"…","updatedAt":"…"}`.
    var stored: String {
        JSONValue.object(["updatedAt": .string(updatedAt.iso8601), "id": .string(id), "filter": .string(filter)])
            .serialized()
    }

    /// Whether the token's filter selects `item` (an unreadable filter selects everything).
    static func filterMatches(_ filter: String, _ item: JSONObject) -> Bool {
        if filter.isEmpty { return true }
        guard let expression = try? QueryExpression(odataFilter: filter, protocolVersion: .v3) else { return true }
        return QueryEvaluator().matches(expression, item)
    }
}

/// Pull validation and request building.
enum PullPlan {
    /// The longest query id.
    static let maximumQueryIDLength = 255

    /// The largest page every server of the protocol family takes (the Node server's default
    /// `maxTop`; the .NET servers take 128,000): above it a server may refuse the request with a 400.
    static let largestPageEveryServerTakes = 1_000

    /// A page refused with a 400 when it asked for more items than some servers allow says so:
    /// the server's own words name `$top`, which the caller never wrote.
    static func explained(_ error: SyncError, pageSize: Int, asked top: Int) -> SyncError {
        guard error.code == .remote, error.remoteError?.status == 400, top == pageSize,
            pageSize > largestPageEveryServerTakes
        else { return error }
        var explained = error
        explained.message +=
            " (pages of \(pageSize) items are more than some servers allow; a page size of at most "
            + "\(largestPageEveryServerTakes) is taken by every server)"
        return explained
    }

    /// Rejects what a pull cannot honour (legacy §5.1, plus the checks the legacy client lacked).
    static func validate(table: String, query: TableQuery, queryID: String?, options: PullOptions) throws {
        func reject(_ message: String) -> SyncError {
            SyncError(.invalidQuery, "pull of '\(table)': \(message)")
        }
        do {
            try StoreValidation.validateTableName(table)
        } catch {
            throw SyncError.invalidTableName(error)
        }
        try query.validateShape("pull of '\(table)'")
        if query.select != nil {
            throw reject("select is not allowed: a partial item would replace the whole local item")
        }
        if query.includeTotalCount { throw reject("includeTotalCount is not allowed: a pull does not count") }
        if options.pageSize < 1 { throw reject("the page size must be at least 1, not \(options.pageSize)") }
        if let skip = query.skip, skip < 0 { throw reject("skip must not be negative") }
        if let top = query.top, top < 0 { throw reject("top must not be negative") }
        if let queryID {
            let allowed = queryID.utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                    UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"), UInt8(ascii: "-"), UInt8(ascii: "."),
                    UInt8(ascii: ":"):
                    true
                default: false
                }
            }
            guard !queryID.isEmpty, queryID.utf8.count <= maximumQueryIDLength, allowed else {
                throw reject(
                    "invalid query id '\(queryID.prefix(40))': use 1 to \(maximumQueryIDLength) letters, digits, "
                        + "'_', '-', '.' or ':'")
            }
            if !query.orderBy.isEmpty {
                throw reject("orderBy is not allowed with a query id: an incremental pull orders by updatedAt and id")
            }
            if query.skip != nil || query.top != nil {
                throw reject("skip and top are not allowed with a query id: an incremental pull pages by itself")
            }
        }
        if options.removesMissingItems, queryID != nil || query.skip != nil || query.top != nil {
            throw reject("removesMissingItems needs a complete pull: no query id, skip or top")
        }
    }

    /// `filter and ((updatedAt ge T) and ((updatedAt gt T) or ((updatedAt eq T) and (id gt 'ID'))))`: the
    /// rows after the delta token. The leading `updatedAt ge T` changes nothing but lets a server seek
    /// its `updatedAt` index to the delta token instead of scanning from the start (an `or` alone defeats most
    /// SQL planners, which made every page cost more than the one before).
    static func filter(_ filter: QueryExpression?, after deltaToken: DeltaToken?) -> QueryExpression? {
        guard let deltaToken else { return filter }
        let time = QueryExpression.literal(.dateTimeOffset(deltaToken.updatedAt))
        let after = QueryExpression.binary(
            .and, .binary(.greaterThanOrEqual, .field("updatedAt"), time),
            .binary(
                .or, .binary(.greaterThan, .field("updatedAt"), time),
                .binary(
                    .and, .binary(.equal, .field("updatedAt"), time),
                    .binary(.greaterThan, .field("id"), .literal(.string(deltaToken.id))))))
        guard let filter else { return after }
        return .binary(.and, filter, after)
    }

    /// How far past the device's clock an item's `updatedAt` may be and still move a saved delta
    /// token. A server whose clock jumped ahead (or a bug that stamped 9999-12-31) would otherwise
    /// move it past every change made after, and the device would never pull them.
    static let futureTolerance: Int64 = 24 * 3_600_000

    static func horizon() -> Timestamp {
        Timestamp(millisecondsSince1970: ItemFields.now().millisecondsSince1970 + futureTolerance)
    }

    /// The delta token to save after a page: its last item dated no later than `horizon` (items come
    /// in `updatedAt` order, so those after it are all dated later), or `nil` to keep the saved one.
    static func lastPlausible(_ items: [JSONObject], filter: String, horizon: Timestamp) -> DeltaToken? {
        for item in items.reversed() {
            if let time = item.updatedAt, time <= horizon, let id = item.id {
                return DeltaToken(updatedAt: time, id: id, filter: filter)
            }
        }
        return nil
    }

    /// Paging by `$skip`: the same page three times in a row (a server that ignores `$skip`
    /// answers the first page again and again) stops the pull instead of looping. Once is not
    /// enough: items inserted before the page meanwhile shift the next one by exactly a page now and
    /// then.
    static func checkMovedOn(
        _ items: [JSONObject], from previous: inout (ids: [String?], times: Int)?, skip: Int, table: String
    ) throws {
        let ids = items.map(\.id)
        guard let earlier = previous, earlier.ids == ids else {
            previous = (ids, 1)
            return
        }
        previous = (ids, earlier.times + 1)
        guard earlier.times + 1 >= 3 else { return }
        throw SyncError(
            .invalidResponse,
            "pull of '\(table)': the server answered the pages up to $skip=\(skip) with the same \(items.count) "
                + "items each time; does it ignore $skip?")
    }

    /// The delta token after a page: its last item, which must come after the previous delta token.
    static func deltaToken(after items: [JSONObject], previous: DeltaToken?, filter: String, table: String) throws
        -> DeltaToken
    {
        guard let last = items.last, let id = last.id else {
            throw SyncError(.invalidResponse, "pull of '\(table)': the last item of a page has no id")
        }
        guard let time = last.updatedAt else {
            throw SyncError(
                .invalidResponse,
                "pull of '\(table)': item '\(id)' has no updatedAt; paging by (updatedAt, id) needs it on every item")
        }
        let next = DeltaToken(updatedAt: time, id: id, filter: filter)
        if let previous, time < previous.updatedAt || (time == previous.updatedAt && id == previous.id) {
            throw SyncError(
                .invalidResponse,
                "pull of '\(table)': the server sent a page that does not move past (\(previous.updatedAt), "
                    + "'\(previous.id)'); does it ignore the filter or the order?")
        }
        return next
    }
}
