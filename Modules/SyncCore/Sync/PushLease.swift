/// One pusher per store, across processes: a lease kept in the store itself.
///
/// Two processes that share a store (an app and its share extension, or two `ferry` commands) must
/// not push the same queue at once: both would send the same operations. A push first takes the
/// store's **push lease**, a record in the store (the engine's slot of the delta tokens) naming
/// its holder and when the lease ends. It takes it in a write transaction, so two pushers never
/// both see it free; while it pushes it renews it every third of ``SyncContext/pushLeaseLifetime``;
/// at the end it gives it back. A pusher that dies (SIGKILL, a crash, an app the system
/// terminated) cannot give it back: its lease ends by itself, and the next push takes it.
///
/// Why a lease in the store and not an operating-system file lock: it works the same on every
/// store and platform, and nothing is held while the process is suspended between transactions (on
/// iOS the system terminates a suspended app that holds a file lock in an App Group container).
/// The cost is the wait after a pusher's death: one lifetime, 10 s by default.
struct PushLease: Sendable, Equatable {
    /// Where the lease lives.
    static let slot = "pushLease"

    /// Who holds it: one context.
    var holder: String
    /// When it ends, in milliseconds since 1970.
    var endsAt: Int64

    init(holder: String, endsAt: Int64) {
        self.holder = holder
        self.endsAt = endsAt
    }

    /// The stored form: `holder endsAt`.
    init?(_ text: String) {
        let parts = text.split(separator: " ")
        guard parts.count == 2, let endsAt = Int64(parts[1]) else { return nil }
        self.init(holder: String(parts[0]), endsAt: endsAt)
    }

    var text: String { "\(holder) \(endsAt)" }

    /// A random name for a context's leases.
    static func newHolder() -> String {
        var random = SystemRandomNumberGenerator()
        return String(random.next(), radix: 16) + String(random.next(), radix: 16)
    }
}

extension SyncContext {
    /// How long a push lease lasts without renewal: the longest another pusher waits after this
    /// one died. A running push renews it every third of it.
    public nonisolated var pushLeaseLifetime: Duration { pushLease.lifetime }

    /// Runs `body` holding the store's push lease; throws ``SyncError/Code/pushInProgress`` when
    /// another holds it, and stops `body` (cancelled) when the lease was lost meanwhile (this
    /// process was suspended past its end and another took it).
    func holdingPushLease<Result: Sendable>(_ body: @escaping @Sendable () async throws -> Result) async throws
        -> Result
    {
        try await takePushLease()
        do {
            let result = try await withThrowingTaskGroup(of: Result?.self) { group in
                group.addTask { try await body() }
                group.addTask {
                    // Renews until the push ends; a lost lease ends the group with its error.
                    while !Task.isCancelled {
                        try await Task.sleep(for: self.pushLease.lifetime / 3)
                        try await self.takePushLease(renewing: true)
                    }
                    return nil
                }
                defer { group.cancelAll() }
                guard let first = try await group.next(), let result = first else {
                    throw SyncError(.cancelled, "push stopped")
                }
                return result
            }
            await givePushLeaseBack()
            return result
        } catch {
            await givePushLeaseBack()
            throw error
        }
    }

    /// Takes the lease (or renews it): free, ended, or this context's own.
    func takePushLease(renewing: Bool = false) async throws {
        let holder = pushLease.holder
        let lifetime = pushLease.lifetime
        let taken: PushLease? = try await write("take the push lease") { tx in
            let now = ItemFields.now().millisecondsSince1970
            if let text = try tx.deltaToken(table: Self.engineSlot, queryID: PushLease.slot),
                let current = PushLease(text), current.holder != holder, current.endsAt > now
            {
                return current
            }
            let milliseconds =
                lifetime.components.seconds * 1000 + lifetime.components.attoseconds / 1_000_000_000_000_000
            let lease = PushLease(holder: holder, endsAt: now + milliseconds)
            try tx.setDeltaToken(table: Self.engineSlot, queryID: PushLease.slot, value: lease.text)
            return nil
        }
        if let taken {
            let left = max(0, taken.endsAt - ItemFields.now().millisecondsSince1970)
            throw SyncError(
                .pushInProgress,
                renewing
                    ? "another pusher took this store's push lease while this push was stopped"
                    : "another process is pushing this store, or one stopped without giving its lease back (a crash): "
                        + "the lease ends within \(left / 1000 + 1) s unless it goes on"
            )
        }
    }

    /// Gives the lease back, if this context still holds it.
    func givePushLeaseBack() async {
        let holder = pushLease.holder
        _ = try? await write("give the push lease back") { tx in
            guard let text = try tx.deltaToken(table: Self.engineSlot, queryID: PushLease.slot),
                PushLease(text)?.holder == holder
            else { return }
            try tx.setDeltaToken(table: Self.engineSlot, queryID: PushLease.slot, value: nil)
        }
    }
}
