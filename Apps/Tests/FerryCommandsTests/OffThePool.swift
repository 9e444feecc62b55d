import Foundation

/// Runs blocking work (a child process, reads from its pipes) on a thread of its own and waits for
/// it without holding a thread of the tests' cooperative pool: there are two of them on these
/// machines, and the servers other suites run in-process need them (a blocked pool stalls them
/// until their clients time out).
func offThePool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
    }
}
