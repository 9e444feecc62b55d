import CoreMetrics
import Crypto
import Foundation
import Logging
import ServerStorageCore
import Synchronization
import SyncCore

/// Writes sent with an `Idempotency-Key` header: the first answer is recorded in the storage, and
/// the same request sent again (a retry after a lost answer, alone or in a batch) gets that answer
/// back, marked `Idempotency-Replayed: true`, instead of being applied twice.
///
/// One key has one effect, however the requests that carry it arrive: alone or in batches, at the
/// same moment, through one instance or several. The key is claimed in the storage, in the same
/// transaction as the write and the answer it records (``ServerStorage/claimOutcome(scope:key:)``):
/// a second request with the key waits for the first one's transaction, then replays its answer.
/// A write whose answer is not final (a 503, say) rolls back with its claim, so a retry applies it.
///
/// Keys are scoped to the caller (the token's subject; anonymous callers share one scope), so one
/// user can never read another's recorded answer. A key sent again with another request (method,
/// path or body) is refused with 422. Outcomes are kept for ``RequestLimits/idempotencyRetention``;
/// a retry after that is applied as a new request (a replayed insert then meets its own item: 409).
/// Answers that say nothing final are not recorded: 5xx, 401, 403, 408, 429.
final class IdempotencyLedger: Sendable {
    static let header = "idempotency-key"
    static let replayedHeader = "Idempotency-Replayed"

    let storage: any ServerStorage
    let retention: Duration
    let logger: Logger
    /// Counts the answers replayed from a record (`ferry_idempotent_replays_total`).
    let replays: Counter?
    private let lastSweep = Mutex<ContinuousClock.Instant?>(nil)

    init(storage: any ServerStorage, retention: Duration, logger: Logger, replays: Counter? = nil) {
        self.storage = storage
        self.retention = retention
        self.logger = logger
        self.replays = replays
    }

    /// An answer that is not recorded: the transaction that claimed the key rolls back with it.
    private struct Unrecorded: Error {
        var response: TableResponse
    }

    /// Runs `apply` at most once per key: answers the recorded outcome when there is one. The
    /// write's `table` is locked before its key is claimed, as every writer takes them
    /// (``ServerStorage/lockTables(_:)``).
    func answer(
        key: String, scope: String, request: TableRequest, table: String,
        apply: @escaping @Sendable () async -> TableResponse
    ) async throws -> TableResponse {
        do throws(StorageError) {
            try RecordedOutcome.validateKey(key)
        } catch {
            throw ProtocolError.badRequest(
                "the Idempotency-Key header: \(error.message)", code: "invalidIdempotencyKey")
        }
        let fingerprint = Self.fingerprint(request)
        let storage = storage
        let response: TableResponse
        do {
            response = try await storage.transaction {
                try await storage.lockTables([table])
                if let recorded = try await storage.claimOutcome(scope: scope, key: key) {
                    return try Self.replay(recorded, fingerprint: fingerprint)
                }
                let response = await apply()
                guard Self.isFinal(response.status) else { throw Unrecorded(response: response) }
                let outcome = Self.outcome(
                    of: response, scope: scope, key: key, fingerprint: fingerprint, at: Self.milliseconds(Date()))
                let kept = try await storage.recordOutcome(outcome)
                // The key is held by this transaction, so the outcome is this one; a storage that
                // kept another anyway is answered by what it kept.
                return kept == outcome ? response : try Self.replay(kept, fingerprint: fingerprint)
            }
        } catch let unrecorded as Unrecorded {
            return unrecorded.response
        }
        // Counted once the transaction is over: a transaction a storage retries replays once.
        if response.headers.contains(where: { $0.name == Self.replayedHeader }) { replays?.increment() }
        await sweepIfDue()
        return response
    }

    /// The outcome `response` records under `key`.
    static func outcome(of response: TableResponse, scope: String, key: String, fingerprint: String, at time: Int64)
        -> RecordedOutcome
    {
        RecordedOutcome(
            scope: scope, key: key, fingerprint: fingerprint, status: response.status,
            headers: Dictionary(response.headers.map { ($0.name, $0.value) }, uniquingKeysWith: { first, _ in first }),
            body: response.body.map { String(decoding: $0, as: UTF8.self) }, recordedAt: time)
    }

    static func milliseconds(_ date: Date) -> Int64 {
        Int64((date.timeIntervalSince1970 * 1000).rounded())
    }

    /// Whether an answer is final enough to be replayed.
    static func isFinal(_ status: Int) -> Bool {
        switch status {
        case 200..<300: true
        case 401, 403, 408, 429: false
        case 400..<500: true
        default: false
        }
    }

    static func replay(_ outcome: RecordedOutcome, fingerprint: String) throws -> TableResponse {
        guard outcome.fingerprint == fingerprint else {
            throw ProtocolError(
                422, "idempotencyKeyReused",
                "this Idempotency-Key was used for another request (\(outcome.fingerprint.prefix(80)))")
        }
        var headers = outcome.headers.sorted { $0.key < $1.key }.map { (name: $0.key, value: $0.value) }
        headers.append((replayedHeader, "true"))
        return TableResponse(status: outcome.status, headers: headers, body: outcome.body.map { Array($0.utf8) })
    }

    /// The method, the percent-decoded path and a digest of the body, and the protocol version
    /// when it is 2.0.0 (the answer's shape depends on it: a key replayed under the other version
    /// got the first answer's shape; 3.0.0, the default, adds nothing, so outcomes recorded before
    /// the version counted still replay). A JSON body is digested in its canonical form (keys
    /// sorted, no white space), so the same request written with other spacing or member order is
    /// the same request.
    static func fingerprint(_ request: TableRequest) -> String {
        let canonical: [UInt8]
        if request.bodyIsCanonical, let body = request.body {
            canonical = body
        } else if let parsed = request.parsedBody {
            canonical = parsed.serializedUTF8()
        } else if let body = request.body, !body.isEmpty, let parsed = try? JSONValue(parsingUTF8: body) {
            canonical = parsed.serializedUTF8()
        } else {
            canonical = request.body ?? []
        }
        let digest = SHA256.hash(data: canonical)
        let digits = Array("0123456789abcdef".utf8)
        var hex: [UInt8] = []
        hex.reserveCapacity(32)
        for byte in digest.prefix(16) {
            hex.append(digits[Int(byte >> 4)])
            hex.append(digits[Int(byte & 0x0f)])
        }
        let path = request.segments.map { "/" + $0.joined(separator: "/") } ?? request.path
        let version = (try? TableService.protocolVersion(request)) == .v2 ? " 2.0.0" : ""
        return "\(request.method) \(path) \(String(decoding: hex, as: UTF8.self))\(version)"
    }

    /// Forgets expired outcomes, at most once a minute per process.
    func sweepIfDue() async {
        let due = lastSweep.withLock { last -> Bool in
            let clock = ContinuousClock.now
            if let last, clock - last < .seconds(60) { return false }
            last = clock
            return true
        }
        guard due else { return }
        let cutoff = Self.milliseconds(Date()) - Int64(retention.components.seconds) * 1000
        _ = try? await storage.forgetOutcomes(recordedBefore: cutoff)
    }
}
