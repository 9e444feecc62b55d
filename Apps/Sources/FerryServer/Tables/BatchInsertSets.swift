import CoreMetrics
import Foundation
import ServerStorageCore
import SyncCore

/// Consecutive inserts of a batch, written as sets: one claim of their idempotency keys, one set
/// insert per table (``ServerStorage/insert(into:_:)``: one stamp reservation, a few statements),
/// one recording of their outcomes, instead of a claim, an insert and a recording each.
///
/// Each request still gets exactly the answer it would get alone, in its place:
/// - the checks before the storage (route, version, token, the table's rules, the body) run for
///   each as for one request; they read nothing from the storage, so running them first changes
///   nothing;
/// - a key sent twice in a run splits it: the second set claims the key after the first recorded
///   it, and replays that answer;
/// - the storage gives each row its own outcome (its stamps in request order, or its conflict);
/// - a request whose answer would not be recorded under its key (a 401 of a per-user table, say)
///   runs alone, in its place;
/// - when a set fails as a whole (the database busy, a race with another instance), it rolls back
///   and its requests run one after the other, as before sets.
extension TableService {
    /// The most inserts in one set.
    static let maximumInsertSet = 500

    /// Whether a request of a batch may go in a set: an insert (`POST` to a table).
    static func mayGoInSet(_ request: TableRequest) -> Bool {
        guard request.method == "POST", case .table = request.route else { return false }
        return true
    }

    /// What one request of a run is, before the storage.
    enum SetStep {
        /// Answered without the storage (a refused route, an invalid key, an unkeyed refusal).
        case answered(TableResponse)
        /// Runs alone, as a request outside a set.
        case alone
        /// Goes in a set.
        case member(SetMember)
    }

    /// An insert of a set.
    struct SetMember: Sendable {
        var key: String?
        var scope: String
        var fingerprint: String
        /// The insert, or its refusal (final: it is recorded under the key).
        var insert: Result<PreparedInsert, RefusedInsert>
    }

    struct RefusedInsert: Error {
        var response: TableResponse
    }

    /// Answers a run of inserts (each ``mayGoInSet(_:)``), in order, in the current transaction.
    func insertRun(_ requests: [TableRequest]) async -> [TableResponse] {
        var steps: [SetStep] = []
        steps.reserveCapacity(requests.count)
        for request in requests { steps.append(await setStep(request)) }
        var responses: [TableResponse?] = Array(repeating: nil, count: requests.count)
        var segment: [(index: Int, member: SetMember)] = []
        var keys: Set<[String]> = []
        var index = 0
        while index <= steps.count {
            // A segment ends before a request that runs alone, before a key it holds already, and
            // at the end.
            let ends: Bool
            switch index < steps.count ? steps[index] : .alone {
            case .answered(let response):
                responses[index] = response
                index += 1
                continue
            case .alone: ends = true
            case .member(let member):
                ends = member.key.map { keys.contains([member.scope, $0]) } ?? false
            }
            if ends && !segment.isEmpty {
                let answers = await runSet(segment.map(\.member), segment.map { requests[$0.index] })
                for (place, answer) in zip(segment, answers) { responses[place.index] = answer }
                segment = []
                keys = []
            }
            guard index < steps.count else { break }
            switch steps[index] {
            case .member(let member):
                segment.append((index, member))
                if let key = member.key { keys.insert([member.scope, key]) }
            default:
                responses[index] = await handle(requests[index])
            }
            index += 1
        }
        return responses.map { $0! }
    }

    /// The checks of one request of a run, before the storage.
    private func setStep(_ request: TableRequest) async -> SetStep {
        let limits = configuration.limits
        if let size = request.body?.count, size > limits.maximumBodySize {
            return .answered(
                Self.errorResponse(
                    ProtocolError(
                        413, "bodyTooLarge", "the body is \(size) bytes; the limit is \(limits.maximumBodySize)")))
        }
        let routed: Routed
        do {
            routed = try await routeWrite(request)
        } catch {
            return .answered(Self.finished(await answering { throw error }))
        }
        guard case .write(.insert, var context, _) = routed else { return .alone }
        let key = request.headers[IdempotencyLedger.header]
        if let key {
            do throws(StorageError) {
                try RecordedOutcome.validateKey(key)
            } catch {
                return .answered(
                    Self.finished(
                        Self.errorResponse(
                            .badRequest(
                                "the Idempotency-Key header: \(error.message)", code: "invalidIdempotencyKey"))))
            }
            if context.request.parsedBody == nil, let body = request.body, !body.isEmpty {
                context.request.parsedBody = try? JSONValue(parsingUTF8: body)
            }
        }
        let insert: Result<PreparedInsert, RefusedInsert>
        do {
            insert = .success(try prepareInsert(context))
        } catch {
            let response = await answering { throw error }
            // Unkeyed, a refusal is the answer; keyed, it is recorded under the key (or replays
            // what the key has), unless it is not final: then the key is claimed and released alone.
            guard key != nil else { return .answered(Self.finished(response)) }
            guard IdempotencyLedger.isFinal(response.status) else { return .alone }
            insert = .failure(RefusedInsert(response: response))
        }
        return .member(
            SetMember(
                key: key, scope: context.identity?.subject ?? "",
                fingerprint: key == nil ? "" : IdempotencyLedger.fingerprint(context.request), insert: insert))
    }

