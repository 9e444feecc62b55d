import Foundation
import SyncCore

/// Transactions enter shared; resizing the map waits until none is open and keeps new ones out.
final class ResizeGate: @unchecked Sendable {
    // All state is guarded by `condition`.
    private let condition = NSCondition()
    private var open = 0
    private var resizing = false

    func enter() {
        condition.lock()
        while resizing { condition.wait() }
        open += 1
        condition.unlock()
    }

    /// Enters unless a resize is under way or waiting (then `false`, and nothing to leave).
    func tryEnter() -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !resizing else { return false }
        open += 1
        return true
    }

    func leave() {
        condition.lock()
        open -= 1
        if open == 0 { condition.broadcast() }
        condition.unlock()
    }

    func shared<T>(_ body: () -> T) -> T {
        enter()
        defer { leave() }
        return body()
    }

    func exclusive<T>(_ body: () throws(StoreError) -> T) throws(StoreError) -> T {
        condition.lock()
        while resizing { condition.wait() }
        resizing = true
        while open > 0 { condition.wait() }
        condition.unlock()
        defer {
            condition.lock()
            resizing = false
            condition.broadcast()
            condition.unlock()
        }
        return try body()
    }
}
