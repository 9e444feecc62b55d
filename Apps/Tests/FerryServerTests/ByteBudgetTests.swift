@testable import FerryServer
import Foundation
import ServerTestSupport
import SyncCore
import Testing

#if canImport(Glibc)
    import Glibc
#endif

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
        limits.maximumBodyBytesAtOnce = 64 * 1024
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

    /// A single request's body takes room too, by its `Content-Length`, before it is read: while
    /// a request that declared the whole room sends its body slowly, another waits its turn and,
    /// past the wait, is answered 503 `busy` with nothing applied; a request without a body waits
    /// for nothing; once the slow one ends, the room is back.
    @Test func aSingleBodyTakesItsRoomByItsLength() async throws {
        var limits = RequestLimits()
        limits.maximumBodySize = 16 * 1024
        limits.maximumBatchBodySize = 16 * 1024
        limits.maximumBodyBytesAtOnce = 16 * 1024
        limits.bodyRoomWait = .milliseconds(300)
        let server = try await LiveServer.start(tables: BatchBoundsTests.tables, limits: limits)
        let port = server.server.port
        // Declares 16 KiB and sends one byte of it.
        let slow = try LoopbackHTTP.connect(port: port)
        let head =
            "POST /tables/todo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + "Content-Length: \(16 * 1024)\r\n\r\n{"
        try LoopbackHTTP.writeAll(slow, Array(head.utf8))
        var refused: LiveServer.Reply?
        for _ in 0..<100 {
            // Until the slow request holds the room (its head may not have been read yet).
            let reply = try await server.send("POST", "/tables/todo", json: ["id": "waited"])
            if reply.status == 503 {
                refused = reply
                break
            }
            #expect(reply.status == 201 || reply.status == 409, "\(reply.text)")
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(refused?.json?.objectValue?["code"]?.stringValue == "busy", "\(refused?.text ?? "never refused")")
        #expect(refused?.header("Retry-After") == "1")
        #expect(
            try await server.send("GET", "/tables/todo").status == 200, "a request without a body waits for nothing")
        close(slow)
        var later = try await server.send("POST", "/tables/todo", json: ["id": "later"])
        for _ in 0..<100 where later.status == 503 {
            try await Task.sleep(for: .milliseconds(20))
            later = try await server.send("POST", "/tables/todo", json: ["id": "later"])
        }
        #expect(later.status == 201, "the room came back: \(later.text)")
        try await server.stop()
    }

    /// An answer the client does not read holds its room until it is written: a client that sent
    /// a request and reads nothing kept the answer in memory for the 60 s write timeout, outside
    /// any bound (sixteen of them held a server at about 800 MB). While one does, a read whose
    /// answer finds no room is answered 503 `busy` (a page, or the read of a batch), a small one
    /// is not held back, and once the client goes, the room is back.
    @Test func anAnswerNobodyReadsHoldsItsRoom() async throws {
        var limits = RequestLimits()
        limits.maximumBatchBodySize = 10 << 20
        limits.maximumBodyBytesAtOnce = 10 << 20
        limits.bodyRoomWait = .milliseconds(300)
        let server = try await LiveServer.start(tables: BatchBoundsTests.tables, limits: limits)
        let text = String(repeating: "x", count: 640 << 10)
        for index in 0..<12 {
            let reply = try await server.send(
                "POST", "/tables/todo", json: ["id": .string("big-\(index)"), "text": .string(text)])
            try #require(reply.status == 201, "\(reply.text.prefix(300))")
        }
        // About 7.5 MiB, more than the kernel's buffers take for a reader this slow.
        let page = "/tables/todo?$top=12&$orderby=id"
        let slow = try LoopbackHTTP.connect(port: server.server.port, receiveBuffer: 4096)
        try LoopbackHTTP.writeAll(slow, Array("GET \(page) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8))
        var refused: LiveServer.Reply?
        for _ in 0..<200 {
            // Until the slow client's answer holds its room.
            let reply = try await server.send("GET", page)
            if reply.status == 503 {
                refused = reply
                break
            }
            #expect(reply.status == 200, "\(reply.text.prefix(300))")
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(
            refused?.json?.objectValue?["code"]?.stringValue == "busy",
            "\(refused?.text.prefix(300) ?? "never refused")")
        #expect(refused?.header("Retry-After") == "1")
        let small = try await server.send("GET", "/tables/todo/big-0?$select=id")
        #expect(small.status == 200, "a small answer is not held back: \(small.text.prefix(300))")
        let requests: [JSONValue] = (0..<6).map {
            .object(["method": "GET", "url": .string("/tables/todo/big-\($0)")])
        }
        let batch = try await server.send("POST", "/tables/$batch", json: ["requests": .array(requests)])
        #expect(batch.status == 200, "\(batch.text.prefix(300))")
        let statuses = BatchBoundsTests.statuses(batch)
        #expect(statuses.contains(503), "a batch's reads take their room too: \(statuses)")
        close(slow)
        var later = try await server.send("GET", page)
        for _ in 0..<200 where later.status == 503 {
            try await Task.sleep(for: .milliseconds(20))
            later = try await server.send("GET", page)
        }
        #expect(later.status == 200, "the room came back: \(later.text.prefix(300))")
        let again = try await server.send("POST", "/tables/$batch", json: ["requests": .array(requests)])
        #expect(BatchBoundsTests.statuses(again) == Array(repeating: 200, count: 6))
        try await server.stop()
    }
}