    /// Why a set gives way to its requests one by one.
    private struct SetGivesWay: Error {}

    /// One set in a savepoint of the current transaction: its keys claimed, its inserts written
    /// table by table, its outcomes recorded. When it fails as a whole it rolls back and its
    /// requests run one by one.
    private func runSet(_ members: [SetMember], _ requests: [TableRequest]) async -> [TableResponse] {
        do {
            let responses = try await storage.transaction { [self] in try await writeSet(members) }
            if members.contains(where: { $0.key != nil }) { await ledger.sweepIfDue() }
            // Counted once the transaction is over, as a request alone counts its replay.
            for response in responses
            where response.headers.contains(where: { $0.name == IdempotencyLedger.replayedHeader }) {
                ledger.replays?.increment()
            }
            return responses
        } catch {
            var responses: [TableResponse] = []
            for request in requests { responses.append(await handle(request)) }
            return responses
        }
    }

    private func writeSet(_ members: [SetMember]) async throws -> [TableResponse] {
        // The tables first, then the keys, then the rows, as every writer takes them.
        try await storage.lockTables(
            members.compactMap {
                if case .success(let insert) = $0.insert { insert.context.storageTable.name } else { nil }
            })
        var claimed: [String: [String]] = [:]
        for member in members { if let key = member.key { claimed[member.scope, default: []].append(key) } }
        var recorded: [String: [String: RecordedOutcome]] = [:]
        for (scope, keys) in claimed.sorted(by: { $0.key < $1.key }) {
            recorded[scope] = try await storage.claimOutcomes(scope: scope, keys: keys)
        }
        var responses: [TableResponse?] = Array(repeating: nil, count: members.count)
        var tables: [String] = []
        var inserts: [String: [(index: Int, insert: PreparedInsert)]] = [:]
        for (index, member) in members.enumerated() {
            if let key = member.key, let outcome = recorded[member.scope]?[key] {
                responses[index] = await answering {
                    try IdempotencyLedger.replay(outcome, fingerprint: member.fingerprint)
                }
                continue
            }
            switch member.insert {
            case .failure(let refused):
                responses[index] = refused.response
            case .success(let insert):
                let table = insert.context.table.name
                if inserts[table] == nil { tables.append(table) }
                inserts[table, default: []].append((index, insert))
            }
        }
        for table in tables {
            let group = inserts[table]!
            let results = try await storage.insert(
                into: group[0].insert.context.storageTable,
                group.map { StorageInsert(id: $0.insert.id, content: $0.insert.content, owner: $0.insert.owner) })
            for (place, result) in zip(group, results) {
                responses[place.index] = await answering { try insertAnswer(place.insert, result) }
            }
        }
        var outcomes: [RecordedOutcome] = []
        var places: [Int] = []
        let now = IdempotencyLedger.milliseconds(Date())
        for (index, member) in members.enumerated() {
            guard let key = member.key, recorded[member.scope]?[key] == nil, let response = responses[index] else {
                continue
            }
            // A storage error would not be recorded under its key: the requests go alone.
            guard IdempotencyLedger.isFinal(response.status) else { throw SetGivesWay() }
            outcomes.append(
                IdempotencyLedger.outcome(
                    of: response, scope: member.scope, key: key, fingerprint: member.fingerprint, at: now))
            places.append(index)
        }
        let kept = try await storage.recordOutcomes(outcomes)
        for (offset, index) in places.enumerated() where kept[offset] != outcomes[offset] {
            let member = members[index]
            responses[index] = await answering {
                try IdempotencyLedger.replay(kept[offset], fingerprint: member.fingerprint)
            }
        }
        return responses.map { Self.finished($0!) }
    }

    /// A response as ``handle(_:)`` finishes it.
    static func finished(_ response: TableResponse) -> TableResponse {
        var response = response
        response.headers.append(("x-zumo-server-version", Self.serverVersion))
        // An answer that says how it may be kept (an upload's `no-store`) keeps its own word.
        if !response.headers.contains(where: { $0.name.utf8.count == 13 && $0.name.lowercased() == "cache-control" }) {
            response.headers.append(("Cache-Control", "no-cache"))
        }
        return response
    }
}
