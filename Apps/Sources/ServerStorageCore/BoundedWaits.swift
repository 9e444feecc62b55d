import Synchronization

/// Waits with a bound that holds even when the awaited work ignores cancellation.
///
/// A task group waits for every child before it returns, so racing an operation against a timer in
/// a group is only as bounded as the operation's own response to cancellation. A database driver
/// that loses a wake-up (postgres-nio 1.33.2 drops a statement written to a connection that just
/// closed, and its caller waits forever) would then hang the request and the server's shutdown.
/// Here the operation runs in a task of its own and the caller waits for whichever comes first:
/// its result, the limit, an ``Outcome/settle(_:)`` from elsewhere (a connection that closed), or
/// the caller's cancellation. The operation is then cancelled and left to end on its own; its
/// result is dropped.
///
/// ```swift
/// let rows = try await BoundedWait.run(within: .seconds(35), timeout: { StorageError(.busy, "…") }) {
///     try await connection.query(statement, logger: logger).collect()
/// }
/// ```
package enum BoundedWait {
    /// The first of several outcomes of one wait.
    package final class Outcome<T: Sendable>: Sendable {
        private struct State {
            var continuation: CheckedContinuation<T, any Error>?
            var result: Result<T, any Error>?
        }

        private let state = Mutex(State())

        package init() {}

        /// Ends the wait with `result` unless it has ended; whether this call ended it.
        @discardableResult
        package func settle(_ result: Result<T, any Error>) -> Bool {
            let continuation: CheckedContinuation<T, any Error>?? = state.withLock { state in
                guard state.result == nil else { return .none }
                state.result = result
                defer { state.continuation = nil }
                return .some(state.continuation)
            }
            guard case .some(let waiting) = continuation else { return false }
            waiting?.resume(with: result)
            return true
        }

        /// Whether the wait has ended.
        package var isSettled: Bool { state.withLock { $0.result != nil } }

        fileprivate func wait() async throws -> T {
            try await withCheckedThrowingContinuation { continuation in
                let ready: Result<T, any Error>? = state.withLock { state in
                    if let result = state.result { return result }
                    state.continuation = continuation
                    return nil
                }
                if let ready { continuation.resume(with: ready) }
            }
        }
    }

    /// Runs `operation` in a task of its own and returns its result, or throws: the error
    /// `timeout` gives when `limit` passes first (a `timeout` that gives `nil` lets the operation
    /// go on), what `outcome` was settled with elsewhere, or `CancellationError` when the caller is
    /// cancelled. The operation is cancelled when the wait ends without its result.
    ///
    /// - Parameters:
    ///   - limit: How long to wait; `nil` for no time limit.
    ///   - outcome: Where others (a closed connection's callback) may end the wait early.
    ///   - timeout: The error to end the wait with when `limit` passes, or `nil` to keep waiting.
    ///   - cancellable: Whether the caller's cancellation ends the wait (`false` for clean-up work,
    ///     such as a rollback, that must run even in a cancelled task).
    ///   - operation: The work; it runs with the caller's task-local values.
    package static func run<T: Sendable>(
        within limit: Duration?, outcome: Outcome<T> = Outcome(),
        timeout: @escaping @Sendable () -> (any Error)? = { nil }, cancellable: Bool = true,
        _ operation: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let work = Task {
            do {
                outcome.settle(.success(try await operation()))
            } catch {
                outcome.settle(.failure(error))
            }
        }
        let timer = limit.map { limit in
            Deadlines.shared.schedule(after: limit) {
                if let error = timeout() { outcome.settle(.failure(error)) }
            }
        }
        defer { timer.map(Deadlines.shared.cancel) }
        do {
            guard cancellable else { return try await outcome.wait() }
            return try await withTaskCancellationHandler {
                try await outcome.wait()
            } onCancel: {
                outcome.settle(.failure(CancellationError()))
            }
        } catch {
            work.cancel()
            throw error
        }
    }
}

/// One task at a time, first come first served, and a bounded wait for the turn: the others wait
/// without holding a thread, and give up with `timeout` (or on cancellation) instead of waiting
/// behind a holder for ever. (The SQLite storage's writer.)
///
/// ```swift
/// let gate = TurnGate()
/// try await gate.enter(within: .seconds(5)) { StorageError(.busy, "the writer stayed busy") }
/// defer { gate.leave() }
/// ```
package final class TurnGate: Sendable {
    private struct Waiter {
        let id: Int
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var held = false
        var nextID = 0
        var waiting: [Waiter] = []
        /// Waiters that gave up before they were queued (cancelled at once).
        var abandoned: [Int: any Error] = [:]
    }

    private enum Verdict {
        case admitted
        case queued
        case failed(any Error)
    }

    private let state = Mutex(State())

    package init() {}

    /// Waits for the turn, at most `limit` (`nil`: no limit); throws `timeout()` past it and
    /// `CancellationError` when the caller is cancelled. The caller must ``leave()`` once it had
    /// its turn.
    package func enter(within limit: Duration?, timeout: @escaping @Sendable () -> any Error) async throws {
        let id: Int? = state.withLock { state in
            if !state.held {
                state.held = true
                return nil
            }
            defer { state.nextID += 1 }
            return state.nextID
        }
        guard let id else { return }
        let timer = limit.map { limit in
            Deadlines.shared.schedule(after: limit) { [weak self] in self?.giveUp(id, timeout()) }
        }
        defer {
            timer.map(Deadlines.shared.cancel)
            _ = state.withLock { $0.abandoned.removeValue(forKey: id) }
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let verdict: Verdict = state.withLock { state in
                    if let error = state.abandoned.removeValue(forKey: id) { return .failed(error) }
                    // The holder may have left between the first look and now.
                    if !state.held {
                        state.held = true
                        return .admitted
                    }
                    state.waiting.append(Waiter(id: id, continuation: continuation))
                    return .queued
                }
                switch verdict {
                case .admitted: continuation.resume()
                case .failed(let error): continuation.resume(throwing: error)
                case .queued: break
                }
            }
        } onCancel: {
            self.giveUp(id, CancellationError())
        }
    }

    /// Ends the caller's turn and hands it to the longest waiter.
    package func leave() {
        let next: Waiter? = state.withLock { state in
            guard !state.waiting.isEmpty else {
                state.held = false
                return nil
            }
            return state.waiting.removeFirst()  // the turn passes on: `held` stays true
        }
        next?.continuation.resume()
    }

    /// How many wait for the turn now.
    package var waitingCount: Int { state.withLock { $0.waiting.count } }

    private func giveUp(_ id: Int, _ error: any Error) {
        let waiter: Waiter? = state.withLock { state in
            guard let index = state.waiting.firstIndex(where: { $0.id == id }) else {
                state.abandoned[id] = error  // not queued yet (or admitted: removed when it returns)
                return nil
            }
            return state.waiting.remove(at: index)
        }
        waiter?.continuation.resume(throwing: error)
    }
}
