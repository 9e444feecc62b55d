import Foundation
import Synchronization
import SyncCore
import Testing

/// The deepest filters the default limits accept are parsed, evaluated and written back on a small
/// stack. 80 calls nested in one another (740 bytes of `$filter`) crashed a 512 KiB thread, the
/// size of secondary threads and Swift concurrency's on Apple platforms, so an iOS client reading
/// such a filter from a server's next-page link, or a server on macOS, could crash; a call now
/// counts two levels of `QueryLimits.maximumNesting`. A release build runs them on 512 KiB (50
/// nested calls); a debug build's frames are several times larger, so it gets 4 MiB.
@Suite("Queries on a small stack")
struct SmallStackTests {
    #if DEBUG
        static let stackSize = 4 << 20
    #else
        static let stackSize = 512 << 10
    #endif

    /// Runs `body` on a thread of `stackSize` bytes and waits for it.
    static func onSmallStack(_ body: @escaping @Sendable () -> Void) {
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            body()
            done.signal()
        }
        thread.stackSize = stackSize
        thread.start()
        done.wait()
    }

    /// Parses `text`, evaluates it, writes it in both versions and parses it back: `nil`, or the error.
    static func exercise(_ text: String) -> String? {
        do {
            let filter = try QueryExpression(odataFilter: text, protocolVersion: .v3)
            _ = QueryEvaluator().matches(filter, ["id": "a", "title": "x", "n": 3])
            _ = filter.odata(protocolVersion: .v2)
            _ = try QueryExpression(odataFilter: filter.odata(protocolVersion: .v3), protocolVersion: .v3)
            return nil
        } catch {
            return "\(error)"
        }
    }

    @Test func theDeepestAcceptedFiltersFitASmallStack() {
        // A level below the limit: the encoder puts parentheses around what it writes back.
        let levels = QueryLimits.default.maximumNesting - 2
        let calls = levels / 2
        let nested = String(repeating: "tolower(", count: calls) + "title" + String(repeating: ")", count: calls)
        let parentheses = String(repeating: "(", count: levels) + "n eq 3" + String(repeating: ")", count: levels)
        let nots = String(repeating: "not ", count: levels - 1) + "(n eq 3)"
        let chain = (0..<(QueryLimits.default.maximumDepth / 2)).map { "n eq \($0)" }.joined(separator: " or ")
        let failures = Mutex<[String]>([])
        for text in [nested + " eq 'x'", parentheses, nots, chain] {
            Self.onSmallStack {
                if let failure = Self.exercise(text) { failures.withLock { $0.append(failure) } }
            }
        }
        #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 })")
        // Two calls more are refused, not parsed deeper.
        let deeper = "tolower(tolower(" + nested + ")) eq 'x'"
        #expect(throws: QueryError.self) { try QueryExpression(odataFilter: deeper, protocolVersion: .v3) }
    }
}
