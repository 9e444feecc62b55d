import SyncCore
import SyncTesting
import Testing

@Suite("Backoff")
struct BackoffTests {
    @Test func waitsDoubleUpToTheMaximumWithJitterBelowEach() {
        let backoff = Backoff(initial: .milliseconds(100), maximum: .seconds(2))
        var generator = SeededGenerator(state: 7)
        for failures in 1...12 {
            let base = min(Duration.milliseconds(100) * (1 << (failures - 1)), .seconds(2))
            for _ in 0..<50 {
                let wait = backoff.delay(after: failures, using: &generator)
                #expect(wait >= base / 2 && wait <= base, "after \(failures): \(wait) outside \(base / 2)…\(base)")
            }
        }
        let fixed = Backoff(initial: .milliseconds(100), maximum: .seconds(2), jitter: 0)
        #expect(fixed.delay(after: 3) == .milliseconds(400))
        #expect(fixed.delay(after: 1_000) == .seconds(2), "no overflow after many failures")
    }

    @Test func theServersRetryAfterIsAFloorUpToAnHour() {
        let backoff = Backoff(initial: .milliseconds(100), maximum: .seconds(2), jitter: 0)
        #expect(backoff.delay(after: 1, retryAfter: .seconds(30)) == .seconds(30), "above the maximum too")
        #expect(backoff.delay(after: 5, retryAfter: .milliseconds(10)) == .milliseconds(1_600))
        #expect(backoff.delay(after: 1, retryAfter: .seconds(86_400)) == Backoff.longestRetryAfter)
    }
}
