import StoreConformance
import SyncCore
import SyncTesting
import Synchronization
import Testing

/// Random local edits on several devices, random pushes, pulls, purges and restarts, random network
/// faults and server-side bulk writes, against the model server; then a final sync with the
/// client-wins policy. Every device must end equal to the server, and no write may be lost.
@Suite("Randomized sync")
struct RandomizedSyncTests {
    static let tables = ["todo", "note"]

    /// Faults for a fraction of requests, while enabled.
    final class Chaos: Sendable {
        private let state: Mutex<(enabled: Bool, random: SeededRandom, injected: Int)>

        init(seed: UInt64) { state = Mutex((true, SeededRandom(seed: seed), 0)) }

        var injected: Int { state.withLock { $0.injected } }
        func disable() { state.withLock { $0.enabled = false } }

        func fault(for request: ModelServer.Request) -> ModelServer.Fault? {
            state.withLock { state in
                guard state.enabled, Int.random(in: 0..<100, using: &state.random) < 6 else { return nil }
                state.injected += 1
                switch Int.random(in: 0..<5, using: &state.random) {
                case 0: return .dropBeforeApply
                case 1: return .dropAfterApply
                case 2: return .cancelAfterApply
                case 3: return .status(503, "overloaded")
                default: return .status(401, "token expired")
                }
            }
        }
    }

    struct Run {
        var random: SeededRandom
        var devices: [Device]
        var handlers: [RecordingConflictHandler]
        /// The last value each device wrote to each item ("deleted" after a local delete).
        var lastWrite: [[String: String]]
        var counter = 0
        var localOperations = 0

        mutating func token(_ device: Int) -> String {
            counter += 1
            return "d\(device)-w\(counter)"
        }
    }

    static let tolerated: Set<SyncError.Code> = [.network, .unauthorized, .cancelled, .remote]

    static func tolerate(_ body: () async throws -> Void) async throws {
        do {
            try await body()
        } catch let error as SyncError where tolerated.contains(error.code) {
            // An injected fault: the work stops and will be resumed.
        }
    }

    @Test(arguments: [(UInt64(1), 1000), (UInt64(2), 1000), (UInt64(3), 1000)])
    func devicesConvergeAndNoWriteIsLost(seed: UInt64, steps: Int) async throws {
        let server = ModelServer(maximumPageSize: 5)
        let chaos = Chaos(seed: seed &* 7919)
        server.setFaultPolicy { chaos.fault(for: $0) }
        let kinds: [StoreKind] = [.memory, .sqliteMemory, seed == 1 ? .sqliteFile : .memory]
        var handlers: [RecordingConflictHandler] = []
        var devices: [Device] = []
        for (index, kind) in kinds.enumerated() {
            let handler = RecordingConflictHandler(fallback: .useClient)
            handlers.append(handler)
            devices.append(try Device("d\(index)", kind: kind, server: server, handler: handler))
        }
        var run = Run(
            random: SeededRandom(seed: seed), devices: devices, handlers: handlers,
            lastWrite: Array(repeating: [:], count: devices.count))

        for _ in 0..<steps {
            try await Self.step(&run, server: server)
        }

        // The final sync, faults off: push everything, then pull everything, until quiet.
        chaos.disable()
        for _ in 0..<3 {
            for device in run.devices { try await device.context.push() }
            for device in run.devices {
                for table in Self.tables {
                    try await device.context.pull(table, queryID: "all", options: PullOptions(pageSize: 7))
                }
            }
        }

        for (index, device) in run.devices.enumerated() {
            #expect(try await device.context.queuedOperationCount() == 0, "device \(index)")
            #expect(try await device.context.operationErrors().isEmpty, "device \(index)")
            for table in Self.tables {
                let local = try await device.context.table(table).query(TableQuery().orderBy("id")).items
                let remote = server.rows(table).map { $0.filter { $0.key != "deleted" } }
                let localByID = Dictionary(uniqueKeysWithValues: local.map { ($0.id!, $0) })
                let remoteByID = Dictionary(uniqueKeysWithValues: remote.map { ($0.id!, $0) })
                let differing = Set(localByID.keys).union(remoteByID.keys).filter { localByID[$0] != remoteByID[$0] }
                #expect(
                    differing.isEmpty,
                    """
                    device \(index), table \(table): \(differing.count) items differ, e.g. \(differing.sorted().prefix(3).map {
                        "\($0): local \(localByID[$0].map { "\($0)" } ?? "none"), server \(remoteByID[$0].map { "\($0)" } ?? "none")"
                    })
                    """)
            }
        }

