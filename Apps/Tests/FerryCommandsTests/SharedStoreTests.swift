import Foundation
import ServerTestSupport
import Synchronization
import Testing

/// Issue 29: several processes on one store file. Each `ferry` below is a process of its own.
@Suite("Processes sharing one store", .timeLimit(.minutes(5)))
struct SharedStoreTests {
    /// What a running process has written to its standard output so far, read on a thread of its
    /// own.
    final class Output: Sendable {
        private let text = Mutex("")

        init(_ handle: FileHandle) {
            Thread.detachNewThread { [self] in
                while true {
                    let chunk = handle.availableData
                    if chunk.isEmpty { return }
                    text.withLock { $0 += String(decoding: chunk, as: UTF8.self) }
                }
            }
        }

        var value: String { text.withLock { $0 } }
    }

    @Test func watchShowsWhatAnotherProcessWritesToTheSameStore() async throws {
        let ferry = try #require(FerryBinaryTests.ferryURL(), "the ferry executable was not built beside the tests")
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = "sqlite:\(directory)/shared.ferry"
        // The store exists before the watch opens it (as an app's would).
        let first = try await FerryBinaryTests.run(["insert", "todo", #"{"id":"a","title":"first"}"#, "--store", store])
        #expect(first.status == 0, "\(first.errors)")

        let watch = Process()
        watch.executableURL = ferry
        watch.arguments = ["watch", "todo", "--store", store, "--seconds", "60", "--json"]
        let pipe = Pipe()
        watch.standardOutput = pipe
        watch.standardError = FileHandle.nullDevice
        try watch.run()
        defer { watch.terminate() }
        let output = Output(pipe.fileHandleForReading)
        try await eventually("the watch's first view") { output.value.contains(#""first""#) }

        // Another process inserts, then deletes: the watch, which wrote nothing, shows both.
        let inserted = try await FerryBinaryTests.run([
            "insert", "todo", #"{"id":"b","title":"from another process"}"#, "--store", store,
        ])
        #expect(inserted.status == 0, "\(inserted.errors)")
        try await eventually("the other process's insert") { output.value.contains("from another process") }
        let deleted = try await FerryBinaryTests.run(["delete", "todo", "a", "--store", store])
        #expect(deleted.status == 0, "\(deleted.errors)")
        try await eventually("the other process's delete") {
            output.value.split(separator: "\n").last.map { !$0.contains(#""first""#) && $0.contains("another") }
                ?? false
        }
    }
}
