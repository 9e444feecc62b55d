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
    private let lastSweep = Mutex<ContinuousClock.Instant?>(nil)
    /// Keys being applied in this process: a second request with the same key waits for the first.
    private let busy = KeyedGate()
    /// Whether the current task handles the requests of a batch. A batch holds the storage's writes
    /// until it commits, so it must not wait for a key held by a request that waits for the storage;
    /// the batch's writes already run alone.
    @TaskLocal static var inBatch = false

    init(storage: any ServerStorage, retention: Duration, logger: Logger) {
        self.storage = storage
        self.retention = retention
        self.logger = logger
    }

    /// Runs `apply` at most once per key: answers the recorded outcome when there is one.
    func answer(
        key: String, scope: String, request: TableRequest, apply: () async -> TableResponse
    ) async throws -> TableResponse {
        do throws(StorageError) {
            try RecordedOutcome.validateKey(key)
        } catch {
            throw ProtocolError.badRequest(
                "the Idempotency-Key header: \(error.message)", code: "invalidIdempotencyKey")
        }
        let fingerprint = Self.fingerprint(request)
        let gateKey = Self.inBatch ? nil : scope + "\u{0}" + key
        if let gateKey { await busy.enter(gateKey) }
        defer { if let gateKey { busy.leave(gateKey) } }
        if let recorded = try await storage.recordedOutcome(scope: scope, key: key) {
            return try Self.replay(recorded, fingerprint: fingerprint)
        }
        let response = await apply()
        guard Self.isFinal(response.status) else { return response }
        let now = Int64((Date().timeIntervalSince1970 * 1000).rounded())
        let outcome = RecordedOutcome(
            scope: scope, key: key, fingerprint: fingerprint, status: response.status,
            headers: Dictionary(response.headers.map { ($0.name, $0.value) }, uniquingKeysWith: { first, _ in first }),
            body: response.body.map { String(decoding: $0, as: UTF8.self) }, recordedAt: now)
        do {
            let kept = try await storage.recordOutcome(outcome)
            await sweepIfDue(now: now)
            if kept != outcome { return try Self.replay(kept, fingerprint: fingerprint) }
        } catch let error as ProtocolError {
            throw error
        } catch {
            // The write is applied: its answer goes out even though a retry could not be recognised.
            logger.warning(
                "an idempotent outcome could not be recorded", metadata: ["ferry.error": "\(error)"])
        }
        return response
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

    /// The method, the path and a digest of the body.
    static func fingerprint(_ request: TableRequest) -> String {
        let digest = SHA256.hash(data: request.body ?? [])
        let digits = Array("0123456789abcdef".utf8)
        var hex: [UInt8] = []
        hex.reserveCapacity(32)
        for byte in digest.prefix(16) {
            hex.append(digits[Int(byte >> 4)])
            hex.append(digits[Int(byte & 0x0f)])
        }
        return "\(request.method) \(request.path) \(String(decoding: hex, as: UTF8.self))"
    }

    /// Forgets expired outcomes, at most once a minute per process.
    private func sweepIfDue(now: Int64) async {
        let due = lastSweep.withLock { last -> Bool in
            let clock = ContinuousClock.now
            if let last, clock - last < .seconds(60) { return false }
            last = clock
            return true
        }
        guard due else { return }
        let cutoff = now - Int64(retention.components.seconds) * 1000
        _ = try? await storage.forgetOutcomes(recordedBefore: cutoff)
    }
}
