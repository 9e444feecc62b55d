import SyncCore
import SyncTesting
import Testing

/// A server that cannot take requests for now (429, 503, a proxy's 502 or 504) stops a push: an
/// outage is no operation's failure.
@Suite("Push: a server unavailable for now")
struct PushOutageTests {
    /// 429, 503 and a proxy's 502 or 504 say the server cannot take requests for now: the push
    /// stops, keeps the operation (pending after a 429 or 503, which say it was not applied; in
    /// flight after a 502 or 504, which may come after the server applied it) and those after it,
    /// and records no error. Recorded as failures, a short outage became thousands of errors.
    @Test(arguments: [429, 503, 502, 504])
    func anUnavailableServerStopsThePushAndKeepsTheOperations(_ status: Int) async throws {
        let server = ModelServer()
        let device = try Device(kind: .memory, server: server)
        for id in ["a", "b", "c"] { try await device.table().insert(["id": .string(id)]) }
        server.inject(.status(status, "the database cannot be reached"), on: .insert, itemID: "b")
        let error = await expectSyncError(.network) { try await device.context.push() }
        #expect(error?.operationsPushed == 1, "\(String(describing: error))")
        #expect(error?.remoteError?.status == status)
        #expect(try await device.context.operationErrors().isEmpty, "an outage is no operation's error")
        let states = try await device.operations().map(\.state)
        #expect(states == [status == 502 || status == 504 ? .inFlight : .pending, .pending], "\(states)")
        #expect(server.rows("todo").map(\.id) == ["a"])
        #expect(try await device.context.push().pushed == 2)
        #expect(server.rows("todo").compactMap(\.id).sorted() == ["a", "b", "c"])
    }

    /// In a batch: the entries answered before and after an unavailable one are completed, the
    /// push stops, and the unavailable one is pending; a batch refused as a whole for unavailability
    /// stops the push too, instead of sending its writes one by one to a server that cannot take them.
    @Test func inABatchTheOthersAreCompletedAndTheUnavailableOneKept() async throws {
        let queued = try await PipelinedPushTests.Queued(["a", "b", "c"])
        queued.server.inject(.status(503, "the database cannot be reached"), on: .insert, itemID: "b")
        let error = await expectSyncError(.network) { try await queued.context.push() }
        #expect(error?.operationsPushed == 2, "\(String(describing: error))")
        #expect(try await queued.context.operationErrors().isEmpty)
        #expect(
            try await queued.storage.store.read { try $0.operations(after: nil, table: nil, limit: nil) }.map(\.itemID)
                == ["b"])
        #expect(try await queued.context.push().pushed == 1)

        let whole = try await PipelinedPushTests.Queued(["d", "e"])
        whole.remote.fail(batch: 1, with: .unavailable)
        _ = await expectSyncError(.network) { try await whole.context.push() }
        #expect(whole.remote.writesSentAlone == 0, "sent one by one to a server that cannot take them")
        let states = try await whole.storage.store.read { try $0.operations(after: nil, table: nil, limit: nil) }
        #expect(states.map(\.state) == [.pending, .pending])
        #expect(try await whole.context.push().pushed == 2)
        #expect(whole.server.rows("todo").count == 2)
    }
}
