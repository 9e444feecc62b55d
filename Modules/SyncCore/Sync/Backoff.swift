/// How long to wait before trying again after failures in a row: exponential, capped, with jitter,
/// and never less than the server asked for (`Retry-After`). The one backoff of Ferry's retries:
/// the transport's retries of safe requests and automatic sync's retries of pushes, pulls and the
/// change feed.
///
/// ```swift
/// let backoff = Backoff(initial: .milliseconds(500), maximum: .seconds(60))
/// backoff.delay(after: 1)                                  // 250 ms to 500 ms
/// backoff.delay(after: 4)                                  // 2 s to 4 s
/// backoff.delay(after: 1, retryAfter: .seconds(30))        // 30 s: what the server asked
/// ```
public struct Backoff: Sendable, Hashable {
    /// The wait after the first failure; it doubles with each failure in a row.
    public var initial: Duration
    /// The longest wait the backoff itself chooses.
    public var maximum: Duration
    /// The share of a wait that is random: 0.5 waits between half and all of it, so that many
    /// devices do not retry in step.
    public var jitter: Double
    /// The longest wait a server's `Retry-After` can ask for; a longer one is taken as this.
    public static let longestRetryAfter: Duration = .seconds(3600)

    public init(initial: Duration, maximum: Duration, jitter: Double = 0.5) {
        self.initial = initial
        self.maximum = max(initial, maximum)
        self.jitter = min(max(jitter, 0), 1)
    }

    /// The wait after `failures` failures in a row (1 = after the first), at least `retryAfter`
    /// when the server gave one.
    public func delay(after failures: Int, retryAfter: Duration? = nil) -> Duration {
        var generator = SystemRandomNumberGenerator()
        return delay(after: failures, retryAfter: retryAfter, using: &generator)
    }

    /// ``delay(after:retryAfter:)`` with a given source of randomness (tests pass a seeded one).
    public func delay(
        after failures: Int, retryAfter: Duration? = nil, using generator: inout some RandomNumberGenerator
    ) -> Duration {
        let exponent = min(max(0, failures - 1), 30)
        let base = min(initial * (1 << exponent), maximum)
        let chosen = jitter == 0 ? base : base * Double.random(in: (1 - jitter)...1, using: &generator)
        guard let retryAfter else { return chosen }
        return max(chosen, min(retryAfter, Self.longestRetryAfter))
    }
}
