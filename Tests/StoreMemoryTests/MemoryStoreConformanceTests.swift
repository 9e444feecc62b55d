import StoreConformance
import StoreMemory
import SyncCore
import Testing

@Suite("MemoryStore conformance")
struct MemoryStoreConformanceTests {
    @Test(arguments: StoreConformanceSuite.all)
    func conformance(_ check: StoreConformanceCheck) async throws {
        try await check.run { StoreFixture(store: MemoryStore()) }
    }

    @Test func declaresNoOptionalCapabilitiesAndReportsWhatItSkips() async throws {
        #expect(MemoryStore().capabilities == [])
        let skipped = await StoreConformanceSuite.skipped(by: StoreFixture(store: MemoryStore())).map(\.name)
        #expect(skipped.contains("everything survives closing and reopening the store"))
        #expect(!skipped.contains("a handle used after its transaction fails with closed"))
        try await StoreConformanceSuite.reportSkipped(by: StoreFixture(store: MemoryStore()))
    }

    @Test func leadingDotFactoryMakesAnEmptyStore() async throws {
        let store: MemoryStore = .memory
        #expect(try await store.read { try $0.tableNames() } == [])
    }
}