        // No write lost: each device's last write of each item reached the server, unless the item was
        // deleted there (a deletion wins: it cannot be revived through the protocol).
        let commits = server.commits
        var written: [String: Set<String>] = [:]
        for commit in commits {
            if let value = commit.row["v"]?.stringValue {
                written[commit.table + "/" + commit.itemID, default: []].insert(value)
            }
        }
        var checked = 0
        for (index, writes) in run.lastWrite.enumerated() {
            for (key, value) in writes where value != "deleted" {
                let parts = key.split(separator: "/", maxSplits: 1).map(String.init)
                let deletedOnServer = server.row(parts[0], id: parts[1])?.isDeleted == true
                #expect(
                    written[key]?.contains(value) == true || deletedOnServer,
                    "device \(index) wrote \(value) to \(key), and the server never saw it")
                checked += 1
            }
        }
        // No duplicate inserts, and no false conflict: a conflict is always with someone else's write.
        var inserts: [String: Int] = [:]
        for commit in commits where commit.kind == .insert && commit.device != "server" {
            inserts[commit.table + "/" + commit.itemID, default: 0] += 1
        }
        #expect(inserts.values.allSatisfy { $0 == 1 })
        var writer: [String: String] = [:]
        for commit in commits { if let version = commit.row.version { writer[version] = commit.device } }
        var conflicts = 0
        for (index, handler) in run.handlers.enumerated() {
            for conflict in handler.seen {
                conflicts += 1
                guard let version = conflict.serverItem?.version else { continue }
                #expect(
                    writer[version] != "d\(index)",
                    """
                    device \(index) met a conflict with its own write \(version) on \(conflict.itemID): \(conflict.kind) \
                    \(conflict.status ?? 0) client \(conflict.clientItem.map { "\($0)" } ?? "-") base \(conflict.baseItem.map { "\($0)" } ?? "-"); \
                    history \(commits.filter { $0.itemID == conflict.itemID }.map { "\($0.device) \($0.kind) \($0.row.version ?? "")" })
                    """)
            }
        }
        // The run exercised what it claims to.
        #expect(run.localOperations > steps / 2)
        #expect(chaos.injected > 10)
        #expect(conflicts > 0)
        #expect(checked > 50)
    }

    static func step(_ run: inout Run, server: ModelServer) async throws {
        let deviceIndex = Int.random(in: 0..<run.devices.count, using: &run.random)
        let device = run.devices[deviceIndex]
        let table = tables[Int.random(in: 0..<tables.count, using: &run.random)]
        let sync = device.context.table(table)
        let roll = Int.random(in: 0..<100, using: &run.random)
        switch roll {
        case 0..<28:
            let value = run.token(deviceIndex)
            let id = "\(value)-item"
            try await sync.insert(["id": .string(id), "v": .string(value), "n": .int(Int64(roll))])
            run.lastWrite[deviceIndex][table + "/" + id] = value
            run.localOperations += 1
        case 28..<58:
            let items = try await sync.query().items
            guard !items.isEmpty else { return }
            var item = items[Int.random(in: 0..<items.count, using: &run.random)]
            let value = run.token(deviceIndex)
            item["v"] = .string(value)
            item["n"] = .int(Int64(roll))
            try await sync.update(item)
            run.lastWrite[deviceIndex][table + "/" + item.id!] = value
            run.localOperations += 1
        case 58..<66:
            let items = try await sync.query().items
            guard !items.isEmpty else { return }
            let id = items[Int.random(in: 0..<items.count, using: &run.random)].id!
            try await sync.delete(id: id)
            run.lastWrite[deviceIndex][table + "/" + id] = "deleted"
            run.localOperations += 1
        case 66..<79:
            try await tolerate { try await device.context.push() }
        case 79..<92:
            let options = PullOptions(
                pageSize: Int.random(in: 1...8, using: &run.random), pushesFirst: Bool.random(using: &run.random))
            try await tolerate { try await sync.pull(queryID: "all", options: options) }
        case 92..<94:
            try await tolerate { try await sync.pull(options: PullOptions(pageSize: 4)) }
        case 94..<97:
            // Another writer changes several rows in one commit (they share one millisecond).
            let live = server.rows(table)
            guard !live.isEmpty else { return }
            let count = Int.random(in: 1...min(8, live.count), using: &run.random)
            let ids = (0..<count).map { _ in live[Int.random(in: 0..<live.count, using: &run.random)].id! }
            server.touch(table, ids: ids, set: ["bulk": .int(Int64(run.counter))])
            if Bool.random(using: &run.random) { server.advanceClock(by: 1) }
        case 97..<98:
            do {
                try await sync.purge()
            } catch {
                // A purge refused because the table has queued operations is a normal outcome here.
                if error.code != .queuedOperations { throw error }
            }
        default:
            try await run.devices[deviceIndex].restart()
        }
    }
}
