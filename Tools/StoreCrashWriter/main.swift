// The child process of the crash-atomicity tests (Tests/StoreConformance/CrashAtomicity.swift).
//
//     StoreCrashWriter sqlite:/path/to/store.ferry | lmdb:/path/to/store-directory
//
// Opens the store, finds the last committed transaction number `n` (the delta token "last" of table
// "crash"), and writes transactions n+1, n+2, ... forever. Transaction t, in ONE store write:
// - inserts `CrashTransaction.itemCount(t)` items `t<t>-<k>` carrying `tx`, `k`, `of` and padding;
// - deletes the items of transaction t-5 whose `k` is even (so deletes must be atomic too);
// - sets the item `counter` to `{"value": t}`;
// - queues one insert operation for `t<t>-1`;
// - sets the delta token ("crash", "last") to "t".
// After each commit it writes the line `committed <t>` to stdout with one write(2), so everything the
// parent has read was committed. The parent kills it with SIGKILL at a random moment.
import ArgumentParser
import Foundation
import StoreLMDB
import StoreSQLite
import SyncCore

@main
struct StoreCrashWriter: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "StoreCrashWriter",
        abstract: "The child process of the crash-atomicity tests: writes transactions until it is killed.")

    @Argument(help: "The store to write into: sqlite:PATH or lmdb:PATH.")
    var spec: String

    func validate() throws {
        guard spec.hasPrefix("sqlite:") || spec.hasPrefix("lmdb:") else {
            throw ValidationError("unknown store '\(spec)' (expected sqlite:PATH or lmdb:PATH)")
        }
    }

    func run() async throws {
        do {
            let store = try Self.open(spec)
            var next = try await store.read { reader in
                Int(try reader.deltaToken(table: "crash", queryID: "last") ?? "0") ?? 0
            }
            while true {
                next += 1
                let transaction = next
                try await store.write { tx in try Self.write(transaction, tx) }
                let line = Array("committed \(transaction)\n".utf8)
                _ = line.withUnsafeBytes { Foundation.write(1, $0.baseAddress, $0.count) }
            }
        } catch {
            Self.fail("StoreCrashWriter: \(error)")
        }
    }

    static func open(_ spec: String) throws -> any LocalStore {
        if spec.hasPrefix("sqlite:") { return try SQLiteStore(path: String(spec.dropFirst("sqlite:".count))) }
        if spec.hasPrefix("lmdb:") { return try LMDBStore(path: String(spec.dropFirst("lmdb:".count))) }
        fail("StoreCrashWriter: unknown store '\(spec)' (expected sqlite:PATH or lmdb:PATH)")
    }

    static func write(_ t: Int, _ tx: any StoreTransaction) throws {
        let count = itemCount(t)
        let padding = String(repeating: "x", count: 64 + (t % 7) * 16)
        let items: [JSONObject] = (1...count).map { k in
            [
                "id": .string("t\(t)-\(k)"), "tx": .int(Int64(t)), "k": .int(Int64(k)), "of": .int(Int64(count)),
                "pad": .string(padding),
            ]
        }
        try tx.upsert("crash", items)
        if t > 5 {
            let old = t - 5
            let doomed = (1...itemCount(old)).filter { $0 % 2 == 0 }.map { "t\(old)-\($0)" }
            _ = try tx.delete("crash", ids: doomed)
        }
        try tx.upsert("crash", [["id": "counter", "value": .int(Int64(t))]])
        _ = try tx.appendOperation(OperationDraft(table: "crash", itemID: "t\(t)-1", kind: .insert))
        try tx.setDeltaToken(table: "crash", queryID: "last", value: String(t))
    }

    /// Items inserted by transaction `t`: 1 to 12, varying.
    static func itemCount(_ t: Int) -> Int { 1 + (t &* 7919) % 12 }

    static func fail(_ message: String) -> Never {
        FileHandle.standardError.write(Data((message + "\n").utf8))
        Foundation.exit(2)
    }
}
