import Synchronization

/// Bytes shared by the requests handled at once: each takes its share before it starts and gives
/// it back when it is answered; one that finds no room waits its turn, first come first served,
/// for a bounded time.
///
/// Why: a batch body is bounded (16 MiB), but handling one takes many times its size (parsed, its
/// requests' bodies, their answers): four 15 MB batches sent together took a server to 1.09 GB.
/// Batches write one after the other anyway (one writer), so taking them a few at a time costs
/// little time and bounds the memory of any number of them.
final class ByteBudget: Sendable {
    private struct Waiter {
        var id: UInt64
        var bytes: Int
        var continuation: CheckedContinuation<Bool, Never>
    }

    private struct State {
        var available: Int
        var waiters: [Waiter] = []
        var nextID: UInt64 = 0
        /// Waits begun whose waiter is not registered yet.
        var unregistered: Set<UInt64> = []
        /// Of those, the ones that ended (timed out or cancelled) already.
        var abandoned: Set<UInt64> = []
    }

    private let state: Mutex<State>
    /// The bytes shared.
    let capacity: Int

    init(capacity: Int) {
        self.capacity = capacity
        state = Mutex(State(available: capacity))
    }

    /// Takes `bytes` (at most ``capacity``), waiting at most `limit` for room; `false` when the wait
    /// ended without it (the limit, or the task's cancellation). A `true` must be matched by one
    /// ``give(_:)`` of the same bytes.
    func take(_ bytes: Int, within limit: Duration) async -> Bool {
        let bytes = clamped(bytes)
        let id: UInt64? = state.withLock { state in
            if state.waiters.isEmpty && state.available >= bytes {
                state.available -= bytes
                return nil
            }
            state.nextID += 1
            state.unregistered.insert(state.nextID)
            return state.nextID
        }
        guard let id else { return true }
        let timer = Task {
            guard (try? await Task.sleep(for: limit)) != nil else { return }
            self.abandon(id)
        }
        defer { timer.cancel() }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let now: Bool? = state.withLock { state in
                    state.unregistered.remove(id)
                    if state.abandoned.remove(id) != nil { return false }
                    if state.waiters.isEmpty && state.available >= bytes {
                        state.available -= bytes
                        return true
                    }
                    state.waiters.append(Waiter(id: id, bytes: bytes, continuation: continuation))
                    return nil
                }
                if let now { continuation.resume(returning: now) }
            }
        } onCancel: {
            abandon(id)
        }
    }

    /// `bytes` as ``take(_:within:)`` and ``takeNow(_:)`` count them: at most ``capacity``, so that
    /// one request larger than all the room can still have it all.
    func clamped(_ bytes: Int) -> Int { min(max(bytes, 0), capacity) }

    /// Takes `bytes` (at most ``capacity``) if there is room now and nobody waits for it.
    func takeNow(_ bytes: Int) -> Bool {
        let bytes = clamped(bytes)
        return state.withLock { state in
            guard state.waiters.isEmpty && state.available >= bytes else { return false }
            state.available -= bytes
            return true
        }
    }

    /// Takes `bytes` room or not: for what is in memory already and must stay (the answer to a
    /// write that was applied). The room may go below none; nobody gets in until it is back.
    func overdraw(_ bytes: Int) {
        state.withLock { $0.available -= max(bytes, 0) }
    }

    /// How many wait for room now.
    var waiting: Int { state.withLock { $0.waiters.count } }

    /// Gives back bytes taken (as many as were taken: a `take` of more than ``capacity`` took
    /// ``capacity``), and lets in the waiters that now fit, in order.
    func give(_ bytes: Int) {
        let bytes = max(bytes, 0)
        let admitted: [Waiter] = state.withLock { state in
            state.available += bytes
            var admitted: [Waiter] = []
            while let first = state.waiters.first, first.bytes <= state.available {
                state.available -= first.bytes
                admitted.append(state.waiters.removeFirst())
            }
            return admitted
        }
        for waiter in admitted { waiter.continuation.resume(returning: true) }
    }

    /// Ends the wait `id` without room, unless it got room already.
    private func abandon(_ id: UInt64) {
        let waiter: Waiter? = state.withLock { state in
            if let index = state.waiters.firstIndex(where: { $0.id == id }) {
                return state.waiters.remove(at: index)
            }
            // Not registered yet: it ends as it registers. Otherwise it got room, or ended.
            if state.unregistered.contains(id) { state.abandoned.insert(id) }
            return nil
        }
        guard let waiter else { return }
        waiter.continuation.resume(returning: false)
        give(0)  // those behind it may fit now
    }
}

/// The room of a ``ByteBudget`` one request holds: first its body's, then its answer's, until the
/// answer is written to the socket, or dropped with the connection. It is given back when the last
/// reference to it goes, so no path can keep it.
///
/// Why the answer's bytes count: an answer is in memory whole until the client reads it, and a
/// client that never reads kept it for the 60 s write timeout. Sixteen such clients, each sending a
/// batch and reading nothing, held a server at about 800 MB while the budget for bodies stood empty.
final class HeldRoom: Sendable {
    let budget: ByteBudget
    private let held: Mutex<Int>

    /// Holds `bytes` the caller took from `budget` already.
    init(_ budget: ByteBudget, holding bytes: Int = 0) {
        self.budget = budget
        held = Mutex(max(bytes, 0))
    }

    /// The bytes held.
    var bytes: Int { held.withLock { $0 } }

    /// Holds `bytes` more if there is room now (``ByteBudget/takeNow(_:)``); `false` otherwise.
    func grow(by bytes: Int) -> Bool {
        guard budget.takeNow(bytes) else { return false }
        held.withLock { $0 += budget.clamped(bytes) }
        return true
    }

    /// Holds `bytes` more, room or not (``ByteBudget/overdraw(_:)``).
    func overdraw(by bytes: Int) {
        let bytes = max(bytes, 0)
        budget.overdraw(bytes)
        held.withLock { $0 += bytes }
    }

    /// Holds at most `bytes`, giving back the rest now.
    func shrink(to bytes: Int) {
        let excess = held.withLock { held in
            let excess = max(held - max(bytes, 0), 0)
            held -= excess
            return excess
        }
        if excess > 0 { budget.give(excess) }
    }

    deinit {
        let bytes = held.withLock { $0 }
        if bytes > 0 { budget.give(bytes) }
    }
}
