import Synchronization

/// Lets one task at a time through per key, first come first served; the others wait their turn
/// without holding a thread. (The server's idempotency keys, the SQLite storage's writer.)
package final class KeyedGate: Sendable {
    private struct State {
        var held: Set<String> = []
        var waiting: [String: [CheckedContinuation<Void, Never>]] = [:]
    }

    private let state = Mutex(State())

    package init() {}

    package func enter(_ key: String) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let acquired = state.withLock { state -> Bool in
                if state.held.insert(key).inserted { return true }
                state.waiting[key, default: []].append(continuation)
                return false
            }
            if acquired { continuation.resume() }
        }
    }

    package func leave(_ key: String) {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard var queue = state.waiting[key], !queue.isEmpty else {
                state.held.remove(key)
                state.waiting[key] = nil
                return nil
            }
            let next = queue.removeFirst()
            state.waiting[key] = queue.isEmpty ? nil : queue
            return next  // the key stays held: it passes to the next waiter
        }
        next?.resume()
    }
}
