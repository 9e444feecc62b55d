import Observation
import Synchronization
@testable import SyncCore
import Testing

/// The status as SwiftUI reads it: on the main actor, one property at a time.
@Suite("SyncStatus")
struct SyncStatusTests {
    final class Flag: Sendable {
        let raised = Mutex(false)
        var isRaised: Bool { raised.withLock { $0 } }
    }

    /// Waits (up to 5 s) for the main actor to take the delivered state.
    @MainActor
    static func delivered(_ condition: @MainActor () -> Bool) async throws {
        for _ in 0..<500 where !condition() { try await Task.sleep(for: .milliseconds(10)) }
    }

    @Test @MainActor func aViewOfOnePropertyIsNotInvalidatedByAnother() async throws {
        let status = SyncStatus()
        let pendingChanged = Flag()
        withObservationTracking {
            _ = status.pendingOperations
        } onChange: {
            pendingChanged.raised.withLock { $0 = true }
        }
        status.update { $0.isPulling = true }
        try await Self.delivered { status.isPulling }
        #expect(status.isPulling)
        #expect(!pendingChanged.isRaised, "a change of isPulling invalidated a view of pendingOperations")
        status.update { $0.pendingOperations = 3 }
        try await Self.delivered { status.pendingOperations == 3 }
        #expect(pendingChanged.isRaised)
    }

    @Test @MainActor func theSameValueAgainInvalidatesNothing() async throws {
        let status = SyncStatus()
        status.update { $0.pendingOperations = 2 }
        try await Self.delivered { status.pendingOperations == 2 }
        let changed = Flag()
        withObservationTracking {
            _ = status.pendingOperations
            _ = status.isCaughtUp
        } onChange: {
            changed.raised.withLock { $0 = true }
        }
        status.update { $0.pendingOperations = 2 }
        status.update { $0.isPushing = true }
        try await Self.delivered { status.isPushing }
        #expect(!changed.isRaised)
    }

    @Test func updatesNeverRepeatAnUnchangedSnapshotAndGiveTheNewestToASlowReader() async throws {
        let status = SyncStatus()
        var updates = status.updates().makeAsyncIterator()
        #expect(await updates.next()?.pendingOperations == 0, "the status now first")
        status.update { $0.pendingOperations = 1 }
        #expect(await updates.next()?.pendingOperations == 1)
        status.update { $0.pendingOperations = 1 }  // unchanged: nothing is sent
        status.update { $0.isPushing = true }
        status.update { $0.isPulling = true }
        // A reader that fell behind gets the newest state, once.
        let newest = await updates.next()
        #expect(newest?.isPushing == true && newest?.isPulling == true && newest?.pendingOperations == 1)
        #expect(status.snapshot == newest, "readable from any executor")
        let watched = WatchedValue(5)
        #expect(!watched.update { $0 = 5 }, "an unchanged value is not a change")
        #expect(watched.update { $0 = 6 })
    }
}
