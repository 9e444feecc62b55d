import ServerStorageCore
import Synchronization
import Testing

/// The one clock of bounded waits (`Deadlines`): every deadline fires once, never before its time,
/// and a cancelled one never fires.
@Suite("Deadlines")
struct DeadlinesTests {
    @Test func deadlinesFireOnceNotBeforeTheirTimeAndCancelledOnesNever() async throws {
        let deadlines = Deadlines(granularity: .milliseconds(5))
        let fired = Mutex<[(Int, ContinuousClock.Instant)]>([])
        let start = ContinuousClock.now
        for (index, delay) in [(0, 120), (1, 40), (2, 80)] {
            _ = deadlines.schedule(after: .milliseconds(delay)) { fired.withLock { $0.append((index, .now)) } }
        }
        let cancelled = deadlines.schedule(after: .milliseconds(60)) { fired.withLock { $0.append((9, .now)) } }
        deadlines.cancel(cancelled)
        #expect(deadlines.count == 3)
        try await waitUntil { fired.withLock { $0.count } == 3 }
        let order = fired.withLock { $0 }
        #expect(order.map(\.0) == [1, 2, 0])
        for (index, time) in order {
            #expect(time - start >= .milliseconds([120, 40, 80][index]), "deadline \(index) fired early")
        }
        #expect(deadlines.count == 0)
        // The clock stops when nothing is registered, and starts again for the next deadline.
        try await Task.sleep(for: .milliseconds(50))
        let again = Mutex(false)
        _ = deadlines.schedule(after: .milliseconds(10)) { again.withLock { $0 = true } }
        try await waitUntil { again.withLock { $0 } }
        try await Task.sleep(for: .milliseconds(100))
        #expect(fired.withLock { $0.count } == 3, "a cancelled deadline fired")
    }

    /// Waits (at most 10 s) until `condition` holds.
    func waitUntil(_ condition: @Sendable () -> Bool) async throws {
        let limit = ContinuousClock.now + .seconds(10)
        while !condition() {
            guard ContinuousClock.now < limit else {
                Issue.record("the condition did not hold within 10 s")
                return
            }
            try await Task.sleep(for: .milliseconds(5))
        }
    }
}
