import FerryConsole
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

@Suite("Waiting at the prompt", .timeLimit(.minutes(1)))
struct PromptWaitTests {
    /// More prompts waiting at once than the cooperative pool has threads: if a wait held one of its
    /// threads, nothing else could run and this test would hang until its time limit.
    @Test func aWaitingPromptLeavesTheCooperativePoolFree() async throws {
        let waiting = ProcessInfo.processInfo.activeProcessorCount + 2
        var pipes: [(read: Int32, write: Int32)] = []
        for _ in 0..<waiting {
            var ends: [Int32] = [0, 0]
            #expect(pipe(&ends) == 0)
            pipes.append((ends[0], ends[1]))
        }
        defer { for ends in pipes { close(ends.read) } }
        let readers = pipes.map { ends in
            Task { await LineEditor(input: ends.read, output: ends.write).line(prompt: "> ") }
        }
        // Work on the pool goes on while every prompt waits.
        let sum = await Task.detached { (1...1_000).reduce(0, +) }.value
        #expect(sum == 500_500)
        try await Task.sleep(for: .milliseconds(50))
        for (index, ends) in pipes.enumerated() {
            let line = Array("line \(index)\n".utf8)
            #expect(write(ends.write, line, line.count) == line.count)
            close(ends.write)
        }
        for (index, reader) in readers.enumerated() {
            #expect(await reader.value == "line \(index)")
        }
    }
}
