// Time and memory of the sync benchmark.
import Foundation

enum Clock {
    static func measure(_ body: () async throws -> Void) async rethrows -> Double {
        let start = DispatchTime.now().uptimeNanoseconds
        try await body()
        return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
    }
}

enum Memory {
    /// VmRSS of this process, from /proc (0 where there is none).
    static func residentBytes() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
        for line in text.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            let digits = line.filter(\.isNumber)
            return (Int(digits) ?? 0) * 1024
        }
        return 0
    }

    /// Samples VmRSS every 20 ms on a thread until stopped; answers the peak.
    final class Sampler: @unchecked Sendable {
        private let lock = NSLock()
        private var peak = Memory.residentBytes()
        private var running = true
        private let thread: Thread

        init() {
            let box = Box()
            thread = Thread { box.sampler?.loop() }
            box.sampler = self
            thread.start()
        }

        private final class Box: @unchecked Sendable { weak var sampler: Sampler? }

        private func loop() {
            while true {
                let value = Memory.residentBytes()
                lock.lock()
                peak = max(peak, value)
                let keepGoing = running
                lock.unlock()
                if !keepGoing { return }
                usleep(20_000)
            }
        }

        func stop() -> Int {
            lock.lock()
            running = false
            peak = max(peak, Memory.residentBytes())
            let result = peak
            lock.unlock()
            return result
        }
    }
}
