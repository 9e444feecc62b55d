import Foundation
import ServerStorageCore
public import Testing

/// Waits (up to 20 s) until `condition` holds; records an issue when it never does.
public func eventually(
    _ what: String, sourceLocation: SourceLocation = #_sourceLocation, _ condition: () async throws -> Bool
) async throws {
    for _ in 0..<2_000 {
        if try await condition() { return }
        try await Task.sleep(for: .milliseconds(10))
    }
    // Once more: a sleep that ended late (a busy machine) must not hide a condition that holds.
    if try await condition() { return }
    Issue.record("never happened: \(what)", sourceLocation: sourceLocation)
}

/// A liveness bound, not a measurement: `body`'s result, or an issue recorded and
/// ``LivenessFailure`` thrown when it has not returned after `limit` (even if it ignores
/// cancellation, which is what such a test looks for). Bounds are generous (tens of seconds), far
/// above what a healthy run takes on a loaded machine.
public func within<T: Sendable>(
    _ limit: Duration, _ what: String, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    do {
        return try await BoundedWait.run(within: limit, timeout: { LivenessFailure(what: what, limit: limit) }, body)
    } catch let failure as LivenessFailure {
        Issue.record("\(failure)", sourceLocation: sourceLocation)
        throw failure
    }
}

/// What ``within(_:_:sourceLocation:_:)`` throws for work that did not end in time.
public struct LivenessFailure: Error, CustomStringConvertible {
    public var what: String
    public var limit: Duration
    public var description: String { "\(what) did not end within \(limit)" }
}

/// Runs blocking work (a child process, reads from its pipes or a socket, a pseudo-terminal) on a
/// thread of its own and waits for it without holding a thread of the tests' cooperative pool:
/// there are two of them on these machines, and the servers and storages other suites run
/// in-process need them. A blocked pool stalls them all, until their own time limits fail tests
/// that have nothing to do with the blocking one (a writer's turn "busy for 5 seconds").
///
/// ```swift
/// let status = try await offThePool { process.waitUntilExit(); return process.terminationStatus }
/// ```
public func offThePool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
    }
}
