/// A random source that always gives the same sequence, for tests of code that takes one.
///
/// ```swift
/// var random = SeededGenerator(state: 42)
/// let wait = Backoff(initial: .seconds(1), maximum: .seconds(8)).delay(after: 2, using: &random)
/// ```
public struct SeededGenerator: RandomNumberGenerator, Sendable {
    public var state: UInt64

    public init(state: UInt64) { self.state = state }

    public mutating func next() -> UInt64 {
        state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        return state
    }
}
