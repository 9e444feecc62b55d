import Synchronization

/// One clock for the bounded waits of a process: a wait registers its deadline and what to do when
/// it passes, and takes it back when it ends first.
///
/// A timer per wait (a task sleeping for the limit, cancelled when the wait ends, which is almost
/// always) cost every database call of the PostgreSQL storage a task, a dispatch timer and the
/// thread switches between them: under `wrk`, reads by id spent a fifth of their time in the
/// kernel's task switching. Here a single task wakes while deadlines are registered, at most every
/// ``granularity``, and fires those that passed: a deadline fires late by at most that, and a wait
/// costs a lock and a dictionary entry.
///
/// ```swift
/// let deadline = Deadlines.shared.schedule(after: .seconds(5)) { outcome.settle(.failure(timeout)) }
/// defer { Deadlines.shared.cancel(deadline) }
/// ```
package final class Deadlines: Sendable {
    /// The clock of every bounded wait of the process.
    package static let shared = Deadlines()

    /// How late a deadline may fire, at most (also how often the clock wakes while deadlines are
    /// registered).
    package let granularity: Duration

    private struct Entry {
        var deadline: ContinuousClock.Instant
        var fire: @Sendable () -> Void
    }

    private struct State {
        var entries: [Int: Entry] = [:]
        var nextID = 0
        var running = false
    }

    private let state = Mutex(State())

    package init(granularity: Duration = .milliseconds(20)) {
        self.granularity = granularity
    }

    /// Registers `fire` to run once `delay` has passed, unless ``cancel(_:)`` comes first; answers
    /// the registration.
    package func schedule(after delay: Duration, _ fire: @escaping @Sendable () -> Void) -> Int {
        let deadline = ContinuousClock.now + delay
        let (id, starts) = state.withLock { state in
            defer { state.nextID += 1 }
            state.entries[state.nextID] = Entry(deadline: deadline, fire: fire)
            let starts = !state.running
            state.running = true
            return (state.nextID, starts)
        }
        if starts { Task.detached { await self.run() } }
        return id
    }

    /// Takes a registration back; nothing happens if it has fired.
    package func cancel(_ id: Int) {
        _ = state.withLock { $0.entries.removeValue(forKey: id) }
    }

    /// How many deadlines are registered.
    package var count: Int { state.withLock { $0.entries.count } }

    private func run() async {
        while true {
            let now = ContinuousClock.now
            let (due, earliest): ([Entry], ContinuousClock.Instant?) = state.withLock { state in
                var due: [Entry] = []
                var earliest: ContinuousClock.Instant?
                for (id, entry) in state.entries {
                    if entry.deadline <= now {
                        due.append(entry)
                        state.entries.removeValue(forKey: id)
                    } else if earliest.map({ entry.deadline < $0 }) ?? true {
                        earliest = entry.deadline
                    }
                }
                if earliest == nil { state.running = false }
                return (due, earliest)
            }
            // In the order of their deadlines, however late the clock woke.
            for entry in due.sorted(by: { $0.deadline < $1.deadline }) { entry.fire() }
            guard let earliest else { return }
            // Not past the earliest deadline, and never longer than the granularity: a deadline
            // registered meanwhile may be earlier.
            try? await Task.sleep(until: min(earliest, now + granularity), clock: .continuous)
        }
    }
}
