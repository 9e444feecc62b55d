@testable import FerryServer
import Foundation
import ServerTestSupport
import SyncCore
import Testing

/// The room batches share (``ByteBudget``): taken while there is room, waited for in order, given
/// back whole, and a wait that ends without room holds none.
@Suite("Batch bytes handled at once", .timeLimit(.minutes(3)))
struct ByteBudgetTests {
    /// Waits (a bounded number of turns) until `budget` has `count` waiters.
    static func waitUntil(_ budget: ByteBudget, holds count: Int) async throws {
        for _ in 0..<2_000 where budget.waiting != count { try await Task.sleep(for: .milliseconds(5)) }
        try #require(budget.waiting == count, "\(budget.waiting) waiting, not \(count)")
    }

    @Test func waitersGetRoomInTheOrderTheyCame() async throws {
        let budget = ByteBudget(capacity: 10)
        let took1 = await budget.take(6, within: .zero)
        #expect(took1)
        let first = Task { await budget.take(6, within: .seconds(60)) }
        try await Self.waitUntil(budget, holds: 1)
        // 3 would fit, but it comes after a waiter: it waits its turn.
        let second = Task { await budget.take(3, within: .seconds(60)) }
        try await Self.waitUntil(budget, holds: 2)
        budget.give(6)
        let (firstTook, secondTook) = (await first.value, await second.value)
        #expect(firstTook && secondTook)
        #expect(budget.waiting == 0)
        // 6 + 3 are taken: 1 is left.
        let took2 = await budget.take(2, within: .milliseconds(20))
        #expect(!took2)
        let took3 = await budget.take(1, within: .zero)
        #expect(took3)
    }

    @Test func aWaitThatEndsWithoutRoomHoldsNone() async throws {
        let budget = ByteBudget(capacity: 10)
        let took4 = await budget.take(8, within: .zero)
        #expect(took4)
        // Timed out.
        let took5 = await budget.take(5, within: .milliseconds(20))
        #expect(!took5)
        // Cancelled, at the head of the line: the one behind it gets in.
        let cancelled = Task { await budget.take(5, within: .seconds(60)) }
        try await Self.waitUntil(budget, holds: 1)
        let behind = Task { await budget.take(2, within: .seconds(60)) }
        try await Self.waitUntil(budget, holds: 2)
        cancelled.cancel()
        let cancelledTook = await cancelled.value
        #expect(!cancelledTook)
        let behindTook = await behind.value
        #expect(behindTook)
        // Everything given back: the whole capacity again, and more than it is taken as all of it.
        budget.give(8)
        budget.give(2)
        let took6 = await budget.take(50, within: .zero)
        #expect(took6)
        let took7 = await budget.take(1, within: .zero)
        #expect(!took7)
    }

    /// Batches larger together than the room for them are all answered, one after the other.
    @Test func batchesBeyondTheRoomWaitTheirTurn() async throws {
        var limits = RequestLimits()
        limits.maximumBodySize = 16 * 1024
        limits.maximumBatchBodySize = 64 * 1024
        limits.maximumBatchBytesAtOnce = 64 * 1024
        let server = try await LiveServer.start(tables: BatchBoundsTests.tables, limits: limits)
        let replies = try await withThrowingTaskGroup(of: LiveServer.Reply.self) { group in
            for round in 0..<4 {
                group.addTask {
                    try await server.send(
                        "POST", "/tables/$batch", json: BatchBoundsTests.inserts(400, prefix: "b\(round)-"))
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        for reply in replies {
            #expect(reply.status == 200, "\(reply.text.prefix(300))")
            #expect(BatchBoundsTests.statuses(reply) == Array(repeating: 201, count: 400))
        }
        let count = try await server.send("GET", "/tables/todo?$top=1&$count=true")
        #expect(count.json?.objectValue?["count"] == .int(1_600), "\(count.text.prefix(300))")
        try await server.stop()
    }
}
