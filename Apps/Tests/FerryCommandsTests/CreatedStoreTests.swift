import Foundation
import ServerTestSupport
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A command that fails on a store it created removes the store only while it holds nothing: a
/// pull cut after some pages keeps them, so the next one resumes (the chaos probe saw a pull of
/// 41,200 rows cut by the server's death remove them all, with another process's queued insert).
@Suite("A store a failed command created", .timeLimit(.minutes(3)))
struct CreatedStoreTests {
    /// A server that answers one page of `todo` (two items and a next link), then closes every
    /// later connection without a word.
    static func serverCutAfterOnePage() throws -> LoopbackListener {
        let listener = try LoopbackListener()
        let answered = Mutex(false)
        listener.start { fd in
            defer { close(fd) }
            var head: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 4096)
            while !head.suffix(4).elementsEqual([13, 10, 13, 10]) {
                let count = read(fd, &buffer, buffer.count)
                guard count > 0 else { return }
                head += buffer[0..<count]
            }
            let isPage = String(decoding: head, as: UTF8.self).hasPrefix("GET /tables/todo")
            guard isPage else { return }
            let isFirst = answered.withLock { answered in
                defer { answered = true }
                return !answered
            }
            guard isFirst else { return }
            let body = """
                {"items":[\
                {"id":"a","title":"one","updatedAt":"2026-01-01T00:00:00.000Z","version":"MQ==","deleted":false},\
                {"id":"b","title":"two","updatedAt":"2026-01-01T00:00:01.000Z","version":"Mg==","deleted":false}],\
                "nextLink":"tables/todo?$skip=2"}
                """
            let answer =
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n"
                + "Connection: close\r\n\r\n\(body)"
            _ = LoopbackSockets.writeAll(fd, Array(answer.utf8))
        }
        return listener
    }

    @Test func aPullCutAfterItsFirstPageKeepsTheStoreItCreated() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-created-\(UUID())").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let listener = try Self.serverCutAfterOnePage()
        defer { listener.stop() }
        let store = "\(directory)/phone.sqlite"
        let cut = try await FerryBinaryTests.run([
            "pull", "todo", "--store", store, "--server", "http://127.0.0.1:\(listener.port)", "--query-id", "all",
        ])
        #expect(cut.status == 3, "\(cut.status): \(cut.errors)")
        #expect(FileManager.default.fileExists(atPath: store), "the page pulled went with the store: \(cut.errors)")
        let query = try await FerryBinaryTests.run(["query", "todo", "--store", store, "--json"])
        #expect(query.status == 0 && query.output.contains("\"one\"") && query.output.contains("\"two\""), "\(query)")

        // A pull that reaches no server leaves no store behind.
        let nowhere = "\(directory)/nowhere.sqlite"
        let failed = try await FerryBinaryTests.run([
            "pull", "todo", "--store", nowhere, "--server", try AttachmentCommandTests.unreachableURL(),
        ])
        #expect(failed.status == 3, "\(failed.errors)")
        #expect(!FileManager.default.fileExists(atPath: nowhere))
    }
}
