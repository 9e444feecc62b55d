import StoreConformance
import StoreMemory
import SyncCore
import Testing

@Suite("MemoryStore conformance")
struct MemoryStoreConformanceTests {
    @Test(arguments: StoreConformance.checks(for: MemoryStore().capabilities))
    func conformance(_ check: StoreConformanceCheck) async throws {
        try await check.run { StoreFixture(store: MemoryStore()) }
    }

    @Test func declaresNoOptionalCapabilities() {
        #expect(MemoryStore().capabilities == [])
        #expect(StoreConformance.skipped(for: []) == ["everything survives closing and reopening the store"])
    }

    @Test func leadingDotFactoryMakesAnEmptyStore() async throws {
        let store: MemoryStore = .memory
        #expect(try await store.read { try $0.tableNames() } == [])
    }

    @Test func aTransactionHandleCannotBeUsedAfterItsTransaction() async throws {
        let store = MemoryStore()
        let escaped = EscapedHandle()
        try await store.write { tx in escaped.set(tx) }
        #expect(throws: StoreError.self) { try escaped.handle?.upsert("t", [["id": "1"]]) }
        #expect(try await store.item("t", id: "1") == nil)
    }
}

/// Holds a transaction handle past the end of its transaction, to prove that doing so fails.
final class EscapedHandle: @unchecked Sendable {
    // Only touched from one task in the test above.
    var handle: (any StoreTransaction)?
    func set(_ handle: any StoreTransaction) { self.handle = handle }
}
